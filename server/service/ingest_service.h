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
// the batch's stream position (each group skips a replay of what it applied). One part,
// `services`'s own, on a single-group server.
[[nodiscard]] std::vector<std::pair<const Services*, CommandBatch>> SplitByGroup(
    const Services& services, CommandBatch batch);

// Submits one part of a batch (SplitByGroup) to its group without waiting: to `group`'s
// applier, or — when `group` has a forwarder and this server does not lead the group —
// forwarded to the group's leader (group_forwarder.h). With Applier::TrySubmitAsync's
// contract: refused, `*part` is left as it was (to retry) and `done` is not called;
// accepted, `done` runs once, on the applier's or a forwarder's thread.
[[nodiscard]] Status TrySubmitPart(const Services& group, CommandBatch* part,
                                   Applier::Callback done);
// As TrySubmitPart, but a refusal is reported to `done`, at once on this thread.
void SubmitPart(const Services& group, CommandBatch part, Applier::Callback done);

// Submits `batch` without waiting: `done` runs on the applier thread once it is applied,
// or at once on this thread when it is refused (Applier::SubmitAsync). `done` must be quick.
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
