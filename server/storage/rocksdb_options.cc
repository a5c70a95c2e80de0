// The RocksDB options of the storage (MakeOptions in rocksdb_storage_impl.h): database and
// column family tuning from StorageOptions, the block cache and bloom filters, the vector
// memtable, the flush jitter listener and the on_flush hook. Both column families open with these
// options; the choices and their measurements are in docs/storage.md.
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_buffer_manager.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "server/storage/flush_jitter.h"
#include "server/storage/rocksdb_storage_impl.h"
#include "server/storage/sorted_vector_rep.h"

namespace kvatlas::server::rocksdb_storage {
namespace {

// StorageOptions::on_flush.
class FlushHook final : public rocksdb::EventListener {
 public:
  explicit FlushHook(std::function<void()> hook) : hook_(std::move(hook)) {}
  void OnFlushCompleted(rocksdb::DB* /*db*/, const rocksdb::FlushJobInfo& /*info*/) override {
    hook_();
  }
  const char* Name() const override { return "KvatlasFlushHook"; }

 private:
  const std::function<void()> hook_;
};

}  // namespace

rocksdb::Options MakeOptions(const StorageOptions& options, std::shared_ptr<FlushJitter>* jitter) {
  rocksdb::Options o;
  if (options.env) o.env = options.env.get();  // RocksDbStorage keeps it alive
  o.create_if_missing = true;
  // Flushes and compactions share the machine with the applier and the network threads.
  o.max_background_jobs = 2;
  // Memtables of random sizes up to write_buffer_bytes, so that replicas sharing a machine
  // do not all flush at the same moment (flush_jitter.h).
  *jitter = std::make_shared<FlushJitter>(options.write_buffer_bytes, std::random_device{}());
  o.write_buffer_size = (*jitter)->NextSize();
  o.listeners.push_back(*jitter);
  if (options.on_flush) o.listeners.push_back(std::make_shared<FlushHook>(options.on_flush));
  // Smooths write-back of SSTs instead of one large fsync at the end of each file.
  o.bytes_per_sync = 1 << 20;
  o.level_compaction_dynamic_level_bytes = true;
  // After a crash, recover the WAL up to the last intact record and stop there: the database
  // comes back at a consistent applied_index (the atomicity contract in docs/storage.md
  // relies on it; it is RocksDB's default, stated here because we depend on it).
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;

  // Values are small and keys share long prefixes; LZ4 is cheap to decode at boot. Fall
  // back to no compression when this librocksdb was built without it.
  const std::vector<rocksdb::CompressionType> supported = rocksdb::GetSupportedCompressions();
  const bool has_lz4 =
      std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end();
  o.compression = has_lz4 ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;

  rocksdb::BlockBasedTableOptions table;
  if (options.memory_bytes != 0) {
    // One budget for RocksDB's memory (docs/operations.md §Sizing): a cache of
    // memory_bytes that both column families read through, and a write buffer manager that
    // charges their memtables to it (cost_to_cache) and flushes once they pass
    // memory_bytes - block_cache_bytes. Memtables and cached blocks then stay within
    // memory_bytes together, however many memtables the flush jitter or a slow flush
    // leaves around (max_write_buffer_number alone allowed 6 per column family).
    table.block_cache = rocksdb::NewLRUCache(options.memory_bytes);
    // Index and filter blocks too: left in the table readers they sit outside the budget
    // and grow with the database (about 1.3 bytes per record with the bloom filter below:
    // ~60 MB at 50M entries). The database is read at boot and by the few meta Gets, so
    // evicting them costs nothing that matters.
    table.cache_index_and_filter_blocks = true;
    table.cache_index_and_filter_blocks_with_high_priority = true;
    o.write_buffer_manager = std::make_shared<rocksdb::WriteBufferManager>(
        options.memory_bytes - options.block_cache_bytes, table.block_cache);
  } else if (options.block_cache_bytes == 0) {
    table.no_block_cache = true;
  } else {
    table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  }
  // Point reads are meta Gets and, later, single-record reads; a full-key bloom filter
  // spares them a data-block read per level.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.optimize_filters_for_memory = true;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));

  // The database is written on every applied group and read only at boot (point reads of
  // a few meta keys, then one full scan). A vector memtable appends in O(1) and sorts once
  // at flush, where the default skip list spent ~70% of the server's ingest CPU on ordered
  // inserts of random keys; ours sorts key prefixes instead of pointers to the entries
  // (sorted_vector_rep.h). Writes come from one thread (the applier), as it requires.
  o.memtable_factory = std::make_shared<SortedVectorRepFactory>();
  // Compactions are catch-up work: on a small machine they must not take CPU from lookups.
  // Flushes are not: a starved flush fills every memtable, and the next write then stalls
  // the applying thread, which under raft is the raft loop (docs/replication.md
  // §Benchmark: at low priority, loops blocked for 4-9 s in sustained 3-server ingest).
  o.env->LowerThreadPoolCPUPriority(rocksdb::Env::LOW);
  o.allow_concurrent_memtable_write = false;
  // A write that RocksDB stalls (full memtables waiting for a flush, too many L0 files
  // waiting for a compaction) blocks the applying thread, which under raft is the raft
  // loop: heartbeats stop and followers start elections. Since that flush and compaction
  // run at low CPU priority, give them room to fall behind under a burst instead: more
  // memtables (each write_buffer_size) and later L0 slowdown/stop triggers.
  o.max_write_buffer_number = 6;
  o.level0_slowdown_writes_trigger = 48;
  o.level0_stop_writes_trigger = 96;
  // Both column families flush together: without a WAL (disable_wal) that is what keeps
  // them at one applied_index after a crash, and with one it keeps the small default
  // family from pinning old WAL files.
  o.atomic_flush = true;
  o.create_missing_column_families = true;
  return o;
}

}  // namespace kvatlas::server::rocksdb_storage
