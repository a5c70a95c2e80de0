// How a write batch is split over the groups of a server hosting several (SplitByGroup).
#include <doctest/doctest.h>

#include <memory>
#include <variant>
#include <vector>

#include "server/service/ingest_service.h"

namespace kvatlas::server {
namespace {

constexpr size_t kGroups = 3;

// Services with kGroups group copies and group 1's state (an empty placement directory);
// SplitByGroup reads nothing else.
Services ThreeGroups() {
  static StateMachine cluster(StateMachineOptions{}, nullptr);
  auto groups = std::make_shared<std::vector<Services>>(kGroups);
  Services services;
  services.machine = &cluster;
  services.groups = groups;
  return services;
}

size_t GroupIndex(const Services& services, const Services* part) {
  return static_cast<size_t>(part - services.groups->data());
}

}  // namespace

TEST_SUITE("split_by_group") {
  TEST_CASE("SplitByGroup: stores go to their home group, a registration to every group") {
    const Services services = ThreeGroups();
    Registration registration;
    registration.instance_id = "e1";
    registration.model = "m";
    CommandBatch batch;
    const ContextKey context{"default", "m", "", 16, ""};
    StoreCommand store;
    store.context = context;
    store.holder = HolderKey{"e1", 0};
    store.hashes = {1, 2};
    batch.commands.emplace_back(std::move(store));
    batch.commands.emplace_back(RegisterCommand{registration});
    batch.commands.emplace_back(UnregisterCommand{"e2", "default", 0});
    batch.position = StreamPosition{"e1|default|0", 7, false};

    const auto parts = SplitByGroup(services, std::move(batch));
    REQUIRE(parts.size() == kGroups);
    const size_t home = HomeGroup(context, kGroups) - 1;
    for (const auto& [group, part] : parts) {
      const size_t index = GroupIndex(services, group);
      // Every group registers and unregisters, so each applies the stream's batches only
      // while it is registered there; only the home group stores.
      CHECK(part.commands.size() == (index == home ? 3u : 2u));
      size_t registrations = 0, unregistrations = 0, stores = 0;
      for (const Command& command : part.commands) {
        registrations += std::holds_alternative<RegisterCommand>(command);
        unregistrations += std::holds_alternative<UnregisterCommand>(command);
        stores += std::holds_alternative<StoreCommand>(command);
      }
      CHECK(registrations == 1);
      CHECK(unregistrations == 1);
      CHECK(stores == (index == home ? 1u : 0u));
      REQUIRE(part.position.has_value());
      CHECK(part.position->sequence == 7);
    }
  }

  TEST_CASE("SplitByGroup: one group keeps the batch whole") {
    Services services;
    CommandBatch batch;
    batch.commands.emplace_back(RegisterCommand{Registration{}});
    const auto parts = SplitByGroup(services, std::move(batch));
    REQUIRE(parts.size() == 1);
    CHECK(parts[0].first == &services);
    CHECK(parts[0].second.commands.size() == 1);
  }
}

}  // namespace kvatlas::server
