// The raft cluster over REST (docs/replication.md): GET /v1/cluster, and membership
// changes on the leader: POST /v1/cluster/members, DELETE /v1/cluster/members/{id},
// POST /v1/cluster/transfer, POST /v1/cluster/announce (a member's addresses). A change is
// answered once raft has committed it. On a follower these fail with kNotLeader and are
// forwarded to the leader (forwarding.h).
#include <httplib.h>

#include <charconv>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "server/api/forwarding.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleCluster(const ApiServices& api) {
  if (api.log == nullptr) return Status::Unavailable("this server runs without replication");
  const ClusterStatus s = api.log->GetStatus();
  std::map<uint64_t, ServerAddresses> known = api.machine->ServerAddressMap();
  // This server's own addresses are known before it has announced them.
  known[s.id] = ServerAddresses{api.http_address, api.rpc_address};
  // An address not announced yet (or announced empty) is null.
  const auto address = [&known](uint64_t id, std::string ServerAddresses::*field) {
    auto it = known.find(id);
    if (it == known.end() || (it->second.*field).empty()) return nlohmann::json(nullptr);
    return nlohmann::json(it->second.*field);
  };
  nlohmann::json members = nlohmann::json::array();
  for (const ClusterMember& m : s.members) {
    const bool self = m.id == s.id;
    members.push_back({{"id", m.id},
                       {"raft_address", m.raft_address},
                       {"http_address", address(m.id, &ServerAddresses::http_address)},
                       {"rpc_address", address(m.id, &ServerAddresses::rpc_address)},
                       {"role", m.role},
                       {"state", self                  ? nlohmann::json(s.state)
                                 : m.id == s.leader_id ? nlohmann::json("leader")
                                                       : nlohmann::json(nullptr)},
                       {"applied_index", self ? nlohmann::json(s.applied_index) : nullptr}});
  }
  nlohmann::json out = {{"id", s.id},
                        {"state", s.state},
                        {"leader_id", s.leader_id},
                        {"leader_raft_address", s.leader_raft_address},
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
                        {"revision", api.machine->applied_revision()},
                        {"members", std::move(members)}};
  return JsonReply(out.dump());
}

Result<uint64_t> ServerId(const nlohmann::json& value, std::string_view field, bool allow_zero) {
  if (!value.is_number_unsigned() || (!allow_zero && value.get<uint64_t>() == 0)) {
    return Status::InvalidArgument("body." + std::string(field) + ": must be a positive integer");
  }
  return value.get<uint64_t>();
}

// Runs a membership change and waits for its outcome (up to apply_timeout).
template <typename Start>
Result<HttpReply> Change(const ApiServices& api, Start start, nlohmann::json answer) {
  if (api.log == nullptr) return Status::Unavailable("this server runs without replication");
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  start([done](Status s) { done->set_value(std::move(s)); });
  if (result.wait_for(api.options.apply_timeout) != std::future_status::ready) {
    return ApplyDeadlineExceeded(api);
  }
  KVATLAS_RETURN_IF_ERROR(result.get());
  answer["status"] = "ok";
  return JsonReply(answer.dump());
}

Result<HttpReply> HandleAdd(const ApiServices& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(uint64_t id, ServerId(body.value("id", nlohmann::json()), "id", false));
  const nlohmann::json address = body.value("raft_address", nlohmann::json());
  if (!address.is_string() || address.get<std::string>().find(':') == std::string::npos) {
    return Status::InvalidArgument("body.raft_address: must be HOST:PORT");
  }
  std::string raft_address = address.get<std::string>();
  return Change(
      api, [&](ReplicatedLog::Done done) { api.log->AddServer(id, raft_address, std::move(done)); },
      {{"added", id}, {"raft_address", raft_address}});
}

Result<HttpReply> HandleRemove(const ApiServices& api, const RouteRequest& request) {
  uint64_t id = 0;
  const std::string_view text = request.path_param;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || id == 0) {
    return Status::InvalidArgument("path: the server id must be a positive integer");
  }
  KVATLAS_ASSIGN_OR_RETURN(
      HttpReply reply,
      Change(api, [&](ReplicatedLog::Done done) { api.log->RemoveServer(id, std::move(done)); },
             {{"removed", id}}));
  // The removed server's addresses go too (a replicated command, after the removal).
  if (api.machine->AddressesOf(id).has_value()) {
    CommandBatch forget;
    forget.commands.emplace_back(ForgetServerCommand{id});
    Result<Revision> forgotten = SubmitAndWait(api, std::move(forget));
    if (!forgotten.has_value()) {
      return forgotten.error().WithContext("server " + std::to_string(id) +
                                           " was removed, but dropping its addresses failed");
    }
  }
  return reply;
}

// POST /v1/cluster/announce {"id", "http_address", "rpc_address"}: records a member's
// addresses (servers call it on the leader for themselves; server.cc). A member whose
// recorded addresses are already these answers at once without a log entry.
Result<HttpReply> HandleAnnounce(const ApiServices& api, const RouteRequest& request) {
  if (api.log == nullptr) return Status::Unavailable("this server runs without replication");
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(uint64_t id, ServerId(body.value("id", nlohmann::json()), "id", false));
  ServerAddresses addresses;
  for (auto [field, out] : {std::pair{"http_address", &addresses.http_address},
                            std::pair{"rpc_address", &addresses.rpc_address}}) {
    const nlohmann::json value = body.value(field, nlohmann::json());
    if (!value.is_string() || !IsHostPort(value.get<std::string>())) {
      return Status::InvalidArgument(std::string("body.") + field + ": must be HOST:PORT");
    }
    *out = value.get<std::string>();
  }
  const ClusterStatus status = api.log->GetStatus();
  bool member = false;
  for (const ClusterMember& m : status.members) member = member || m.id == id;
  if (!member) {
    return Status::NotFound("server " + std::to_string(id) + " is not a member of the cluster");
  }
  nlohmann::json answer = {{"status", "ok"},
                           {"id", id},
                           {"http_address", addresses.http_address},
                           {"rpc_address", addresses.rpc_address}};
  if (api.machine->AddressesOf(id) == addresses) {
    answer["revision"] = api.machine->applied_revision();
    return JsonReply(answer.dump());
  }
  CommandBatch batch;
  batch.commands.emplace_back(
      AnnounceCommand{id, std::move(addresses.http_address), std::move(addresses.rpc_address)});
  KVATLAS_ASSIGN_OR_RETURN(Revision revision, SubmitAndWait(api, std::move(batch)));
  answer["revision"] = revision;
  return JsonReply(answer.dump());
}

Result<HttpReply> HandleTransfer(const ApiServices& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  uint64_t id = 0;
  if (body.contains("id")) {
    KVATLAS_ASSIGN_OR_RETURN(id, ServerId(body["id"], "id", /*allow_zero=*/true));
  }
  return Change(api,
                [&](ReplicatedLog::Done done) { api.log->TransferLeadership(id, std::move(done)); },
                {{"transfer_to", id}});
}

}  // namespace

void AddClusterRoutes(const ApiServices* api, Router* router) {
  router->Add(
      {"GET", "/v1/cluster", false, [api](const RouteRequest&) { return HandleCluster(*api); }});
  router->Add({"POST", "/v1/cluster/members", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleAdd(*api, request); }});
  router->Add({"DELETE", "/v1/cluster/members/{id}", false,
               [api](const RouteRequest& request) { return HandleRemove(*api, request); }});
  router->Add({"POST", "/v1/cluster/transfer", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleTransfer(*api, request); }});
  router->Add({"POST", "/v1/cluster/announce", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleAnnounce(*api, request); }});
}

}  // namespace kvatlas::server
