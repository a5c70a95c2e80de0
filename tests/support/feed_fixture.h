// FeedFixture: a ChangeFeed observing a recovered in-memory StateMachine, for the feed tests.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "server/feed/change_feed.h"
#include "server/state/state_machine.h"

namespace kvatlas::testing {

struct FeedFixture {
  explicit FeedFixture(server::ChangeFeedOptions options = {})
      : feed(options), machine({}, nullptr) {
    machine.SetApplyObserver(&feed);
    REQUIRE(machine.Recover().ok());
  }
  server::ChangeFeed feed;
  server::StateMachine machine;
};

// Everything the watcher has now (waits a little for the first records); stops early at
// an error, which the next Next() reports again.
inline std::vector<FeedRecord> DrainRecords(server::Watcher& w) {
  using namespace std::chrono_literals;
  std::vector<FeedRecord> out;
  while (true) {
    Result<std::vector<FeedRecord>> next = w.Next(out.empty() ? 200ms : 1ms);
    if (!next.has_value() || next->empty()) return out;
    out.insert(out.end(), next->begin(), next->end());
  }
}

}  // namespace kvatlas::testing
