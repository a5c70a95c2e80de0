// What libraft 0.15 holds of its log in memory (RaftOptions::snapshot_log_bytes), read from
// raft.h's struct raft_log: a circular buffer of entries, with no accessor in 0.15.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
struct raft;
}

namespace kvatlas::server {

struct LogHeld {
  size_t entries = 0;     // entries in libraft's in-memory log
  size_t bytes = 0;       // their data
  unsigned trailing = 0;  // newest applied entries within the trailing limits
};

// One pass over the entries in memory (at most 16 * snapshot_threshold + snapshot_trailing
// with RaftLog's defaults, ~130k: well under a millisecond). Loop thread.
LogHeld MeasureLogHeld(const struct raft& raft, unsigned max_trailing, size_t max_trailing_bytes);

// The held entries' data plus what each costs libraft beside it (its struct raft_entry slot
// and the data's allocation).
size_t HeldWithOverhead(const LogHeld& held);

// The bytes the log may hold before a snapshot is taken early: snapshot_log_bytes, or a
// fraction of the last snapshot when more. The budget grows with the state because each
// snapshot writes the whole state, so snapshotting a large state every snapshot_log_bytes
// would rewrite it ever more often.
size_t LogBudgetBytes(size_t snapshot_log_bytes, uint64_t last_snapshot_bytes);

// libraft's entry-count trigger while the log is under its budget. It scales too: with
// snapshot_threshold small entries it would otherwise rewrite a large state for a log of a
// few hundred KB. Until the entries (with their overhead) hold the budget's fraction of
// the last snapshot, a snapshot is due only at a multiple of snapshot_threshold, which
// bounds the replay at a restart and the measuring pass.
unsigned CountThreshold(const LogHeld& held, uint64_t last_snapshot_bytes,
                        unsigned snapshot_threshold);

// How long a leader waits for a follower to install the snapshot it sent before sending it
// again (raft_set_install_snapshot_timeout; libraft's default is 30 s whatever the size). A
// follower taking a snapshot of its own when one arrives drops it without an answer, and
// libraft then retries only at this timeout: with a small snapshot a follower would wait
// 30 s for nothing. So 3 s, plus 1 s per 32 MiB of the last snapshot, for sending and
// installing a large one (1 GiB: 35 s).
unsigned InstallSnapshotTimeoutMs(uint64_t last_snapshot_bytes);

}  // namespace kvatlas::server
