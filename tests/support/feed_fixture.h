// FeedFixture: a ChangeFeed observing a recovered in-memory StateMachine, for the feed tests.
#pragma once

#include <doctest/doctest.h>

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

}  // namespace kvatlas::testing
