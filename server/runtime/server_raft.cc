// Server: this server's part of the raft cluster (peer authentication, and the start of
// the groups' raft members, group.h, side by side when there are several). server.h.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/internal/log.h"
#include "server/api/forwarding.h"
#include "server/runtime/server.h"
#include "server/service/group_service.h"
#include "server/service/ingest_service.h"

namespace kvatlas::server {
namespace {

// How long a server waits for a member's answer on whether it may drop its copy of a group.
constexpr std::chrono::milliseconds kReleaseAskTimeout{2'000};

}  // namespace

Status Server::StartPeerAuth(bool single, const std::string& secret) {
  if (!config_.cluster_secret_file.empty()) {
    LogInfo("peers authenticate with the cluster secret of " + config_.cluster_secret_file +
            " (cluster_id \"" + config_.cluster_id + "\")");
  } else if (!single && PeersExposed(config_)) {
    LogWarning(
        "insecure: this cluster's servers use non-loopback addresses and no cluster_secret_file "
        "is set: anyone who reaches them can pose as a member (join raft, announce addresses, "
        "answer forwarded writes); docs/security.md §Peers");
  } else if (!single) {
    LogWarning(
        "no cluster_secret_file: peers on loopback addresses prove only the cluster id, so any "
        "process on this machine can pose as a member");
  }
  // A single server without a secret uses a random key: nobody else can sign for it (a
  // server that should take members later needs the secret from the start).
  peer_auth_ = std::make_unique<PeerAuth>(config_.id, config_.cluster_id, secret,
                                          /*random_if_no_secret=*/single);
  return Status::Ok();
}

Status Server::StartRaft(const Preflight& preflight) {
  KVATLAS_RETURN_IF_ERROR(StartPeerAuth(preflight.raft.single, preflight.cluster_secret));
  // Registry changes reach the ZMQ ingest once it exists; raft may apply entries (replay
  // past the persisted state) as soon as it starts. Every group's: a stream is followed once
  // its group holds its registration too (zmq_ingest.h).
  auto registry_changed = [this] {
    if (ZmqIngest* zmq = zmq_notify_.load(std::memory_order_acquire)) zmq->NotifyRegistryChanged();
  };
  // The other groups' connections reach them through group 1's listener (whichever starts
  // first: a connection for a group not registered yet is closed, and its peer dials again).
  KVATLAS_RETURN_IF_ERROR(ForEachGroup(
      "starting raft in " + std::to_string(groups_.size()) + " groups", [&](Group& group) {
        const int listen_fd = &group == group_ ? preflight.raft_socket.fd() : -1;
        return group.StartReplication(peer_auth_.get(), listen_fd, registry_changed);
      }));
  std::vector<GroupMirror::Follower> followers;
  for (size_t i = 1; i < groups_.size(); ++i) {
    followers.push_back({groups_[i]->id(), groups_[i]->raft()});
  }
  // On every server, one group too: a draining server hands its leaderships over with it.
  // With replicas on some servers, each group's leader records its members in group 1
  // (through group 1's leader, like any write part: the group parts exist once the mirror
  // starts, after the listeners).
  GroupMirror::Records records;
  records.recorded = [machine = group_->machine()](GroupId id) {
    return RecordedMembers(*machine->directory(), id);
  };
  records.record = [this](GroupId id, std::vector<uint64_t> members,
                          std::function<void(Status)> done) {
    const std::vector<Services>* groups = group_services_.load(std::memory_order_acquire);
    if (groups == nullptr) {
      done(Status::Unavailable("the server is starting"));
      return;
    }
    CommandBatch batch;
    batch.commands.push_back(SetGroupMembersCommand{id, std::move(members)});
    SubmitPart((*groups)[0], std::move(batch),
               [done = std::move(done)](Result<Revision> applied) { done(applied.status()); });
  };
  group_mirror_ = std::make_unique<GroupMirror>(
      config_.id, group_->raft(),
      [machine = group_->machine()] { return machine->DrainingServers(); }, std::move(followers),
      static_cast<size_t>(config_.replicas), std::move(records),
      [mismatch = services_.shape_mismatch] { return !mismatch->Get().empty(); });
  if (config_.replicas > 0 && groups_.size() > 1) MakeReplicaDropper();
  return Status::Ok();
}

void Server::MakeReplicaDropper() {
  ReplicaDropper::Options options;
  options.self = config_.id;
  options.replicas = static_cast<size_t>(config_.replicas);
  options.primary = group_->raft();
  options.recorded = [machine = group_->machine()](GroupId id) {
    return RecordedMembers(*machine->directory(), id);
  };
  for (size_t i = 1; i < groups_.size(); ++i) options.groups.push_back(groups_[i].get());
  options.ask = [this](GroupId group, uint64_t member) -> Result<bool> {
    const std::optional<ServerAddresses> addresses = group_->machine()->AddressesOf(member);
    if (!addresses || addresses->http_address.empty()) {
      return Status::Unavailable("server " + std::to_string(member) +
                                 " has not announced its HTTP address yet");
    }
    KVATLAS_ASSIGN_OR_RETURN(
        std::string answer,
        PostInternalCall(services_.peer_http, peer_auth_.get(), member, addresses->http_address,
                         "/v1/cluster/released?group=" + std::to_string(group), "{}",
                         {kReleaseAskTimeout, kReleaseAskTimeout}));
    const nlohmann::json body = nlohmann::json::parse(answer, nullptr, false);
    if (!body.is_object() || !body.contains("released") || !body["released"].is_boolean()) {
      return Status::Unavailable("server " + std::to_string(member) +
                                 " answered POST /v1/cluster/released without \"released\"");
    }
    return body["released"].get<bool>();
  };
  options.dropped = [this](GroupId group) { metrics_.RecordReplicaDropped(group); };
  replica_dropper_ = std::make_unique<ReplicaDropper>(std::move(options));
}

}  // namespace kvatlas::server
