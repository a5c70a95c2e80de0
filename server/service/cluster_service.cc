#include "server/service/cluster_service.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "common/internal/host_port.h"
#include "common/internal/log.h"
#include "server/service/ingest_service.h"
#include "server/service/replica_audit_service.h"

namespace kvatlas::server {
namespace {

// libraft 0.15 gives up promoting a server that has not caught up after 5 s of a catch-up
// round; an add then removes the spare again (raft_log.cc). An add waits this much longer
// than apply_timeout for that outcome.
constexpr std::chrono::milliseconds kPromotionBound{10'000};
// How long a transfer's answer waits for the new leader to be known here.
constexpr std::chrono::milliseconds kNewLeaderWait{2'000};

// Starts a membership change with `start(done)` and waits for its outcome (up to
// options.apply_timeout + `extra`).
template <typename Start>
Status Change(const Services& services, Start start,
              std::chrono::milliseconds extra = std::chrono::milliseconds{0}) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  start([done](Status s) { done->set_value(std::move(s)); });
  const std::chrono::milliseconds limit = services.options.apply_timeout + extra;
  if (result.wait_for(limit) != std::future_status::ready) {
    return Status(StatusCode::kDeadlineExceeded,
                  "the membership change did not complete within " + std::to_string(limit.count()) +
                      " ms; it may still complete: see GET /v1/cluster");
  }
  return result.get();
}

}  // namespace

std::vector<LeaderAddresses> AnnouncedMembers(const Services& services, GroupId group,
                                              std::string* why) {
  std::vector<LeaderAddresses> members;
  const StateMachine& cluster = ClusterState(services);
  for (const uint64_t id : RecordedMembers(*cluster.directory(), group)) {
    if (id == services.server_id) continue;
    const std::optional<ServerAddresses> known = cluster.AddressesOf(id);
    if (!known || known->http_address.empty()) {
      if (why != nullptr) {
        *why = "its member, server " + std::to_string(id) + ", has not announced its HTTP address";
      }
      continue;
    }
    members.push_back(
        {id, known->http_address,
         known->rpc_address.empty() ? std::nullopt : std::optional(known->rpc_address)});
  }
  if (members.empty() && why != nullptr && why->empty()) {
    *why = "no members of group " + std::to_string(group) + " are recorded";
  }
  return members;
}

LeaderAddresses FindLeader(const Services& services) {
  LeaderAddresses leader;
  if (services.log == nullptr) return leader;
  leader.id = services.log->GetStatus().leader_id;
  if (leader.id == 0) return leader;
  if (std::optional<ServerAddresses> known = ClusterState(services).AddressesOf(leader.id)) {
    if (!known->http_address.empty()) leader.http_address = known->http_address;
    if (!known->rpc_address.empty()) leader.rpc_address = known->rpc_address;
  }
  return leader;
}

LeaderAddresses FindLeaderForRedirect(const Services& services) {
  LeaderAddresses leader = FindLeader(services);
  if (leader.id == services.server_id) return LeaderAddresses{};
  return leader;
}

Status RequireCluster(const Services& services) {
  if (services.log == nullptr) return Status::Unavailable("this server runs without replication");
  return Status::Ok();
}

Result<ClusterView> ViewCluster(const Services& services) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  ClusterView view;
  view.status = services.log->GetStatus();
  view.addresses = services.machine->ServerAddressMap();
  // Its own as it serves them; whether it drains, as recorded.
  ServerAddresses& own = view.addresses[view.status.id];
  own.http_address = services.http_address;
  own.rpc_address = services.rpc_address;
  view.revision = services.machine->applied_revision();
  view.audit = services.machine->audit();
  return view;
}

nlohmann::json ClusterViewJson(const ClusterView& view) {
  const ClusterStatus& s = view.status;
  // An address not announced yet (or announced empty) is null.
  const auto address = [&view](uint64_t id, std::string ServerAddresses::*field) {
    auto it = view.addresses.find(id);
    if (it == view.addresses.end() || (it->second.*field).empty()) return nlohmann::json(nullptr);
    return nlohmann::json(it->second.*field);
  };
  // Known on the leader only (replicated_log.h): null elsewhere.
  const auto optional = [](const auto& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  // Port 0 is no address: a single server started without --raft-listen takes any port,
  // which nobody else needs (or can learn).
  const auto raft_address = [](const std::string& raft) {
    const Result<HostPort> parsed = ParseHostPort(raft);
    if (raft.empty() || (parsed.has_value() && parsed->port == 0)) return nlohmann::json(nullptr);
    return nlohmann::json(raft);
  };
  nlohmann::json members = nlohmann::json::array();
  for (const ClusterMember& m : s.members) {
    const bool self = m.id == s.id;
    nlohmann::json state = nullptr;  // another member's state is not known here...
    if (self) {
      state = s.state;
    } else if (m.id == s.leader_id) {
      state = "leader";
    } else if (m.reachable == false) {
      state = "unreachable";  // ...except, on the leader, that it does not answer
    }
    members.push_back(
        {{"id", m.id},
         {"raft_address", raft_address(m.raft_address)},
         {"http_address", address(m.id, &ServerAddresses::http_address)},
         {"rpc_address", address(m.id, &ServerAddresses::rpc_address)},
         {"role", m.role},
         {"state", std::move(state)},
         {"reachable", optional(m.reachable)},
         {"last_contact_ms", optional(m.last_contact_ms)},
         {"applied_index", self ? nlohmann::json(s.applied_index) : nullptr},
         {"match_index", optional(m.match_index)},
         {"lag_entries", optional(MemberLagEntries(s, m))},
         {"draining", view.addresses.contains(m.id) && view.addresses.at(m.id).draining}});
  }
  nlohmann::json out = {{"id", s.id},
                        {"state", s.state},
                        {"leader_id", s.leader_id},
                        {"leader_raft_address", raft_address(s.leader_raft_address)},
                        {"leader_http_address",
                         s.leader_id == 0 ? nlohmann::json(nullptr)
                                          : address(s.leader_id, &ServerAddresses::http_address)},
                        {"leader_rpc_address",
                         s.leader_id == 0 ? nlohmann::json(nullptr)
                                          : address(s.leader_id, &ServerAddresses::rpc_address)},
                        {"term", s.term},
                        {"commit_index", s.commit_index},
                        {"applied_index", s.applied_index},
                        {"last_index", s.last_index},
                        {"revision", view.revision},
                        {"members", std::move(members)}};
  out["audit"] = AuditJson(view.audit);
  return out;
}

Status AddMember(const Services& services, uint64_t id, std::string raft_address) {
  return Change(
      services,
      [&](ReplicatedLog::Done done) {
        services.log->AddServer(id, std::move(raft_address), std::move(done));
      },
      kPromotionBound);
}

Status RemoveMember(const Services& services, uint64_t id) {
  KVATLAS_RETURN_IF_ERROR(Change(services, [&](ReplicatedLog::Done done) {
    services.log->RemoveServer(id, std::move(done));
  }));
  if (!services.machine->AddressesOf(id).has_value()) return Status::Ok();
  CommandBatch forget;
  forget.commands.emplace_back(ForgetServerCommand{id});
  Result<Revision> forgotten = SubmitAndWait(services, std::move(forget));
  if (!forgotten.has_value()) {
    return forgotten.error().WithContext("server " + std::to_string(id) +
                                         " was removed, but dropping its addresses failed");
  }
  return Status::Ok();
}

Result<uint64_t> TransferLeadership(const Services& services, uint64_t id) {
  KVATLAS_RETURN_IF_ERROR(Change(services, [&](ReplicatedLog::Done done) {
    services.log->TransferLeadership(id, std::move(done));
  }));
  // The transfer is done once another server leads; this server's status (refreshed every
  // 50 ms) may not say who yet.
  const auto deadline = std::chrono::steady_clock::now() + kNewLeaderWait;
  while (true) {
    const uint64_t leader = services.log->GetStatus().leader_id;
    if (leader != 0 && leader != services.server_id && (id == 0 || leader == id)) return leader;
    if (std::chrono::steady_clock::now() >= deadline) return uint64_t{0};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool IsMember(const Services& services, uint64_t id) {
  if (services.log == nullptr) return false;
  const ClusterStatus status = services.log->GetStatus();
  return std::any_of(status.members.begin(), status.members.end(),
                     [id](const ClusterMember& m) { return m.id == id; });
}

Status RequireInternalCall(const Services& services, std::optional<uint64_t> announcer,
                           std::string_view remote, std::string_view what) {
  if (announcer.has_value()) return Status::Ok();
  if (services.peers != nullptr) {
    services.peers->Refuse(PeerChannel::kHttpIn, PeerRefusal::kUnsigned, remote,
                           std::string(what) + " without " + kPeerAuthHeader);
  }
  return Status(StatusCode::kUnauthenticated,
                std::string(what) +
                    " is a call between the servers of the cluster: it must be signed with the "
                    "cluster secret (" +
                    kPeerAuthHeader + ")");
}

Status SubmitForwardedPredictions(const Services& services, uint64_t sender, CommandBatch batch) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  if (services.predictions == nullptr) {
    return Status::FailedPrecondition("this server records no predictions");
  }
  // Each prediction is its context's group's (one part on a single-group server).
  for (auto& [group, part] : SplitByGroup(services, std::move(batch))) {
    if (group->predictions == nullptr) continue;
    KVATLAS_RETURN_IF_ERROR(
        group->predictions->SubmitForwarded(std::move(part))
            .WithContext("predictions forwarded by server " + std::to_string(sender)));
  }
  return Status::Ok();
}

ClusterShape ShapeOf(const Services& services) {
  return {services.groups == nullptr ? 1 : services.groups->size(), services.replicas};
}

Status CheckClusterShape(const Services& services, uint64_t id, const ClusterShape& shape) {
  const ClusterShape mine = ShapeOf(services);
  if (shape == mine) return Status::Ok();
  const auto text = [](const ClusterShape& s) {
    return "--groups " + std::to_string(s.groups) + " --replicas " + std::to_string(s.replicas);
  };
  return Status::FailedPrecondition(
      "server " + std::to_string(id) + " runs " + text(shape) + ", but group 1's leader (server " +
      std::to_string(services.server_id) + ") runs " + text(mine) +
      ": every server of a cluster must run the same (the leader places the groups' replicas "
      "by its own); start server " +
      std::to_string(id) + " again on an empty data directory with the cluster's settings");
}

Result<Revision> AnnounceMember(const Services& services, uint64_t announcer,
                                std::string_view remote, uint64_t id, ServerAddresses addresses,
                                std::optional<ClusterShape> shape) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  if (announcer != id) {
    const std::string why = "server " + std::to_string(announcer) +
                            " may announce only its own addresses, not server " +
                            std::to_string(id) + "'s";
    if (services.peers != nullptr) {
      services.peers->Refuse(PeerChannel::kHttpIn, PeerRefusal::kWrongSender, remote, why);
    }
    return Status(StatusCode::kPermissionDenied, why);
  }
  if (!IsMember(services, id)) {
    return Status::NotFound("server " + std::to_string(id) + " is not a member of the cluster");
  }
  if (shape) {
    if (Status s = CheckClusterShape(services, id, *shape); !s.ok()) {
      LogWarning("refused server " + std::to_string(id) + "'s announcement: " + s.message());
      return s;
    }
  }
  if (services.machine->AddressesOf(id) == addresses) {
    return services.machine->applied_revision();
  }
  CommandBatch batch;
  batch.commands.emplace_back(
      AnnounceCommand{id, std::move(addresses.http_address), std::move(addresses.rpc_address)});
  return SubmitAndWait(services, std::move(batch));
}

Result<Revision> SetDraining(const Services& services, uint64_t id, bool draining) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  if (!IsMember(services, id)) {
    return Status::NotFound("server " + std::to_string(id) + " is not a member of the cluster");
  }
  if (draining && services.log->GetStatus().members.size() < 2) {
    return Status::FailedPrecondition(
        "a cluster of one server has no other server to lead its groups");
  }
  const std::optional<ServerAddresses> recorded = services.machine->AddressesOf(id);
  if (!recorded) {
    return Status::FailedPrecondition(
        "server " + std::to_string(id) +
        " has not announced its addresses yet (a drain is recorded with them); retry once it "
        "has");
  }
  if (recorded->draining == draining) return services.machine->applied_revision();
  CommandBatch batch;
  batch.commands.emplace_back(DrainCommand{id, draining});
  return SubmitAndWait(services, std::move(batch));
}

}  // namespace kvatlas::server
