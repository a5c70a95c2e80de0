// An in-memory server's service layer (no storage, no replication, no ZMQ), as the REST and
// binary-protocol adapters see it: for the unit tests of server/service/ and server/rpc/.
#pragma once

#include <doctest/doctest.h>

#include "server/feed/change_feed.h"
#include "server/service/metrics.h"
#include "server/service/services.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"

namespace kvatlas::testing {

struct InMemoryServices {
  // With `with_feed`, the state machine publishes to a change feed that `api` exposes.
  explicit InMemoryServices(server::ChangeFeedOptions feed_options = {}, bool with_feed = false)
      : feed(feed_options), machine(server::StateMachineOptions{}, nullptr), applier(&machine) {
    if (with_feed) {
      machine.SetApplyObserver(&feed);
      api.feed = &feed;
    }
    REQUIRE(machine.Recover().ok());
    api.machine = &machine;
    api.applier = &applier;
    api.metrics = &metrics;
  }

  server::ChangeFeed feed;
  server::StateMachine machine;
  server::Applier applier;
  server::Metrics metrics;
  server::Services api;
};

}  // namespace kvatlas::testing
