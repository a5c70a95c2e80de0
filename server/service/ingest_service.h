// Writes: turning an event batch into a command batch, and handing command batches to the
// Applier, waiting (REST worker threads) or called back (binary-protocol connections).
// Every write of the server goes through SubmitAndWait or SubmitAsync, which keep the
// applier-queue gauge. Safe from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvatlas/common/events.h"
#include "kvatlas/common/result.h"
#include "server/model/command.h"
#include "server/service/services.h"

namespace kvatlas::server {

// An event batch converted to commands, with the answer to give once it is applied.
struct PreparedIngest {
  CommandBatch batch;
  // `revision` is the current one; the caller replaces it with the applied batch's.
  IngestAnswer answer;
};

// Converts `events` (already validated by their decoder) into one command batch, carrying
// the writer's stream position when given. An empty batch changes nothing: it is answered
// with the current revision, without a log entry.
[[nodiscard]] Result<PreparedIngest> PrepareIngest(const Services& services,
                                                   std::span<const BlockEvent> events,
                                                   const std::optional<WriterPosition>& writer);

// Submits `batch` to the applier and waits up to options.apply_timeout for its revision.
// On a server hosting several groups the batch is split by the group each command belongs
// to (SplitByGroup) and every part submitted; the answer is the last part's revision (each
// group numbers its own revisions).
[[nodiscard]] Result<Revision> SubmitAndWait(const Services& services, CommandBatch batch);
// The parts of `batch` by group: store, remove and a context's clear go to the context's
// group; a clear of a holder in every context, a holder's expiry and a publisher's
// registration and unregistration to every group (each group applies a stream's batches
// only while it is registered there, exempts registered holders from expiry and forgets an
// unregistered stream's position); the rest of the registry's commands (addresses,
// audits, loads) to group 1. Each part keeps
// the batch's stream position (each group skips a replay of what it applied), but the
// commands of a context the directory places (docs/scaling.md §Placed contexts) are a part
// of their own with the position's PlacedStreamKey; a restart's position reaches every group
// (an empty part where it has no commands). One part, `services`'s own, on a single-group
// server. `refused_by`, when set, is the group that refused `batch` (a part of an earlier
// split, routed again): the commands for every group and a restart go to it alone, since the
// other groups had theirs.
[[nodiscard]] std::vector<std::pair<const Services*, CommandBatch>> SplitByGroup(
    const Services& services, CommandBatch batch, const Services* refused_by = nullptr);

// Submits one part of a batch (SplitByGroup) to its group without waiting: to `group`'s
// applier, or — when `group` has a forwarder and this server does not lead the group —
// forwarded to the group's leader (group_forwarder.h). With Applier::TrySubmitAsync's
// contract: refused, `*part` is left as it was (to retry) and `done` is not called;
// accepted, `done` runs once, on the applier's or a forwarder's thread.
[[nodiscard]] Status TrySubmitPart(const Services& group, CommandBatch* part,
                                   Applier::Callback done);
// As TrySubmitPart, but a refusal is reported to `done`, at once on this thread.
void SubmitPart(const Services& group, CommandBatch part, Applier::Callback done);

// `done` for a part of `services`'s write submitted to `group`, which routes the part again
// when the group refuses it wrong_group (a placement this server had not applied yet): on
// services.rerouter, placing its contexts (PlaceContextsOf) and submitting what SplitByGroup
// makes of it, then calling `done` once with the first failure or the last revision, before
// `deadline`. `done` itself when there is no rerouter, or neither is placement at work
// (PlacementActive) nor has the group disowned anything as this server knows: then a
// refusal is the write's answer. Needs a copy of the part (taken here) and `services` to
// outlive the rerouter.
[[nodiscard]] Applier::Callback RoutedAgainOnRefusal(
    const Services& services, const Services& group, const CommandBatch& part,
    Applier::Callback done, std::chrono::steady_clock::time_point deadline);

// For an engine stream's batch on a multi-group server (the ZMQ ingest, which must go on
// past what it cannot write): places the batch's new contexts while placement is at work
// (PlaceNewContexts, waited for on this thread; a failure leaves them to the next step),
// then removes the stores into contexts that their group does not hold while its applier
// refuses new contexts (Applier::DropNewContextStores), and returns how many it removed.
// `home` is the stream's group.
[[nodiscard]] size_t PlaceOrDropNewContextStores(const Services& services, const Services& home,
                                                 CommandBatch* batch);
// TrySubmitPart for an engine stream's batch on a multi-group server: whole to `home` (a
// stream is one model: its home group) while placement is not at work, else split
// (SplitByGroup) and each part submitted, the first with TrySubmitPart's contract (refused:
// `*batch` is left to retry), the later ones retried here while their group's queue is full
// (`done` runs once per part).
[[nodiscard]] Status TrySubmitStreamBatch(const Services& services, const Services& home,
                                          CommandBatch* batch, Applier::Callback done);

// Submits `batch` without waiting: `done` runs on the applier thread once it is applied,
// or at once on this thread when it is refused (Applier::SubmitAsync). `done` must be quick.
// A batch with a new context to place (NeedsPlacement) is placed and submitted on the
// rerouter's thread; a part refused wrong_group is routed again there
// (RoutedAgainOnRefusal).
void SubmitAsync(const Services& services, CommandBatch batch,
                 std::function<void(Result<Revision>)> done);

// Submits `batch` to `group`'s own applier — never split, never forwarded: for a part this
// server was sent as its group's leader, or found itself leading — and waits until
// `deadline` for its revision (ApplyDeadlineExceeded past it).
[[nodiscard]] Result<Revision> ApplyHereAndWait(const Services& group, CommandBatch batch,
                                                std::chrono::steady_clock::time_point deadline);

// kDeadlineExceeded for a write batch not applied within options.apply_timeout (it may
// still be applied later).
[[nodiscard]] Status ApplyDeadlineExceeded(const Services& services);

// Accepted events whose medium is not a known name were indexed in the nearest tier: counts
// them in the metrics and logs each new medium string once.
void NoteUnknownMedia(const Services& services, std::span<const BlockEvent> events);

}  // namespace kvatlas::server
