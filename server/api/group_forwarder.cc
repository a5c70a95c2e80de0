#include "server/api/group_forwarder.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/internal/host_port.h"
#include "common/internal/thread_name.h"
#include "server/api/forwarding.h"
#include "server/api/peer_http_client.h"
#include "server/model/command_codec.h"
#include "server/peer/peer_auth.h"
#include "server/service/cluster_service.h"
#include "server/service/group_service.h"
#include "server/service/ingest_service.h"

namespace kvatlas::server {
namespace {

// What one call came to: the answer's body (verified), a final error, or "try again".
template <typename T>
struct Attempt {
  std::optional<Result<T>> outcome;  // nullopt: retry after kForwardHoldPoll
  std::string why;                   // the reason to retry, for the final error
};

// The server's error answer as a Status of its code ("code" and "message" of the body).
Status LeaderError(const std::string& leader, const PeerHttpAnswer& answer) {
  const nlohmann::json body = nlohmann::json::parse(answer.body, nullptr, false);
  StatusCode code = StatusCode::kUnavailable;
  std::string message = answer.body;
  if (body.is_object() && body.contains("code") && body["code"].is_string()) {
    code = StatusCodeFromWireName(body["code"].get<std::string>());
    if (body.contains("message") && body["message"].is_string()) message = body["message"];
  }
  return Status(code, leader + " answered " + std::to_string(answer.status) + ": " + message);
}

// POSTs `body` to `target` on server `to` (signed); its 200 answer's body once verified as
// that server's. `name` names it in errors; `writes`: a failure after sending may have
// applied something (a write part), so it is final.
Attempt<std::string> PostOnce(const Services& group, const LeaderAddresses& to_server,
                              const std::string& name, const std::string& target,
                              const std::string& body, std::chrono::milliseconds left,
                              bool writes) {
  const Result<HostPort> to = ParseHostPort(*to_server.http_address);
  if (!to.has_value() || to->port == 0) {
    return {Status::Unavailable(name + ": its announced HTTP address is malformed"), ""};
  }
  const SignedPeerRequest signature = group.peers->SignRequest("POST", target, body);
  const PeerHttpRequest post{
      "POST",
      target,
      {{"Content-Type", "application/octet-stream"}, {kPeerAuthHeader, signature.header}},
      body,
      /*idempotent=*/!writes};
  bool nothing_sent = false;
  const Result<PeerHttpAnswer> answer = SendPeerHttp(
      group.peer_http, *to, post, {std::min(left, kForwardConnectTimeout), left}, &nothing_sent);
  if (!answer.has_value()) {
    if (nothing_sent || !writes) return {std::nullopt, name + " could not be reached"};
    return {Status::Unavailable("forwarding to " + name +
                                " failed (the part may have been "
                                "applied): " +
                                answer.error().message()),
            ""};
  }
  if (answer->status == 421) return {std::nullopt, name + " does not serve it now"};
  if (answer->status != 200) return {LeaderError(name, *answer), ""};
  // Only the server meant (raft's leader, or a recorded member) acknowledges.
  if (const Status authentic =
          group.peers->VerifyReply(AnswerHeader(*answer, kPeerReplyHeader), to_server.id,
                                   signature.nonce, answer->status, answer->body, to->ToString());
      !authentic.ok()) {
    return {Status::Unavailable("forwarding to " + name + ": " + authentic.message()), ""};
  }
  return {Result<std::string>(answer->body), ""};
}

Attempt<Revision> SendOnce(const Services& group, const LeaderAddresses& leader,
                           const std::string& body, std::chrono::milliseconds left) {
  const std::string name = "group " + std::to_string(group.group) + "'s leader, server " +
                           std::to_string(leader.id) + " at " + *leader.http_address;
  Attempt<std::string> posted =
      PostOnce(group, leader, name, "/v1/cluster/apply?group=" + std::to_string(group.group), body,
               left, /*writes=*/true);
  if (!posted.outcome) return {std::nullopt, std::move(posted.why)};
  if (!posted.outcome->has_value()) return {Result<Revision>(posted.outcome->error()), ""};
  const std::string& answer = posted.outcome->value();
  const nlohmann::json reply = nlohmann::json::parse(answer, nullptr, false);
  if (!reply.is_object() || !reply.contains("revision") ||
      !reply["revision"].is_number_unsigned()) {
    return {Status::Unavailable(name + " answered without a revision: " + answer), ""};
  }
  return {Result<Revision>(reply["revision"].get<Revision>()), ""};
}

// One round over the group's recorded members (a server that does not host the group):
// the answer of the first that applies the part or fails it for good; nullopt when none
// did (`why` says why), to be tried again.
std::optional<Result<Revision>> SendToMembers(const Services& group, const std::string& body,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::string* why) {
  for (const LeaderAddresses& member : AnnouncedMembers(group, group.group, why)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    Attempt<Revision> attempt = SendOnce(group, member, body, std::max(left, kForwardHoldPoll));
    if (attempt.outcome) return std::move(attempt.outcome);
    *why = std::move(attempt.why);
  }
  return std::nullopt;
}

}  // namespace

Result<Revision> DeliverToGroupLeader(const Services& group, CommandBatch batch,
                                      const std::atomic<bool>& abandon) {
  const auto deadline = std::chrono::steady_clock::now() + group.options.apply_timeout;
  const std::string body = EncodeCommandBatch(batch);
  std::string last_reason = "no leader is known";
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (abandon.load(std::memory_order_acquire)) {
      return Status::Unavailable("the server is stopping");
    }
    if (group.log->is_leader()) {
      // Elected while the part waited: it is this server's to apply.
      return ApplyHereAndWait(group, std::move(batch), deadline);
    }
    if (!HostsGroup(group)) {
      // Not a member (replicas on some servers): this server's raft knows no leader of the
      // group. Its recorded members are asked in turn; the leader among them applies the
      // part, the others answer not_leader (421) without applying it.
      std::optional<Result<Revision>> outcome = SendToMembers(group, body, deadline, &last_reason);
      if (outcome) return std::move(*outcome);
    } else if (const LeaderAddresses leader = FindLeader(group);
               leader.id != 0 && leader.id != group.server_id && leader.http_address) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      Attempt<Revision> attempt = SendOnce(group, leader, body, std::max(left, kForwardHoldPoll));
      if (attempt.outcome) return std::move(*attempt.outcome);
      last_reason = std::move(attempt.why);
    } else if (leader.id != 0 && leader.id != group.server_id) {
      last_reason = "its leader, server " + std::to_string(leader.id) +
                    ", has not announced its HTTP address yet";
    }
    if (std::chrono::steady_clock::now() + kForwardHoldPoll >= deadline) {
      return Status::Unavailable("group " + std::to_string(group.group) +
                                 ": no leader could be forwarded to within apply_timeout_ms (" +
                                 std::to_string(group.options.apply_timeout.count()) +
                                 " ms): " + last_reason);
    }
    std::this_thread::sleep_for(kForwardHoldPoll);
  }
}

Result<std::string> ReadFromGroupMember(const Services& group, uint8_t type,
                                        const std::string& payload,
                                        const std::atomic<bool>& abandon) {
  const auto deadline = std::chrono::steady_clock::now() + group.options.apply_timeout;
  const std::string target =
      "/v1/cluster/read?group=" + std::to_string(group.group) + "&type=" + std::to_string(type);
  std::string last_reason;
  for (;;) {
    if (abandon.load(std::memory_order_acquire)) {
      return Status::Unavailable("the server is stopping");
    }
    for (const LeaderAddresses& member : AnnouncedMembers(group, group.group, &last_reason)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const std::string name = "group " + std::to_string(group.group) + "'s member, server " +
                               std::to_string(member.id) + " at " + *member.http_address;
      Attempt<std::string> attempt = PostOnce(group, member, name, target, payload,
                                              std::max(left, kForwardHoldPoll), /*writes=*/false);
      if (attempt.outcome) return std::move(*attempt.outcome);
      last_reason = std::move(attempt.why);
    }
    if (std::chrono::steady_clock::now() + kForwardHoldPoll >= deadline) {
      return Status::Unavailable(
          "this server holds no replica of group " + std::to_string(group.group) +
          ", and no member of it answered within apply_timeout_ms (" +
          std::to_string(group.options.apply_timeout.count()) + " ms): " + last_reason);
    }
    std::this_thread::sleep_for(kForwardHoldPoll);
  }
}

HttpGroupForwarder::HttpGroupForwarder(GroupForwarderOptions options) : options_(options) {
  for (size_t i = 0; i < std::max<size_t>(options_.threads, 1); ++i) {
    threads_.emplace_back([this] {
      SetCurrentThreadName("group-forward");
      Run();
    });
  }
}

HttpGroupForwarder::~HttpGroupForwarder() { Stop(); }

Status HttpGroupForwarder::TryForward(const Services& group, CommandBatch* batch,
                                      Applier::Callback done) {
  return Enqueue([&] {
    Part part;
    part.group = &group;
    part.batch = std::move(*batch);
    part.done = std::move(done);
    return part;
  });
}

Status HttpGroupForwarder::TryRead(const Services& group, uint8_t type, std::string payload,
                                   ReadCallback done) {
  return Enqueue([&] {
    Part part;
    part.group = &group;
    part.read_type = type;
    part.read_payload = std::move(payload);
    part.read_done = std::move(done);
    return part;
  });
}

Status HttpGroupForwarder::Enqueue(const std::function<Part()>& make) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status::Unavailable("the server is stopping");
    if (queue_.size() >= options_.max_queue) {
      return Status::ResourceExhausted("the queue of requests to other groups' servers is full (" +
                                       std::to_string(options_.max_queue) + "); retry later");
    }
    queue_.push_back(make());  // only now is the caller's batch or payload taken
  }
  cv_.notify_one();
  return Status::Ok();
}

void HttpGroupForwarder::Stop() {
  std::deque<Part> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  abandon_.store(true, std::memory_order_release);
  cv_.notify_all();
  for (Part& part : dropped) {
    if (part.read_done) {
      part.read_done(Status::Unavailable("the server is stopping"));
    } else {
      part.done(Status::Unavailable("the server is stopping"));
    }
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void HttpGroupForwarder::Run() {
  for (;;) {
    Part part;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      part = std::move(queue_.front());
      queue_.pop_front();
    }
    if (part.read_done) {
      Result<std::string> answer =
          ReadFromGroupMember(*part.group, part.read_type, part.read_payload, abandon_);
      if (part.group->metrics != nullptr) {
        part.group->metrics->RecordGroupRead(part.group->group, answer.has_value());
      }
      part.read_done(std::move(answer));
      continue;
    }
    const GroupId id = part.group->group;
    Result<Revision> applied = DeliverToGroupLeader(*part.group, std::move(part.batch), abandon_);
    if (part.group->metrics != nullptr)
      part.group->metrics->RecordGroupForward(id, applied.has_value());
    part.done(std::move(applied));
  }
}

}  // namespace kvatlas::server
