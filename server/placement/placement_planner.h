// PlanPlacement: the directory leader's placement policy (docs/scaling.md §Policy), a pure
// function of the directory and the groups' and ranges' figures (from heartbeats). It says
// which groups stop or resume taking new contexts (a group near libraft's snapshot bound
// must never reach it), which ranges are split because one group cannot hold them, and
// which ranges move to even out entries and write rate. Each action names why. Applying a
// plan is the caller's (a move copies, catches up and cuts over); a dry run shows the plan
// and the directory it would make (ApplyPlanToDirectory).
//
// Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"

namespace kvatlas::server {

// A group's figures, from its leader's heartbeat.
struct GroupFigures {
  GroupId group = kNoGroup;
  uint64_t entries = 0;
  uint64_t snapshot_bytes = 0;  // the last raft snapshot's size
  double writes_per_s = 0;      // block events applied per second, recent average
};

// One range of a context (a whole unsplit context: range_start 0) and its figures.
struct RangeFigures {
  ContextKey context;
  BlockKey range_start = 0;
  uint64_t entries = 0;
  double writes_per_s = 0;
};

struct PlacementPolicy {
  // A group whose last snapshot reaches this stops taking new contexts; it takes them again
  // below `resume_fraction` of it. Far below libraft 0.15's 2 GiB failure, so that the
  // contexts it has may grow while they are moved away.
  uint64_t snapshot_stop_bytes = 1ull << 30;
  double resume_fraction = 0.75;
  // A range holding more entries than this is split in two at the middle of its key span
  // (block keys are uniform hashes: each half holds about half).
  uint64_t max_range_entries = 8'000'000;
  // Load = entries ÷ mean entries + write_weight × writes ÷ mean writes. Ranges move from
  // the most to the least loaded accepting group while the most loaded is above
  // (1 + imbalance) × the mean and a move lowers the larger of the two.
  double write_weight = 1.0;
  double imbalance = 0.2;
  size_t max_moves = 8;  // per plan: moves cost copies, so a plan does a few at a time
};

struct PlacementAction {
  enum class Kind { kStopAccepting, kResumeAccepting, kSplit, kMove };
  Kind kind = Kind::kMove;
  GroupId group = kNoGroup;  // kStop/kResume: the group; kSplit/kMove: the destination
  ContextKey context;        // kSplit/kMove
  BlockKey range_start = 0;  // kMove: the range moved; kSplit: the range split
  BlockKey split_at = 0;     // kSplit: where the range is cut
  std::string reason;

  friend bool operator==(const PlacementAction&, const PlacementAction&) = default;
};

// "stop_accepting", "resume_accepting", "split", "move".
std::string_view PlacementActionName(PlacementAction::Kind kind);

// The actions, in order: accepting changes, then splits, then moves. Figures of groups or
// ranges the directory does not know are ignored; groups without figures count zero.
[[nodiscard]] std::vector<PlacementAction> PlanPlacement(const PlacementDirectory& directory,
                                                         const std::vector<GroupFigures>& groups,
                                                         const std::vector<RangeFigures>& ranges,
                                                         const PlacementPolicy& policy);

// The directory after `plan` (the dry run's picture), or the first action's error.
[[nodiscard]] Result<PlacementDirectory> ApplyPlanToDirectory(
    PlacementDirectory directory, const std::vector<PlacementAction>& plan);

}  // namespace kvatlas::server
