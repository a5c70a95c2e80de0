#include "kvatlas/common/fleet_load.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kvatlas/common/limits.h"

namespace kvatlas {

Status ValidateLoadReport(const LoadReport& report) {
  if (report.router_id.empty()) {
    return Status::InvalidArgument("router_id: is required (a non-empty string)");
  }
  if (report.router_id.size() > kMaxNameBytes) {
    return Status::InvalidArgument("router_id: at most " + std::to_string(kMaxNameBytes) +
                                   " bytes, got " + std::to_string(report.router_id.size()));
  }
  if (report.ttl_ms < kMinLoadTtlMs || report.ttl_ms > kMaxLoadTtlMs) {
    return Status::InvalidArgument(
        "ttl_ms: must be an integer from " + std::to_string(kMinLoadTtlMs) + " to " +
        std::to_string(kMaxLoadTtlMs) + ", got " + std::to_string(report.ttl_ms));
  }
  if (report.loads.size() > kMaxLoadEntries) {
    return Status::PayloadTooLarge("loads: " + std::to_string(report.loads.size()) +
                                   " entries; one report holds at most " +
                                   std::to_string(kMaxLoadEntries));
  }
  std::set<std::pair<std::string_view, uint32_t>> seen;
  for (size_t i = 0; i < report.loads.size(); ++i) {
    const InstanceLoad& load = report.loads[i];
    const std::string path = "loads[" + std::to_string(i) + "]";
    if (load.instance_id.empty() || load.instance_id.size() > kMaxNameBytes) {
      return Status::InvalidArgument(path + ".instance_id: must be a string of 1 to " +
                                     std::to_string(kMaxNameBytes) + " bytes");
    }
    for (const auto& [name, value] : {std::pair{"prefill_blocks", load.prefill_blocks},
                                      std::pair{"decode_blocks", load.decode_blocks}}) {
      if (value > kMaxLoadBlocks) {
        return Status::InvalidArgument(path + "." + name + ": at most " +
                                       std::to_string(kMaxLoadBlocks) + ", got " +
                                       std::to_string(value));
      }
    }
    if (!seen.emplace(load.instance_id, load.dp_rank).second) {
      return Status::InvalidArgument(path + ": instance \"" + load.instance_id + "\" rank " +
                                     std::to_string(load.dp_rank) +
                                     " is given twice (one entry per instance and rank)");
    }
  }
  return Status::Ok();
}

void FleetLoadTable::ExpireLocked(Clock::time_point now) const {
  std::erase_if(routers_, [now](const auto& item) { return item.second.expires_at <= now; });
}

bool FleetLoadTable::Replace(const LoadReport& report, Clock::time_point expires_at) {
  std::lock_guard lock(mu_);
  if (report.loads.empty()) {
    routers_.erase(report.router_id);
    return true;
  }
  auto it = routers_.find(report.router_id);
  if (it == routers_.end()) {
    if (routers_.size() >= kMaxLoadRouters) ExpireLocked(Clock::now());
    if (routers_.size() >= kMaxLoadRouters) return false;
    it = routers_.emplace(report.router_id, Entry{}).first;
  }
  Entry& entry = it->second;
  entry.expires_at = expires_at;
  entry.loads = report.loads;
  entry.by_instance.clear();
  for (size_t i = 0; i < entry.loads.size(); ++i) {
    entry.by_instance[entry.loads[i].instance_id].push_back(i);
  }
  return true;
}

void FleetLoadTable::Clear() {
  std::lock_guard lock(mu_);
  routers_.clear();
}

LoadSum FleetLoadTable::LoadOf(std::string_view instance, std::optional<uint32_t> dp_rank,
                               Clock::time_point now) const {
  std::lock_guard lock(mu_);
  LoadSum sum;
  const std::string key(instance);
  for (const auto& [router, entry] : routers_) {
    if (entry.expires_at <= now) continue;
    const auto found = entry.by_instance.find(key);
    if (found == entry.by_instance.end()) continue;
    bool named = false;
    for (const size_t i : found->second) {
      const InstanceLoad& load = entry.loads[i];
      if (dp_rank && load.dp_rank != *dp_rank) continue;
      sum.prefill_blocks += load.prefill_blocks;
      sum.decode_blocks += load.decode_blocks;
      named = true;
    }
    if (named) ++sum.routers;
  }
  return sum;
}

size_t FleetLoadTable::FillCandidates(std::span<RouteCandidate> candidates, uint32_t block_size,
                                      Clock::time_point now) const {
  size_t filled = 0;
  for (RouteCandidate& candidate : candidates) {
    if (candidate.queued_prefill_tokens != 0 || candidate.active_decode_blocks != 0) continue;
    const LoadSum sum = LoadOf(candidate.instance_id, candidate.dp_rank, now);
    if (sum.routers == 0) continue;
    // Sums stay below 2^58 (kMaxLoadBlocks × kMaxLoadRouters); × block_size saturates.
    const uint64_t tokens = sum.prefill_blocks * block_size;
    candidate.queued_prefill_tokens =
        block_size != 0 && tokens / block_size != sum.prefill_blocks ? UINT64_MAX : tokens;
    candidate.active_decode_blocks = sum.decode_blocks;
    ++filled;
  }
  return filled;
}

std::vector<FleetLoadTable::RouterEntry> FleetLoadTable::LiveRouters(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::vector<RouterEntry> out;
  for (const auto& [router, entry] : routers_) {
    if (entry.expires_at <= now) continue;
    out.push_back(RouterEntry{router, entry.expires_at, entry.loads});
  }
  return out;
}

bool FleetLoadTable::HasRoom(std::string_view router_id, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  if (routers_.find(router_id) != routers_.end()) return true;
  ExpireLocked(now);
  return routers_.size() < kMaxLoadRouters;
}

}  // namespace kvatlas
