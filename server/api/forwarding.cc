#include "server/api/forwarding.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>
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

// `request` as sent on to another server (one hop: kForwardedHeader; the client's
// credentials along; signed, `*signature` the signature's nonce to verify the answer by).
PeerHttpRequest ForwardedRequest(const Services& services, const RouteRequest& request, bool read,
                                 SignedPeerRequest* signature) {
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
  *signature = services.peers->SignRequest(forward.method, forward.target, forward.body);
  forward.headers.emplace_back(kPeerAuthHeader, signature->header);
  return forward;
}

// Sends `request` on to the leader at `to` (one hop, marked with kForwardedHeader) and
// relays its answer. nullopt when the connection could not be opened: nothing was sent,
// so the caller may try again (the leader may have just died; a new one is being chosen).
// `read`: the request changes nothing there (PeerHttpRequest::idempotent).
std::optional<HttpReply> Forward(const Services& services, const RouteRequest& request,
                                 const LeaderAddresses& leader, const HostPort& to,
                                 const std::string& why, bool read = false) {
  SignedPeerRequest signature;
  const PeerHttpRequest forward = ForwardedRequest(services, request, read, &signature);
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

namespace {

// A request about a group this server holds no replica of, to be sent on to a member.
struct SendOn {
  std::vector<LeaderAddresses> members;  // in the order to try them
  std::string not_here;                  // why it is sent on, for messages
  LeaderAddresses named;                 // a member to name in a refusal
  std::string last_error;                // why the last member tried did not answer
  std::optional<HttpReply> refused;      // set: the request must not be sent on
};

// The members to try, starting at one `spread` picks (so requests spread over them); a
// forwarded request or an internal call is refused instead (one hop only: the server that
// sent it here believed this one holds the group).
SendOn PlanSendOn(const Services& services, const RouteRequest& request, const Services& group,
                  std::string_view spread) {
  SendOn plan;
  std::vector<LeaderAddresses> members = AnnouncedMembers(services, group.group, &plan.last_error);
  plan.not_here = "this server holds no replica of group " + std::to_string(group.group);
  plan.named = members.empty() ? LeaderAddresses{} : members.front();
  if (request.http.HasHeader(kForwardedHeader) || request.peer != nullptr ||
      services.peers == nullptr) {
    plan.refused = NotLeaderReply(plan.named, plan.not_here +
                                                  " (the directory changed while the request "
                                                  "was forwarded); ask one of its members");
    return plan;
  }
  const size_t first = members.empty() ? 0 : std::hash<std::string_view>{}(spread) % members.size();
  for (size_t i = 0; i < members.size(); ++i) {
    plan.members.push_back(members[(first + i) % members.size()]);
  }
  return plan;
}

// The answer when no member answered (counted).
HttpReply NoMemberAnswered(const Services& group, const SendOn& plan) {
  if (group.metrics != nullptr) group.metrics->RecordGroupRead(group.group, false);
  return NotForwardedReply(
      Status::Unavailable(plan.not_here + ", and no member of it answered: " + plan.last_error),
      plan.named);
}

}  // namespace

std::optional<HttpReply> AnswerFromMember(const Services& services, const RouteRequest& request,
                                          const Services& group) {
  if (HostsGroup(group)) return std::nullopt;
  SendOn plan = PlanSendOn(services, request, group, request.http.body);
  if (plan.refused) return std::move(*plan.refused);
  for (const LeaderAddresses& member : plan.members) {
    const Result<HostPort> to = ParseHostPort(*member.http_address);
    if (!to.has_value() || to->port == 0) continue;
    std::optional<HttpReply> reply =
        Forward(services, request, LeaderAddresses{member.id, member.http_address, std::nullopt},
                *to, plan.not_here + "; forwarding to its member", /*read=*/true);
    if (reply && reply->status != HttpStatusOf(StatusCode::kNotLeader)) {
      if (group.metrics != nullptr) group.metrics->RecordGroupRead(group.group, true);
      return reply;
    }
    plan.last_error = "its member, server " + std::to_string(member.id) +
                      (reply ? ", answered that it does not hold it" : ", could not be reached");
  }
  return NoMemberAnswered(group, plan);
}

namespace {

// How long a relayed stream waits for the member's next bytes: a watch sends a keep-alive
// every second, a snapshot a page as soon as it is read.
constexpr std::chrono::milliseconds kRelayIdle{15'000};
// The largest answer that is not a stream (an error) read from a member.
constexpr size_t kMaxRelayedErrorBytes = size_t{1} << 20;

// A stream relayed from a member, pumped on this server's HTTP worker.
class RelayedStream {
 public:
  RelayedStream(std::unique_ptr<PeerHttpStream> from, bool sse, std::string member,
                std::optional<uint64_t> resume_from, std::shared_ptr<void> slot)
      : from_(std::move(from)),
        sse_(sse),
        member_(std::move(member)),
        resume_from_(resume_from),
        slot_(std::move(slot)) {}

  bool Pump(const HttpReply::Write& write) {
    Result<std::string> piece = from_->Next(kRelayIdle);
    if (!piece.has_value()) {
      // A snapshot's body ends unterminated (its JSON fails to parse, as when a local scan
      // fails); a watch ends with an error event naming where to resume.
      if (sse_) {
        const nlohmann::json error = {
            {"code", "unavailable"},
            {"message", "the relay from " + member_ + " ended: " + piece.error().message()},
            {"resume_from", resume_from_ ? nlohmann::json(*resume_from_) : nullptr}};
        write("event: error\ndata: " + error.dump() + "\n\n");
      }
      return false;
    }
    if (sse_) NoteEventIds(*piece);
    return write(*piece) && !from_->done();
  }

 private:
  // Keeps the revision of the last `id:` line relayed (the watch's resume point).
  void NoteEventIds(std::string_view piece) {
    line_.append(piece);
    size_t start = 0;
    for (size_t end = line_.find('\n'); end != std::string::npos;
         start = end + 1, end = line_.find('\n', start)) {
      const std::string_view line = std::string_view(line_).substr(start, end - start);
      uint64_t id = 0;
      if (line.starts_with("id: ") &&
          std::from_chars(line.data() + 4, line.data() + line.size(), id).ec == std::errc()) {
        resume_from_ = id;
      }
    }
    line_.erase(0, start);
    if (line_.size() > 4'096) line_.clear();  // a data line; ids are short
  }

  std::unique_ptr<PeerHttpStream> from_;
  const bool sse_;
  const std::string member_;
  std::optional<uint64_t> resume_from_;
  std::string line_;            // the relayed bytes after the last newline
  std::shared_ptr<void> slot_;  // released with the stream
};

}  // namespace

HttpReply StreamFromMember(const Services& services, const RouteRequest& request,
                           const Services& group, bool sse, std::optional<uint64_t> resume_from,
                           std::shared_ptr<void> slot) {
  SendOn plan = PlanSendOn(services, request, group, request.http.target);
  if (plan.refused) return std::move(*plan.refused);
  const auto failed = [&plan](const LeaderAddresses& member, const std::string& what) {
    plan.last_error = "its member, server " + std::to_string(member.id) + " at " +
                      *member.http_address + ", " + what;
  };
  for (const LeaderAddresses& member : plan.members) {
    const Result<HostPort> to = ParseHostPort(*member.http_address);
    if (!to.has_value() || to->port == 0) continue;
    SignedPeerRequest signature;
    const PeerHttpRequest forward = ForwardedRequest(services, request, true, &signature);
    Result<std::unique_ptr<PeerHttpStream>> opened =
        OpenPeerHttpStream(services.peer_http, *to, forward,
                           {std::min(services.options.apply_timeout, kForwardConnectTimeout),
                            services.options.apply_timeout});
    if (!opened.has_value()) {
      failed(member, "could not be reached: " + opened.error().message());
      continue;
    }
    PeerHttpStream& from = **opened;
    // A whole answer (an error, or a stream the member refused) is relayed as one, once its
    // signature over the body checks; a stream's signature covers its status.
    std::string body;
    const auto encoding = from.headers().find("Transfer-Encoding");
    const bool streamed = from.status() == 200 && encoding != from.headers().end() &&
                          encoding->second.find("chunked") != std::string::npos;
    while (!streamed && !from.done() && body.size() <= kMaxRelayedErrorBytes) {
      Result<std::string> piece = from.Next(services.options.apply_timeout);
      if (!piece.has_value()) break;
      body += *piece;
    }
    if (!streamed && !from.done()) {
      failed(member, "sent an answer that could not be read whole");
      continue;
    }
    const auto header = from.headers().find(kPeerReplyHeader);
    if (const Status authentic = services.peers->VerifyReply(
            header == from.headers().end() ? std::string_view() : std::string_view(header->second),
            member.id, signature.nonce, from.status(), body, to->ToString());
        !authentic.ok()) {
      failed(member, "answered without its signature: " + authentic.message());
      continue;
    }
    if (from.status() == HttpStatusOf(StatusCode::kNotLeader)) {
      failed(member, "answered that it does not hold it");
      continue;
    }
    if (group.metrics != nullptr) group.metrics->RecordGroupRead(group.group, true);
    HttpReply reply;
    reply.status = from.status();
    const auto type = from.headers().find("Content-Type");
    reply.content_type =
        type == from.headers().end() ? std::string("application/json") : type->second;
    for (const char* name : {"Cache-Control", "X-Accel-Buffering"}) {
      if (const auto it = from.headers().find(name); it != from.headers().end()) {
        reply.headers.emplace_back(name, it->second);
      }
    }
    reply.headers.emplace_back(kForwardedFromHeader, std::to_string(services.server_id));
    reply.headers.emplace_back(kRelayedFromHeader, std::to_string(member.id));
    if (!streamed) {
      reply.body = std::move(body);
      return reply;
    }
    auto relay = std::make_shared<RelayedStream>(
        std::move(opened).value(), sse,
        "server " + std::to_string(member.id) + " at " + *member.http_address, resume_from,
        std::move(slot));
    reply.stream = [relay](const HttpReply::Write& write) { return relay->Pump(write); };
    return reply;
  }
  return NoMemberAnswered(group, plan);
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
  // A refusal keeps the member's code when the member signed it (a verified call's answer
  // is signed whatever its status); anything else may be a stranger's, so only unavailable.
  StatusCode code = StatusCode::kUnavailable;
  const std::string signed_by = AnswerHeader(*answer, kPeerReplyHeader);
  if (!signed_by.empty() && auth->VerifyReply(signed_by, leader_id, signature.nonce, answer->status,
                                              answer->body, leader_http)
                                .ok()) {
    const nlohmann::json error = nlohmann::json::parse(answer->body, nullptr, false);
    if (error.is_object() && error.contains("code") && error["code"].is_string()) {
      code = StatusCodeFromWireName(error["code"].get<std::string>());
    }
  }
  return Status(code, "POST " + url + ": " + std::to_string(answer->status) + " " + answer->body);
}

Status PostAnnounce(const PeerHttpOptions& peer, PeerAuth* auth, uint64_t leader_id,
                    const std::string& leader_http, uint64_t id, const std::string& http_address,
                    const std::string& rpc_address, const ClusterShape& shape,
                    std::chrono::milliseconds timeout) {
  const std::string body = nlohmann::json{
      {"id", id},
      {"http_address", http_address},
      {"rpc_address", rpc_address},
      {"groups", shape.groups},
      {"replicas",
       shape.replicas}}.dump();
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
