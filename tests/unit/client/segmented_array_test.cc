// SegmentedArray: indexes across segment boundaries, growth prepared ahead, stale segments.
#include "client/src/segmented_array.h"

#include <doctest/doctest.h>

#include <cstdint>

namespace kvatlas::client_internal {
namespace {

struct Record {
  uint64_t value;
  uint32_t check;
};

TEST_CASE("SegmentedArray: every index keeps its own record while segments are added") {
  SegmentedArray<Record> array;
  CHECK(array.size() == 0);
  CHECK(array.capacity() == 0);
  constexpr uint32_t kCount = 300'000;  // segments 0..9
  for (uint32_t i = 0; i < kCount; ++i) {
    REQUIRE(array.Append() == i);
    array[i] = Record{uint64_t{i} * 3 + 1, ~i};
  }
  CHECK(array.size() == kCount);
  CHECK(array.capacity() == 1u << 19);
  for (uint32_t i = 0; i < kCount; ++i) {
    if (array[i].value != uint64_t{i} * 3 + 1 || array[i].check != ~i) {
      FAIL("record " << i << " was overwritten");
    }
  }
  // Segment boundaries are contiguous within a segment and distinct across them.
  for (uint32_t boundary : {1u << 10, 1u << 11, 1u << 12, 1u << 18}) {
    CHECK(&array[boundary - 2] + 1 == &array[boundary - 1]);
    CHECK(&array[boundary - 1] != &array[boundary]);
  }
}

TEST_CASE("SegmentedArray: capacity prepared ahead is installed once; a stale segment is dropped") {
  SegmentedArray<Record> array;
  auto segments = array.PrepareCapacity(5'000);  // 1,024 + 1,024 + 2,048 + 4,096
  CHECK(segments.size() == 4);
  CHECK(array.capacity() == 0);  // not installed yet
  auto again = array.PrepareCapacity(1);
  for (auto& s : segments) array.Install(std::move(s));
  CHECK(array.capacity() == 8'192);
  const uint64_t memory = array.memory_bytes();
  for (auto& s : again) array.Install(std::move(s));  // segment 0 is there already
  CHECK(array.capacity() == 8'192);
  CHECK(array.memory_bytes() == memory);
  for (uint32_t i = 0; i < 8'192; ++i) REQUIRE(array.Append() == i);
  CHECK(array.memory_bytes() == memory);  // no allocation while within the capacity
  CHECK(array.PrepareCapacity(8'192).empty());
}

}  // namespace
}  // namespace kvatlas::client_internal
