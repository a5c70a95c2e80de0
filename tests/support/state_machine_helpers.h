// Shared by the unit tests that drive a real (in-memory) StateMachine: a batch of one store,
// a publisher's registration, and applying one batch at the next revision.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "server/state/state_machine.h"

namespace kvatlas::testing {

// One StoreCommand of `keys` (block keys, KeyMode::kSequence from the root).
inline server::CommandBatch StoreBatch(const ContextKey& context, const HolderKey& holder,
                                       std::vector<uint64_t> keys, Tier tier = Tier::kGpu,
                                       std::vector<std::string> locations = {}) {
  server::StoreCommand store;
  store.context = context;
  store.holder = holder;
  store.tier = tier;
  store.hashes = std::move(keys);
  store.locations = std::move(locations);
  server::CommandBatch batch;
  batch.commands.emplace_back(std::move(store));
  return batch;
}

// A followed publisher's registration for `instance` (model "m", block size 2, a fixed
// endpoint): what the registry and lease tests register.
inline server::Registration PublisherRegistration(const std::string& instance) {
  server::Registration r;
  r.endpoint = "tcp://127.0.0.1:5557";
  r.model = "m";
  r.instance_id = instance;
  r.block_size = 2;
  return r;
}

// Applies `batch` alone; the test fails unless it applies. Returns its revision.
inline Revision ApplyOne(server::StateMachine& machine, const server::CommandBatch& batch) {
  const server::CommandBatch* one[] = {&batch};
  Result<Revision> revision = machine.Apply(one);
  REQUIRE(revision.has_value());
  return *revision;
}

}  // namespace kvatlas::testing
