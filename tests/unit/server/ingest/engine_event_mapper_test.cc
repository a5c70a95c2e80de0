#include "server/ingest/engine_event_mapper.h"

#include <doctest/doctest.h>

#include <string>
#include <variant>
#include <vector>

#include "server/ingest/engine_event_decoder.h"
#include "tests/unit/server/ingest/engine_batch_builder.h"

namespace kvatlas::server {
namespace {

const BlockHasher kHasher(1337);
const StreamIdentity kIdentity{ContextKey{"default", "m", "", 2, ""}, HolderKey{"e1", 1}};

EngineEvent Stored(std::vector<uint64_t> hashes, std::vector<uint32_t> tokens) {
  EngineEvent e;
  e.kind = EngineEventKind::kStored;
  e.block_hashes = std::move(hashes);
  e.token_ids = std::move(tokens);
  e.block_size = 2;
  return e;
}

EngineEvent Removed(std::vector<uint64_t> hashes, std::optional<std::string> medium) {
  EngineEvent e;
  e.kind = EngineEventKind::kRemoved;
  e.block_hashes = std::move(hashes);
  e.medium = std::move(medium);
  return e;
}

MappedBatch Map(std::vector<EngineEvent> events, StreamMapState* state) {
  EngineBatch batch;
  batch.events = std::move(events);
  return EngineEventMapper(&kHasher).Map(batch, kIdentity, state);
}

template <typename T>
const T& At(const MappedBatch& m, size_t i) {
  REQUIRE(i < m.batch.commands.size());
  REQUIRE(std::holds_alternative<T>(m.batch.commands[i]));
  return std::get<T>(m.batch.commands[i]);
}

TEST_SUITE("EngineEventMapper") {
  TEST_CASE("EngineEventMapper: stores index the tokens' standard hashes, engine hashes alias") {
    StreamMapState state;
    EngineEvent e = Stored({900, 901}, {1, 2, 3, 4});
    e.parent_hash = 77;
    e.medium = "GPU";
    const MappedBatch m = Map({e}, &state);
    const auto& store = At<StoreCommand>(m, 0);
    CHECK(store.mode == KeyMode::kLocal);
    CHECK(store.hashes == kHasher.LocalHashes(std::vector<uint32_t>{1, 2, 3, 4}, 2));
    CHECK(store.engine_hashes == std::vector<uint64_t>{900, 901});
    CHECK(store.parent == 77u);
    CHECK(store.context == kIdentity.context);
    CHECK(store.holder == kIdentity.holder);
    CHECK(store.tier == Tier::kGpu);
    CHECK(m.stored == 1);
    CHECK(m.blocks == 2);
    CHECK(state.contexts == std::vector<ContextKey>{kIdentity.context});
  }

  TEST_CASE("EngineEventMapper: LoRA and salt pick the context; a continuation keeps the salt") {
    StreamMapState state;
    EngineEvent first = Stored({10}, {1, 2});
    first.lora_name = "adapter";
    first.cache_salt = "s";
    EngineEvent next = Stored({11}, {3, 4});
    next.lora_name = "adapter";
    next.parent_hash = 10;  // no salt on this event: vLLM names it on block 0 only
    const MappedBatch m = Map({first, next}, &state);
    const ContextKey salted{"default", "m", "adapter", 2, "s"};
    CHECK(At<StoreCommand>(m, 0).context == salted);
    CHECK(At<StoreCommand>(m, 1).context == salted);
    // A removal of the salted block goes to its context only; others to unsalted ones.
    EngineEvent plain = Stored({20}, {5, 6});
    const MappedBatch m2 = Map({plain, Removed({11, 20}, "GPU")}, &state);
    REQUIRE(m2.batch.commands.size() == 3);
    const auto& unsalted_remove = At<RemoveCommand>(m2, 1);
    CHECK(unsalted_remove.context == kIdentity.context);
    CHECK(unsalted_remove.hashes == std::vector<uint64_t>{20});
    CHECK(unsalted_remove.tier == Tier::kGpu);
    const auto& salted_remove = At<RemoveCommand>(m2, 2);
    CHECK(salted_remove.context == salted);
    CHECK(salted_remove.hashes == std::vector<uint64_t>{11});
  }

  TEST_CASE("EngineEventMapper: offloads without tokens resolve through aliases in the tier") {
    StreamMapState state;
    Map({Stored({10, 11}, {1, 2, 3, 4})}, &state);
    EngineEvent offload = Stored({10, 11}, {});
    offload.block_size = 0;
    offload.medium = "CPU_PINNED";
    const MappedBatch m = Map({offload}, &state);
    const auto& copy = At<StoreCommand>(m, 0);
    CHECK(copy.mode == KeyMode::kAlias);
    CHECK(copy.hashes == std::vector<uint64_t>{10, 11});
    CHECK(copy.tier == Tier::kCpu);
    CHECK(copy.context == kIdentity.context);
  }

  TEST_CASE("EngineEventMapper: clears are holder-wide; removals default to the GPU tier") {
    StreamMapState state;
    EngineEvent clear;
    clear.kind = EngineEventKind::kCleared;
    const MappedBatch m = Map({Removed({5}, std::nullopt), clear}, &state);
    CHECK(At<RemoveCommand>(m, 0).tier == Tier::kGpu);
    const auto& c = At<ClearCommand>(m, 1);
    CHECK(c.holder == kIdentity.holder);
    CHECK(!c.context.has_value());
    CHECK(!c.tier.has_value());
    CHECK(m.removed == 1);
    CHECK(m.cleared == 1);
  }

  TEST_CASE("EngineEventMapper: unmappable events are counted and left out") {
    StreamMapState state;
    EngineEvent ragged = Stored({1, 2}, {1, 2, 3});  // 3 tokens for 2 blocks of 2
    EngineEvent window = Stored({3}, {1, 2});
    window.kv_cache_spec_kind = "sliding_window";
    EngineEvent mla = Stored({4}, {1, 2});
    mla.kv_cache_spec_kind = "mla_attention";
    EngineEvent empty = Stored({}, {});
    const MappedBatch m = Map({ragged, window, mla, empty}, &state);
    CHECK(m.batch.commands.size() == 1);  // only the MLA store
    CHECK(m.skipped_not_whole_blocks == 1);
    CHECK(m.skipped_sliding_or_mamba == 1);
    CHECK(m.skipped_empty == 1);
  }

  TEST_CASE("EngineEventMapper: a block size the engine reports is believed for its tokens") {
    StreamMapState state;
    EngineEvent e = Stored({1}, {1, 2, 3, 4});
    e.block_size = 4;
    const MappedBatch m = Map({e}, &state);
    CHECK(At<StoreCommand>(m, 0).context.block_size == 4);
  }

  TEST_CASE("EngineEventMapper: Mooncake RFC events keep their standard keys and envelope") {
    StreamMapState state;
    EngineEvent e = Stored({100, 101}, {});
    e.standard_hashes = true;
    e.base_block_idx = 4;
    e.parent_hash = 99;
    e.medium = "disk";
    e.locations = {"obj/1", "obj/2"};
    e.model_name = "other";
    e.tenant_id = "t";
    const MappedBatch m = Map({e}, &state);
    const auto& store = At<StoreCommand>(m, 0);
    CHECK(store.mode == KeyMode::kSequence);
    CHECK(store.hashes == std::vector<uint64_t>{100, 101});
    CHECK(store.base_depth == 4u);
    CHECK(store.tier == Tier::kDisk);
    CHECK(store.locations == std::vector<std::string>{"obj/1", "obj/2"});
    CHECK(store.context.model == "other");
    CHECK(store.context.tenant == "t");
  }
  TEST_CASE("EngineEventMapper: a salt the engine names in any form picks the context") {
    using namespace test;  // NOLINT(build/namespaces): the payload builders
    // The registration's additional_salt applies when the event names none; an event's own
    // salt replaces it (docs/engine-events.md §Keys).
    const StreamIdentity identity{ContextKey{"default", "m", "", 2, "reg"}, HolderKey{"e1", 0}};
    const std::vector<uint8_t> payload = PackBatch({
        StoredMap(1, 2,
                  [](Packer& pk) {
                    Pair(pk, "cache_salt", std::string("tenant-a"));
                    Pair(pk, "session_id", std::string("sess-1"));
                  }),
        StoredMap(2, 1,
                  [](Packer& pk) {
                    pk.pack(std::string("metadata"));
                    SaltMetadata(pk, "tenant-b");
                  }),
        StoredArray(3, 1, [](Packer& pk) { SaltMetadata(pk, "tenant-c"); }),
        StoredMap(4, 0, nullptr),
        StoredMap(5, 1, [](Packer& pk) { Pair(pk, "cache_salt", 42); }),  // unreadable
        MooncakeStored(6, 1, [](Packer& pk) { Pair(pk, "additional_salt", std::string("t1")); }),
    });
    Result<EngineBatch> batch = DecodeEngineBatch(payload);
    REQUIRE(batch.has_value());
    CHECK(batch->skipped_namespace_events == 1);
    StreamMapState state;
    const MappedBatch m = EngineEventMapper(&kHasher).Map(*batch, identity, &state);
    REQUIRE(m.batch.commands.size() == 5);
    const auto salt_of = [&](size_t i) { return At<StoreCommand>(m, i).context.salt; };
    CHECK(salt_of(0) == "tenant-a");
    CHECK(salt_of(1) == "tenant-b");
    CHECK(salt_of(2) == "tenant-c");
    CHECK(salt_of(3) == "reg");  // no salt field: the registration's, as before
    CHECK(salt_of(4) == "t1");
    for (size_t i = 0; i < 4; ++i) {
      CHECK(At<StoreCommand>(m, i).hashes == kHasher.LocalHashes(std::vector<uint32_t>{1, 2}, 2));
    }
    // A removal of a salted block goes to the context it was stored in.
    EngineEvent remove = Removed({static_cast<uint64_t>(1)}, "GPU");
    EngineBatch removal;
    removal.events = {remove};
    const MappedBatch r = EngineEventMapper(&kHasher).Map(removal, identity, &state);
    REQUIRE(r.batch.commands.size() == 1);
    CHECK(At<RemoveCommand>(r, 0).context.salt == "tenant-a");
  }
}

}  // namespace
}  // namespace kvatlas::server
