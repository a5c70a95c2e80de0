// The replica digest (server/model/replica_digest.h) kept by the StateMachine, and the
// replica audits built on it (server/state/replica_audit.h).
#include "server/model/replica_digest.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "server/state/audit_proposer.h"
#include "server/state/state_machine.h"
#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using Rng = std::mt19937_64;

ContextKey Context(int i) { return ContextKey{"t", "m" + std::to_string(i), "", 16, ""}; }
HolderKey Holder(int i) { return HolderKey{"h" + std::to_string(i), static_cast<uint32_t>(i % 2)}; }

// A random command batch over a small key space, so that stores hit held blocks (refcounts,
// chains, locations, new engine hashes), removes find them and clears and evictions (the
// index is capped at 40 entries per context) drop them; registry commands and positions too.
CommandBatch RandomBatch(Rng& rng) {
  CommandBatch batch;
  const int holder = static_cast<int>(rng() % 5);
  const int context = static_cast<int>(rng() % 3);
  switch (rng() % 10) {
    case 0:
    case 1:
    case 2:
    case 3: {
      StoreCommand store;
      store.context = Context(context);
      store.holder = Holder(holder);
      store.tier = static_cast<Tier>(rng() % kNumTiers);
      const size_t n = 1 + rng() % 6;
      const uint64_t first = rng() % 30;
      for (size_t i = 0; i < n; ++i) store.hashes.push_back(first + i);
      if (rng() % 3 == 0) {
        for (size_t i = 0; i < n; ++i) store.engine_hashes.push_back(1000 + rng() % 40);
      }
      if (rng() % 3 == 0) {
        for (size_t i = 0; i < n; ++i)
          store.locations.push_back("s3://b/" + std::to_string(rng() % 4));
      }
      store.report = rng() % 5 == 0;
      batch.commands.emplace_back(std::move(store));
      break;
    }
    case 4:
    case 5: {
      RemoveCommand remove;
      remove.context = Context(context);
      remove.holder = Holder(holder);
      if (rng() % 2) remove.tier = static_cast<Tier>(rng() % kNumTiers);
      for (int i = 0; i < 4; ++i) remove.hashes.push_back(rng() % 40 + (rng() % 2 ? 1000 : 0));
      batch.commands.emplace_back(std::move(remove));
      break;
    }
    case 6: {
      ClearCommand clear;
      clear.holder = Holder(holder);
      if (rng() % 2) clear.context = Context(context);
      batch.commands.emplace_back(std::move(clear));
      break;
    }
    case 7: {
      Registration r = testing::PublisherRegistration("p" + std::to_string(holder));
      r.topic = std::to_string(rng() % 3);
      batch.commands.emplace_back(RegisterCommand{r});
      if (rng() % 2) {
        batch.commands.emplace_back(
            UnregisterCommand{"p" + std::to_string(rng() % 5), r.tenant_id, r.dp_rank});
      }
      break;
    }
    case 8:
      batch.commands.emplace_back(
          AnnounceCommand{rng() % 4, "h:" + std::to_string(rng() % 9), "r:1"});
      if (rng() % 2) batch.commands.emplace_back(ForgetServerCommand{rng() % 4});
      break;
    default:
      batch.commands.emplace_back(ExpireHolderCommand{Holder(holder), 0});
      break;
  }
  // Writer positions (always accepted streams): new, advanced, repeated and restarted.
  if (rng() % 2) {
    batch.position =
        StreamPosition{"writer:w" + std::to_string(rng() % 3), rng() % 10, rng() % 7 == 0};
  }
  return batch;
}

StateMachineOptions SmallIndex() {
  StateMachineOptions options;
  options.index.max_entries_per_context = 40;
  return options;
}

std::string Serialize(StateMachine& machine) {
  auto capture = machine.CaptureState();
  REQUIRE(capture.has_value());
  ChunkedBytes chunks(1 << 16);
  REQUIRE((*capture)->SerializeInto(&chunks).ok());
  std::string out;
  for (const ChunkedBytes::Chunk& chunk : chunks.chunks()) out.append(chunk.data, chunk.size);
  return out;
}

CommandBatch Audit(Revision checked_index, uint64_t checked_digest,
                   uint32_t digest_scheme = kReplicaDigestScheme) {
  CommandBatch batch;
  batch.commands.emplace_back(AuditCommand{checked_index, checked_digest, digest_scheme});
  return batch;
}

TEST_SUITE("ReplicaDigest") {
  TEST_CASE("ReplicaDigest: the entry element of digest scheme 2 is pinned") {
    // Known answers (computed apart, from the definition in replica_digest.h): a change of
    // the function changes every replica's digest, and needs a new kReplicaDigestScheme.
    REQUIRE(kReplicaDigestScheme == 2);
    EntryDigestFields e;
    CHECK(EntryElement(e) == 0x6c5a0423bd55ca87ULL);
    e.context_key_hash = 0x0123456789abcdefULL;
    e.holder_key_hash = 0xfedcba9876543210ULL;
    e.block_key = 0x1111222233334444ULL;
    e.depth = 7;
    e.tier = 2;
    e.refcount = 3;
    e.engine_hash = 0x5555666677778888ULL;
    CHECK(EntryElement(e) == 0xc3564d1f39b009f0ULL);
    e.location_hash = 0x99;
    CHECK(EntryElement(e) == 0x2a0532f91758b195ULL);
    // Every field counts, each word in its own place: no two of these elements are equal.
    std::vector<uint64_t> elements = {EntryElement(e)};
    using Change = void (*)(EntryDigestFields&);
    const Change changes[] = {
        [](EntryDigestFields& f) { f.context_key_hash ^= 1; },
        [](EntryDigestFields& f) { f.holder_key_hash ^= 1; },
        [](EntryDigestFields& f) { f.block_key ^= 1; },
        [](EntryDigestFields& f) { f.depth ^= 1; },
        [](EntryDigestFields& f) { f.tier ^= 1; },
        [](EntryDigestFields& f) { f.refcount ^= 1; },
        [](EntryDigestFields& f) { f.engine_hash ^= 1; },
        [](EntryDigestFields& f) { f.location_hash ^= 1; },
        [](EntryDigestFields& f) { std::swap(f.context_key_hash, f.holder_key_hash); },
    };
    for (const Change change : changes) {
      EntryDigestFields f = e;
      change(f);
      elements.push_back(EntryElement(f));
    }
    std::sort(elements.begin(), elements.end());
    CHECK(std::adjacent_find(elements.begin(), elements.end()) == elements.end());
  }

  TEST_CASE("ReplicaDigest: the incremental digest equals a full recomputation after every apply") {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(seed);
      Rng rng(seed);
      StateMachine machine(SmallIndex(), nullptr);
      CHECK(machine.ReplicaDigest() == 0);
      std::vector<uint64_t> seen;
      for (int step = 0; step < 600; ++step) {
        CAPTURE(step);
        (void)testing::ApplyOne(machine, RandomBatch(rng));
        const uint64_t digest = machine.ReplicaDigest();
        REQUIRE(digest == machine.RecomputeReplicaDigest());
        seen.push_back(digest);
      }
      // It moves with the state (not a constant): most steps change something.
      std::sort(seen.begin(), seen.end());
      CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() > 200);
    }
  }

  TEST_CASE("ReplicaDigest: placement elements, none for an empty directory") {
    // A state without placement has the digest it had before placement existed (scheme 2).
    CHECK(DirectoryElement(PlacementDirectory()) == 0);
    Registry registry;
    registry.positions.emplace("s", 1);
    const uint64_t plain = RegistryDigest(registry);
    CHECK(plain == StreamPositionElement("s", 1));
    PlacementDirectory dir;
    REQUIRE(dir.AddGroup({2, {}, true}).ok());
    CHECK(DirectoryElement(dir) != 0);
    registry.directory = dir;
    registry.disowned.emplace(Context(1), DisownedContext{3, 4});
    CHECK(RegistryDigest(registry) ==
          plain + DirectoryElement(dir) + DisownedElement(Context(1), DisownedContext{3, 4}));
    CHECK(DisownedElement(Context(1), DisownedContext{3, 4}) !=
          DisownedElement(Context(1), DisownedContext{3, 5}));
    CHECK(DisownedElement(Context(1), DisownedContext{3, 4}) !=
          DisownedElement(Context(1), DisownedContext{4, 4}));

    // Kept incrementally through placements, refusals and placed positions.
    Rng rng(11);
    StateMachine machine(SmallIndex(), nullptr);
    (void)testing::ApplyOne(machine, [] {
      CommandBatch b;
      b.commands.emplace_back(RegisterCommand{testing::PublisherRegistration("h1")});
      return b;
    }());
    for (int step = 0; step < 300; ++step) {
      CAPTURE(step);
      CommandBatch batch;
      const int context = static_cast<int>(rng() % 6);
      switch (rng() % 5) {
        case 0:
          batch.commands.emplace_back(
              PlaceContextCommand{Context(context), static_cast<GroupId>(1 + rng() % 3)});
          break;
        case 1:
          batch.commands.emplace_back(
              SetGroupAcceptingCommand{static_cast<GroupId>(1 + rng() % 3), rng() % 2 == 0});
          break;
        case 2:
          batch.commands.emplace_back(DisownContextCommand{Context(context), rng() % 4});
          break;
        default:
          batch = testing::StoreBatch(Context(context), HolderKey{"h1", 0}, {rng() % 8});
          batch.position = StreamPosition{
              PlacedStreamKey(testing::PublisherRegistration("h1").Key(), Context(context)),
              rng() % 20, false};
      }
      (void)testing::ApplyOne(machine, batch);
      REQUIRE(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
    }
    CommandBatch unregister;
    unregister.commands.emplace_back(UnregisterCommand{"h1", "default", 0});
    (void)testing::ApplyOne(machine, unregister);
    CHECK(machine.ReplicaDigest() == machine.RecomputeReplicaDigest());
  }

  TEST_CASE("ReplicaDigest: equal states give equal digests, whatever the order they came in") {
    // Holders and contexts interned in another order get other ids, and blocks other
    // stamps: the digest names them by key.
    std::vector<CommandBatch> batches;
    for (int i = 0; i < 12; ++i) {
      batches.push_back(testing::StoreBatch(Context(i % 3), Holder(i % 4),
                                            {uint64_t(100 + i), uint64_t(200 + i)},
                                            static_cast<Tier>(i % kNumTiers), {"loc", ""}));
    }
    CommandBatch announce;
    announce.commands.emplace_back(AnnounceCommand{1, "a:1", "b:1"});
    batches.push_back(announce);
    batches.push_back(
        CommandBatch{{RegisterCommand{testing::PublisherRegistration("p")}}, std::nullopt});
    StateMachine forward({}, nullptr);
    for (const CommandBatch& batch : batches) (void)testing::ApplyOne(forward, batch);
    StateMachine backward({}, nullptr);
    for (auto it = batches.rbegin(); it != batches.rend(); ++it) {
      (void)testing::ApplyOne(backward, *it);
    }
    CHECK(forward.ReplicaDigest() == backward.ReplicaDigest());
    CHECK(forward.ReplicaDigest() == forward.RecomputeReplicaDigest());
    // One more copy (a refcount of 2) on one side only: different.
    (void)testing::ApplyOne(backward, batches.front());
    CHECK(forward.ReplicaDigest() != backward.ReplicaDigest());
    // And removing it again makes them equal.
    RemoveCommand remove;
    remove.context = Context(0);
    remove.holder = Holder(0);
    remove.hashes = {100, 200};
    (void)testing::ApplyOne(backward, CommandBatch{{remove}, std::nullopt});
    CHECK(forward.ReplicaDigest() == backward.ReplicaDigest());
  }

  TEST_CASE("ReplicaDigest: recomputed at recovery and across a snapshot restore") {
    testing::TempDir dir;
    StorageOptions options;
    options.path = (dir.path() / "a").string();
    options.sync_writes = false;
    Rng rng(7);
    uint64_t digest = 0;
    std::string snapshot;
    {
      auto storage = Storage::Open(options);
      REQUIRE(storage.has_value());
      StateMachine machine(SmallIndex(), storage->get());
      REQUIRE(machine.Recover().ok());
      for (int step = 0; step < 400; ++step) (void)testing::ApplyOne(machine, RandomBatch(rng));
      digest = machine.ReplicaDigest();
      CHECK(digest == machine.RecomputeReplicaDigest());
      snapshot = Serialize(machine);
      REQUIRE(storage->get()->Flush().ok());
    }
    {
      // Reopened: the records loaded give the same digest.
      auto storage = Storage::Open(options);
      REQUIRE(storage.has_value());
      StateMachine machine(SmallIndex(), storage->get());
      REQUIRE(machine.Recover().ok());
      CHECK(machine.ReplicaDigest() == digest);
      CHECK(machine.RecomputeReplicaDigest() == digest);
    }
    // Another replica, with a state of its own, restored from the snapshot.
    StorageOptions other = options;
    other.path = (dir.path() / "b").string();
    auto storage = Storage::Open(other);
    REQUIRE(storage.has_value());
    StateMachine machine(SmallIndex(), storage->get());
    REQUIRE(machine.Recover().ok());
    (void)testing::ApplyOne(machine, testing::StoreBatch(Context(9), Holder(9), {1, 2, 3}));
    REQUIRE(machine.Restore(snapshot).ok());
    CHECK(machine.ReplicaDigest() == digest);
    CHECK(machine.RecomputeReplicaDigest() == digest);
  }

  TEST_CASE("ReplicaAudit: an audit compares the previous audit point with the leader's") {
    StateMachine leader({}, nullptr);
    StateMachine good({}, nullptr);
    StateMachine bad({}, nullptr);
    StateMachine* all[] = {&leader, &good, &bad};
    auto apply_all = [&](const CommandBatch& batch) {
      for (StateMachine* m : all) (void)testing::ApplyOne(*m, batch);
    };
    apply_all(testing::StoreBatch(Context(1), Holder(1), {1, 2, 3}));
    CHECK(leader.audit().verdict == AuditVerdict::kPending);
    // The first audit has nothing to compare: each records its point.
    apply_all(Audit(0, 0));
    for (StateMachine* m : all) {
      CHECK(m->audit().verdict == AuditVerdict::kPending);
      REQUIRE(m->audit().latest.has_value());
      CHECK(m->audit().latest->index == 2);
      CHECK(m->audit().latest->digest == m->ReplicaDigest());
    }
    // The second carries the leader's point: equal everywhere.
    AuditPoint point = *leader.audit().latest;
    apply_all(testing::StoreBatch(Context(1), Holder(2), {1, 2}));
    apply_all(Audit(point.index, point.digest));
    for (StateMachine* m : all) {
      const AuditStatus status = m->audit();
      CHECK(status.verdict == AuditVerdict::kOk);
      CHECK(status.index == 2);
      CHECK(status.checked_by == 4);
      CHECK(status.checks == 1);
      CHECK_FALSE(m->diverged());
    }
    // One replica loses a write (what a corrupted disk would do): the next audit point
    // differs, and the audit after it says so on that replica only.
    CommandBatch lost = testing::StoreBatch(Context(2), Holder(1), {7});
    (void)testing::ApplyOne(leader, lost);
    (void)testing::ApplyOne(good, lost);
    (void)testing::ApplyOne(bad, CommandBatch{});  // the same revision, without the store
    point = *leader.audit().latest;
    apply_all(Audit(point.index, point.digest));  // index 6: records the points
    point = *leader.audit().latest;
    CHECK(point.index == 6);
    apply_all(Audit(point.index, point.digest));
    CHECK(leader.audit().verdict == AuditVerdict::kOk);
    CHECK(good.audit().verdict == AuditVerdict::kOk);
    const AuditStatus status = bad.audit();
    CHECK(status.verdict == AuditVerdict::kDiverged);
    CHECK(bad.diverged());
    CHECK(status.index == 6);
    CHECK(status.leader_digest == point.digest);
    CHECK(status.digest != point.digest);
    CHECK(status.mismatches == 1);
    const std::string message = DivergedMessage(status);
    CHECK(message.find("diverged from the leader's at log index 6") != std::string::npos);
    CHECK(message.find(ReplicaDigestHex(point.digest)) != std::string::npos);
    CHECK(message.find("serves no reads") != std::string::npos);
    // An audit point this replica has no digest of (it started after it) checks nothing.
    StateMachine fresh({}, nullptr);
    (void)testing::ApplyOne(fresh, Audit(point.index, point.digest));
    CHECK(fresh.audit().verdict == AuditVerdict::kPending);
    CHECK(fresh.audit().unchecked == 1);
  }

  TEST_CASE("ReplicaAudit: an audit of another digest scheme compares nothing") {
    // A leader of another build (a rolling upgrade across a scheme change): its digests of
    // the same state differ from this build's, which must not read as divergence.
    StateMachine replica({}, nullptr);
    (void)testing::ApplyOne(replica, testing::StoreBatch(Context(1), Holder(1), {1, 2, 3}));
    const uint32_t other = kReplicaDigestScheme == 1 ? 2 : 1;
    (void)testing::ApplyOne(replica, Audit(0, 0, other));  // index 2: records the point
    CHECK(replica.audit().verdict == AuditVerdict::kUnchecked);
    REQUIRE(replica.audit().latest.has_value());
    const uint64_t mine = replica.audit().latest->digest;
    (void)testing::ApplyOne(replica, Audit(2, mine + 1, other));
    AuditStatus status = replica.audit();
    CHECK(status.verdict == AuditVerdict::kUnchecked);
    CHECK_FALSE(replica.diverged());
    CHECK(status.checks == 0);
    CHECK(status.mismatches == 0);
    CHECK(status.unchecked == 1);
    CHECK(status.digest_scheme == kReplicaDigestScheme);
    CHECK(status.leader_digest_scheme == other);
    CHECK(SchemeMismatchMessage(status) ==
          "the leader uses replica digest scheme " + std::to_string(other) + " and this build " +
              std::to_string(kReplicaDigestScheme) +
              ": this replica's audits compare nothing (unchecked) until every server runs the "
              "same build (docs/operations.md §Upgrading)");
    // A leader of this build's scheme again: compared as usual.
    (void)testing::ApplyOne(replica, Audit(3, replica.audit().latest->digest));
    status = replica.audit();
    CHECK(status.verdict == AuditVerdict::kOk);
    CHECK(status.checks == 1);
    CHECK(status.leader_digest_scheme == kReplicaDigestScheme);
    // A diverged replica stays diverged (serving no reads) under a leader of another scheme:
    // only a comparison clears it.
    (void)testing::ApplyOne(replica, Audit(4, replica.audit().latest->digest + 1));
    CHECK(replica.diverged());
    (void)testing::ApplyOne(replica, Audit(5, 0, other));
    CHECK(replica.audit().verdict == AuditVerdict::kDiverged);
    CHECK(replica.diverged());
  }

  TEST_CASE("AuditProposer: an audit is due after other entries, or after 10 idle intervals") {
    using std::chrono::milliseconds;
    const milliseconds interval(200);
    // Nothing applied since the audit point at 7: not due until idle for 10 intervals.
    CHECK_FALSE(AuditProposer::Due(7, 7, milliseconds(200), interval));
    CHECK_FALSE(AuditProposer::Due(7, 7, milliseconds(1'999), interval));
    CHECK(AuditProposer::Due(7, 7, milliseconds(2'000), interval));
    // Anything applied after it (a write, an announcement, a leader's empty entry): due.
    CHECK(AuditProposer::Due(8, 7, milliseconds(200), interval));
    // No audit point yet (a new leader that has applied none): due once anything is applied.
    CHECK(AuditProposer::Due(1, 0, milliseconds(0), interval));
  }
}

}  // namespace
}  // namespace kvatlas::server
