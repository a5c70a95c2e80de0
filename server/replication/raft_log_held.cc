#include "server/replication/raft_log_held.h"

// libraft's headers have no extern "C" (docs/toolchain: pitfall 3).
extern "C" {
#include <raft.h>
}

#include <algorithm>

namespace kvatlas::server {
namespace {

// The log may hold this fraction of the last snapshot (LogBudgetBytes).
constexpr size_t kSnapshotLogFraction = 16;
// CountThreshold's deferral.
constexpr unsigned kCountDeferral = 16;
constexpr size_t kEntryOverheadBytes = 64;

}  // namespace

size_t HeldWithOverhead(const LogHeld& held) {
  return held.bytes + held.entries * kEntryOverheadBytes;
}

size_t LogBudgetBytes(size_t snapshot_log_bytes, uint64_t last_snapshot_bytes) {
  return std::max<size_t>(snapshot_log_bytes, last_snapshot_bytes / kSnapshotLogFraction);
}

unsigned CountThreshold(const LogHeld& held, uint64_t last_snapshot_bytes,
                        unsigned snapshot_threshold) {
  const bool defer = HeldWithOverhead(held) < last_snapshot_bytes / kSnapshotLogFraction;
  return defer ? snapshot_threshold * kCountDeferral : snapshot_threshold;
}

LogHeld MeasureLogHeld(const struct raft& raft, unsigned max_trailing, size_t max_trailing_bytes) {
  const struct raft_log& log = raft.log;
  const size_t n = log.back >= log.front ? log.back - log.front : log.size - log.front + log.back;
  LogHeld held;
  held.entries = n;
  size_t trailing_bytes = 0;
  bool counting = true;
  for (size_t k = n; k-- > 0;) {
    const size_t len = log.entries[(log.front + k) % log.size].buf.len;
    held.bytes += len;
    if (log.offset + 1 + k > raft.last_applied || !counting) continue;
    counting = held.trailing < max_trailing && trailing_bytes + len <= max_trailing_bytes;
    if (counting) {
      ++held.trailing;
      trailing_bytes += len;
    }
  }
  return held;
}

unsigned InstallSnapshotTimeoutMs(uint64_t last_snapshot_bytes) {
  constexpr uint64_t kBaseMs = 3'000;
  constexpr uint64_t kBytesPerSecond = 32ull << 20;
  constexpr uint64_t kMaxMs = 3'600'000;  // libraft keeps it in an unsigned: an hour at most
  return static_cast<unsigned>(
      std::min(kMaxMs, kBaseMs + last_snapshot_bytes / (kBytesPerSecond / 1'000)));
}

}  // namespace kvatlas::server
