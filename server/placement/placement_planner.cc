#include "server/placement/placement_planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <utility>

namespace kvatlas::server {
namespace {

using Kind = PlacementAction::Kind;

// A range being planned: where it is now and its figures, kept up to date as the plan
// splits and moves ranges.
struct PlannedRange {
  RangeFigures figures;
  GroupId group = kNoGroup;
  bool moved = false;  // a range moves at most once per plan
};

struct GroupTally {
  uint64_t entries = 0;
  double writes = 0;
};

// The end (exclusive, as a 128-bit-free pair) of the range starting at `start`: the next
// range's start, or nullopt for the last range (the end of the key space).
std::optional<BlockKey> RangeEnd(const ContextPlacement& placement, BlockKey start) {
  for (const KeyRange& r : placement.ranges) {
    if (r.start > start) return r.start;
  }
  return std::nullopt;
}

BlockKey Middle(BlockKey start, std::optional<BlockKey> end) {
  const BlockKey last = end ? *end - 1 : std::numeric_limits<BlockKey>::max();
  return start + (last - start) / 2 + 1;
}

std::string Num(double v) {
  std::string s = std::to_string(v);
  return s.substr(0, s.find('.') + 3);
}

class Planner {
 public:
  Planner(const PlacementDirectory& directory, const PlacementPolicy& policy)
      : work_(directory), policy_(policy) {}

  std::vector<PlacementAction> Run(const std::vector<GroupFigures>& groups,
                                   const std::vector<RangeFigures>& ranges) {
    std::map<GroupId, uint64_t> snapshot;
    for (const GroupFigures& g : groups) {
      if (work_.FindGroup(g.group) != nullptr) snapshot[g.group] = g.snapshot_bytes;
    }
    for (const RangeFigures& r : ranges) {
      const ContextPlacement* placement = work_.Find(r.context);
      if (placement == nullptr) continue;
      const GroupId group = placement->GroupOf(r.range_start);
      if (!std::any_of(placement->ranges.begin(), placement->ranges.end(),
                       [&](const KeyRange& k) { return k.start == r.range_start; })) {
        continue;
      }
      ranges_.push_back(PlannedRange{r, group, false});
    }
    PlanAccepting(snapshot);
    PlanSplits();
    PlanMoves();
    return std::move(plan_);
  }

 private:
  void Do(PlacementAction action) {
    Result<PlacementDirectory> next = ApplyPlanToDirectory(work_, {action});
    if (!next.has_value()) return;  // cannot happen for the actions built here
    work_ = std::move(next).value();
    plan_.push_back(std::move(action));
  }

  void PlanAccepting(const std::map<GroupId, uint64_t>& snapshot) {
    for (const auto& [id, bytes] : snapshot) {
      const bool accepting = work_.FindGroup(id)->accepting;
      const auto resume_below = static_cast<uint64_t>(
          static_cast<double>(policy_.snapshot_stop_bytes) * policy_.resume_fraction);
      if (accepting && bytes >= policy_.snapshot_stop_bytes) {
        Do({Kind::kStopAccepting,
            id,
            {},
            0,
            0,
            "snapshot of " + std::to_string(bytes) + " bytes reached the bound of " +
                std::to_string(policy_.snapshot_stop_bytes)});
      } else if (!accepting && bytes < resume_below) {
        Do({Kind::kResumeAccepting,
            id,
            {},
            0,
            0,
            "snapshot of " + std::to_string(bytes) + " bytes is below " +
                std::to_string(resume_below)});
      }
    }
  }

  std::map<GroupId, GroupTally> Tallies() const {
    std::map<GroupId, GroupTally> out;
    for (const auto& [id, group] : work_.groups()) out[id];
    for (const PlannedRange& r : ranges_) {
      out[r.group].entries += r.figures.entries;
      out[r.group].writes += r.figures.writes_per_s;
    }
    return out;
  }

  // The accepting group with the fewest entries other than `except`; kNoGroup if none.
  GroupId EmptiestAccepting(GroupId except) const {
    GroupId best = kNoGroup;
    uint64_t best_entries = 0;
    for (const auto& [id, tally] : Tallies()) {
      if (id == except || !work_.FindGroup(id)->accepting) continue;
      if (best == kNoGroup || tally.entries < best_entries) {
        best = id;
        best_entries = tally.entries;
      }
    }
    return best;
  }

  void PlanSplits() {
    // Index-based: splitting appends the upper halves, which may need splitting again.
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (ranges_[i].figures.entries <= policy_.max_range_entries) continue;
      const GroupId to = EmptiestAccepting(ranges_[i].group);
      if (to == kNoGroup) continue;  // nowhere to put half: the range stays (and is reported)
      const ContextKey context = ranges_[i].figures.context;
      const BlockKey start = ranges_[i].figures.range_start;
      const std::optional<BlockKey> end = RangeEnd(*work_.Find(context), start);
      if (end && *end - start < 2) continue;
      const BlockKey at = Middle(start, end);
      const uint64_t entries = ranges_[i].figures.entries;
      const std::string reason = "range holds " + std::to_string(entries) + " entries, more than " +
                                 std::to_string(policy_.max_range_entries);
      const size_t before = plan_.size();
      Do({Kind::kSplit, to, context, start, at, reason});
      if (plan_.size() == before) continue;
      RangeFigures upper = ranges_[i].figures;
      upper.range_start = at;
      upper.entries = entries - entries / 2;
      upper.writes_per_s = ranges_[i].figures.writes_per_s / 2;
      ranges_[i].figures.entries = entries / 2;
      ranges_[i].figures.writes_per_s /= 2;
      ranges_.push_back(PlannedRange{upper, to, true});
      --i;  // the lower half may still be too big
    }
  }

  void PlanMoves() {
    for (size_t n = 0; n < policy_.max_moves; ++n) {
      const std::map<GroupId, GroupTally> tallies = Tallies();
      if (tallies.size() < 2) return;
      double total_entries = 0;
      double total_writes = 0;
      for (const auto& [id, t] : tallies) {
        total_entries += static_cast<double>(t.entries);
        total_writes += t.writes;
      }
      const double groups = static_cast<double>(tallies.size());
      const double mean_entries = total_entries / groups;
      const double mean_writes = total_writes / groups;
      auto load = [&](uint64_t entries, double writes) {
        double l = mean_entries > 0 ? static_cast<double>(entries) / mean_entries : 0;
        if (mean_writes > 0) l += policy_.write_weight * writes / mean_writes;
        return l;
      };
      double mean_load = 0;
      GroupId src = kNoGroup;
      double src_load = -1;
      for (const auto& [id, t] : tallies) {
        const double l = load(t.entries, t.writes);
        mean_load += l / groups;
        if (l > src_load) {
          src = id;
          src_load = l;
        }
      }
      if (src_load <= (1 + policy_.imbalance) * mean_load) return;
      GroupId dst = kNoGroup;
      double dst_load = 0;
      for (const auto& [id, t] : tallies) {
        if (id == src || !work_.FindGroup(id)->accepting) continue;
        const double l = load(t.entries, t.writes);
        if (dst == kNoGroup || l < dst_load) {
          dst = id;
          dst_load = l;
        }
      }
      if (dst == kNoGroup) return;
      // The range whose move leaves the larger of the two loads smallest.
      PlannedRange* best = nullptr;
      double best_peak = src_load;
      for (PlannedRange& r : ranges_) {
        if (r.group != src || r.moved) continue;
        const double moved = load(r.figures.entries, r.figures.writes_per_s);
        const double peak = std::max(src_load - moved, dst_load + moved);
        if (peak < best_peak) {
          best = &r;
          best_peak = peak;
        }
      }
      if (best == nullptr) return;
      const size_t before = plan_.size();
      Do({Kind::kMove, dst, best->figures.context, best->figures.range_start, 0,
          "group " + std::to_string(src) + " load " + Num(src_load) + " is above " +
              Num((1 + policy_.imbalance) * mean_load) + " (mean " + Num(mean_load) + "); group " +
              std::to_string(dst) + " has " + Num(dst_load)});
      if (plan_.size() == before) return;
      best->group = dst;
      best->moved = true;
    }
  }

  PlacementDirectory work_;
  const PlacementPolicy& policy_;
  std::vector<PlannedRange> ranges_;
  std::vector<PlacementAction> plan_;
};

}  // namespace

std::string_view PlacementActionName(PlacementAction::Kind kind) {
  switch (kind) {
    case Kind::kStopAccepting:
      return "stop_accepting";
    case Kind::kResumeAccepting:
      return "resume_accepting";
    case Kind::kSplit:
      return "split";
    case Kind::kMove:
      return "move";
  }
  return "unknown";
}

std::vector<PlacementAction> PlanPlacement(const PlacementDirectory& directory,
                                           const std::vector<GroupFigures>& groups,
                                           const std::vector<RangeFigures>& ranges,
                                           const PlacementPolicy& policy) {
  return Planner(directory, policy).Run(groups, ranges);
}

Result<PlacementDirectory> ApplyPlanToDirectory(PlacementDirectory directory,
                                                const std::vector<PlacementAction>& plan) {
  for (const PlacementAction& a : plan) {
    Status s;
    switch (a.kind) {
      case Kind::kStopAccepting:
        s = directory.SetAccepting(a.group, false);
        break;
      case Kind::kResumeAccepting:
        s = directory.SetAccepting(a.group, true);
        break;
      case Kind::kSplit:
        s = directory.SplitAt(a.context, a.split_at, a.group);
        break;
      case Kind::kMove:
        s = directory.MoveRange(a.context, a.range_start, a.group);
        break;
    }
    if (!s.ok()) return s;
  }
  return directory;
}

}  // namespace kvatlas::server
