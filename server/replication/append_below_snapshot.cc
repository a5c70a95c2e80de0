#include "server/replication/append_below_snapshot.h"

extern "C" {
#include <raft.h>
}

#include <cstring>

namespace kvatlas::server {

bool RepairAppendBelowSnapshot(const struct raft& raft, struct raft_message* message) {
  if (message->type != RAFT_IO_APPEND_ENTRIES) return false;
  struct raft_append_entries& append = message->append_entries;
  const struct raft_log& log = raft.log;
  const raft_index snapshot = log.snapshot.last_index;
  // Only below the snapshot and below the first entry held (offset + 1) does libraft's own
  // check go wrong; a stale term is refused before the log is looked at.
  if (snapshot == 0 || append.prev_log_index >= snapshot || append.prev_log_index > log.offset ||
      append.term < raft.current_term) {
    return false;
  }
  const raft_index covered = snapshot - append.prev_log_index;
  const unsigned n = append.n_entries;
  const unsigned dropped = covered < n ? static_cast<unsigned>(covered) : n;
  struct raft_entry* kept = nullptr;
  if (dropped < n) {
    kept = static_cast<struct raft_entry*>(raft_malloc((n - dropped) * sizeof(struct raft_entry)));
    if (kept == nullptr) return false;  // unrepaired: libraft refuses it, as without us
    std::memcpy(kept, append.entries + dropped, (n - dropped) * sizeof(struct raft_entry));
  }
  // A message's entries share batches in runs; a batch that only dropped entries point
  // into is freed here, the others go on with the entries kept.
  void* freed = nullptr;
  for (unsigned i = 0; i < dropped; ++i) {
    void* batch = append.entries[i].batch;
    if (batch == nullptr || batch == freed) continue;
    if (kept != nullptr && batch == kept[0].batch) break;
    raft_free(batch);
    freed = batch;
  }
  if (append.entries != nullptr) raft_free(append.entries);
  append.entries = kept;
  append.n_entries = n - dropped;
  append.prev_log_index = snapshot;
  append.prev_log_term = log.snapshot.last_term;
  return true;
}

}  // namespace kvatlas::server
