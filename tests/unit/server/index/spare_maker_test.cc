// SpareMaker: spares are made on its thread, once per need, and handed over by TakeReady.
#include "server/index/spare_maker.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace kvatlas::server {
namespace {

// What TakeReady hands over within `wait`, polled.
std::vector<IndexSpare> TakeWithin(SpareMaker& maker, std::chrono::milliseconds wait) {
  std::vector<IndexSpare> taken;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (taken.empty() && std::chrono::steady_clock::now() < deadline) {
    taken = maker.TakeReady();
    if (taken.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return taken;
}

TEST_CASE("SpareMaker makes one spare per need, however often it is asked") {
  SpareMaker maker;
  const SpareNeed need{IndexPart::kForward, 1 << 16};
  for (int i = 0; i < 5; ++i) maker.Request(need);
  std::vector<IndexSpare> taken = TakeWithin(maker, std::chrono::seconds(10));
  CHECK(taken.size() == 1);
  // Nothing else follows.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(maker.TakeReady().empty());
  // Once taken, the same need may be asked again (the table may have dropped the spare).
  maker.Request(need);
  CHECK(TakeWithin(maker, std::chrono::seconds(10)).size() == 1);
}

TEST_CASE("SpareMaker makes a spare for each table") {
  SpareMaker maker;
  maker.Request(SpareNeed{IndexPart::kForward, 1 << 10});
  maker.Request(SpareNeed{IndexPart::kAliases, 1 << 10});
  maker.Request(SpareNeed{IndexPart::kHot, 1 << 10});
  std::vector<IndexSpare> taken;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (taken.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    for (IndexSpare& spare : maker.TakeReady()) taken.push_back(std::move(spare));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(taken.size() == 3);
}

TEST_CASE("SpareMaker stops with requests pending") {
  SpareMaker maker;
  for (int i = 10; i < 20; ++i) maker.Request(SpareNeed{IndexPart::kForward, size_t{1} << i});
  // The destructor waits for the spare being made and drops the rest.
}

}  // namespace
}  // namespace kvatlas::server
