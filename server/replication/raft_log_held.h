// What libraft 0.15 holds of its log in memory (RaftOptions::snapshot_log_bytes), read from
// raft.h's struct raft_log: a circular buffer of entries, with no accessor in 0.15.
#pragma once

#include <cstddef>

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

}  // namespace kvatlas::server
