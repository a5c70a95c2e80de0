// Shared in-flight load of a router fleet (docs/routing.md §Shared load). Each router
// replica keeps its own in-flight table and reports it as an absolute summary per instance
// and dp rank (a LoadReport), which replaces that router's previous report and counts until
// its lease (ttl_ms) runs out; the cluster replicates reports through its log, and every
// server sums the live ones (FleetLoadTable) to fill the load terms of route candidates that
// carry none of their own.
//
// Plain values and one thread-safe table: the same code runs in the server and, for a
// scheduler holding loads it fetched itself, in a client's process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/export.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/routing.h"

namespace kvatlas {

// Bounds of a report (docs/api.md §Shared load): entries per report, distinct routers a
// server keeps (a report of a new router past it is refused), and the lease range.
inline constexpr size_t kMaxLoadEntries = 10'000;
inline constexpr size_t kMaxLoadRouters = 1'024;
inline constexpr uint32_t kMinLoadTtlMs = 100;
inline constexpr uint32_t kMaxLoadTtlMs = 600'000;
// A report's load numbers are at most this (2^48 blocks: far past any real queue, small
// enough that summing kMaxLoadRouters reports cannot overflow).
inline constexpr uint64_t kMaxLoadBlocks = uint64_t{1} << 48;

// What one router has in flight on one instance's data-parallel rank.
struct InstanceLoad {
  std::string instance_id;
  uint32_t dp_rank = 0;
  uint64_t prefill_blocks = 0;  // prompt blocks routed there and not yet prefilled
  uint64_t decode_blocks = 0;   // KV blocks of requests routed there and still decoding

  friend bool operator==(const InstanceLoad&, const InstanceLoad&) = default;
};

// A router's absolute summary: replaces its previous one. No entries = nothing in flight
// (a router that stops sends one to leave at once instead of after its lease).
struct LoadReport {
  std::string router_id;
  uint32_t ttl_ms = 2'000;  // the lease: the report counts this long after it was accepted
  std::vector<InstanceLoad> loads;

  friend bool operator==(const LoadReport&, const LoadReport&) = default;
};

// kInvalidArgument naming the field: an empty or too long router_id (kMaxNameBytes), a ttl
// outside [kMinLoadTtlMs, kMaxLoadTtlMs], an empty or too long instance_id, a number above
// kMaxLoadBlocks, an (instance, rank) given twice; kPayloadTooLarge past kMaxLoadEntries.
[[nodiscard]] KVATLAS_EXPORT Status ValidateLoadReport(const LoadReport& report);

// POST /v1/load body: {"router_id", "ttl_ms"?, "loads": [{"instance_id", "dp_rank"?,
// "prefill_blocks"?, "decode_blocks"?}]}, validated. kInvalidArgument naming the field.
[[nodiscard]] KVATLAS_EXPORT Result<LoadReport> DecodeLoadReport(std::string_view body);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLoadReport(const LoadReport& report);

// The summed load of one instance (or one of its ranks) over every live report.
struct LoadSum {
  uint64_t prefill_blocks = 0;
  uint64_t decode_blocks = 0;
  size_t routers = 0;  // live reports that name it

  friend bool operator==(const LoadSum&, const LoadSum&) = default;
};

// The live reports, keyed by router id. Replace and Erase from any thread; reads too.
class KVATLAS_EXPORT FleetLoadTable {
 public:
  using Clock = std::chrono::system_clock;

  // Replaces `report.router_id`'s report; it counts while the clock is before
  // `expires_at`. A report with no loads erases the router. False (nothing changed) for a
  // new router when kMaxLoadRouters live routers are kept.
  bool Replace(const LoadReport& report, Clock::time_point expires_at);
  // Forgets every report (a server restoring a snapshot: routers report again).
  void Clear();

  // The load of `instance` at `dp_rank`, or summed over its ranks when nullopt.
  LoadSum LoadOf(std::string_view instance, std::optional<uint32_t> dp_rank,
                 Clock::time_point now) const;
  // Fills the load of every candidate that gives none (queued_prefill_tokens and
  // active_decode_blocks both 0) from the table: prefill blocks × block_size tokens, decode
  // blocks. Returns how many candidates it filled.
  size_t FillCandidates(std::span<RouteCandidate> candidates, uint32_t block_size,
                        Clock::time_point now) const;

  struct RouterEntry {
    std::string router_id;
    Clock::time_point expires_at;
    std::vector<InstanceLoad> loads;
  };
  // Every live report, by router id (GET /v1/load).
  std::vector<RouterEntry> LiveRouters(Clock::time_point now) const;
  // Whether a report from `router_id` would be kept (it is known, or there is room).
  bool HasRoom(std::string_view router_id, Clock::time_point now) const;

 private:
  struct Entry {
    Clock::time_point expires_at;
    std::vector<InstanceLoad> loads;
    // instance id → indexes into loads
    std::unordered_map<std::string, std::vector<size_t>> by_instance;
  };
  // Drops routers whose lease ran out. mu_ held.
  void ExpireLocked(Clock::time_point now) const;

  mutable std::mutex mu_;
  mutable std::map<std::string, Entry, std::less<>> routers_;
};

}  // namespace kvatlas
