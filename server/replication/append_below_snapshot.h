// A repair of an AppendEntries message, applied as libraft 0.15 receives it, for a follower
// whose log is compacted past the point where its leader believes it stands.
//
// libraft 0.15 checks an AppendEntries against its in-memory log only. When the message's
// prev_log_index lies below the follower's snapshot and its entry is no longer held, the
// follower rejects it, and a leader probing one index at a time walks down to index 1: it
// then sends its whole log from there if it never took a snapshot (the follower appends the
// entries after its snapshot, cannot find index 1 and shuts down with "No log entries found
// at index 1"), or its whole snapshot otherwise. A leader probes below a follower's snapshot
// when acknowledgements were lost while the follower went on storing, applying and
// compacting: a follower restarted while entries were in flight, or one whose replies were
// dropped. Upstream (through 0.18) behaves the same.
//
// The entries up to the follower's snapshot are committed, so every leader of this or a
// later term holds them with the same terms (Leader Completeness): such a message is
// rewritten to start at the snapshot, with the snapshot's index and term as its previous
// entry and the entries it covers dropped, which libraft then checks as usual.
#pragma once

extern "C" {
struct raft;
struct raft_message;
}

namespace kvatlas::server {

// Loop thread, before libraft's receive callback sees `message`. Returns whether the
// message was rewritten. Entry batches the rewrite drops are freed (libraft owns and frees
// the rest, as it would have the original).
bool RepairAppendBelowSnapshot(const struct raft& raft, struct raft_message* message);

}  // namespace kvatlas::server
