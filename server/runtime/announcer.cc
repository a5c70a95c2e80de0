#include "server/runtime/announcer.h"

#include <algorithm>
#include <future>
#include <optional>
#include <utility>

#include "common/internal/log.h"
#include "server/api/forwarding.h"

namespace kvatlas::server {

Announcer::Announcer(uint64_t id, ServerAddresses mine, ClusterShape shape,
                     bool awaiting_membership, std::chrono::milliseconds apply_wait,
                     PeerHttpOptions peer_http, Deps deps)
    : id_(id),
      mine_(std::move(mine)),
      shape_(shape),
      apply_wait_(apply_wait),
      peer_http_(std::move(peer_http)),
      deps_(deps),
      awaiting_membership_(awaiting_membership),
      task_(kPoll, [this] { return Round(); }) {}

PeriodicTask::Next Announcer::Round() {
  const ClusterStatus status = deps_.raft->GetStatus();
  if (awaiting_membership_ && !status.members.empty()) {
    awaiting_membership_ = false;
    LogInfo("raft: added to the cluster (a configuration of " +
            std::to_string(status.members.size()) + " servers)");
  }
  // Announced once as this server starts, which also ends a drain recorded before it
  // stopped (AnnounceCommand replaces the record); after that only when the addresses
  // recorded differ, so a drain asked for while it runs stays.
  const std::optional<ServerAddresses> recorded = deps_.machine->AddressesOf(id_);
  if (recorded == mine_) confirmed_ = true;
  const bool current =
      recorded && (confirmed_ ? recorded->SameAddresses(mine_) : *recorded == mine_);
  // In a one-server cluster nobody needs the addresses: no log entry for them.
  if (status.members.size() < 2 || current) {
    delay_ = kPoll;
    return delay_;
  }
  Status announced;
  bool waiting = false;  // for a leader, or for its address: local checks, no backoff
  const bool mismatched = deps_.mismatch != nullptr && !deps_.mismatch->Get().empty();
  if (deps_.raft->is_leader() && mismatched) {
    // Refused by a leader of the cluster's settings: not announced by this server's own
    // authority either, while its mirror hands the leadership back (group_mirror.h).
    waiting = true;
  } else if (deps_.raft->is_leader()) {
    CommandBatch batch;
    batch.commands.emplace_back(AnnounceCommand{id_, mine_.http_address, mine_.rpc_address});
    std::future<Result<Revision>> applied = deps_.applier->Submit(std::move(batch));
    announced = applied.wait_for(apply_wait_) == std::future_status::ready
                    ? applied.get().status()
                    : Status(StatusCode::kDeadlineExceeded, "not applied in time");
  } else if (status.leader_id == 0) {
    waiting = true;
  } else if (std::optional<ServerAddresses> leader = deps_.machine->AddressesOf(status.leader_id);
             !leader || leader->http_address.empty()) {
    waiting = true;
  } else {
    announced = PostAnnounce(peer_http_, deps_.peer_auth, status.leader_id, leader->http_address,
                             id_, mine_.http_address, mine_.rpc_address, shape_, apply_wait_);
  }
  if (waiting) {
    // Nothing was sent, so no backoff: a server that wins the election announces itself
    // within a poll, and its followers, which say ready only once they know the leader's
    // address (server/service/readiness.h), become ready soon after the election.
    delay_ = kPoll;
  } else if (announced.ok()) {
    const auto now = std::chrono::steady_clock::now();
    if (++announced_ == 1) {
      LogInfo("announced this server's addresses (http " + mine_.http_address + ", rpc " +
              mine_.rpc_address + ")");
      logged_ = now;
    } else if (now - logged_ >= kRepeatLog) {
      LogWarning("announced this server's addresses again (" + std::to_string(announced_) +
                 " times since the start): the state applied here (revision " +
                 std::to_string(deps_.machine->applied_revision()) + ", leader " +
                 std::to_string(status.leader_id) + ", raft commit index " +
                 std::to_string(status.commit_index) + ", applied index " +
                 std::to_string(status.applied_index) + ") still does not hold them");
      logged_ = now;
    }
    last_error_.clear();
    // Taken by a leader (the cluster's may have changed to one that agrees).
    if (mismatched) deps_.mismatch->Set("");
    confirmed_ = true;  // a drain recorded from now on is not this start's to end
    delay_ = kPoll;
  } else if (announced.code() == StatusCode::kFailedPrecondition) {
    // A misconfiguration, not a passing state: an error, and the reason readiness gives.
    // Retried (backing off), as the cluster's leader may change to one that agrees.
    if (announced.ToString() != last_error_) {
      last_error_ = announced.ToString();
      LogError("group 1's leader refused this server's announcement: " + announced.message());
    }
    if (deps_.mismatch != nullptr) deps_.mismatch->Set(announced.message());
    delay_ = std::min<std::chrono::milliseconds>(delay_ * 2, kMaxBackoff);
  } else {
    // Expected around a change of leader (a proposal lost, a leader that stopped): log
    // changes only.
    if (announced.ToString() != last_error_) {
      last_error_ = announced.ToString();
      LogInfo("announcing this server's addresses: " + last_error_ + " (retrying)");
    }
    delay_ = std::min<std::chrono::milliseconds>(delay_ * 2, kMaxBackoff);
  }
  return delay_;
}

}  // namespace kvatlas::server
