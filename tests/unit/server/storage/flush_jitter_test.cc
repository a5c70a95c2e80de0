// FlushJitter: memtable sizes drawn in [max/2, max], redrawn by RocksDB after each flush.
#include "server/storage/flush_jitter.h"

#include <doctest/doctest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

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

TEST_CASE("FlushJitter gives each memtable of the tracked family a new size after a flush") {
  testing::TempDir dir;
  constexpr uint64_t kMax = 1 << 20;
  auto jitter = std::make_shared<FlushJitter>(kMax, 11);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.write_buffer_size = jitter->NextSize();
  options.listeners.push_back(jitter);
  const std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(options)},
      {"tracked", rocksdb::ColumnFamilyOptions(options)}};
  std::vector<rocksdb::ColumnFamilyHandle*> families;
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(rocksdb::DBOptions(options), dir.str() + "/db", descriptors, &families,
                            &raw)
              .ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::ColumnFamilyHandle* tracked = families[1];
  jitter->Track(tracked);
  const uint64_t untracked_size = db->GetOptions(families[0]).write_buffer_size;
  std::set<uint64_t> sizes{db->GetOptions(tracked).write_buffer_size};
  for (int flush = 0; flush < 6; ++flush) {
    for (rocksdb::ColumnFamilyHandle* family : families) {
      REQUIRE(db->Put(rocksdb::WriteOptions(), family, "key" + std::to_string(flush), "v").ok());
      REQUIRE(db->Flush(rocksdb::FlushOptions(), family).ok());  // waits, listeners included
    }
    const uint64_t size = db->GetOptions(tracked).write_buffer_size;
    CHECK(size >= kMax / 2);
    CHECK(size <= kMax);
    sizes.insert(size);
  }
  CHECK(sizes.size() >= 4);  // 7 draws from 2^19 values
  CHECK(db->GetOptions(families[0]).write_buffer_size == untracked_size);
  jitter->Track(nullptr);
  for (rocksdb::ColumnFamilyHandle* family : families) {
    REQUIRE(db->DestroyColumnFamilyHandle(family).ok());
  }
}

}  // namespace
}  // namespace kvatlas::server
