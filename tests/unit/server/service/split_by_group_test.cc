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

  TEST_CASE("SplitByGroup: a holder-wide removal has one id in every group's part") {
    const Services services = ThreeGroups();
    CommandBatch batch;
    batch.commands.emplace_back(ClearCommand{HolderKey{"e1", 0}, std::nullopt, std::nullopt});
    batch.commands.emplace_back(UnregisterCommand{"e2", "default", 0});
    const ContextKey context{"default", "m", "", 16, ""};
    batch.commands.emplace_back(ClearCommand{HolderKey{"e1", 0}, context, std::nullopt});
    const auto parts = SplitByGroup(services, std::move(batch));
    REQUIRE(parts.size() == kGroups);
    const auto& first = parts[0].second.commands;
    const uint64_t clear_id = std::get<ClearCommand>(first[0]).fanout;
    const uint64_t unregister_id = std::get<UnregisterCommand>(first[1]).fanout;
    CHECK(clear_id != 0);
    CHECK(unregister_id != 0);
    CHECK(clear_id != unregister_id);
    for (const auto& [group, part] : parts) {
      CHECK(std::get<ClearCommand>(part.commands[0]).fanout == clear_id);
      CHECK(std::get<UnregisterCommand>(part.commands[1]).fanout == unregister_id);
      // A clear in one context goes to its group only, with no id.
      if (part.commands.size() == 3) CHECK(std::get<ClearCommand>(part.commands[2]).fanout == 0);
    }
    // A part a group refused, routed again, keeps its ids.
    const Services* refused_by = parts[1].first;
    CommandBatch again = parts[1].second;
    const auto rerouted = SplitByGroup(services, std::move(again), refused_by);
    for (const auto& [group, part] : rerouted) {
      if (part.commands.empty()) continue;
      if (const auto* clear = std::get_if<ClearCommand>(&part.commands[0]);
          clear && !clear->context) {
        CHECK(clear->fanout == clear_id);
      }
    }
    // A batch of another write gets other ids.
    CommandBatch next;
    next.commands.emplace_back(ClearCommand{HolderKey{"e1", 0}, std::nullopt, std::nullopt});
    CHECK(std::get<ClearCommand>(SplitByGroup(services, std::move(next))[0].second.commands[0])
              .fanout != clear_id);
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
