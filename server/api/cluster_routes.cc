// The raft cluster over REST (docs/replication.md): GET /v1/cluster, GET /v1/groups (its
// raft groups, docs/scaling.md), and membership changes on the leader: POST
// /v1/cluster/members, DELETE /v1/cluster/members/{id}, POST /v1/cluster/transfer, POST
// /v1/cluster/drain, POST /v1/cluster/announce (a member's addresses), POST
// /v1/cluster/drain-self (a member stopping), POST /v1/cluster/predict (a follower's
// predictions, forwarded_predictions.h), POST /v1/cluster/apply (a write part for a group
// led here, group_forwarder.h), POST /v1/cluster/read (a read of a group held here) and POST
// /v1/cluster/released (whether a server may drop its copy of a group led here). A change is
// answered once raft has committed it. On a follower these fail with kNotLeader and are
// forwarded to the leader (forwarding.h), except the internal calls (announce, drain-self,
// predict, apply, read, released), which are answered 421.

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "common/internal/host_port.h"
#include "kvatlas/common/limits.h"
#include "kvatlas/common/protocol.h"
#include "server/api/forwarded_predictions.h"
#include "server/api/routes.h"
#include "server/model/command_codec.h"
#include "server/service/cluster_service.h"
#include "server/service/group_service.h"
#include "server/service/ingest_service.h"
#include "server/service/lookup_service.h"
#include "server/service/route_decision.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleGroups(const Services& services) {
  KVATLAS_ASSIGN_OR_RETURN(GroupsView view, ViewGroups(services));
  return JsonReply(GroupsViewJson(view).dump());
}

Result<HttpReply> HandleCluster(const Services& services) {
  KVATLAS_ASSIGN_OR_RETURN(ClusterView view, ViewCluster(services));
  return JsonReply(ClusterViewJson(view).dump());
}

Result<uint64_t> ServerId(const nlohmann::json& value, std::string_view field, bool allow_zero) {
  if (!value.is_number_unsigned() || (!allow_zero && value.get<uint64_t>() == 0)) {
    return Status::InvalidArgument("body." + std::string(field) + ": must be a positive integer");
  }
  return value.get<uint64_t>();
}

// The answer of a committed membership change: `answer` with "status": "ok".
Result<HttpReply> Changed(const Status& status, nlohmann::json answer) {
  KVATLAS_RETURN_IF_ERROR(status);
  answer["status"] = "ok";
  return JsonReply(answer.dump());
}

Result<HttpReply> HandleAdd(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(uint64_t id, ServerId(body.value("id", nlohmann::json()), "id", false));
  const nlohmann::json address = body.value("raft_address", nlohmann::json());
  if (!address.is_string() || address.get<std::string>().find(':') == std::string::npos) {
    return Status::InvalidArgument("body.raft_address: must be HOST:PORT");
  }
  const std::string raft_address = address.get<std::string>();
  KVATLAS_RETURN_IF_ERROR(CheckLength("body.", "raft_address", raft_address, kMaxEndpointBytes));
  return Changed(AddMember(services, id, raft_address),
                 {{"added", id}, {"raft_address", raft_address}});
}

// `text` as a positive decimal integer, wholly; nullopt otherwise.
std::optional<uint64_t> PositiveInteger(std::string_view text) {
  const std::optional<uint64_t> value = ParseDecimal(text);
  return value == 0 ? std::nullopt : value;
}

Result<HttpReply> HandleRemove(const Services& services, const RouteRequest& request) {
  const std::optional<uint64_t> id = PositiveInteger(request.path_param);
  if (!id) return Status::InvalidArgument("path: the server id must be a positive integer");
  return Changed(RemoveMember(services, *id), {{"removed", *id}});
}

// POST /v1/cluster/announce {"id", "http_address", "rpc_address", "groups", "replicas"}:
// records a member's addresses (servers call it on the leader for themselves; announcer.h),
// refusing a member that runs another group count or replication factor (the last two
// fields, which builds before them do not send). An internal call: signed by the member
// itself (forwarding.h), never forwarded.
Result<HttpReply> HandleAnnounce(const Services& services, const RouteRequest& request) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  const std::optional<uint64_t> announcer =
      request.peer ? std::optional<uint64_t>(request.peer->sender) : std::nullopt;
  KVATLAS_RETURN_IF_ERROR(RequireInternalCall(services, announcer, request.http.remote_addr,
                                              "POST /v1/cluster/announce"));
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(uint64_t id, ServerId(body.value("id", nlohmann::json()), "id", false));
  ServerAddresses addresses;
  for (auto [field, out] : {std::pair{"http_address", &addresses.http_address},
                            std::pair{"rpc_address", &addresses.rpc_address}}) {
    const nlohmann::json value = body.value(field, nlohmann::json());
    if (!value.is_string() || !IsConnectableHostPort(value.get<std::string>())) {
      return Status::InvalidArgument(std::string("body.") + field + ": must be HOST:PORT");
    }
    *out = value.get<std::string>();
    KVATLAS_RETURN_IF_ERROR(CheckLength("body.", field, *out, kMaxEndpointBytes));
  }
  std::optional<ClusterShape> shape;
  if (body.contains("groups") || body.contains("replicas")) {
    shape.emplace();
    for (auto [field, out] :
         {std::pair{"groups", &shape->groups}, std::pair{"replicas", &shape->replicas}}) {
      const nlohmann::json value = body.value(field, nlohmann::json());
      if (!value.is_number_unsigned()) {
        return Status::InvalidArgument(std::string("body.") + field +
                                       ": must be an unsigned integer (with the other)");
      }
      *out = value.get<uint64_t>();
    }
  }
  nlohmann::json answer = {{"status", "ok"},
                           {"id", id},
                           {"http_address", addresses.http_address},
                           {"rpc_address", addresses.rpc_address}};
  KVATLAS_ASSIGN_OR_RETURN(answer["revision"],
                           AnnounceMember(services, *announcer, request.http.remote_addr, id,
                                          std::move(addresses), shape));
  return JsonReply(answer.dump());
}

// The verified sender of internal call `what` (a cluster member), or why it is refused.
Result<uint64_t> InternalSender(const Services& services, const RouteRequest& request,
                                std::string_view what) {
  KVATLAS_RETURN_IF_ERROR(RequireCluster(services));
  const std::optional<uint64_t> sender =
      request.peer ? std::optional<uint64_t>(request.peer->sender) : std::nullopt;
  KVATLAS_RETURN_IF_ERROR(RequireInternalCall(services, sender, request.http.remote_addr, what));
  return *sender;
}

// POST /v1/cluster/predict {"predictions": [...]}: a follower's round of approximate-mode
// predictions (forwarded_predictions.h), submitted here without waiting. An internal call:
// signed by a member, never forwarded.
Result<HttpReply> HandlePredict(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(uint64_t sender,
                           InternalSender(services, request, "POST /v1/cluster/predict"));
  KVATLAS_ASSIGN_OR_RETURN(CommandBatch batch, DecodeForwardedPredictions(request.http.body));
  const size_t predictions = batch.commands.size();
  KVATLAS_RETURN_IF_ERROR(SubmitForwardedPredictions(services, sender, std::move(batch)));
  return JsonReply(nlohmann::json({{"status", "ok"}, {"predictions", predictions}}).dump());
}

// POST /v1/cluster/apply?group=G, body: a CommandBatch (EncodeCommandBatch): a write part
// of group G from a server that does not lead G (group_forwarder.h), submitted here and
// answered {"status", "group", "revision"} once applied. An internal call: signed by a
// member, never forwarded (not_leader, 421, when this server does not lead G).
// The group named by ?group=G, when this server leads it (kNotLeader otherwise).
Result<const Services*> LedGroupOfQuery(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(const Services* group, GroupOfQuery(services, request));
  if (!group->log->is_leader()) {
    return Status(StatusCode::kNotLeader,
                  "this server does not lead group " + std::to_string(group->group));
  }
  return group;
}

Result<HttpReply> HandleApply(const Services& services, const RouteRequest& request) {
  KVATLAS_RETURN_IF_ERROR(InternalSender(services, request, "POST /v1/cluster/apply").status());
  KVATLAS_ASSIGN_OR_RETURN(const Services* led, LedGroupOfQuery(services, request));
  const Services& group = *led;
  const GroupId id = group.group;
  Result<CommandBatch> batch = DecodeCommandBatch(request.http.body);
  if (!batch.has_value()) return Status::InvalidArgument("body: " + batch.error().message());
  KVATLAS_ASSIGN_OR_RETURN(Revision revision, ApplyHereAndWait(group, std::move(*batch),
                                                               std::chrono::steady_clock::now() +
                                                                   services.options.apply_timeout));
  return JsonReply(
      nlohmann::json({{"status", "ok"}, {"group", id}, {"revision", revision}}).dump());
}

// POST /v1/cluster/read?group=G&type=T, body: a binary-protocol request payload of type T
// (kLookup or kRoute, docs/protocol.md): a read of a context of group G from a server that
// holds no replica of G (group_forwarder.h, replicas on some servers), answered as the
// binary protocol answers it here — its consistency (min_revision, linearizable) included —
// with the answer's payload (application/octet-stream), or an error. An internal call:
// signed by a member, never forwarded (not_leader, 421, when this server holds no replica
// of the context's group either).
Result<HttpReply> HandleRead(const Services& services, const RouteRequest& request) {
  KVATLAS_RETURN_IF_ERROR(InternalSender(services, request, "POST /v1/cluster/read").status());
  const std::optional<uint64_t> type = PositiveInteger(request.http.Param("type"));
  RoutingRequest route;  // a kLookup's request is route.lookup
  const bool is_route = type == static_cast<uint64_t>(protocol::MessageType::kRoute);
  if (type == static_cast<uint64_t>(protocol::MessageType::kLookup)) {
    KVATLAS_ASSIGN_OR_RETURN(route.lookup, protocol::DecodeLookupRequestBinary(request.http.body));
  } else if (is_route) {
    KVATLAS_ASSIGN_OR_RETURN(route, protocol::DecodeRouteRequestBinary(request.http.body));
  } else {
    return Status::InvalidArgument("query.type: must be 2 (kLookup) or 6 (kRoute)");
  }
  const LookupRequest& lookup = route.lookup;
  if (!HostsGroup(ServicesFor(services, lookup.context))) {
    return Status(StatusCode::kNotLeader, "this server holds no replica of group " +
                                              std::to_string(GroupOf(services, lookup.context)));
  }
  KVATLAS_RETURN_IF_ERROR(AwaitReadConsistency(services, lookup));
  HttpReply reply;
  reply.content_type = "application/octet-stream";
  if (is_route) {
    KVATLAS_ASSIGN_OR_RETURN(RoutingAnswer answer, DecideRoute(services, route));
    reply.body =
        protocol::EncodeRouteAnswerBinary(answer, protocol::RouteRequestUsesApproximate(route));
  } else {
    KVATLAS_ASSIGN_OR_RETURN(LookupAnswer answer,
                             LookupPrefix(ServicesFor(services, lookup.context), lookup));
    reply.body = protocol::EncodeLookupAnswerBinary(answer);
  }
  return reply;
}

// POST /v1/cluster/released?group=G: whether the sender may drop its copy of group G
// (docs/scaling.md §Dropping a copy), answered by G's leader as {"group", "released",
// "members"}: released while G's configuration is committed and names no such server.
// An internal call: signed by a member, never forwarded (421 where G is not led).
Result<HttpReply> HandleReleased(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(uint64_t sender,
                           InternalSender(services, request, "POST /v1/cluster/released"));
  KVATLAS_ASSIGN_OR_RETURN(const Services* group, LedGroupOfQuery(services, request));
  const ClusterStatus status = group->log->GetStatus();
  nlohmann::json members = nlohmann::json::array();
  bool named = false;
  for (const ClusterMember& member : status.members) {
    members.push_back(member.id);
    named = named || member.id == sender;
  }
  const bool released = status.state == "leader" && status.configuration_committed && !named;
  return JsonReply(
      nlohmann::json(
          {{"group", group->group}, {"released", released}, {"members", std::move(members)}})
          .dump());
}

Result<HttpReply> HandleTransfer(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  uint64_t id = 0;
  if (body.contains("id")) {
    KVATLAS_ASSIGN_OR_RETURN(id, ServerId(body["id"], "id", /*allow_zero=*/true));
  }
  KVATLAS_ASSIGN_OR_RETURN(uint64_t leader, TransferLeadership(services, id));
  return JsonReply(
      nlohmann::json({{"status", "ok"}, {"transfer_to", id}, {"leader_id", leader}}).dump());
}

// The answer of a drain's change.
Result<HttpReply> Drained(Result<Revision> recorded, uint64_t id, bool draining) {
  KVATLAS_RETURN_IF_ERROR(recorded.status());
  return JsonReply(
      nlohmann::json(
          {{"status", "ok"}, {"id", id}, {"draining", draining}, {"revision", *recorded}})
          .dump());
}

// body.draining: a boolean, true when absent.
Result<bool> DrainingField(const nlohmann::json& body) {
  const nlohmann::json value = body.value("draining", nlohmann::json(true));
  if (!value.is_boolean()) return Status::InvalidArgument("body.draining: must be a boolean");
  return value.get<bool>();
}

// POST /v1/cluster/drain {"id", "draining" (default true)}: an operator's drain of a member
// (docs/operations.md §Draining a server), or its end.
Result<HttpReply> HandleDrain(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(uint64_t id, ServerId(body.value("id", nlohmann::json()), "id", false));
  KVATLAS_ASSIGN_OR_RETURN(bool draining, DrainingField(body));
  return Drained(SetDraining(services, id, draining), id, draining);
}

// POST /v1/cluster/drain-self {"draining"}: a member drains itself as it stops (server.cc).
// An internal call: signed by that member, never forwarded.
Result<HttpReply> HandleDrainSelf(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(uint64_t sender,
                           InternalSender(services, request, "POST /v1/cluster/drain-self"));
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(bool draining, DrainingField(body));
  return Drained(SetDraining(services, sender, draining), sender, draining);
}

}  // namespace

std::optional<uint64_t> ParseDecimal(std::string_view text) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

Result<const Services*> GroupOfQuery(const Services& services, const RouteRequest& request) {
  const size_t groups = services.groups == nullptr ? 1 : services.groups->size();
  const std::string text = request.http.Param("group");
  const std::optional<uint64_t> id = ParseDecimal(text);
  if (!id || *id == 0 || *id > groups) {
    return Status::InvalidArgument("query.group: must be a group of this cluster, 1 to " +
                                   std::to_string(groups) + ", got \"" + text + "\"");
  }
  return services.groups == nullptr ? &services : &(*services.groups)[*id - 1];
}

void AddClusterRoutes(const Services* services, Router* router) {
  router->Add({"GET", "/v1/groups", RouteAccess::kRead,
               [services](const RouteRequest&) { return HandleGroups(*services); }});
  router->Add({"GET", "/v1/directory", RouteAccess::kRead, [services](const RouteRequest&) {
                 return Result<HttpReply>(JsonReply(DirectoryJson(*services).dump()));
               }});
  router->Add({"GET", "/v1/cluster", RouteAccess::kRead,
               [services](const RouteRequest&) { return HandleCluster(*services); }});
  router->Add({"POST", "/v1/cluster/members", RouteAccess::kAdmin,
               [services](const RouteRequest& request) { return HandleAdd(*services, request); }});
  router->Add(
      {"DELETE", "/v1/cluster/members/{id}", RouteAccess::kAdmin,
       [services](const RouteRequest& request) { return HandleRemove(*services, request); }});
  router->Add(
      {"POST", "/v1/cluster/transfer", RouteAccess::kAdmin,
       [services](const RouteRequest& request) { return HandleTransfer(*services, request); }});
  router->Add(
      {"POST", "/v1/cluster/announce", RouteAccess::kInternal,
       [services](const RouteRequest& request) { return HandleAnnounce(*services, request); }});
  router->Add(
      {"POST", "/v1/cluster/predict", RouteAccess::kInternal,
       [services](const RouteRequest& request) { return HandlePredict(*services, request); }});
  router->Add(
      {"POST", "/v1/cluster/drain", RouteAccess::kAdmin,
       [services](const RouteRequest& request) { return HandleDrain(*services, request); }});
  router->Add(
      {"POST", "/v1/cluster/drain-self", RouteAccess::kInternal,
       [services](const RouteRequest& request) { return HandleDrainSelf(*services, request); }});
  router->Add({"POST", "/v1/cluster/apply", RouteAccess::kInternal,
               [services](const RouteRequest& request) { return HandleApply(*services, request); },
               "application/octet-stream"});
  router->Add(
      {"POST", "/v1/cluster/released", RouteAccess::kInternal,
       [services](const RouteRequest& request) { return HandleReleased(*services, request); }});
  router->Add({"POST", "/v1/cluster/read", RouteAccess::kInternal,
               [services](const RouteRequest& request) { return HandleRead(*services, request); },
               "application/octet-stream"});
}

}  // namespace kvatlas::server
