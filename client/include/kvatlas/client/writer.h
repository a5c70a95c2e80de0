// kvatlas::Writer: exactly-once ingestion through a Client (docs/api.md §Idempotent
// writes). A Writer names itself (writer_id), numbers its batches 1, 2, 3... and keeps one
// batch in flight; when a batch's outcome is unknown (connection lost, deadline, server
// busy, leader changing, a context just placed on another group) it resends the same
// batch with the same sequence until the server acknowledges it. The server applies each
// (writer_id, sequence) at most once, so a batch is applied exactly once however often it
// was sent.
//
// A batch that could not be acknowledged within `retry_for` stays pending: the next
// Write() first resends it (its outcome must be settled before a higher sequence may be
// sent, or a late first copy would be taken for a duplicate). A batch the server rejects
// (kInvalidArgument, kPayloadTooLarge, ...) was not applied and is dropped.
//
// Thread-safety: Write() may be called from several threads; calls are serialized.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/common/export.h"

namespace kvatlas {

struct WriterOptions {
  // How long one Write() keeps resending a batch whose outcome is unknown.
  std::chrono::milliseconds retry_for{10000};
  // Deadline of one send.
  std::chrono::milliseconds call_deadline{2000};
  // Pause between sends, doubling up to backoff_max.
  std::chrono::milliseconds backoff_min{10};
  std::chrono::milliseconds backoff_max{500};
};

class KVATLAS_EXPORT Writer {
 public:
  // `client` must outlive the Writer. A writer id that outlives this process (stored by the
  // caller) continues at the sequence after the last one it had acknowledged; a fresh id
  // (e.g. host + pid + start time) starts at 1.
  Writer(Client* client, std::string writer_id, uint64_t next_sequence = 1,
         WriterOptions options = {});

  // Sends `events` as the next batch (after settling a pending one) and returns the
  // server's answer, or the last error once retry_for has passed (the batch then stays
  // pending). An empty batch is sent too (it changes nothing and records nothing).
  [[nodiscard]] Result<IngestAnswer> Write(std::vector<BlockEvent> events);

  // Resends the pending batch, if any, until acknowledged or retry_for has passed.
  [[nodiscard]] Status Settle();

  const std::string& writer_id() const { return writer_id_; }
  // The sequence the next new batch will carry.
  uint64_t next_sequence() const;
  bool has_pending() const;

 private:
  // Sends pending_ until it is acknowledged, rejected or retry_for passed. REQUIRES mu_.
  Result<IngestAnswer> SendPendingLocked();

  Client* const client_;
  const std::string writer_id_;
  const WriterOptions options_;
  mutable std::mutex mu_;
  uint64_t next_sequence_;
  std::optional<std::vector<BlockEvent>> pending_;  // carries sequence next_sequence_
};

}  // namespace kvatlas
