// ReplicatedLog: the seam between writers and the state machine (docs/replication.md).
// Every state change is an entry appended to this log; once an entry is committed, every
// server applies it to its state machine at the entry's index, which becomes the state's
// revision. The implementation over canonical/raft is server/replication/raft_log.h; a
// single server is a one-voter cluster on the same code path.
//
// Thread-safety: Propose, Status and the membership calls from any thread. Callbacks run
// on the log's own threads and must be quick and must not call back into the log.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/chunked_bytes.h"
#include "common/internal/histogram.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"

namespace kvatlas::server {

// What a replicated log drives: the state machine side of a server.
class LogStateMachine {
 public:
  virtual ~LogStateMachine() = default;

  // Applies the committed entry at `index`, on the log's applying thread (calls to this
  // interface never overlap). Entries arrive in index order, each once per process; after
  // a restart, entries at or below the state's persisted applied index may arrive again
  // and must be skipped. A non-OK Status means the state can no longer follow the log
  // (e.g. its storage failed): the server must stop.
  [[nodiscard]] virtual Status ApplyEntry(uint64_t index, std::string_view entry) = 0;

  // A consistent image of the whole state for a snapshot, in two steps so that the log's
  // thread only pays for the cheap one: Capture() on the log's thread (pins a consistent
  // view), then SerializeInto() on a worker thread, which appends the snapshot's bytes to
  // chunks that the log hands over as they are (a big state is never copied whole).
  class Capture {
   public:
    virtual ~Capture() = default;
    [[nodiscard]] virtual Status SerializeInto(ChunkedBytes* out) = 0;
  };
  [[nodiscard]] virtual Result<std::unique_ptr<Capture>> CaptureState() = 0;

  // Replaces the state with a snapshot's, unless the state is already at or past the
  // snapshot's applied index (then it is a no-op: the state is persistent).
  [[nodiscard]] virtual Status Restore(std::string_view snapshot) = 0;
};

struct ClusterMember {
  uint64_t id = 0;
  std::string raft_address;
  std::string role;  // "voter", "standby", "spare"
  // On the leader: the highest log index known replicated on this member (its own last
  // index for the leader itself); unset on other servers.
  std::optional<uint64_t> match_index;
  // On the leader, for the other members: whether the leader received a raft message from
  // this member within an election timeout, and the ms since the last one (unset when it
  // never heard from it); unset on other servers and for the leader itself.
  std::optional<bool> reachable;
  std::optional<uint64_t> last_contact_ms;
};

struct ClusterStatus {
  uint64_t id = 0;
  std::string raft_address;
  std::string state;       // "leader", "follower", "candidate", "unavailable"
  uint64_t leader_id = 0;  // 0 when unknown
  std::string leader_raft_address;
  uint64_t term = 0;
  uint64_t commit_index = 0;
  uint64_t applied_index = 0;
  uint64_t last_index = 0;
  std::vector<ClusterMember> members;
  // On the leader: whether `members` is a committed configuration (no membership change
  // in flight); false on other servers.
  bool configuration_committed = false;
};

// On the leader: the log entries `member` lacks (the leader's last index - its match
// index; 0 for the leader itself); unset where its match index is.
[[nodiscard]] inline std::optional<uint64_t> MemberLagEntries(const ClusterStatus& status,
                                                              const ClusterMember& member) {
  if (!member.match_index) return std::nullopt;
  return status.last_index > *member.match_index ? status.last_index - *member.match_index : 0;
}

// Counters and latency histograms of the log since this process started (GET /metrics).
struct LogMetrics {
  // Times this server saw the leader change to another known server (sampled with the
  // status, every 50 ms: a leader that came and went between two samples is not counted).
  uint64_t leadership_changes = 0;
  // AppendEntries received with their previous entry below this follower's snapshot, and
  // rewritten to start at it (append_below_snapshot.h): each is a probe or a resend libraft
  // 0.15 would have refused, and walked its leader down to index 1 for.
  uint64_t appends_repaired = 0;
  // Proposals made here, from Propose to applied here (leader only: followers forward).
  HistogramData commit_latency;
  // Snapshots taken (capture to written) and restored (at start, or sent by the leader).
  uint64_t snapshots_taken = 0;
  HistogramData snapshot_duration;
  uint64_t last_snapshot_bytes = 0;  // the last snapshot taken, loaded or installed here
  uint64_t snapshots_restored = 0;
  HistogramData restore_duration;
  // Snapshots taken here that did not become the log's snapshot (their write or
  // serialisation failed, whatever the cause: the log was not compacted), and the index of
  // the last attempt when it failed (0 once a later one was written).
  uint64_t snapshot_failures = 0;
  uint64_t failed_snapshot_index = 0;
  // What the raft library holds of its log in memory (entries since the last snapshot, and
  // the trailing ones kept after it), as last measured: their data plus a per-entry
  // overhead. Bounded by raft_snapshot_log_bytes (or 1/16 of the last snapshot); 0 when that
  // budget is off (not measured).
  uint64_t log_memory_entries = 0;
  uint64_t log_memory_bytes = 0;
};

class ReplicatedLog {
 public:
  virtual ~ReplicatedLog() = default;

  // Appends `entry`; `done` runs once it is committed and applied here, with its index —
  // or with kNotLeader (this server is not the leader; the message names the leader when
  // known), kUnavailable (stopping, or leadership lost before commit: the entry may or may
  // not be applied later). Returns kResourceExhausted without taking `entry` when too many
  // proposals are queued, and kUnavailable when stopped.
  [[nodiscard]] virtual Status Propose(std::string* entry,
                                       std::function<void(Result<uint64_t>)> done) = 0;

  [[nodiscard]] virtual ClusterStatus GetStatus() const = 0;
  [[nodiscard]] virtual LogMetrics GetMetrics() const { return {}; }
  // Whether this server leads now (cheap where the log keeps it apart from its status).
  [[nodiscard]] virtual bool is_leader() const { return GetStatus().state == "leader"; }

  // Membership, leader only (kNotLeader otherwise); `done` reports the outcome.
  using Done = std::function<void(Status)>;
  virtual void AddServer(uint64_t id, std::string raft_address, Done done) = 0;
  virtual void RemoveServer(uint64_t id, Done done) = 0;
  // id 0: any up-to-date voter.
  virtual void TransferLeadership(uint64_t id, Done done) = 0;
};

}  // namespace kvatlas::server
