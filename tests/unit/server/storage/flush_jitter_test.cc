// FlushJitter: memtable sizes drawn in [max/2, max], redrawn by RocksDB after each flush.
#include "server/storage/flush_jitter.h"

#include <doctest/doctest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>

#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

TEST_CASE("FlushJitter draws sizes over the whole of [max/2, max]") {
  constexpr uint64_t kMax = 64ull << 20;
  FlushJitter jitter(kMax, 7);
  uint64_t lowest = kMax, highest = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t size = jitter.NextSize();
    REQUIRE(size >= kMax / 2);
    REQUIRE(size <= kMax);
    lowest = std::min(lowest, size);
    highest = std::max(highest, size);
  }
  // Spread, not one value: the whole point is that replicas differ.
  CHECK(lowest < kMax / 2 + kMax / 20);
  CHECK(highest > kMax - kMax / 20);
}

TEST_CASE("FlushJitter gives each memtable after a flush a new size") {
  testing::TempDir dir;
  constexpr uint64_t kMax = 1 << 20;
  auto jitter = std::make_shared<FlushJitter>(kMax, 11);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.write_buffer_size = jitter->NextSize();
  options.listeners.push_back(jitter);
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(options, dir.str() + "/db", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::set<uint64_t> sizes{db->GetOptions().write_buffer_size};
  for (int flush = 0; flush < 6; ++flush) {
    REQUIRE(db->Put(rocksdb::WriteOptions(), "key" + std::to_string(flush), "value").ok());
    REQUIRE(db->Flush(rocksdb::FlushOptions()).ok());  // waits, listeners included
    const uint64_t size = db->GetOptions().write_buffer_size;
    CHECK(size >= kMax / 2);
    CHECK(size <= kMax);
    sizes.insert(size);
  }
  CHECK(sizes.size() >= 4);  // 7 draws from 2^19 values
}

}  // namespace
}  // namespace kvatlas::server
