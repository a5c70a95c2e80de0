// LeaseTracker: holder leases on the leader (docs/leases.md). With a TTL configured, every
// holder must show activity — an applied event naming it, or a heartbeat — at least once
// per TTL, or the leader expires it with an ExpireHolderCommand (command.h), which drops
// its entries on every replica.
//
// What the tracker keeps is leader-local and in memory: heartbeats (not replicated) and
// the moment this server started leading. Event activity is the StateMachine's
// (ReadActivity): it is recorded on the applying thread with one map update per batch, so
// the tracker adds nothing to the apply path. A server that becomes leader grants every
// holder a full TTL from that moment, since it cannot know the heartbeats its predecessor
// received. Holders of registered publishers are exempt (engines such as vLLM send no
// heartbeats and an idle engine still holds its cache; unregistering clears them anyway).
//
// Thread-safety: every method from any thread. The tracker's mutex is never held while the
// state machine's read lock is taken. The background task that proposes the expiries is the
// server's (server/runtime/server.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/model/command.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

struct LeaseOptions {
  // A holder silent this long is expired; zero = leases off (nothing is tracked or expired,
  // heartbeats are accepted and ignored).
  std::chrono::milliseconds ttl{0};
  // Distinct holders with a live heartbeat; a heartbeat that would track more is refused
  // (kResourceExhausted). Bounds the memory a client inventing holder ids can take.
  size_t max_heartbeat_holders = 100'000;
  // Expiries one check proposes at most (one command batch); the rest wait for the next.
  size_t max_expiries_per_check = 256;
};

class LeaseTracker {
 public:
  using Clock = std::chrono::steady_clock;
  // This server's raft term while it leads; nullopt while it does not.
  using LeaderTerm = std::function<std::optional<uint64_t>()>;

  // `machine` must outlive the tracker.
  LeaseTracker(LeaseOptions options, const StateMachine* machine, LeaderTerm leader_term);

  bool enabled() const { return options_.ttl.count() > 0; }
  std::chrono::milliseconds ttl() const { return options_.ttl; }
  // How often the leader looks for silent holders: a quarter of the TTL, at least 100 ms,
  // so an expiry comes at most TTL/4 (or 100 ms) late.
  std::chrono::milliseconds check_interval() const;

  // Records that `holders` are alive at `now`. kNotLeader on a follower (heartbeats go to
  // the leader: REST forwards them), kResourceExhausted past max_heartbeat_holders. A
  // no-op returning OK when leases are off.
  [[nodiscard]] Status Heartbeat(std::span<const HolderKey> holders, Clock::time_point now);
  [[nodiscard]] Status Heartbeat(std::span<const HolderKey> holders) {
    return Heartbeat(holders, Clock::now());
  }

  // The holders whose lease ran out at `now`, as the commands to propose (at most
  // max_expiries_per_check, the longest silent first): holders with entries, not
  // registered, and with no event, heartbeat or start of leadership within the TTL. Empty
  // when leases are off or this server does not lead. Reads the state under its read lock
  // (O(holders)); never blocks the applying thread for longer than that.
  std::vector<ExpireHolderCommand> DueExpiries(Clock::time_point now);

  // Seconds since each holder's last activity (event, heartbeat, or this server's start of
  // leadership, whichever is latest), in the order of `holders`, for GET /v1/holders.
  // nullopt when leases are off or this server does not lead (a follower sees no
  // heartbeats, so its figure would be wrong).
  std::optional<std::vector<double>> IdleSeconds(std::span<const HolderKey> holders,
                                                 Clock::time_point now);

 private:
  // Follows the leadership as of `now`: a new term starts a full TTL for every holder and
  // forgets the heartbeats of the previous one. Returns whether this server leads. mu_ held.
  bool RefreshLeadershipLocked(Clock::time_point now);
  // The latest activity of `holder` apart from events: heartbeat or start of leadership.
  Clock::time_point LastHeartbeatLocked(const HolderKey& holder) const;

  const LeaseOptions options_;
  const StateMachine* const machine_;
  const LeaderTerm leader_term_;
  std::mutex mu_;
  std::optional<uint64_t> term_;  // the term this server leads in, as last seen
  Clock::time_point leading_since_;
  std::unordered_map<HolderKey, Clock::time_point, HolderKeyHash> heartbeats_;
};

}  // namespace kvatlas::server
