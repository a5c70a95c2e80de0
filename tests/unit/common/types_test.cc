#include "kvatlas/common/types.h"

#include <doctest/doctest.h>

namespace kvatlas {
namespace {

TEST_SUITE("types") {
  TEST_CASE("engine medium strings map onto tiers") {
    bool known = false;
    CHECK(TierFromMedium("GPU", &known) == Tier::kGpu);
    CHECK(known);
    CHECK(TierFromMedium("gpu") == Tier::kGpu);
    CHECK(TierFromMedium("DEVICE") == Tier::kGpu);
    CHECK(TierFromMedium("") == Tier::kGpu);
    CHECK(TierFromMedium("cpu") == Tier::kCpu);
    CHECK(TierFromMedium("CPU_PINNED") == Tier::kCpu);
    CHECK(TierFromMedium("CPU_TIER1") == Tier::kCpu);
    CHECK(TierFromMedium("CPU_TIER2") == Tier::kDisk);
    CHECK(TierFromMedium("disk") == Tier::kDisk);
    CHECK(TierFromMedium("NVME") == Tier::kDisk);
    CHECK(TierFromMedium("STORAGE") == Tier::kDisk);
    CHECK(TierFromMedium("EXTERNAL") == Tier::kShared);
    CHECK(TierFromMedium("remote") == Tier::kShared);
    CHECK(TierFromMedium("SHARED") == Tier::kShared);
  }

  TEST_CASE("unknown media map to the nearest tier and are flagged") {
    bool known = true;
    CHECK(TierFromMedium("host_memory", &known) == Tier::kCpu);
    CHECK_FALSE(known);
    CHECK(TierFromMedium("remote_pool_3", &known) == Tier::kShared);
    CHECK_FALSE(known);
    CHECK(TierFromMedium("weird", &known) == Tier::kGpu);
    CHECK_FALSE(known);
  }

  TEST_CASE("tier names round-trip") {
    for (Tier t : {Tier::kGpu, Tier::kCpu, Tier::kDisk, Tier::kShared}) {
      CHECK(ParseTierName(TierName(t)) == t);
    }
    CHECK_FALSE(ParseTierName("DEVICE").has_value());
  }

  TEST_CASE("context and holder keys compare and hash by value") {
    ContextKey a{"t", "m", "", 16, ""};
    ContextKey b = a;
    CHECK(a == b);
    CHECK(ContextKeyHash{}(a) == ContextKeyHash{}(b));
    b.salt = "s";
    CHECK_FALSE(a == b);
    CHECK(HolderKey{"i", 1}.ToString() == "i|1");
    CHECK(a.ToString() == "t/m//16/");
  }
}

}  // namespace
}  // namespace kvatlas
