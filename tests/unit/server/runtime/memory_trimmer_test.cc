// MemoryTrimmer: requests are served on its thread, and requests close together merge.
#include "server/runtime/memory_trimmer.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

namespace kvatlas::server {
namespace {

// Waits (bounded) until `trimmer` has trimmed `n` times; false if it never does.
bool WaitForTrims(const MemoryTrimmer& trimmer, uint64_t n) {
  for (int i = 0; i < 1000 && trimmer.trims() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return trimmer.trims() >= n;
}

TEST_CASE("MemoryTrimmer: a request is served, and requests within the interval merge") {
  MemoryTrimmer trimmer(std::chrono::milliseconds(300));
  CHECK(trimmer.trims() == 0);
  trimmer.Request();
  REQUIRE(WaitForTrims(trimmer, 1));
  // Within 300 ms of that trim: these three wait for the interval and make one trim.
  trimmer.Request();
  trimmer.Request();
  trimmer.Request();
  REQUIRE(WaitForTrims(trimmer, 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  CHECK(trimmer.trims() == 2);
}

TEST_CASE("MemoryTrimmer: no request, no trim; destruction with one pending returns") {
  {
    MemoryTrimmer trimmer(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(trimmer.trims() == 0);
  }
  MemoryTrimmer trimmer(std::chrono::hours(1));
  trimmer.Request();
  REQUIRE(WaitForTrims(trimmer, 1));
  trimmer.Request();  // waits an hour for its turn: the destructor must not
}

}  // namespace
}  // namespace kvatlas::server
