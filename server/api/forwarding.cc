#include "server/api/forwarding.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/internal/host_port.h"
#include "common/internal/log.h"
#include "server/api/peer_http_client.h"
#include "server/service/cluster_service.h"
#include "server/service/group_service.h"

namespace kvatlas::server {
namespace {

nlohmann::json OrNull(const std::optional<std::string>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// The answer to a request that this server neither ran nor forwarded: nothing of it was
// submitted ("applied": false, so a write may be resent anywhere), and the leader this
// server knows, to resend it to (0 and null when unknown).
HttpReply NotForwardedReply(const Status& status, const LeaderAddresses& leader) {
  HttpReply reply = ErrorReply(status);
  nlohmann::json body = {{"code", std::string(WireNameOf(status.code()))},
                         {"message", status.message()},
                         {"applied", false},
                         {"leader_id", leader.id},
                         {"leader_http_address", OrNull(leader.http_address)},
                         {"leader_rpc_address", OrNull(leader.rpc_address)}};
  reply.body = body.dump();
  return reply;
}

HttpReply NotLeaderReply(const LeaderAddresses& leader, std::string message) {
  return NotForwardedReply(Status(StatusCode::kNotLeader, std::move(message)), leader);
}

}  // namespace

namespace {

// Sends `request` on to the leader at `to` (one hop, marked with kForwardedHeader) and
// relays its answer. nullopt when the connection could not be opened: nothing was sent,
// so the caller may try again (the leader may have just died; a new one is being chosen).
// `read`: the request changes nothing there (PeerHttpRequest::idempotent).
std::optional<HttpReply> Forward(const Services& services, const RouteRequest& request,
                                 const LeaderAddresses& leader, const HostPort& to,
                                 const std::string& why, bool read = false) {
  PeerHttpRequest forward;
  forward.idempotent = read;
  forward.method = request.http.method;
  forward.target = request.http.target.empty() ? request.http.path : request.http.target;
  forward.body = request.http.body;
  if (request.http.HasHeader("Content-Type")) {
    forward.headers.emplace_back("Content-Type", request.http.Header("Content-Type"));
  } else if (!forward.body.empty()) {
    forward.headers.emplace_back("Content-Type", "application/json");
  }
  // The client's credentials go along: the leader checks the token itself, so a forwarded
  // request has exactly the authority it would have sent directly (docs/security.md).
  if (request.http.HasHeader("Authorization")) {
    forward.headers.emplace_back("Authorization", request.http.Header("Authorization"));
  }
  forward.headers.emplace_back(kForwardedHeader, std::to_string(services.server_id));
  const SignedPeerRequest signature =
      services.peers->SignRequest(forward.method, forward.target, forward.body);
  forward.headers.emplace_back(kPeerAuthHeader, signature.header);
  bool nothing_sent = false;
  const Result<PeerHttpAnswer> answer =
      SendPeerHttp(services.peer_http, to, forward,
                   {std::min(services.options.apply_timeout, kForwardConnectTimeout),
                    services.options.apply_timeout},
                   &nothing_sent);
  if (!answer.has_value() && nothing_sent) return std::nullopt;
  const std::string failed =
      why + ", server " + std::to_string(leader.id) + " at " + *leader.http_address + ", failed: ";
  HttpReply reply;
  if (!answer.has_value()) {
    reply = ErrorReply(Status::Unavailable(failed + answer.error().message()));
  } else if (const Status authentic = services.peers->VerifyReply(
                 AnswerHeader(*answer, kPeerReplyHeader), leader.id, signature.nonce,
                 answer->status, answer->body, to.ToString());
             !authentic.ok()) {
    // Whoever answered is not the server meant: nothing is acknowledged.
    reply = ErrorReply(Status::Unavailable(failed + authentic.message()));
  } else {
    reply.status = answer->status;
    reply.body = answer->body;
    const std::string content_type = AnswerHeader(*answer, "Content-Type");
    reply.content_type = content_type.empty() ? std::string("application/json") : content_type;
  }
  reply.headers.emplace_back(kForwardedFromHeader, std::to_string(services.server_id));
  return reply;
}

}  // namespace

HttpReply AnswerNotLeader(const Services& services, const RouteRequest& request,
                          const Status& not_leader, const Router::RunAgain& run_again) {
  if (request.http.HasHeader(kForwardedHeader)) {
    // One hop only: a forwarded request that finds no leader here is not sent on, so that
    // two servers with stale views cannot bounce it between them.
    return NotLeaderReply(FindLeaderForRedirect(services),
                          not_leader.message() +
                              "; the request was already forwarded by "
                              "server " +
                              request.http.Header(kForwardedHeader));
  }
  if (request.peer != nullptr) {
    // An internal call is made to the server meant (its sender retries elsewhere): its
    // signature vouches for its sender, not for this server as a relay.
    return NotLeaderReply(FindLeaderForRedirect(services),
                          not_leader.message() + "; an internal call from server " +
                              std::to_string(request.peer->sender) + " is not forwarded");
  }
  if (services.log == nullptr || services.peers == nullptr) {
    return NotLeaderReply(FindLeaderForRedirect(services), not_leader.message());
  }
  // Hold the request until the leader and its HTTP address are known (an election, or a
  // new leader's announcement, is under way), or its connection opens (a dead leader is
  // still believed to lead until the election timeout): polled every kForwardHoldPoll.
  const auto deadline = std::chrono::steady_clock::now() + services.options.apply_timeout;
  std::string last_error;
  for (;;) {
    const LeaderAddresses leader = FindLeader(services);
    if (leader.id == services.server_id) {
      // The route failed because this server does not lead, yet the status (refreshed every
      // 50 ms) names it: either that status predates the loss of leadership (an old leader
      // resumed after a pause or a partition), or this server was elected while the
      // request was held. Running the route again here tells which: it succeeds on a
      // leader, and fails with kNotLeader again, submitting nothing, on a server that is
      // not one (then hold on until the status catches up).
      Result<HttpReply> again = run_again();
      if (again.has_value()) return std::move(again).value();
      if (again.error().code() != StatusCode::kNotLeader) return ErrorReply(again.error());
      last_error = "this server's leadership was ending and no other leader is known yet";
    } else if (leader.id != 0 && leader.http_address) {
      const Result<HostPort> to = ParseHostPort(*leader.http_address);
      if (!to.has_value() || to->port == 0) {
        return NotLeaderReply(leader, "not the leader; the leader's announced HTTP address \"" +
                                          *leader.http_address + "\" is malformed");
      }
      std::optional<HttpReply> reply =
          Forward(services, request, leader, *to, "not the leader; forwarding to the leader");
      // 421: the server believed to lead no longer does (a leadership transfer, a drain)
      // and refused the request before appending it, so it may be sent again once this
      // server knows the new leader; any other answer is the client's.
      if (reply && reply->status != HttpStatusOf(StatusCode::kNotLeader)) return *reply;
      last_error = "the leader, server " + std::to_string(leader.id) + " at " +
                   *leader.http_address +
                   (reply ? ", answered that it no longer leads" : ", could not be reached");
    } else if (leader.id == 0) {
      last_error = "no leader is known";
    } else {
      last_error = "the leader is server " + std::to_string(leader.id) +
                   ", whose HTTP address is not known yet";
    }
    if (std::chrono::steady_clock::now() + kForwardHoldPoll >= deadline) {
      return NotForwardedReply(
          Status::Unavailable(
              "not the leader, and no leader could be forwarded to within apply_timeout_ms (" +
              std::to_string(services.options.apply_timeout.count()) + " ms): " + last_error),
          FindLeaderForRedirect(services));
    }
    std::this_thread::sleep_for(kForwardHoldPoll);
  }
}

std::optional<HttpReply> AnswerFromMember(const Services& services, const RouteRequest& request,
                                          const Services& group) {
  if (HostsGroup(group)) return std::nullopt;
  std::string last_error;
  const std::vector<LeaderAddresses> members = AnnouncedMembers(services, group.group, &last_error);
  const std::string not_here =
      "this server holds no replica of group " + std::to_string(group.group);
  // A member to name in a refusal (the client may ask it directly).
  const LeaderAddresses named = members.empty() ? LeaderAddresses{} : members.front();
  if (request.http.HasHeader(kForwardedHeader) || request.peer != nullptr ||
      services.peers == nullptr) {
    // One hop only: the server that sent it here believed this one holds the group.
    return NotLeaderReply(named, not_here +
                                     " (the directory changed while the request was "
                                     "forwarded); ask one of its members");
  }
  // Spread over the members: start at one picked by the request's body.
  const size_t first =
      members.empty() ? 0 : std::hash<std::string>{}(request.http.body) % members.size();
  for (size_t i = 0; i < members.size(); ++i) {
    const LeaderAddresses& member = members[(first + i) % members.size()];
    const Result<HostPort> to = ParseHostPort(*member.http_address);
    if (!to.has_value() || to->port == 0) continue;
    std::optional<HttpReply> reply =
        Forward(services, request, LeaderAddresses{member.id, member.http_address, std::nullopt},
                *to, not_here + "; forwarding to its member", /*read=*/true);
    if (reply && reply->status != HttpStatusOf(StatusCode::kNotLeader)) {
      if (group.metrics != nullptr) group.metrics->RecordGroupRead(group.group, true);
      return reply;
    }
    last_error = "its member, server " + std::to_string(member.id) +
                 (reply ? ", answered that it does not hold it" : ", could not be reached");
  }
  if (group.metrics != nullptr) group.metrics->RecordGroupRead(group.group, false);
  return NotForwardedReply(
      Status::Unavailable(not_here + ", and no member of it answered: " + last_error), named);
}

Result<std::string> PostInternalCall(const PeerHttpOptions& peer, PeerAuth* auth,
                                     uint64_t leader_id, const std::string& leader_http,
                                     const std::string& path, const std::string& body,
                                     PeerHttpTimeouts timeouts) {
  const Result<HostPort> to = ParseHostPort(leader_http);
  if (!to.has_value() || to->port == 0)
    return Status::InvalidArgument("malformed leader address " + leader_http);
  const SignedPeerRequest signature = auth->SignRequest("POST", path, body);
  PeerHttpRequest post{"POST",
                       path,
                       {{"Content-Type", "application/json"}, {kPeerAuthHeader, signature.header}},
                       body};
  const Result<PeerHttpAnswer> answer = SendPeerHttp(peer, *to, post, timeouts);
  const std::string url = std::string(peer.tls ? "https://" : "http://") + leader_http + path;
  if (!answer.has_value())
    return Status::Unavailable("POST " + url + ": " + answer.error().message());
  if (answer->status == 200) {
    KVATLAS_RETURN_IF_ERROR(auth->VerifyReply(AnswerHeader(*answer, kPeerReplyHeader), leader_id,
                                              signature.nonce, answer->status, answer->body,
                                              leader_http)
                                .WithContext("POST " + url));
    return answer->body;
  }
  return Status(StatusCode::kUnavailable,
                "POST " + url + ": " + std::to_string(answer->status) + " " + answer->body);
}

Status PostAnnounce(const PeerHttpOptions& peer, PeerAuth* auth, uint64_t leader_id,
                    const std::string& leader_http, uint64_t id, const std::string& http_address,
                    const std::string& rpc_address, std::chrono::milliseconds timeout) {
  const std::string body =
      nlohmann::json{{"id", id}, {"http_address", http_address}, {"rpc_address", rpc_address}}
          .dump();
  return PostInternalCall(peer, auth, leader_id, leader_http, "/v1/cluster/announce", body,
                          {timeout, timeout})
      .status();
}

Status PostDrainSelf(const PeerHttpOptions& peer, PeerAuth* auth, uint64_t leader_id,
                     const std::string& leader_http, bool draining,
                     std::chrono::milliseconds timeout) {
  const std::string body = nlohmann::json{{"draining", draining}}.dump();
  return PostInternalCall(peer, auth, leader_id, leader_http, "/v1/cluster/drain-self", body,
                          {timeout, timeout})
      .status();
}

Result<PeerCall> VerifyPeerCall(const Services& services, const HttpRequest& request) {
  return services.peers->VerifyRequest(
      request.Header(kPeerAuthHeader), request.method,
      request.target.empty() ? request.path : request.target, request.body,
      [&services](uint64_t id) { return IsMember(services, id); }, request.remote_addr);
}

void SignPeerReply(const Services& services, const PeerCall& call, HttpReply* reply) {
  reply->headers.emplace_back(kPeerReplyHeader,
                              services.peers->SignReply(call, reply->status, reply->body));
}

}  // namespace kvatlas::server
