// MakeOptions: RocksDB's memory as one budget (storage_memory_bytes, docs/storage.md
// §RocksDB options), and the on_flush hook.
#include <doctest/doctest.h>
#include <rocksdb/cache.h>
#include <rocksdb/table.h>
#include <rocksdb/write_buffer_manager.h>

#include <atomic>
#include <memory>

#include "server/storage/flush_jitter.h"
#include "server/storage/rocksdb_storage_impl.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/server/storage/storage_test_support.h"

namespace kvatlas::server {
namespace {

std::shared_ptr<rocksdb::Cache> BlockCacheOf(const rocksdb::Options& o) {
  const auto* table = o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  REQUIRE(table != nullptr);
  return table->block_cache;
}

TEST_CASE("a memory budget charges memtables to the one block cache") {
  StorageOptions options;
  options.memory_bytes = 96ull << 20;
  options.block_cache_bytes = 16ull << 20;
  std::shared_ptr<FlushJitter> jitter;
  const rocksdb::Options o = rocksdb_storage::MakeOptions(options, &jitter);
  const std::shared_ptr<rocksdb::Cache> cache = BlockCacheOf(o);
  REQUIRE(cache != nullptr);
  CHECK(cache->GetCapacity() == (96ull << 20));
  REQUIRE(o.write_buffer_manager != nullptr);
  CHECK(o.write_buffer_manager->buffer_size() == (80ull << 20));
  CHECK(o.write_buffer_manager->cost_to_cache());
}

TEST_CASE("without a budget the block cache is block_cache_bytes and memtables are unmanaged") {
  StorageOptions options;
  options.memory_bytes = 0;
  options.block_cache_bytes = 8ull << 20;
  std::shared_ptr<FlushJitter> jitter;
  const rocksdb::Options o = rocksdb_storage::MakeOptions(options, &jitter);
  REQUIRE(BlockCacheOf(o) != nullptr);
  CHECK(BlockCacheOf(o)->GetCapacity() == (8ull << 20));
  CHECK(o.write_buffer_manager == nullptr);
}

// The server trims the heap after a flush frees a memtable (memory_trimmer.h). Closing the
// database waits for its flush jobs, listeners included.
TEST_CASE("on_flush runs after each flush") {
  testing::TempDir dir;
  StorageOptions options = SmallOptions(dir);
  options.disable_wal = true;  // so that Flush flushes the memtables
  std::atomic<int> flushes{0};
  options.on_flush = [&flushes] { ++flushes; };
  {
    auto storage = OpenOk(options);
    REQUIRE(storage->Write(5, OneOfEach()).ok());
    REQUIRE(storage->Flush().ok());
  }
  CHECK(flushes.load() >= 1);
}

}  // namespace
}  // namespace kvatlas::server
