#include "server/state/state_machine.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::OpenStorage;
using testing::SnapshotBytes;

const ContextKey kContext{"default", "m", "", 2, ""};

CommandBatch Register(const Registration& r) {
  CommandBatch batch;
  batch.commands.emplace_back(RegisterCommand{r});
  return batch;
}

// One stored block with key `key` for `instance`, at `sequence` of the instance's stream.
CommandBatch StreamStore(const std::string& instance, uint64_t key,
                         std::optional<uint64_t> sequence, bool restart = false) {
  StoreCommand store;
  store.context = kContext;
  store.holder = HolderKey{instance, 0};
  store.hashes = {key};
  CommandBatch batch;
  batch.commands.emplace_back(std::move(store));
  if (sequence || restart) {
    batch.position = StreamPosition{testing::PublisherRegistration(instance).Key(),
                                    sequence.value_or(0), restart};
  }
  return batch;
}

Result<Revision> ApplyOne(StateMachine& machine, const CommandBatch& batch) {
  const CommandBatch* one[] = {&batch};
  return machine.Apply(one);
}

uint64_t Entries(const StateMachine& machine) {
  return machine.Read([](const Index& index, Revision) { return index.Stats().entries; });
}

TEST_SUITE("StateMachine") {
  TEST_CASE("StateMachine: a stream batch applies once per sequence and restarts reset it") {
    StateMachine machine({}, nullptr);
    REQUIRE(ApplyOne(machine, Register(testing::PublisherRegistration("a"))).has_value());
    REQUIRE(ApplyOne(machine, StreamStore("a", 100, 0)).has_value());
    REQUIRE(ApplyOne(machine, StreamStore("a", 101, 1)).has_value());
    // Delivered again (a replay overlapping live traffic): nothing changes.
    REQUIRE(ApplyOne(machine, StreamStore("a", 100, 0)).has_value());
    REQUIRE(ApplyOne(machine, StreamStore("a", 101, 1)).has_value());
    CHECK(machine.counters().duplicate_batches == 2);
    CHECK(machine.Read([](const Index& index, Revision) {
      return index.Locate(101, &kContext).at(0).refcount;
    }) == 1);
    CHECK(machine.ReadRegistry(
              [](const Registry& r, Revision) { return r.positions.at("a|default|0"); }) == 1);
    // The engine restarted: a restart batch clears and forgets the position; 0 is new again.
    CommandBatch restart;
    restart.commands.emplace_back(ClearCommand{HolderKey{"a", 0}, std::nullopt, std::nullopt});
    restart.position = StreamPosition{"a|default|0", 0, true};
    REQUIRE(ApplyOne(machine, restart).has_value());
    CHECK(Entries(machine) == 0);
    CHECK(machine.ReadRegistry([](const Registry& r, Revision) { return r.positions.size(); }) ==
          0);
    REQUIRE(ApplyOne(machine, StreamStore("a", 200, 0)).has_value());
    CHECK(Entries(machine) == 1);
    CHECK(machine.applied_revision() == 7);  // skipped batches still take their revision
  }

  TEST_CASE("StateMachine: unregister drops the registration, its position and its entries") {
    StateMachine machine({}, nullptr);
    int notified = 0;
    machine.SetRegistryListener([&] { ++notified; });
    REQUIRE(ApplyOne(machine, Register(testing::PublisherRegistration("a"))).has_value());
    REQUIRE(ApplyOne(machine, Register(testing::PublisherRegistration("b"))).has_value());
    CHECK(notified == 2);
    REQUIRE(ApplyOne(machine, StreamStore("a", 1, 0)).has_value());
    REQUIRE(ApplyOne(machine, StreamStore("b", 1, 0)).has_value());
    CHECK(notified == 2);  // data batches do not wake the listener
    CommandBatch unregister;
    unregister.commands.emplace_back(UnregisterCommand{"a", "default", 0});
    REQUIRE(ApplyOne(machine, unregister).has_value());
    CHECK(notified == 3);
    CHECK(Entries(machine) == 1);
    CHECK(machine.ReadRegistry([](const Registry& r, Revision) {
      return r.registrations.size() == 1 && r.positions.size() == 1 &&
             r.registrations.contains("b|default|0");
    }));
    // A batch still in flight from the unregistered stream does not bring it back.
    REQUIRE(ApplyOne(machine, StreamStore("a", 2, 1)).has_value());
    CHECK(machine.counters().orphan_batches == 1);
    CHECK(Entries(machine) == 1);
  }

  TEST_CASE("StateMachine: a writer's batches need no registration and apply once") {
    StateMachine machine({}, nullptr);
    CommandBatch batch = StreamStore("w", 7, std::nullopt);
    batch.position = WriterStreamPosition(WriterPosition{"sched-1", 1});
    CHECK(batch.position->stream == "writer:sched-1");
    REQUIRE(ApplyOne(machine, batch).has_value());
    REQUIRE(ApplyOne(machine, batch).has_value());  // a resend after a lost answer
    CHECK(machine.counters().duplicate_batches == 1);
    CHECK(machine.counters().orphan_batches == 0);
    CHECK(machine.Read([](const Index& index, Revision) {
      return index.Locate(7, &kContext).at(0).refcount;
    }) == 1);
    batch.position->sequence = 2;
    REQUIRE(ApplyOne(machine, batch).has_value());
    CHECK(machine.Read([](const Index& index, Revision) {
      return index.Locate(7, &kContext).at(0).refcount;
    }) == 2);
    CHECK(machine.ReadRegistry(
              [](const Registry& r, Revision) { return r.positions.at("writer:sched-1"); }) == 2);
  }

  TEST_CASE("StateMachine: registrations and positions survive a restart") {
    testing::TempDir dir;
    StorageOptions options;
    options.path = dir.str();
    options.sync_writes = false;
    {
      auto storage = Storage::Open(options);
      REQUIRE(storage.has_value());
      StateMachine machine({}, storage->get());
      REQUIRE(machine.Recover().ok());
      REQUIRE(ApplyOne(machine, Register(testing::PublisherRegistration("a"))).has_value());
      REQUIRE(ApplyOne(machine, StreamStore("a", 1, 7)).has_value());
    }
    auto storage = Storage::Open(options);
    REQUIRE(storage.has_value());
    StateMachine machine({}, storage->get());
    REQUIRE(machine.Recover().ok());
    CHECK(machine.ReadRegistry([](const Registry& r, Revision) {
      return r.registrations.at("a|default|0") == testing::PublisherRegistration("a") &&
             r.positions.at("a|default|0") == 7;
    }));
    REQUIRE(ApplyOne(machine, StreamStore("a", 2, 7)).has_value());
    CHECK(machine.counters().duplicate_batches == 1);
  }

  TEST_CASE("StateMachine: a snapshot not newer than the state is skipped on its header alone") {
    testing::TempDir dir;
    const std::unique_ptr<Storage> storage = OpenStorage(dir.str());
    StateMachine machine({}, storage.get());
    REQUIRE(machine.Recover().ok());
    REQUIRE(ApplyOne(machine, StreamStore("a", 1, std::nullopt)).has_value());
    const std::string snapshot = SnapshotBytes(machine, 1 << 10);
    // Damaged past its header: raft hands the state machine its latest snapshot at every
    // start, and one at or below the state's revision is not read beyond the header.
    std::string damaged = snapshot;
    damaged[damaged.size() - 1] ^= 0x5a;
    CHECK(machine.Restore(damaged).ok());
    CHECK(Entries(machine) == 1);
    // A newer one is checked whole before it replaces anything.
    REQUIRE(ApplyOne(machine, StreamStore("a", 2, std::nullopt)).has_value());
    const Revision later = machine.applied_revision();
    std::string newer = damaged;
    for (int i = 0; i < 8; ++i) newer[5 + i] = static_cast<char>(i == 0 ? 0x7f : 0);
    CHECK(machine.Restore(newer).code() == StatusCode::kCorruption);
    CHECK(machine.applied_revision() == later);
    CHECK(Entries(machine) == 2);
  }

  TEST_CASE("StateMachine: with a RecoveryProgress, recovery counts its entries and stops") {
    testing::TempDir dir;
    constexpr uint64_t kEntries = 10'000;
    {
      const std::unique_ptr<Storage> storage = OpenStorage(dir.str());
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      StoreCommand store;
      store.context = kContext;
      store.holder = HolderKey{"a", 0};
      for (uint64_t k = 1; k <= kEntries; ++k) store.hashes.push_back(k);
      CommandBatch batch;
      batch.commands.emplace_back(std::move(store));
      REQUIRE(ApplyOne(machine, batch).has_value());
    }
    const std::unique_ptr<Storage> storage = OpenStorage(dir.str());
    {
      RecoveryProgress progress;
      progress.BeginPhase("loading", "entries");
      StateMachine machine({}, storage.get());
      machine.SetRecoveryProgress(&progress);
      REQUIRE(machine.Recover().ok());
      CHECK(progress.Read().records == kEntries);
      CHECK(Entries(machine) == kEntries);
    }
    RecoveryProgress stopped;
    stopped.RequestStop();
    StateMachine machine({}, storage.get());
    machine.SetRecoveryProgress(&stopped);
    const Status recovered = machine.Recover();
    CHECK(recovered.code() == StatusCode::kCancelled);
    CHECK(recovered.message().find("stopped (SIGINT or SIGTERM) while loading") !=
          std::string::npos);
  }

  TEST_CASE("StateMachine: server addresses are announced, forgotten, persisted, snapshotted") {
    testing::TempDir dir;
    StorageOptions options;
    options.path = (dir.path() / "a").string();
    options.sync_writes = false;
    const ServerAddresses one{"127.0.0.1:7201", "127.0.0.1:7301"};
    const ServerAddresses two{"127.0.0.1:7202", "127.0.0.1:7302"};
    std::string snapshot;
    {
      auto storage = Storage::Open(options);
      REQUIRE(storage.has_value());
      StateMachine machine({}, storage->get());
      REQUIRE(machine.Recover().ok());
      CHECK(machine.ServerAddressMap().empty());
      CommandBatch batch;
      batch.commands.emplace_back(AnnounceCommand{1, "old:1", "old:2"});
      batch.commands.emplace_back(AnnounceCommand{1, one.http_address, one.rpc_address});
      batch.commands.emplace_back(AnnounceCommand{2, two.http_address, two.rpc_address});
      batch.commands.emplace_back(AnnounceCommand{3, "x:1", "x:2"});
      REQUIRE(ApplyOne(machine, batch).has_value());
      CommandBatch forget;
      forget.commands.emplace_back(ForgetServerCommand{3});
      forget.commands.emplace_back(ForgetServerCommand{9});  // unknown: nothing
      REQUIRE(ApplyOne(machine, forget).has_value());
      const std::map<uint64_t, ServerAddresses> expected{{1, one}, {2, two}};
      CHECK(machine.ServerAddressMap() == expected);
      CHECK(machine.AddressesOf(2) == std::optional<ServerAddresses>(two));
      CHECK_FALSE(machine.AddressesOf(3).has_value());
      // Chunks of 7 bytes: records straddle chunks, and the header is patched across two.
      snapshot = SnapshotBytes(machine, 7);
    }
    {
      // Reopened: the records are loaded with the registry.
      auto storage = Storage::Open(options);
      REQUIRE(storage.has_value());
      StateMachine machine({}, storage->get());
      REQUIRE(machine.Recover().ok());
      CHECK(machine.ServerAddressMap() == std::map<uint64_t, ServerAddresses>{{1, one}, {2, two}});
    }
    // A fresh replica restored from the snapshot has them too, and a snapshot replaces
    // addresses a replica had before.
    StorageOptions other = options;
    other.path = (dir.path() / "b").string();
    auto storage = Storage::Open(other);
    REQUIRE(storage.has_value());
    StateMachine machine({}, storage->get());
    REQUIRE(machine.Recover().ok());
    CommandBatch stale;
    stale.commands.emplace_back(AnnounceCommand{5, "stale:1", "stale:2"});
    REQUIRE(ApplyOne(machine, stale).has_value());
    REQUIRE(machine.Restore(snapshot).ok());
    CHECK(machine.ServerAddressMap() == std::map<uint64_t, ServerAddresses>{{1, one}, {2, two}});
  }

  TEST_CASE("StateMachine: a drain marks a member's record, persisted and snapshotted") {
    testing::TempDir dir;
    const std::string path = (dir.path() / "a").string();
    std::string snapshot;
    {
      std::unique_ptr<Storage> storage = OpenStorage(path);
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      CommandBatch batch;
      batch.commands.emplace_back(AnnounceCommand{1, "h:1", "r:1"});
      batch.commands.emplace_back(AnnounceCommand{2, "h:2", "r:2"});
      batch.commands.emplace_back(AnnounceCommand{3, "h:3", "r:3"});
      batch.commands.emplace_back(DrainCommand{2, true});
      batch.commands.emplace_back(DrainCommand{3, true});
      batch.commands.emplace_back(DrainCommand{9, true});  // no record: nothing
      REQUIRE(ApplyOne(machine, batch).has_value());
      CHECK(machine.DrainingServers() == std::vector<uint64_t>{2, 3});
      CHECK(machine.AddressesOf(2) == std::optional<ServerAddresses>({"h:2", "r:2", true}));
      CHECK_FALSE(machine.AddressesOf(9).has_value());
      // The incremental digest counts the flag as a recomputation does.
      CHECK(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
      // Undrained; and a server's announcement (as it starts) ends its drain.
      CommandBatch end;
      end.commands.emplace_back(DrainCommand{3, false});
      end.commands.emplace_back(DrainCommand{1, false});  // not draining: nothing
      REQUIRE(ApplyOne(machine, end).has_value());
      CHECK(machine.DrainingServers() == std::vector<uint64_t>{2});
      CHECK(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
      CommandBatch again;
      again.commands.emplace_back(DrainCommand{1, true});
      again.commands.emplace_back(AnnounceCommand{1, "h:1", "r:1"});
      REQUIRE(ApplyOne(machine, again).has_value());
      CHECK(machine.DrainingServers() == std::vector<uint64_t>{2});
      snapshot = SnapshotBytes(machine, 64);
    }
    {
      std::unique_ptr<Storage> storage = OpenStorage(path);
      StateMachine machine({}, storage.get());
      REQUIRE(machine.Recover().ok());
      CHECK(machine.DrainingServers() == std::vector<uint64_t>{2});
      CHECK(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
    }
    std::unique_ptr<Storage> storage = OpenStorage((dir.path() / "b").string());
    StateMachine machine({}, storage.get());
    REQUIRE(machine.Recover().ok());
    REQUIRE(machine.Restore(snapshot).ok());
    CHECK(machine.DrainingServers() == std::vector<uint64_t>{2});
    CHECK(machine.AddressesOf(3) == std::optional<ServerAddresses>({"h:3", "r:3", false}));
  }

  TEST_CASE("StateMachine: each applied group is one write-lock hold, and its time counts") {
    StateMachine machine({}, nullptr);
    const ApplyCounters before = machine.counters();
    CHECK(before.write_lock_holds == 0);
    CHECK(before.write_lock_held_ns == 0);
    // A group of three small batches: one hold (a read sees all of a group or nothing).
    const CommandBatch small[] = {StreamStore("a", 1, std::nullopt),
                                  StreamStore("a", 2, std::nullopt),
                                  StreamStore("b", 3, std::nullopt)};
    const CommandBatch* group[] = {&small[0], &small[1], &small[2]};
    REQUIRE(machine.Apply(group).has_value());
    const ApplyCounters three = machine.counters();
    CHECK(three.write_lock_holds == 1);
    CHECK(three.write_lock_held_ns > 0);
    CHECK(three.write_lock_hold_max_ns <= three.write_lock_held_ns);
    // 200,000 blocks in one batch cannot apply in under a millisecond (that would be 5 ns a
    // block): one more hold over 1 ms.
    StoreCommand big;
    big.context = kContext;
    big.holder = HolderKey{"c", 0};
    for (uint64_t k = 0; k < 200'000; ++k) big.hashes.push_back(k + 1'000);
    CommandBatch big_batch;
    big_batch.commands.emplace_back(std::move(big));
    REQUIRE(ApplyOne(machine, big_batch).has_value());
    const ApplyCounters after = machine.counters();
    CHECK(after.write_lock_holds == 2);
    // (A small batch's hold may pass 1 ms too on a busy machine: its thread can be
    // preempted while it holds the lock.)
    CHECK(after.write_lock_holds_over_1ms == three.write_lock_holds_over_1ms + 1);
    CHECK(after.write_lock_hold_max_ns > 1'000'000);
    CHECK(after.write_lock_held_ns - three.write_lock_held_ns > 1'000'000);
    CHECK(after.write_lock_hold_max_ns <= after.write_lock_held_ns);
  }

  TEST_CASE("StateMachine: lookups stay exact while batches grow the index's tables") {
    // The applier prepares table growth under the read lock and adopts it under the write
    // lock; a reader looking up under the read lock meanwhile must see every applied batch
    // whole and nothing of the others. (Correctness only: how long lookups wait is a
    // benchmark figure, bench/index_bench.cc.)
    constexpr uint64_t kBatches = 300;
    constexpr uint64_t kBlocks = 1000;  // 300k blocks: the forward table grows to 2^19 slots
    const auto chain = [](uint64_t b) {
      std::vector<uint64_t> keys(kBlocks);
      for (uint64_t i = 0; i < kBlocks; ++i) keys[i] = (b + 1) << 32 | i;
      return keys;
    };
    std::vector<CommandBatch> batches(kBatches);
    for (uint64_t b = 0; b < kBatches; ++b) {
      StoreCommand store;
      store.context = kContext;
      store.holder = HolderKey{"h" + std::to_string(b % 4), 0};
      store.hashes = chain(b);
      // Engine hashes on every other batch: the alias table grows too.
      if (b % 2 == 1) {
        for (uint64_t key : store.hashes) store.engine_hashes.push_back(key ^ 0x5555);
      }
      batches[b].commands.emplace_back(std::move(store));
    }
    StateMachine machine({}, nullptr);
    const Revision first = machine.applied_revision() + 1;
    std::atomic<bool> done{false};
    std::atomic<uint64_t> lookups{0};
    std::atomic<uint64_t> wrong{0};
    std::thread reader([&] {
      std::mt19937_64 rng(5);
      do {
        machine.Read([&](const Index& index, Revision applied) {
          // Batch b applies at revision first + b: whole once the read's revision reaches
          // it, absent before.
          const uint64_t b = rng() % kBatches;
          const uint32_t found = index.Lookup(kContext, chain(b)).blocks_found;
          const bool ok = applied >= first + b ? found == kBlocks : found == 0;
          if (!ok) wrong.fetch_add(1);
          return 0;
        });
        lookups.fetch_add(1);
      } while (!done.load());
    });
    for (const CommandBatch& batch : batches) {
      if (!ApplyOne(machine, batch).has_value()) break;
    }
    done.store(true);
    reader.join();
    CHECK(wrong.load() == 0);
    CHECK(lookups.load() > 0);
    CHECK(machine.applied_revision() == first + kBatches - 1);
    // The same state, and the same table sizes, as an index that grew by itself.
    Index grown;
    for (const CommandBatch& batch : batches) {
      grown.Apply(batch.commands[0], kDefaultHashSeed, nullptr);
    }
    machine.Read([&](const Index& index, Revision) {
      CHECK(index.Stats().blocks == kBatches * kBlocks);
      CHECK(index.Stats().aliases == kBatches / 2 * kBlocks);
      CHECK(index.StateDigest() == grown.StateDigest());
      CHECK(index.table_capacities().forward == grown.table_capacities().forward);
      CHECK(index.table_capacities().aliases == grown.table_capacities().aliases);
      return 0;
    });
  }

  TEST_CASE("StateMachine: a read shows exactly the entries up to the revision it reports") {
    // A reader races the apply of log entries of many batches each (raft's ApplyAt: the
    // batches of an entry share its revision) and of groups without a log (Apply: a
    // revision per batch). Every batch adds one new copy, so a read at revision R must count
    // exactly the copies of the batches at or below R: none of a later entry, all of R's. And
    // the change feed's records up to R (what a LocalIndex replica at R holds) must count the
    // same. A reader let in between two batches of one entry would be caught: a spinning
    // reader gets there several times in 400 entries.

    // Counts the copies each revision's feed records added.
    class FeedCounter final : public ApplyObserver {
     public:
      void OnApplied(Revision revision, const MutationList& mutations) override {
        total_ += static_cast<uint64_t>(
            std::count_if(mutations.begin(), mutations.end(),
                          [](const Mutation& m) { return m.kind == MutationKind::kPutEntry; }));
        by_revision_[revision] = total_;
      }
      void OnReset(Revision, const Index&) override {}
      // The copies the records up to `revision` hold; the writing side must be done.
      uint64_t CopiesAt(Revision revision) const {
        auto it = by_revision_.upper_bound(revision);
        return it == by_revision_.begin() ? 0 : std::prev(it)->second;
      }

     private:
      uint64_t total_ = 0;
      std::map<Revision, uint64_t> by_revision_;
    };
    constexpr uint64_t kEntries = 400;
    constexpr uint64_t kBatchesPerEntry = 32;
    for (const bool replicated : {true, false}) {
      CAPTURE(replicated);
      std::vector<CommandBatch> batches;
      for (uint64_t b = 0; b < kEntries * kBatchesPerEntry; ++b) {
        batches.push_back(testing::StoreBatch(kContext, HolderKey{"h", 0}, {b + 1}));
      }
      FeedCounter feed;
      StateMachine machine({}, nullptr);
      machine.SetApplyObserver(&feed);
      REQUIRE(machine.Recover().ok());
      std::atomic<bool> done{false};
      // What the reader saw: (revision, copies), each pair once.
      std::vector<std::pair<Revision, uint64_t>> seen;
      uint64_t reads = 0;
      std::thread reader([&] {
        do {
          const auto read = machine.Read([](const Index& index, Revision revision) {
            return std::make_pair(revision, index.Stats().entries);
          });
          if (seen.empty() || seen.back() != read) seen.push_back(read);
          ++reads;
        } while (!done.load());
      });
      bool applied = true;
      for (uint64_t e = 0; e < kEntries && applied; ++e) {
        std::vector<const CommandBatch*> entry;
        for (uint64_t b = 0; b < kBatchesPerEntry; ++b) {
          entry.push_back(&batches[e * kBatchesPerEntry + b]);
        }
        applied =
            replicated ? machine.ApplyAt(e + 1, entry).ok() : machine.Apply(entry).has_value();
      }
      done.store(true);
      reader.join();
      REQUIRE(applied);
      CHECK(reads > 0);
      // Under raft revision R is entry R (kBatchesPerEntry copies each); without a log each
      // batch has a revision of its own.
      const uint64_t copies_per_revision = replicated ? kBatchesPerEntry : 1;
      uint64_t wrong = 0;
      for (const auto& [revision, copies] : seen) {
        if (copies != revision * copies_per_revision || copies != feed.CopiesAt(revision)) {
          if (++wrong <= 3) {
            MESSAGE("a read at revision " << revision << " saw " << copies << " copies; the feed "
                                          << "holds " << feed.CopiesAt(revision) << " there");
          }
        }
      }
      CHECK(wrong == 0);
      CHECK(feed.CopiesAt(machine.applied_revision()) == batches.size());
    }
  }

  TEST_CASE("StateMachine: a load report is leased state, apart from the replicated digest") {
    StateMachine machine({}, nullptr);
    REQUIRE(machine.Recover().ok());
    const uint64_t digest = machine.ReplicaDigest();
    const auto now_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  FleetLoadTable::Clock::now().time_since_epoch())
                                                  .count());
    CommandBatch live;
    live.commands.emplace_back(
        LoadReportCommand{LoadReport{"r1", 60'000, {{"a", 0, 3, 4}}}, now_ms});
    // A report accepted long ago (a log replayed at start-up) has no lease left.
    CommandBatch stale;
    stale.commands.emplace_back(
        LoadReportCommand{LoadReport{"r2", 60'000, {{"a", 0, 100, 100}}}, now_ms - 120'000});
    testing::ApplyOne(machine, live);
    testing::ApplyOne(machine, stale);
    CHECK(machine.fleet_load().LoadOf("a", 0, FleetLoadTable::Clock::now()) == LoadSum{3, 4, 1});
    CHECK(machine.ReplicaDigest() == digest);
  }
}

}  // namespace
}  // namespace kvatlas::server
