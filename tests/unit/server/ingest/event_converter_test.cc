#include "server/ingest/event_converter.h"

#include <doctest/doctest.h>

#include <variant>

namespace kvatlas::server {
namespace {

const ContextKey kContext{"default", "m", "", 2, ""};
const HolderKey kHolder{"engine-a", 1};

BlockEvent Event(EventType type) {
  BlockEvent event;
  event.type = type;
  event.context = kContext;
  event.holder = kHolder;
  return event;
}

TEST_SUITE("EventConverter") {
  TEST_CASE("EventConverter: stored with token_ids becomes local hashes with engine aliases") {
    const BlockHasher hasher(7);
    const EventConverter converter(&hasher);
    BlockEvent event = Event(EventType::kStored);
    event.medium = "cpu";
    event.tier = Tier::kCpu;
    event.token_ids = std::vector<uint32_t>{1, 2, 3, 4};
    event.seq_hashes = {900, 901};
    event.parent_hash = 55;
    event.base_block_idx = 3;
    event.locations = {"l0", "l1"};
    const auto converted = converter.Convert(std::vector<BlockEvent>{event});
    REQUIRE(converted.has_value());
    CHECK(converted->events == 1);
    CHECK(converted->blocks == 2);
    REQUIRE(converted->batch.commands.size() == 1);
    const auto& store = std::get<StoreCommand>(converted->batch.commands[0]);
    CHECK(store.mode == KeyMode::kLocal);
    const std::vector<uint32_t> block0{1, 2}, block1{3, 4};
    CHECK(store.hashes ==
          std::vector<uint64_t>{hasher.LocalHash(block0), hasher.LocalHash(block1)});
    CHECK(store.engine_hashes == std::vector<uint64_t>{900, 901});
    CHECK(store.parent == 55u);
    CHECK(store.base_depth == 3u);
    CHECK(store.tier == Tier::kCpu);
    CHECK(store.context == kContext);
    CHECK(store.holder == kHolder);
    CHECK(store.locations == std::vector<std::string>{"l0", "l1"});
  }

  TEST_CASE("EventConverter: stored with only seq_hashes uses them as block keys") {
    const BlockHasher hasher;
    BlockEvent event = Event(EventType::kStored);
    event.seq_hashes = {10, 11, 12};
    const auto converted = EventConverter(&hasher).Convert(std::vector<BlockEvent>{event});
    REQUIRE(converted.has_value());
    const auto& store = std::get<StoreCommand>(converted->batch.commands[0]);
    CHECK(store.mode == KeyMode::kSequence);
    CHECK(store.hashes == std::vector<uint64_t>{10, 11, 12});
    CHECK(store.engine_hashes.empty());
    CHECK_FALSE(store.parent.has_value());
    CHECK(store.tier == Tier::kGpu);
  }

  TEST_CASE("EventConverter: removed keeps its tier, cleared clears one stream or all tiers") {
    const BlockHasher hasher;
    BlockEvent removed = Event(EventType::kRemoved);
    removed.seq_hashes = {5};
    removed.medium = "disk";
    removed.tier = Tier::kDisk;
    BlockEvent cleared_one = Event(EventType::kCleared);
    cleared_one.medium = "cpu";
    cleared_one.tier = Tier::kCpu;
    const BlockEvent cleared_all = Event(EventType::kCleared);
    const auto converted =
        EventConverter(&hasher).Convert(std::vector<BlockEvent>{removed, cleared_one, cleared_all});
    REQUIRE(converted.has_value());
    CHECK(converted->blocks == 1);
    REQUIRE(converted->batch.commands.size() == 3);
    CHECK(std::get<RemoveCommand>(converted->batch.commands[0]) ==
          RemoveCommand{kContext, kHolder, Tier::kDisk, {5}});
    CHECK(std::get<ClearCommand>(converted->batch.commands[1]) ==
          ClearCommand{kHolder, kContext, Tier::kCpu});
    CHECK(std::get<ClearCommand>(converted->batch.commands[2]) ==
          ClearCommand{kHolder, kContext, std::nullopt});
  }

  TEST_CASE("EventConverter: limits reject the whole batch with payload_too_large") {
    const BlockHasher hasher;
    const EventConverter converter(&hasher, ConverterOptions{2, 3});
    BlockEvent event = Event(EventType::kStored);
    event.seq_hashes = {1, 2, 3};

    SUBCASE("too many events") {
      const auto r = converter.Convert(std::vector<BlockEvent>(3, event));
      CHECK(r.status().code() == StatusCode::kPayloadTooLarge);
      CHECK(r.status().message() ==
            "events: the batch has 3 events; the limit is 2 (max_events_per_batch): split the "
            "batch");
    }
    SUBCASE("too many blocks in one event, counted from token_ids too") {
      BlockEvent big = Event(EventType::kStored);
      big.token_ids = std::vector<uint32_t>(8, 1);  // 4 blocks of 2
      const auto r = converter.Convert(std::vector<BlockEvent>{event, big});
      CHECK(r.status().code() == StatusCode::kPayloadTooLarge);
      CHECK(r.status().message() ==
            "events[1]: the event names 4 blocks; the limit is 3 (max_blocks_per_event)");
    }
  }

  TEST_CASE("EventConverter: events that break the BlockEvent contract are invalid") {
    const BlockHasher hasher;
    BlockEvent event = Event(EventType::kStored);
    event.token_ids = std::vector<uint32_t>{1, 2, 3};  // not whole blocks of 2
    const auto r =
        EventConverter(&hasher).Convert(std::vector<BlockEvent>{Event(EventType::kCleared), event});
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().starts_with("events[1].token_ids:"));
  }
}

}  // namespace
}  // namespace kvatlas::server
