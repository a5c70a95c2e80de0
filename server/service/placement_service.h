// Placed contexts (docs/scaling.md §Placed contexts): a new context whose home group takes
// no new contexts is placed by the directory on another group. Placing one is two commits:
// its home group disowns it (DisownContextCommand: from then on the home group refuses every
// batch naming it, so a server routing with an older directory cannot write it there), then
// group 1 records it in the directory (PlaceContextCommand, a new epoch). A batch refused
// that way is answered kWrongGroup; the sender routes it again with the directory as it is
// now. Safe from any thread; the functions that wait block the calling thread for up to
// their deadline (a placement: two commits, once per new context).
#pragma once

#include <chrono>
#include <vector>

#include "kvatlas/common/placement.h"
#include "kvatlas/common/status.h"
#include "server/model/command.h"
#include "server/service/services.h"

namespace kvatlas::server {

using Deadline = std::chrono::steady_clock::time_point;

// The distinct contexts `batch`'s commands name (a store's, a removal's, a context's clear,
// a prediction's), in first-named order.
[[nodiscard]] std::vector<ContextKey> ContextsOf(const CommandBatch& batch);

// Whether the directory (as this server has applied it) lets `group` take new contexts: a
// group it does not list does.
[[nodiscard]] bool GroupAccepting(const PlacementDirectory& directory, GroupId group);

// Whether placement is at work: the directory places some context, or some group takes no
// new contexts. While it is not, every context lives in its home group (one atomic load).
[[nodiscard]] bool PlacementActive(const Services& services);

// Makes sure `context` has a group to live in: nothing to do when the directory places it,
// or when its home group takes new contexts or holds it already. Otherwise its home group
// disowns it (unless it came to hold it meanwhile: then it stays home) and group 1 places
// it on the accepting group with the fewest entries (not the home group), and this waits
// until this server has applied the placement. kResourceExhausted when no other group takes
// new contexts; kDeadlineExceeded / kUnavailable from the commits. A multi-group server only.
[[nodiscard]] Status EnsurePlaced(const Services& services, const ContextKey& context,
                                  Deadline deadline);

// Whether some context of `batch` needs EnsurePlaced: placement is at work, and the directory
// does not place it while its home group disowned it, or takes no new contexts and does not
// hold it. False in the common case at the cost of PlacementActive.
[[nodiscard]] bool NeedsPlacement(const Services& services, const CommandBatch& batch);

// EnsurePlaced for every context of `batch` that may need it: none at all while every group
// of the directory takes new contexts and no context has been disowned (the common case:
// one atomic load). Ok on a single-group server.
[[nodiscard]] Status PlaceNewContexts(const Services& services, const CommandBatch& batch,
                                      Deadline deadline);

// EnsurePlaced for every context of `batch` (a batch refused wrong_group: its contexts'
// placements, or this server's copy of them, changed).
[[nodiscard]] Status PlaceContextsOf(const Services& services, const CommandBatch& batch,
                                     Deadline deadline);

// Whether `group`, where this server would read `context` now, has given it away: it
// disowned the context, which the directory as applied here does not place yet (the
// placement's second commit has not reached this server, or never came).
[[nodiscard]] bool GaveAway(const Services& services, const Services& group,
                            const ContextKey& context);
// Waits until the directory as applied here places `context`: true once it does, false at
// `deadline` or after kPlacementWait (a disown whose placement never came: nothing holds the
// context anywhere, and its home group's empty answer is the right one; or this server's
// group 1 lags by more: the read is then as stale as this server).
inline constexpr std::chrono::milliseconds kPlacementWait{1'000};
[[nodiscard]] bool AwaitPlacement(const Services& services, const ContextKey& context,
                                  Deadline deadline);

// After a part naming `contexts` was applied in `group` at `revision`: kWrongGroup when the
// group refused it (it names a context the group disowned at or before `revision`), the
// message naming the context and the directory epoch; Ok otherwise. A log entry's batches
// share its revision, so a part applied in the disown's own entry, before it, is taken for
// refused too (the safe side: a refused part taken for applied would be lost). Such a part
// cannot have created the context (the disown would have found it held); routed again, its
// commands are applied once more, which a stream's or writer's position makes a no-op.
[[nodiscard]] Status RefusalOf(const Services& group, const std::vector<ContextKey>& contexts,
                               Revision revision);

}  // namespace kvatlas::server
