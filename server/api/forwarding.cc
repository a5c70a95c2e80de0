#include "server/api/forwarding.h"

#include <httplib.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "common/internal/host_port.h"
#include "common/internal/log.h"
#include "server/service/cluster_service.h"

namespace kvatlas::server {
namespace {

nlohmann::json OrNull(const std::optional<std::string>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

HttpReply NotLeaderReply(const LeaderAddresses& leader, std::string message) {
  HttpReply reply = ErrorReply(Status(StatusCode::kNotLeader, message));
  nlohmann::json body = {{"code", "not_leader"},
                         {"message", std::move(message)},
                         {"leader_id", leader.id},
                         {"leader_http_address", OrNull(leader.http_address)},
                         {"leader_rpc_address", OrNull(leader.rpc_address)}};
  reply.body = body.dump();
  return reply;
}

std::unique_ptr<httplib::Client> MakeClient(const HostPort& to, std::chrono::milliseconds timeout) {
  auto client = std::make_unique<httplib::Client>(to.host, to.port);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout - seconds);
  client->set_connection_timeout(seconds.count(), micros.count());
  client->set_read_timeout(seconds.count(), micros.count());
  client->set_write_timeout(seconds.count(), micros.count());
  client->set_keep_alive(false);
  return client;
}

}  // namespace

HttpReply AnswerNotLeader(const Services& api, const RouteRequest& request,
                          const Status& not_leader) {
  const LeaderAddresses leader = FindLeader(api);
  if (request.http.has_header(kForwardedHeader)) {
    // One hop only: a forwarded request that finds no leader here is not sent on, so that
    // two servers with stale views cannot bounce it between them.
    return NotLeaderReply(leader, not_leader.message() +
                                      "; the request was already forwarded by "
                                      "server " +
                                      request.http.get_header_value(kForwardedHeader));
  }
  if (leader.id == 0) return NotLeaderReply(leader, "not the leader, and no leader is known yet");
  if (leader.id == api.server_id || !leader.http_address) {
    return NotLeaderReply(leader, "not the leader; the leader is server " +
                                      std::to_string(leader.id) +
                                      ", whose HTTP address is not known yet");
  }
  const Result<HostPort> to = ParseHostPort(*leader.http_address);
  if (!to.has_value() || to->port == 0) {
    return NotLeaderReply(leader, "not the leader; the leader's announced HTTP address \"" +
                                      *leader.http_address + "\" is malformed");
  }
  httplib::Request forward;
  forward.method = request.http.method;
  forward.path = request.http.target.empty() ? request.http.path : request.http.target;
  forward.body = request.http.body;
  if (request.http.has_header("Content-Type")) {
    forward.set_header("Content-Type", request.http.get_header_value("Content-Type"));
  } else if (!forward.body.empty()) {
    forward.set_header("Content-Type", "application/json");
  }
  forward.set_header(kForwardedHeader, std::to_string(api.server_id));
  std::unique_ptr<httplib::Client> client = MakeClient(*to, api.options.apply_timeout);
  httplib::Result result = client->send(forward);
  if (!result) {
    HttpReply reply = ErrorReply(Status::Unavailable(
        "not the leader; forwarding to the leader, server " + std::to_string(leader.id) + " at " +
        *leader.http_address + ", failed: " + httplib::to_string(result.error())));
    reply.headers.emplace_back(kForwardedFromHeader, std::to_string(api.server_id));
    return reply;
  }
  HttpReply reply;
  reply.status = result->status;
  reply.body = result->body;
  reply.content_type = result->has_header("Content-Type") ? result->get_header_value("Content-Type")
                                                          : std::string("application/json");
  reply.headers.emplace_back(kForwardedFromHeader, std::to_string(api.server_id));
  return reply;
}

Status PostAnnounce(const std::string& leader_http, uint64_t id, const std::string& http_address,
                    const std::string& rpc_address, std::chrono::milliseconds timeout) {
  const Result<HostPort> to = ParseHostPort(leader_http);
  if (!to.has_value() || to->port == 0)
    return Status::InvalidArgument("malformed leader address " + leader_http);
  const nlohmann::json body = {
      {"id", id}, {"http_address", http_address}, {"rpc_address", rpc_address}};
  std::unique_ptr<httplib::Client> client = MakeClient(*to, timeout);
  httplib::Result result = client->Post("/v1/cluster/announce", body.dump(), "application/json");
  if (!result) {
    return Status::Unavailable("POST http://" + leader_http +
                               "/v1/cluster/announce: " + httplib::to_string(result.error()));
  }
  if (result->status == 200) return Status::Ok();
  return Status(StatusCode::kUnavailable, "POST http://" + leader_http + "/v1/cluster/announce: " +
                                              std::to_string(result->status) + " " + result->body);
}

}  // namespace kvatlas::server
