// The placement policy: groups near the snapshot bound stop taking contexts (and resume
// below it), oversized ranges split, and moves even out entries and write rate without
// overshooting; every plan applies to the directory it was made from.
#include "server/placement/placement_planner.h"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

namespace kvatlas::server {
namespace {

using Kind = PlacementAction::Kind;

ContextKey Ctx(int i) { return ContextKey{"default", "model-" + std::to_string(i), "", 16, ""}; }

PlacementDirectory Groups(int n) {
  PlacementDirectory dir;
  for (GroupId g = 1; g <= static_cast<GroupId>(n); ++g) {
    REQUIRE(dir.AddGroup({g, {"s" + std::to_string(g)}, true}).ok());
  }
  return dir;
}

std::vector<Kind> Kinds(const std::vector<PlacementAction>& plan) {
  std::vector<Kind> out;
  for (const PlacementAction& a : plan) out.push_back(a.kind);
  return out;
}

TEST_CASE("a group near the snapshot bound stops taking contexts and resumes well below it") {
  PlacementDirectory dir = Groups(3);
  REQUIRE(dir.SetAccepting(3, false).ok());
  PlacementPolicy policy;
  policy.snapshot_stop_bytes = 1000;
  const std::vector<PlacementAction> plan =
      PlanPlacement(dir, {{1, 0, 1000, 0}, {2, 0, 999, 0}, {3, 0, 700, 0}}, {}, policy);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].kind == Kind::kStopAccepting);
  CHECK(plan[0].group == 1);
  CHECK(plan[1].kind == Kind::kResumeAccepting);  // 700 < 0.75 × 1000
  CHECK(plan[1].group == 3);
  CHECK(PlanPlacement(dir, {{3, 0, 800, 0}}, {}, policy).empty());  // between: no change
  const PlacementDirectory after = ApplyPlanToDirectory(dir, plan).value();
  CHECK_FALSE(after.FindGroup(1)->accepting);
  CHECK(after.FindGroup(3)->accepting);
}

TEST_CASE("an oversized range splits in halves until each fits, onto the emptiest groups") {
  PlacementDirectory dir = Groups(3);
  REQUIRE(dir.Assign(Ctx(0), 1).ok());
  PlacementPolicy policy;
  policy.max_range_entries = 100;
  policy.max_moves = 0;
  const std::vector<PlacementAction> plan = PlanPlacement(dir, {}, {{Ctx(0), 0, 300, 30}}, policy);
  // 300 → 150 + 150 → each of those → 75 + 75: three splits.
  CHECK(Kinds(plan) == std::vector<Kind>{Kind::kSplit, Kind::kSplit, Kind::kSplit});
  CHECK(plan[0].split_at == (1ull << 63));
  const PlacementDirectory after = ApplyPlanToDirectory(dir, plan).value();
  const ContextPlacement& p = *after.Find(Ctx(0));
  CHECK(p.ranges.size() >= 3);
  CHECK(p.Groups().size() >= 2);
  // Nowhere to put half: no split.
  PlacementDirectory lone = Groups(1);
  REQUIRE(lone.Assign(Ctx(0), 1).ok());
  CHECK(PlanPlacement(lone, {}, {{Ctx(0), 0, 300, 30}}, policy).empty());
}

TEST_CASE("moves even out entries and writes, and stop within the imbalance bound") {
  PlacementDirectory dir = Groups(3);
  std::vector<RangeFigures> ranges;
  for (int i = 0; i < 9; ++i) {  // every context on group 1
    REQUIRE(dir.Assign(Ctx(i), 1).ok());
    ranges.push_back({Ctx(i), 0, 100, 10});
  }
  PlacementPolicy policy;
  const std::vector<PlacementAction> plan = PlanPlacement(dir, {}, ranges, policy);
  REQUIRE_FALSE(plan.empty());
  CHECK(plan.size() <= policy.max_moves);
  for (const PlacementAction& a : plan) CHECK(a.kind == Kind::kMove);
  const PlacementDirectory after = ApplyPlanToDirectory(dir, plan).value();
  std::map<GroupId, int> per_group;
  for (int i = 0; i < 9; ++i) ++per_group[after.Find(Ctx(i))->ranges[0].group];
  // Equal ranges: three per group is the balance; the bound allows one off.
  for (GroupId g = 1; g <= 3; ++g) {
    CAPTURE(g);
    CHECK(per_group[g] >= 2);
    CHECK(per_group[g] <= 4);
  }
  // Planning again from the result changes nothing: the plan converged.
  std::vector<RangeFigures> same = ranges;
  CHECK(PlanPlacement(after, {}, same, policy).empty());
}

TEST_CASE("write rate counts: groups equal in entries are evened out by writes") {
  PlacementDirectory dir = Groups(2);
  REQUIRE(dir.Assign(Ctx(0), 1).ok());
  REQUIRE(dir.Assign(Ctx(1), 1).ok());
  REQUIRE(dir.Assign(Ctx(2), 2).ok());
  REQUIRE(dir.Assign(Ctx(3), 2).ok());
  const std::vector<RangeFigures> ranges = {
      {Ctx(0), 0, 100, 0}, {Ctx(1), 0, 100, 0}, {Ctx(2), 0, 100, 1000}, {Ctx(3), 0, 100, 0}};
  PlacementPolicy policy;
  const std::vector<PlacementAction> plan = PlanPlacement(dir, {}, ranges, policy);
  // Group 2 takes every write. Moving its hot range would only move the hot spot; moving
  // its cold one leaves group 2 the hot range alone.
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].kind == Kind::kMove);
  CHECK(plan[0].context == Ctx(3));
  CHECK(plan[0].group == 1);
  policy.write_weight = 0;  // entries only: 200 and 200, balanced
  CHECK(PlanPlacement(dir, {}, ranges, policy).empty());
}

TEST_CASE("nothing moves onto a group that takes no new contexts, or when balanced") {
  PlacementDirectory dir = Groups(2);
  REQUIRE(dir.Assign(Ctx(0), 1).ok());
  REQUIRE(dir.Assign(Ctx(1), 1).ok());
  REQUIRE(dir.SetAccepting(2, false).ok());
  const std::vector<RangeFigures> ranges = {{Ctx(0), 0, 100, 0}, {Ctx(1), 0, 100, 0}};
  CHECK(PlanPlacement(dir, {}, ranges, {}).empty());
  REQUIRE(dir.SetAccepting(2, true).ok());
  const std::vector<PlacementAction> plan = PlanPlacement(dir, {}, ranges, {});
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].group == 2);
  // Figures of unknown contexts or of offsets that start no range are ignored.
  CHECK(PlanPlacement(Groups(2), {}, {{Ctx(5), 0, 100, 0}}, {}).empty());
  CHECK(PlanPlacement(dir, {}, {{Ctx(0), 7, 100, 0}, {Ctx(1), 7, 100, 0}}, {}).empty());
}

TEST_CASE("a plan that no longer fits the directory is refused whole") {
  PlacementDirectory dir = Groups(2);
  REQUIRE(dir.Assign(Ctx(0), 1).ok());
  const std::vector<PlacementAction> stale = {{Kind::kMove, 2, Ctx(0), 0, 0, ""},
                                              {Kind::kMove, 2, Ctx(9), 0, 0, ""}};
  CHECK(ApplyPlanToDirectory(dir, stale).status().code() == StatusCode::kNotFound);
  CHECK(dir.Find(Ctx(0))->ranges[0].group == 1);
}

}  // namespace
}  // namespace kvatlas::server
