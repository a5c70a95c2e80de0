// FlushJitter: each memtable of a database gets a random size in [max/2, max] (RocksDB's
// write_buffer_size), redrawn after every flush.
//
// Replicas apply the same entries, so with one fixed size their memtables fill at the same
// entry and all of them flush at once. Where replicas share a machine (a local cluster,
// this project's benchmarks) the flushes then take the CPU together: on the 2-core CI VM,
// three simultaneous flushes (~0.6 s of CPU each) held the commit latency of a half-loaded
// cluster at 80-150 ms for their duration. Random sizes spread the flushes apart, as random
// election timeouts spread candidates. On separate machines it changes nothing but the
// flush sizes (on average 3/4 of the maximum, so a quarter more, smaller flushes).
//
// Only the column family given to Track is resized (version 4 keeps the entry records, all
// but a few bytes of every write, in a family of their own; the others stay at the size
// they were opened with).
//
// Thread-safety: RocksDB calls the listener from its flush threads; one lock guards the
// random generator and the tracked family.
#pragma once

#include <rocksdb/listener.h>

#include <cstdint>
#include <mutex>
#include <random>

namespace kvatlas::server {

class FlushJitter final : public rocksdb::EventListener {
 public:
  FlushJitter(uint64_t max_bytes, uint64_t seed);

  // A size for the next memtable: uniform in [max_bytes / 2, max_bytes].
  uint64_t NextSize();

  // Resizes `family` after its flushes from now on; null stops that. REQUIRES: Track(null)
  // before the handle is destroyed.
  void Track(rocksdb::ColumnFamilyHandle* family);

  // Sets the next memtable's size (DB::SetOptions; it runs without the DB mutex held).
  void OnFlushCompleted(rocksdb::DB* db, const rocksdb::FlushJobInfo& info) override;

  const char* Name() const override { return "KvatlasFlushJitter"; }

 private:
  uint64_t Draw();  // REQUIRES: mu_ held

  const uint64_t max_bytes_;
  std::mutex mu_;
  std::mt19937_64 rng_;                            // guarded by mu_
  rocksdb::ColumnFamilyHandle* family_ = nullptr;  // guarded by mu_
};

}  // namespace kvatlas::server
