// What RaftLog says about libraft's servers: its codes and states in the operator's words,
// when the leader last heard from each member (MemberContacts), and why an add failed.
// Loop thread only, like the rest of RaftLog's raft state.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/state/replicated_log.h"

struct raft;  // libraft's
struct raft_server;

namespace kvatlas::server {

// Bootstraps `raft` (initialised, not started) with `voters` {id, address} as its first
// configuration; nothing when `voters` is empty or the log already holds a configuration
// (a restart). kIOError naming libraft's reason otherwise.
[[nodiscard]] Status Bootstrap(struct raft* raft,
                               const std::vector<std::pair<uint64_t, std::string>>& voters);

// Deletes everything inside `dir` (not `dir` itself): a dropped replica's raft log,
// metadata and snapshots (RaftLog::Reopen). kIOError naming what could not be deleted.
[[nodiscard]] Status RemoveDirectoryContents(const std::string& dir);

// The servers of `raft`'s configuration. On the leader each with its match index
// (`last_index` for the leader itself) and, for the others, what `describe_contact` says of
// when the leader last heard from it (MemberContacts::Describe).
std::vector<ClusterMember> DescribeMembers(
    const struct raft& raft, uint64_t last_index,
    const std::function<void(ClusterMember*)>& describe_contact);

// The server `id` of `raft`'s configuration; null when it has none.
const struct raft_server* FindServer(const struct raft& raft, uint64_t id);

// libraft's message for a return code.
std::string RaftError(int rv);

// Why libraft refused a change naming server `id` (at `address`, for an add), in the
// operator's words: libraft's own ("server ID is not valid") names neither the server nor
// what is wrong with it.
std::string RefusalOf(int rv, uint64_t id, std::string_view address);

std::string_view StateName(int state);  // RAFT_LEADER ... as ClusterStatus::state
std::string_view RoleName(int role);    // RAFT_VOTER ... as ClusterMember::role

// When this server last received a raft message (any: AppendEntries results, votes,
// snapshots' answers) from each other server, on the raft loop's clock in ms. libraft 0.15
// keeps only a flag per member (raft_progress.recent_recv, reset every election timeout
// and meaningful on the leader only), so RaftLog counts the messages itself as raft_io
// hands them to raft.
class MemberContacts {
 public:
  void Heard(uint64_t id, uint64_t now_ms) { last_[id] = now_ms; }
  [[nodiscard]] std::optional<uint64_t> LastHeard(uint64_t id) const;
  // ClusterMember::reachable and last_contact_ms of member `m` as of `now_ms`: reachable
  // when heard from within `election_timeout_ms`.
  void Describe(ClusterMember* m, uint64_t now_ms, unsigned election_timeout_ms) const;

 private:
  std::unordered_map<uint64_t, uint64_t> last_;
};

// The error of an add whose promotion to voter failed (`why`, libraft's reason), by what
// was done about it: the spare was removed again (`removed`), or removing it failed too
// (`remove_error`), or it answered and stays a spare that is still catching up
// (`answered`).
struct FailedAdd {
  uint64_t id = 0;
  std::string address;
  std::string why;
};
std::string NotAnsweredRemoved(const FailedAdd& add);
std::string NotAnsweredLeftSpare(const FailedAdd& add, std::string_view remove_error);
std::string AnsweredLeftSpare(const FailedAdd& add);

}  // namespace kvatlas::server
