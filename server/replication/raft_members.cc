#include "server/replication/raft_members.h"

// libraft's headers have no extern "C" (docs/toolchain: pitfall 3).
extern "C" {
#include <raft.h>
}

#include <filesystem>
#include <system_error>

namespace kvatlas::server {

std::string RaftError(int rv) { return std::string(raft_strerror(rv)); }

Status RemoveDirectoryContents(const std::string& dir) {
  std::error_code ec;
  for (const std::filesystem::directory_entry& entry :
       std::filesystem::directory_iterator(dir, ec)) {
    std::filesystem::remove_all(entry.path(), ec);
    if (ec) return Status::IOError("cannot remove " + entry.path().string() + ": " + ec.message());
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  return Status::Ok();
}

const struct raft_server* FindServer(const struct raft& raft, uint64_t id) {
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    if (raft.configuration.servers[i].id == id) return &raft.configuration.servers[i];
  }
  return nullptr;
}

std::vector<ClusterMember> DescribeMembers(
    const struct raft& raft, uint64_t last_index,
    const std::function<void(ClusterMember*)>& describe_contact) {
  std::vector<ClusterMember> members;
  // libraft 0.15 keeps the leader's replication progress in raft.h's struct raft (no
  // accessor): progress[i] belongs to configuration.servers[i].
  const bool leading = raft.state == RAFT_LEADER && raft.leader_state.progress != nullptr;
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    const struct raft_server& server = raft.configuration.servers[i];
    ClusterMember& member = members.emplace_back();
    member.id = server.id;
    member.raft_address = server.address ? server.address : "";
    member.role = RoleName(server.role);
    if (!leading) continue;
    member.match_index =
        server.id == raft.id ? last_index : uint64_t{raft.leader_state.progress[i].match_index};
    if (server.id != raft.id) describe_contact(&member);
  }
  return members;
}

Status Bootstrap(struct raft* raft, const std::vector<std::pair<uint64_t, std::string>>& voters) {
  if (voters.empty()) return Status::Ok();
  struct raft_configuration conf;
  raft_configuration_init(&conf);
  int rv = 0;
  for (const auto& [id, address] : voters) {
    rv = raft_configuration_add(&conf, id, address.c_str(), RAFT_VOTER);
    if (rv != 0) break;
  }
  if (rv == 0) rv = raft_bootstrap(raft, &conf);
  raft_configuration_close(&conf);
  if (rv != 0 && rv != RAFT_CANTBOOTSTRAP)
    return Status::IOError("raft_bootstrap: " + RaftError(rv));
  return Status::Ok();
}

std::string RefusalOf(int rv, uint64_t id, std::string_view address) {
  const std::string server = "server " + std::to_string(id);
  switch (rv) {
    case RAFT_BADID:
      return server +
             " is not a member of the cluster (or, for a transfer, not a voter or "
             "this server)";
    case RAFT_DUPLICATEID:
      return server + " is already a member of the cluster";
    case RAFT_DUPLICATEADDRESS:
      return "address " + std::string(address) + " is already a member's";
    case RAFT_CANTCHANGE:
      return "another membership change is in progress; retry when it is done";
    default:
      return RaftError(rv) + " (" + server + ")";
  }
}

std::string_view StateName(int state) {
  switch (state) {
    case RAFT_LEADER:
      return "leader";
    case RAFT_FOLLOWER:
      return "follower";
    case RAFT_CANDIDATE:
      return "candidate";
    default:
      return "unavailable";
  }
}

std::string_view RoleName(int role) {
  switch (role) {
    case RAFT_VOTER:
      return "voter";
    case RAFT_STANDBY:
      return "standby";
    default:
      return "spare";
  }
}

std::optional<uint64_t> MemberContacts::LastHeard(uint64_t id) const {
  auto it = last_.find(id);
  if (it == last_.end()) return std::nullopt;
  return it->second;
}

void MemberContacts::Describe(ClusterMember* m, uint64_t now_ms,
                              unsigned election_timeout_ms) const {
  const std::optional<uint64_t> last = LastHeard(m->id);
  const uint64_t since = last && now_ms > *last ? now_ms - *last : 0;
  m->reachable = last.has_value() && since < election_timeout_ms;
  if (last) m->last_contact_ms = since;
}

namespace {

std::string Server(const FailedAdd& add) {
  return "server " + std::to_string(add.id) + " at " + add.address;
}

}  // namespace

std::string NotAnsweredRemoved(const FailedAdd& add) {
  return Server(add) +
         " did not answer (nothing listens there, or its peer handshake failed: check its "
         "--cluster-id and cluster secret); it was not added (" +
         add.why + "). Start it first, on an empty data directory with --id " +
         std::to_string(add.id) + " --raft-listen " + add.address +
         " and --peers naming the cluster's initial voters (docs/operations.md §Membership), "
         "then add it again";
}

std::string NotAnsweredLeftSpare(const FailedAdd& add, std::string_view remove_error) {
  return Server(add) + " did not answer (" + add.why +
         "), and removing it again failed: " + std::string(remove_error) +
         ". It is left in the configuration as a spare: remove it (DELETE /v1/cluster/members/" +
         std::to_string(add.id) + ") before adding it again";
}

std::string AnsweredLeftSpare(const FailedAdd& add) {
  return Server(add) + " answered but was not promoted to voter (" + add.why +
         "): it did not catch up with the log in time (a large snapshot, a slow link). It stays "
         "a spare and keeps receiving the log; add it again to promote it once it caught up, "
         "or remove it (DELETE /v1/cluster/members/" +
         std::to_string(add.id) + ")";
}

}  // namespace kvatlas::server
