// SnapshotStream (server/service/snapshot_stream.h): a context listed page by page from a
// pinned RocksDB snapshot while writes go on is exactly the context at the stream's
// revision; streams past max_snapshot_streams are refused with a clear error.
#include "server/service/snapshot_stream.h"

#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "server/service/ingest_service.h"
#include "server/service/metrics.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"
#include "server/storage/storage.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

const ContextKey kContext{"default", "m", "", 2, ""};

// A server's service layer over RocksDB storage in a temporary directory.
struct StoredServices {
  StoredServices() {
    StorageOptions options;
    options.path = dir.str() + "/db";
    options.sync_writes = false;
    Result<std::unique_ptr<Storage>> opened = Storage::Open(options);
    REQUIRE(opened.has_value());
    storage = std::move(opened).value();
    machine = std::make_unique<StateMachine>(StateMachineOptions{}, storage.get());
    REQUIRE(machine->Recover().ok());
    applier = std::make_unique<Applier>(machine.get());
    services.machine = machine.get();
    services.applier = applier.get();
    services.storage = storage.get();
    services.metrics = &metrics;
    services.options.snapshot_page_copies = 8;
  }

  // Stores `blocks` blocks of document `doc` for `holder` (or removes them).
  Revision Write(uint32_t doc, const std::string& holder, uint32_t blocks, bool remove = false) {
    BlockEvent event;
    event.type = remove ? EventType::kRemoved : EventType::kStored;
    event.context = kContext;
    event.holder = HolderKey{holder, 0};
    for (uint32_t b = 0; b < blocks; ++b) event.seq_hashes.push_back(doc * 1000 + b + 1);
    Result<PreparedIngest> prepared =
        PrepareIngest(services, std::vector<BlockEvent>{event}, std::nullopt);
    REQUIRE(prepared.has_value());
    Result<Revision> applied = SubmitAndWait(services, std::move(prepared->batch));
    REQUIRE(applied.has_value());
    return *applied;
  }

  testing::TempDir dir;
  std::unique_ptr<Storage> storage;
  std::unique_ptr<StateMachine> machine;
  std::unique_ptr<Applier> applier;
  Metrics metrics;
  Services services;
};

using Row = std::tuple<BlockKey, std::string, Tier, uint32_t, uint32_t>;

std::vector<Row> RowsOf(const ContextSnapshot& s) {
  std::vector<Row> rows;
  for (const SnapshotRow& r : s.rows) {
    rows.emplace_back(r.key, s.holders[r.holder].id, r.tier, r.depth, r.refcount);
  }
  return rows;
}

TEST_SUITE("SnapshotStream") {
  TEST_CASE("pages of a stored context are its state at the stream's revision, writes going on") {
    StoredServices s;
    for (uint32_t doc = 0; doc < 20; ++doc) s.Write(doc, doc % 2 ? "a" : "b", 6);
    // The state at the revision the stream will list, copied under the read lock.
    const Result<ContextSnapshot> expected = SnapshotContext(s.services, kContext);
    REQUIRE(expected.has_value());
    REQUIRE(expected->rows.size() == 120);
    Result<std::unique_ptr<SnapshotStream>> stream = SnapshotStream::Open(s.services, kContext, {});
    REQUIRE(stream.has_value());

    std::vector<Row> listed;
    size_t pages = 0;
    for (uint32_t step = 0;; ++step) {
      // Writes continue while the stream is read: removes, new blocks, new holders.
      s.Write(step % 20, "a", 6, /*remove=*/true);
      s.Write(100 + step, "c", 3);
      Result<SnapshotPage> page = (*stream)->Next();
      REQUIRE_MESSAGE(page.has_value(), page.status().ToString());
      CHECK(page->copies.revision == expected->revision);
      CHECK(page->copies.context == kContext);
      CHECK(page->copies.rows.size() <= 8);
      ++pages;
      for (const Row& row : RowsOf(page->copies)) listed.push_back(row);
      if (page->last) break;
    }
    CHECK((*stream)->revision() == expected->revision);
    CHECK(pages >= 15);
    CHECK(listed == RowsOf(*expected));
    CHECK((*stream)->TryNext().status().code() == StatusCode::kFailedPrecondition);
  }

  TEST_CASE("an unknown context is one empty last page at the current revision") {
    StoredServices s;
    const Revision at = s.Write(1, "a", 3);
    Result<std::unique_ptr<SnapshotStream>> stream =
        SnapshotStream::Open(s.services, ContextKey{"default", "other", "", 2, ""}, {});
    REQUIRE(stream.has_value());
    Result<SnapshotPage> page = (*stream)->Next();
    REQUIRE(page.has_value());
    CHECK(page->last);
    CHECK(page->copies.rows.empty());
    CHECK(page->copies.revision == at);
  }

  TEST_CASE("streams past max_snapshot_streams are refused, naming the limit") {
    StoredServices s;
    for (uint32_t doc = 0; doc < 10; ++doc) s.Write(doc, "a", 6);
    s.services.options.max_snapshot_streams = 2;
    auto first = SnapshotStream::Open(s.services, kContext, {});
    auto second = SnapshotStream::Open(s.services, kContext, {});
    REQUIRE(first.has_value());
    REQUIRE(second.has_value());
    const auto third = SnapshotStream::Open(s.services, kContext, {});
    REQUIRE_FALSE(third.has_value());
    CHECK(third.status().code() == StatusCode::kResourceExhausted);
    CHECK_MESSAGE(third.status().message().find("max_snapshot_streams, is 2") != std::string::npos,
                  third.status().message());
    first->reset();  // an abandoned stream (its scan waiting for room) frees its slot
    CHECK(SnapshotStream::Open(s.services, kContext, {}).has_value());
    CHECK(s.services.snapshot_streams->load() == 1);
  }
}

}  // namespace
}  // namespace kvatlas::server
