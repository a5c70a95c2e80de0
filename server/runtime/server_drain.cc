// Server: a stopping server's drain (docs/operations.md §Draining a server): before anything
// stops, the groups it leads are handed to other servers, so their writes wait for no
// election. server.h.
#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include "common/internal/log.h"
#include "server/api/forwarding.h"
#include "server/runtime/server.h"

namespace kvatlas::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kDrainPoll{20};
// How long a drained server waits, leading nothing, before it stops: a server that has not
// applied the drain yet (it learns the commit with the next heartbeat) may still hand it a
// group meanwhile, which its mirror then hands on. Several mirror rounds and heartbeats.
constexpr std::chrono::milliseconds kDrainSettle{500};
constexpr std::chrono::milliseconds kMarkWait{1'000};

std::chrono::milliseconds Left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

size_t Server::GroupsLedHere() const {
  size_t led = 0;
  for (const auto& group : groups_) led += group->raft()->is_leader() ? 1 : 0;
  return led;
}

bool Server::AnotherServerCanLead() const {
  // Heard from within half an election timeout: a member that stopped a moment ago still
  // counts as reachable for up to a whole one.
  const uint64_t recent_ms = config_.raft_election_timeout_ms / 2;
  for (const auto& group : groups_) {
    const ClusterStatus status = group->raft()->GetStatus();
    if (status.state != "leader") continue;
    for (const ClusterMember& m : status.members) {
      if (m.id != status.id && m.role == "voter" && m.reachable.value_or(false) &&
          m.last_contact_ms.value_or(recent_ms) < recent_ms) {
        return true;
      }
    }
  }
  return false;
}

Status Server::MarkSelfDraining(Clock::time_point deadline) {
  const std::optional<ServerAddresses> mine = group_->machine()->AddressesOf(config_.id);
  if (!mine) {
    return Status::FailedPrecondition("this server's addresses are not recorded yet");
  }
  if (mine->draining) return Status::Ok();
  if (group_->raft()->is_leader()) {
    CommandBatch batch;
    batch.commands.emplace_back(DrainCommand{config_.id, true});
    std::future<Result<Revision>> applied = group_->applier()->Submit(std::move(batch));
    if (applied.wait_until(deadline) != std::future_status::ready) {
      return Status(StatusCode::kDeadlineExceeded, "the drain was not applied in time");
    }
    return applied.get().status();
  }
  const uint64_t leader = group_->raft()->GetStatus().leader_id;
  const std::optional<ServerAddresses> at = group_->machine()->AddressesOf(leader);
  if (leader == 0 || !at || at->http_address.empty()) {
    return Status::Unavailable("group 1's leader or its address is not known");
  }
  return PostDrainSelf(services_.peer_http, peer_auth_.get(), leader, at->http_address,
                       /*draining=*/true, Left(deadline));
}

void Server::DrainLeadership() {
  if (config_.shutdown_drain_ms == 0 || !policies_started_ || GroupsLedHere() == 0) return;
  // No other voter answers (the last server of a cluster standing): nobody to hand to.
  if (!AnotherServerCanLead()) return;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(config_.shutdown_drain_ms);
  const size_t led = GroupsLedHere();
  LogInfo("stopping: handing the " + std::to_string(led) +
          " groups this server leads to other servers first (at most " +
          std::to_string(config_.shutdown_drain_ms) + " ms)");
  // Marked draining in group 1, so that no server hands a group back meanwhile (once it has
  // applied the mark); the mirror (still running) hands over every group led here, a group
  // handed back before that too.
  // A commit takes milliseconds; one that takes a second will not come (no majority).
  if (Status marked = MarkSelfDraining(std::min(deadline, start + kMarkWait)); !marked.ok()) {
    LogWarning("stopping: cannot mark this server draining (" + marked.ToString() +
               "); stopping without handing its groups over");
    return;
  }
  constexpr Clock::time_point kLeading = Clock::time_point::max();
  size_t left = GroupsLedHere();
  Clock::time_point idle_since = kLeading;  // since when it has led nothing
  for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
    if (left > 0) {
      idle_since = kLeading;
    } else if (idle_since == kLeading) {
      idle_since = now;
    } else if (now - idle_since >= kDrainSettle) {
      break;
    }
    std::this_thread::sleep_for(kDrainPoll);
    left = GroupsLedHere();
  }
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  if (left == 0) {
    LogInfo("stopping: every group is led by another server (" + std::to_string(took) + " ms)");
  } else {
    LogWarning("stopping: still leading " + std::to_string(left) + " of " + std::to_string(led) +
               " groups after " + std::to_string(took) +
               " ms; they elect a new leader once this server stops");
  }
}

}  // namespace kvatlas::server
