// SettleHolderWide: which of a holder's holder-wide commands a move's destination applies to
// the moved copies, and which it skips for them, from the two groups' records of ids.
#include "server/model/holder_wide.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "server/model/registration.h"

namespace kvatlas::server {
namespace {

using Ids = std::vector<uint64_t>;

// first, first + 1, …, last.
Ids Range(uint64_t first, uint64_t last) {
  Ids ids;
  for (uint64_t id = first; id <= last; ++id) ids.push_back(id);
  return ids;
}

HolderWideSettlement Settle(const Ids& source, const Ids& destination) {
  Result<HolderWideSettlement> settled = SettleHolderWide(source, destination);
  REQUIRE(settled.has_value());
  return *settled;
}

TEST_CASE("records short of the bound are whole histories: every difference counts") {
  CHECK(Settle({}, {}) == HolderWideSettlement{});
  CHECK(Settle({1, 2, 3}, {1, 2, 3}) == HolderWideSettlement{});
  // The destination applied one the source had not by the fence: it clears the copies.
  CHECK(Settle({1, 2}, {1, 2, 9}) == HolderWideSettlement{true, {}});
  CHECK(Settle({}, {7}) == HolderWideSettlement{true, {}});
  // The source applied ones the destination has not yet: skipped when they come.
  CHECK(Settle({1, 2, 9}, {1, 2}) == HolderWideSettlement{false, {9}});
  CHECK(Settle({7}, {}) == HolderWideSettlement{false, {7}});
  // Both, in any order.
  CHECK(Settle({1, 2, 3, 5}, {1, 2, 4}) == HolderWideSettlement{true, {3, 5}});
  CHECK(Settle({5, 1}, {1, 5}) == HolderWideSettlement{});
}

TEST_CASE("a full record forgot old ids: only those after the newest shared one count") {
  REQUIRE(kHolderWideKept == 64);
  const Ids source = Range(1, 64);  // full
  // The destination is two ahead: 1 and 2 are old (it forgot them), 65 and 66 new.
  CHECK(Settle(source, Range(3, 66)) == HolderWideSettlement{true, {}});
  // Two behind: 63 and 64 are the source's, not yet the destination's.
  CHECK(Settle(Range(3, 66), source) == HolderWideSettlement{false, {65, 66}});
  // A destination whose record is short (all it ever applied) beside a full source: what
  // it has after their newest shared id is new; the source's others it never applied.
  const HolderWideSettlement settled = Settle(source, {63, 64, 70});
  CHECK(settled.clear);
  CHECK(settled.skip == Range(1, 62));
  // An id of the short record older than the full one's window was forgotten there.
  CHECK(Settle(Range(2, 65), {1, 65}) == HolderWideSettlement{false, Range(2, 64)});
}

TEST_CASE("a full record sharing nothing with the other cannot be aligned") {
  const Ids full = Range(1, 64);
  for (const Ids& other : {Range(100, 163), Ids{200}}) {
    CHECK(SettleHolderWide(full, other).error().code() == StatusCode::kFailedPrecondition);
    CHECK(SettleHolderWide(other, full).error().code() == StatusCode::kFailedPrecondition);
  }
  // An empty record beside a full one is no conflict: the empty group applied none.
  CHECK(Settle(full, {}) == HolderWideSettlement{false, full});
  CHECK(Settle({}, full) == HolderWideSettlement{true, {}});
}

}  // namespace
}  // namespace kvatlas::server
