#include "server/api/group_forwarder.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "common/internal/host_port.h"
#include "common/internal/thread_name.h"
#include "server/api/forwarding.h"
#include "server/api/peer_http_client.h"
#include "server/model/command_codec.h"
#include "server/peer/peer_auth.h"
#include "server/service/cluster_service.h"
#include "server/service/ingest_service.h"

namespace kvatlas::server {
namespace {

// What one attempt came to: applied (a revision), a final error, or "try again".
struct Attempt {
  std::optional<Result<Revision>> outcome;  // nullopt: retry after kForwardHoldPoll
  std::string why;                          // the reason to retry, for the final error
};

// The leader's error answer as a Status of its code ("code" and "message" of the body).
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

Attempt SendOnce(const Services& group, const LeaderAddresses& leader, const std::string& body,
                 std::chrono::milliseconds left) {
  const std::string name = "group " + std::to_string(group.group) + "'s leader, server " +
                           std::to_string(leader.id) + " at " + *leader.http_address;
  const Result<HostPort> to = ParseHostPort(*leader.http_address);
  if (!to.has_value() || to->port == 0) {
    return {Status::Unavailable(name + ": its announced HTTP address is malformed"), ""};
  }
  const std::string target = "/v1/cluster/apply?group=" + std::to_string(group.group);
  const SignedPeerRequest signature = group.peers->SignRequest("POST", target, body);
  const PeerHttpRequest post{
      "POST",
      target,
      {{"Content-Type", "application/octet-stream"}, {kPeerAuthHeader, signature.header}},
      body};
  bool nothing_sent = false;
  const Result<PeerHttpAnswer> answer = SendPeerHttp(
      group.peer_http, *to, post, {std::min(left, kForwardConnectTimeout), left}, &nothing_sent);
  if (!answer.has_value()) {
    if (nothing_sent) return {std::nullopt, name + " could not be reached"};
    return {Status::Unavailable("forwarding to " + name +
                                " failed (the part may have been "
                                "applied): " +
                                answer.error().message()),
            ""};
  }
  if (answer->status == 421) return {std::nullopt, name + " no longer leads it"};
  if (answer->status != 200) return {LeaderError(name, *answer), ""};
  // Only the group's leader that raft names acknowledges a part.
  if (const Status authentic =
          group.peers->VerifyReply(AnswerHeader(*answer, kPeerReplyHeader), leader.id,
                                   signature.nonce, answer->status, answer->body, to->ToString());
      !authentic.ok()) {
    return {Status::Unavailable("forwarding to " + name + ": " + authentic.message()), ""};
  }
  const nlohmann::json reply = nlohmann::json::parse(answer->body, nullptr, false);
  if (!reply.is_object() || !reply.contains("revision") ||
      !reply["revision"].is_number_unsigned()) {
    return {Status::Unavailable(name + " answered without a revision: " + answer->body), ""};
  }
  return {Result<Revision>(reply["revision"].get<Revision>()), ""};
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
    const LeaderAddresses leader = FindLeader(group);
    if (leader.id != 0 && leader.id != group.server_id && leader.http_address) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      Attempt attempt = SendOnce(group, leader, body, std::max(left, kForwardHoldPoll));
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
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status::Unavailable("the server is stopping");
    if (queue_.size() >= options_.max_queue) {
      return Status::ResourceExhausted("the queue of writes to other groups' leaders is full (" +
                                       std::to_string(options_.max_queue) +
                                       " batches); retry later");
    }
    queue_.push_back(Part{&group, std::move(*batch), std::move(done)});
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
  for (Part& part : dropped) part.done(Status::Unavailable("the server is stopping"));
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
    const GroupId id = part.group->group;
    Result<Revision> applied = DeliverToGroupLeader(*part.group, std::move(part.batch), abandon_);
    if (part.group->metrics != nullptr)
      part.group->metrics->RecordGroupForward(id, applied.has_value());
    part.done(std::move(applied));
  }
}

}  // namespace kvatlas::server
