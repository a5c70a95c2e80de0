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
  // With `with_feed`, the state machine publishes to a change feed that `services` exposes.
  explicit InMemoryServices(server::ChangeFeedOptions feed_options = {}, bool with_feed = false)
      : feed(feed_options), machine(server::StateMachineOptions{}, nullptr), applier(&machine) {
    if (with_feed) {
      machine.SetApplyObserver(&feed);
      services.feed = &feed;
    }
    REQUIRE(machine.Recover().ok());
    services.machine = &machine;
    services.applier = &applier;
    services.metrics = &metrics;
  }

  server::ChangeFeed feed;
  server::StateMachine machine;
  server::Applier applier;
  server::Metrics metrics;
  server::Services services;
};

}  // namespace kvatlas::testing
