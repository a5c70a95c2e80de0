// ContextCopier: a context's copies, listed by one group's index, re-created in another
// group's by applying the batches the copier cuts — the same copies of the same blocks in
// the same order (so the same eviction order), refcounts, engine-hash aliases and locations, over
// random maps; a batch sent twice applied once; a holder's chain one command again.
#include "server/model/context_copy.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/state/state_machine.h"
#include "server/storage/context_scan.h"
#include "tests/support/context_fill.h"
#include "tests/support/state_machine_helpers.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

const ContextKey kMoved{"acme", "llama", "", 16, ""};
const ContextKey kStays{"acme", "llama", "lora-1", 16, ""};

using testing::ListCopies;
using testing::Listed;

// The batches that copy `context` from `from`, cut at `max_hashes`.
std::vector<CommandBatch> CopyBatches(const StateMachine& from, const ContextKey& context,
                                      size_t max_hashes) {
  std::vector<CommandBatch> batches;
  ContextCopier copier(context, "move-1", max_hashes, [&](CommandBatch batch) {
    batches.push_back(std::move(batch));
    return Status::Ok();
  });
  for (const Listed& listed : ListCopies(from, context)) {
    REQUIRE(copier.Add(listed.key, listed.copy).ok());
  }
  REQUIRE(copier.Finish().ok());
  CHECK(copier.batches() == batches.size());
  return batches;
}

void Fill(StateMachine& machine, const ContextKey& context, uint32_t seed) {
  testing::FillContext(machine, context, seed);
}

std::vector<Listed> Copies(const StateMachine& machine, const ContextKey& context) {
  return testing::SortedCopies(machine, context);
}

TEST_CASE("a context copied by its listing is the same context in the other group") {
  for (const uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    for (const size_t max_hashes : {size_t{1}, size_t{7}, size_t{100'000}}) {
      CAPTURE(seed);
      CAPTURE(max_hashes);
      StateMachine from({}, nullptr);
      StateMachine to({}, nullptr);
      Fill(from, kMoved, seed);
      Fill(from, kStays, seed + 100);
      Fill(to, kStays, seed + 200);  // the receiving group holds other contexts
      const std::vector<Listed> copies = Copies(from, kMoved);
      REQUIRE(copies.size() > 100);
      const std::vector<Listed> stays = Copies(to, kStays);
      for (const CommandBatch& batch : CopyBatches(from, kMoved, max_hashes)) {
        testing::ApplyOne(to, batch);
      }
      // Same copies of the same blocks in the same order (creation order), with their
      // refcounts, engine hashes, locations and depths.
      CHECK(Copies(to, kMoved) == copies);
      CHECK(Copies(to, kStays) == stays);
      // The aliases came along: a removal naming a publisher's own hash finds the block.
      RemoveCommand remove;
      remove.context = kMoved;
      remove.holder = {"e1", 1};
      for (const Listed& listed : copies) {
        if (listed.copy.holder == remove.holder) remove.hashes.push_back(listed.copy.engine_hash);
      }
      REQUIRE_FALSE(remove.hashes.empty());
      CommandBatch removal;
      removal.commands.emplace_back(remove);
      testing::ApplyOne(from, removal);
      testing::ApplyOne(to, removal);
      CHECK(Copies(to, kMoved) == Copies(from, kMoved));
    }
  }
}

TEST_CASE("a copy's batch sent twice is applied once") {
  StateMachine from({}, nullptr);
  StateMachine to({}, nullptr);
  Fill(from, kMoved, 9);
  const std::vector<CommandBatch> batches = CopyBatches(from, kMoved, 16);
  REQUIRE(batches.size() > 2);
  for (size_t i = 0; i < batches.size(); ++i) {
    REQUIRE(batches[i].position.has_value());
    CHECK(batches[i].position->stream == "writer:move-1");
    CHECK(batches[i].position->sequence == i + 1);
    testing::ApplyOne(to, batches[i]);
    if (i == 1) testing::ApplyOne(to, batches[0]);  // resent after the next
  }
  testing::ApplyOne(to, batches.back());
  CHECK(to.counters().duplicate_batches == 2);
  CHECK(Copies(to, kMoved) == Copies(from, kMoved));
}

TEST_CASE("a holder's chain is one command again; a second reference one more store") {
  StateMachine from({}, nullptr);
  std::vector<uint64_t> chain;
  for (uint64_t k = 1; k <= 100; ++k) chain.push_back(k * 7919);
  testing::ApplyOne(from, testing::StoreBatch(kMoved, {"e1", 0}, chain));
  testing::ApplyOne(from, testing::StoreBatch(kMoved, {"e1", 0}, {chain[0]}));  // refcount 2
  const std::vector<CommandBatch> batches = CopyBatches(from, kMoved, 100'000);
  REQUIRE(batches.size() == 1);
  REQUIRE(batches[0].commands.size() == 2);
  const auto& store = std::get<StoreCommand>(batches[0].commands[0]);
  CHECK(store.hashes == chain);
  CHECK(store.base_depth == 0u);
  CHECK(store.engine_hashes.empty());  // the publisher's hashes are the keys
  CHECK(store.locations.empty());
  const auto& again = std::get<StoreCommand>(batches[0].commands[1]);
  CHECK(again.hashes == std::vector<uint64_t>{chain[0]});
  CHECK(again.base_depth == 0u);
}

TEST_CASE("an error from the receiver stops the copy") {
  StateMachine from({}, nullptr);
  Fill(from, kMoved, 3);
  int emitted = 0;
  ContextCopier copier(kMoved, "move-1", 4, [&](CommandBatch) {
    return ++emitted == 2 ? Status::Unavailable("group 3 has no leader") : Status::Ok();
  });
  Status failed;
  for (const Listed& listed : ListCopies(from, kMoved)) {
    failed = copier.Add(listed.key, listed.copy);
    if (!failed.ok()) break;
  }
  CHECK(failed.code() == StatusCode::kUnavailable);
  CHECK(emitted == 2);
}

// A move's source (docs/scaling.md §Moves): a context scan of one pinned snapshot gives the
// copies to cut into batches, and the stream positions and holder-wide ids of the same
// revision.
class MoveSource final : public ContextScanVisitor {
 public:
  explicit MoveSource(std::vector<CommandBatch>* batches)
      : copier_(kMoved, "move-1", 16, [batches](CommandBatch batch) {
          batches->push_back(std::move(batch));
          return Status::Ok();
        }) {}
  bool WantsRegistry() const override { return true; }
  Status OnStreamPosition(std::string_view stream, uint64_t sequence) override {
    positions.emplace(std::string(stream), sequence);
    return Status::Ok();
  }
  Status OnHolderWide(const HolderKey& holder, const std::vector<uint64_t>& ids) override {
    holder_wide[holder.ToString()] = ids;
    return Status::Ok();
  }
  Status OnRevision(Revision at) override {
    revision = at;
    return Status::Ok();
  }
  Status OnCopy(BlockKey key, const HolderKey& holder, Tier tier, uint32_t depth, uint32_t refcount,
                uint64_t engine_hash, std::string_view location) override {
    return copier_.Add(
        key, BlockCopy{{}, holder, tier, depth, refcount, engine_hash, std::string(location)});
  }
  Status Finish() { return copier_.Finish(); }

  std::map<std::string, uint64_t> positions;
  std::map<std::string, std::vector<uint64_t>> holder_wide;
  Revision revision = 0;

 private:
  ContextCopier copier_;
};

TEST_CASE("a move's source: copies, positions and holder-wide ids of one pinned revision") {
  testing::TempDir dir;
  StorageOptions options;
  options.path = (dir.path() / "a").string();
  options.sync_writes = false;
  Result<std::unique_ptr<Storage>> storage = Storage::Open(options);
  REQUIRE(storage.has_value());
  StateMachine from({}, storage->get());
  REQUIRE(from.Recover().ok());
  Fill(from, kMoved, 11);
  Fill(from, kStays, 12);
  const HolderKey holder{"e2", 0};
  ClearCommand clear{holder, std::nullopt, std::nullopt};
  clear.fanout = 41;
  CommandBatch batch;
  batch.commands.emplace_back(clear);
  batch.position = StreamPosition{"writer:w1", 5, false};
  const Revision captured_at = testing::ApplyOne(from, batch);
  Fill(from, kMoved, 13);  // more after the clear
  const Revision at = from.applied_revision();
  const std::vector<Listed> copies = Copies(from, kMoved);
  Result<std::unique_ptr<Storage::Capture>> capture = (*storage)->CaptureAll();
  REQUIRE(capture.has_value());
  // After the capture: none of it is in the scan.
  clear.fanout = 42;
  batch.commands = {clear};
  batch.position = StreamPosition{"writer:w1", 6, false};
  testing::ApplyOne(from, batch);
  REQUIRE(from.applied_revision() > at);
  REQUIRE(captured_at < at);

  std::vector<CommandBatch> batches;
  MoveSource source(&batches);
  REQUIRE(ScanContext(**capture, kMoved, &source).ok());
  REQUIRE(source.Finish().ok());
  CHECK(source.revision == at);
  CHECK(source.positions == std::map<std::string, uint64_t>{{"writer:w1", 5}});
  CHECK(source.holder_wide == std::map<std::string, std::vector<uint64_t>>{{"e2|0", {41}}});
  CHECK(from.HolderWideIds(holder) == std::vector<uint64_t>{41, 42});
  StateMachine to({}, nullptr);
  for (const CommandBatch& part : batches) testing::ApplyOne(to, part);
  CHECK(Copies(to, kMoved) == copies);
}

}  // namespace
}  // namespace kvatlas::server
