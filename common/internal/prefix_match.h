// Prefix matching, shared by the server's Index and the client library's LocalIndex so that
// both answer a lookup with the same code: PrefixWalk accumulates, depth by depth along a
// chain of block keys, how far each holder's copies extend from block 0 in each tier;
// BuildLookupAnswer shapes the per-holder result into the LookupAnswer both APIs return.
//
// Thread-safety: a PrefixWalk is scratch owned by one thread (keep one per thread and Reset
// it per lookup: it never clears per-holder arrays). BuildLookupAnswer is pure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// One holder's match, in blocks from block 0. Cumulative: gpu ≤ cpu ≤ disk.
struct HolderMatch {
  uint32_t holder_id = 0;  // the index's interned id of `holder`
  HolderKey holder;
  uint32_t gpu = 0;     // contiguous prefix in GPU
  uint32_t cpu = 0;     // contiguous prefix in GPU ∪ CPU
  uint32_t disk = 0;    // contiguous prefix in GPU ∪ CPU ∪ DISK (= longest for an instance)
  uint32_t shared = 0;  // contiguous prefix in SHARED
  // Per medium alone (the Conductor API's per-medium keys); gpu is both.
  uint32_t cpu_only = 0;   // contiguous prefix in CPU
  uint32_t disk_only = 0;  // contiguous prefix in DISK
  // Location of each of the first `shared` blocks (when requested; "" when none recorded).
  std::vector<std::string> shared_locations;
};

struct LookupResult {
  uint32_t blocks_queried = 0;  // keys considered (after the lookup cap)
  uint32_t blocks_found = 0;    // leading keys that some holder has (any tier), contiguous
  // Holders with a non-zero match, ordered by holder id.
  std::vector<HolderMatch> holders;
};

namespace prefix_match_internal {
constexpr uint8_t Bit(Tier t) { return static_cast<uint8_t>(1u << static_cast<int>(t)); }
inline constexpr uint8_t kGpuMask = Bit(Tier::kGpu);
inline constexpr uint8_t kCpuMask = kGpuMask | Bit(Tier::kCpu);
inline constexpr uint8_t kDiskMask = kCpuMask | Bit(Tier::kDisk);
inline constexpr uint8_t kSharedMask = Bit(Tier::kShared);
}  // namespace prefix_match_internal

// Accumulates per-holder contiguous prefixes while a lookup walks a chain. Per depth the
// caller reports each copy of that depth's block (Add), then closes the depth (EndDepth);
// the walk stops when EndDepth answers false. Holders are dense ids below the count given
// to Reset. A holder first seen below depth 0 cannot extend a prefix from block 0 and is
// ignored.
class PrefixWalk {
 public:
  struct Run {
    uint32_t holder;
    uint32_t gpu, cpu, disk, shared, cpu_only, disk_only;
    uint8_t mask;  // tiers seen at the current depth
  };

  // Starts a walk over holder ids below `holder_count`.
  void Reset(size_t holder_count) {
    if (epoch_of_.size() < holder_count) {
      epoch_of_.resize(holder_count, 0);
      slot_of_.resize(holder_count, 0);
    }
    if (++epoch_ == 0) {  // wrapped: reset so stale epochs cannot alias
      std::fill(epoch_of_.begin(), epoch_of_.end(), 0);
      epoch_ = 1;
    }
    runs_.clear();
    depth_ = 0;
    pending_ = 0;
    adds_ = 0;
    last_only_ = kNoCopy;
  }

  // Depths closed so far.
  uint32_t depth() const { return depth_ + pending_; }

  // For a block that has exactly one copy, (holder, tier): when the last closed depth's
  // block had exactly that one copy too, this depth is counted as a repeat of it (folded
  // into one RepeatDepths) and the answer is true; the caller then neither Adds nor ends
  // it. Otherwise false, and the caller walks the depth as any other. Along a chain most
  // blocks are held just as their parent is (one engine stored them together), so most
  // depths cost this one comparison.
  bool RepeatsLastOnly(uint32_t holder, Tier tier) {
    if (OnlyCopy(holder, tier) != last_only_) return false;
    ++pending_;
    return true;
  }

  // `holder` has a copy of the current depth's block in `tier`.
  void Add(uint32_t holder, Tier tier) {
    FlushRepeats();
    if (epoch_of_[holder] != epoch_) {
      if (depth_ != 0) return;
      epoch_of_[holder] = epoch_;
      slot_of_[holder] = static_cast<uint32_t>(runs_.size());
      runs_.push_back(Run{holder, 0, 0, 0, 0, 0, 0, 0});
    }
    runs_[slot_of_[holder]].mask |= Bit(tier);
    ++adds_;
    last_added_ = OnlyCopy(holder, tier);
  }

  // Closes the current depth. True when some holder's prefix (instance tiers or shared)
  // reached past it, i.e. the walk should go on; the block then counts as found.
  bool EndDepth() {
    FlushRepeats();
    const uint32_t d = depth_;
    bool extended = false;
    for (Run& r : runs_) {
      if (r.gpu == d && (r.mask & kGpuMask)) ++r.gpu;
      if (r.cpu == d && (r.mask & kCpuMask)) ++r.cpu;
      if (r.disk == d && (r.mask & kDiskMask)) ++r.disk;
      if (r.shared == d && (r.mask & kSharedMask)) ++r.shared;
      if (r.cpu_only == d && (r.mask & Bit(Tier::kCpu))) ++r.cpu_only;
      if (r.disk_only == d && (r.mask & Bit(Tier::kDisk))) ++r.disk_only;
      r.mask = 0;
      extended |= r.disk == d + 1 || r.shared == d + 1;
    }
    if (extended) ++depth_;
    last_only_ = extended && adds_ == 1 ? last_added_ : kNoCopy;
    adds_ = 0;
    return extended;
  }

  // Closes `count` more depths whose blocks have exactly the copies of the depth just
  // closed, which must have extended the walk: the same as `count` rounds of Add for each
  // of those copies and EndDepth, in O(holders). Along a chain most blocks are held just as
  // their parent is (one engine stored them together), so the walk is mostly such runs.
  void RepeatDepths(uint32_t count) {
    const uint32_t d = depth_;  // a counter equal to d grew at the last depth: it grows again
    for (Run& r : runs_) {
      if (r.gpu == d) r.gpu += count;
      if (r.cpu == d) r.cpu += count;
      if (r.disk == d) r.disk += count;
      if (r.shared == d) r.shared += count;
      if (r.cpu_only == d) r.cpu_only += count;
      if (r.disk_only == d) r.disk_only += count;
    }
    depth_ += count;
  }

  // The tracked holders, sorted by holder id (call once, after the walk).
  std::span<const Run> SortedRuns() {
    FlushRepeats();
    std::sort(runs_.begin(), runs_.end(),
              [](const Run& a, const Run& b) { return a.holder < b.holder; });
    return runs_;
  }

  // The match of `run` without holder key or locations, which the caller fills in.
  static HolderMatch MatchOf(const Run& r) {
    HolderMatch match;
    match.holder_id = r.holder;
    match.gpu = r.gpu;
    match.cpu = r.cpu;
    match.disk = r.disk;
    match.shared = r.shared;
    match.cpu_only = r.cpu_only;
    match.disk_only = r.disk_only;
    return match;
  }

 private:
  static constexpr uint8_t Bit(Tier t) { return prefix_match_internal::Bit(t); }
  static constexpr uint8_t kGpuMask = prefix_match_internal::kGpuMask;
  static constexpr uint8_t kCpuMask = prefix_match_internal::kCpuMask;
  static constexpr uint8_t kDiskMask = prefix_match_internal::kDiskMask;
  static constexpr uint8_t kSharedMask = prefix_match_internal::kSharedMask;

  static constexpr uint64_t kNoCopy = UINT64_MAX;
  static uint64_t OnlyCopy(uint32_t holder, Tier tier) {
    return uint64_t{holder} << 8 | static_cast<uint8_t>(tier);
  }
  void FlushRepeats() {
    if (pending_ > 0) RepeatDepths(std::exchange(pending_, 0));
  }

  std::vector<uint32_t> epoch_of_;
  std::vector<uint32_t> slot_of_;
  std::vector<Run> runs_;
  uint32_t epoch_ = 0;
  uint32_t depth_ = 0;
  uint32_t pending_ = 0;  // depths counted by RepeatsLastOnly, not yet folded into the runs
  uint32_t adds_ = 0;     // effective Adds at the current depth, the last one last_added_
  uint64_t last_added_ = kNoCopy;
  uint64_t last_only_ = kNoCopy;  // the last closed depth's copy when it had exactly one
};

// Shapes a lookup result into the answer both lookup APIs encode: holders grouped into
// instances (one id over its dp ranks, GPU/CPU/DISK tiers) and shared backends (SHARED tier,
// with locations). An instance's values are the max over its ranks; ranks and instances
// without a GPU/CPU/DISK match are left out. Instances are ordered by longest match
// (descending), then id; shared matches by blocks (descending), then backend id and rank.
// When `instance_id` is not empty only that instance is reported, with zeros if it matched
// nothing (a router asking about one instance gets an answer about it); shared backends are
// all kept.
[[nodiscard]] LookupAnswer BuildLookupAnswer(const LookupResult& result, const ContextKey& context,
                                             std::string_view instance_id, Revision revision);

}  // namespace kvatlas
