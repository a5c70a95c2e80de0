#include "server/state/lease_tracker.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

namespace kvatlas::server {
namespace {

constexpr std::chrono::milliseconds kMinCheckInterval{100};

}  // namespace

LeaseTracker::LeaseTracker(LeaseOptions options, const StateMachine* machine,
                           LeaderTerm leader_term)
    : options_(options), machine_(machine), leader_term_(std::move(leader_term)) {}

std::chrono::milliseconds LeaseTracker::check_interval() const {
  return std::max(kMinCheckInterval, options_.ttl / 4);
}

bool LeaseTracker::RefreshLeadershipLocked(Clock::time_point now) {
  const std::optional<uint64_t> term = leader_term_();
  if (term != term_) {
    // Leading in a new term (or no longer leading): what this server heard as leader of an
    // earlier term says nothing about the heartbeats sent to the leaders in between.
    heartbeats_.clear();
    term_ = term;
    leading_since_ = now;
  }
  return term_.has_value();
}

LeaseTracker::Clock::time_point LeaseTracker::LastHeartbeatLocked(const HolderKey& holder) const {
  const auto it = heartbeats_.find(holder);
  return it == heartbeats_.end() ? leading_since_ : std::max(leading_since_, it->second);
}

Status LeaseTracker::Heartbeat(std::span<const HolderKey> holders, Clock::time_point now) {
  if (!enabled()) return Status::Ok();
  std::lock_guard lock(mu_);
  if (!RefreshLeadershipLocked(now)) {
    return Status(StatusCode::kNotLeader,
                  "heartbeats are kept by the leader, and this server does not lead");
  }
  size_t added = 0;
  for (const HolderKey& holder : holders) added += heartbeats_.contains(holder) ? 0 : 1;
  if (heartbeats_.size() + added > options_.max_heartbeat_holders) {
    // Heartbeats older than the TTL keep nobody alive any more: drop them and look again.
    std::erase_if(heartbeats_, [&](const auto& h) { return now - h.second >= options_.ttl; });
    added = 0;
    for (const HolderKey& holder : holders) added += heartbeats_.contains(holder) ? 0 : 1;
    if (heartbeats_.size() + added > options_.max_heartbeat_holders) {
      return Status::ResourceExhausted("holders: heartbeats of more than " +
                                       std::to_string(options_.max_heartbeat_holders) +
                                       " distinct holders within one TTL are not tracked");
    }
  }
  for (const HolderKey& holder : holders) {
    Clock::time_point& at = heartbeats_[holder];
    at = std::max(at, now);
  }
  return Status::Ok();
}

std::vector<ExpireHolderCommand> LeaseTracker::DueExpiries(Clock::time_point now) {
  if (!enabled()) return {};
  {
    std::lock_guard lock(mu_);
    if (!RefreshLeadershipLocked(now)) return {};
  }
  // Holders with entries and no recent event, from the state (under its read lock, without
  // mu_): each with the revision the race guard checks against and its last event's time.
  struct Candidate {
    ExpireHolderCommand command;
    std::optional<Clock::time_point> last_event;
  };
  std::vector<Candidate> candidates = machine_->ReadActivity(
      [&](const Index& index, const Registry& registry, const HolderActivityMap& activity, Revision,
          Revision activity_since) {
        std::unordered_set<HolderKey, HolderKeyHash> exempt;
        for (const auto& [key, registration] : registry.registrations) {
          exempt.insert(registration.Holder());
        }
        std::vector<Candidate> out;
        for (const HolderInfo& h : index.Holders()) {
          if (h.entries == 0 || exempt.contains(h.holder)) continue;
          const auto it = activity.find(h.holder);
          if (it == activity.end()) {
            // No event since the state was loaded: as far as this server knows, the last
            // one was at or before activity_since (docs/leases.md §Race guard).
            out.push_back({{h.holder, activity_since}, std::nullopt});
          } else if (now - it->second.applied_at >= options_.ttl) {
            out.push_back({{h.holder, it->second.revision}, it->second.applied_at});
          }
        }
        return out;
      });
  std::lock_guard lock(mu_);
  // Leadership may have changed while the state was read.
  if (!RefreshLeadershipLocked(now)) return {};
  std::vector<std::pair<Clock::time_point, ExpireHolderCommand>> due;
  for (Candidate& c : candidates) {
    Clock::time_point last = LastHeartbeatLocked(c.command.holder);
    if (c.last_event) last = std::max(last, *c.last_event);
    if (now - last >= options_.ttl) due.emplace_back(last, std::move(c.command));
  }
  // Heartbeats past the TTL keep nobody alive any more.
  std::erase_if(heartbeats_, [&](const auto& h) { return now - h.second >= options_.ttl; });
  // The longest silent first, when there are more than one check proposes.
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ExpireHolderCommand> out;
  for (size_t i = 0; i < due.size() && i < options_.max_expiries_per_check; ++i) {
    out.push_back(std::move(due[i].second));
  }
  return out;
}

std::optional<std::vector<double>> LeaseTracker::IdleSeconds(std::span<const HolderKey> holders,
                                                             Clock::time_point now) {
  if (!enabled()) return std::nullopt;
  std::vector<std::optional<Clock::time_point>> events = machine_->ReadActivity(
      [&](const Index&, const Registry&, const HolderActivityMap& activity, Revision, Revision) {
        std::vector<std::optional<Clock::time_point>> out;
        out.reserve(holders.size());
        for (const HolderKey& holder : holders) {
          const auto it = activity.find(holder);
          out.push_back(it == activity.end() ? std::nullopt : std::optional(it->second.applied_at));
        }
        return out;
      });
  std::lock_guard lock(mu_);
  if (!RefreshLeadershipLocked(now)) return std::nullopt;
  std::vector<double> out;
  out.reserve(holders.size());
  for (size_t i = 0; i < holders.size(); ++i) {
    Clock::time_point last = LastHeartbeatLocked(holders[i]);
    if (events[i]) last = std::max(last, *events[i]);
    out.push_back(std::max(0.0, std::chrono::duration<double>(now - last).count()));
  }
  return out;
}

}  // namespace kvatlas::server
