// Storage: RocksDB persistence of the whole map (docs/storage.md). It mirrors the mutations
// the Index decides, writing each applied group atomically together with `applied_index`,
// and rebuilds an Index from disk at boot.
//
// Thread-safety: Write/Load/Flush from one thread at a time (the applier); the read-only
// accessors may be called concurrently with them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/internal/chunked_bytes.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/model/mutation.h"
#include "server/model/record_loader.h"
#include "server/model/registration.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace kvatlas::server {

struct StorageOptions {
  // Directory of the RocksDB database (created if missing).
  std::string path;
  // fsync the WAL on every Write. Off, an acknowledged write survives a process crash but
  // not a power loss (the OS may not have written the WAL yet).
  bool sync_writes = true;
  // Skip RocksDB's own WAL. Only when another log is the durable record and can replay
  // what a crash loses (the raft log: a crash reopens RocksDB at its last flush, a
  // consistent earlier applied_index, and raft re-applies or restores from there).
  bool disable_wal = false;
  // RocksDB block cache and write buffer, in bytes. Each memtable takes a random size
  // between half the write buffer and all of it (flush_jitter.h).
  uint64_t block_cache_bytes = 64ull << 20;
  uint64_t write_buffer_bytes = 64ull << 20;
  // RocksDB's whole memory budget: memtables of both column families and cached blocks,
  // charged to one cache of this size; memtables flush past memory_bytes -
  // block_cache_bytes (rocksdb_options.cc). 0 = no budget (the cache is block_cache_bytes
  // and memtables are bounded only by their number). REQUIRES: 0 or > block_cache_bytes.
  uint64_t memory_bytes = 0;
  // The RocksDB environment; null is the default one. Tests inject I/O faults through it.
  std::shared_ptr<rocksdb::Env> env;
  // Runs on a RocksDB flush thread after each flush (the memtable is freed by then). Must
  // not block: flushes wait for it. Must outlive the Storage.
  std::function<void()> on_flush;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Opens (creating if needed) the RocksDB database at options.path.
  // kIOError if it cannot be opened (missing permissions, held by another process: the
  // message says which), kCorruption if its format version is unknown.
  [[nodiscard]] static Result<std::unique_ptr<Storage>> Open(const StorageOptions& options);

  // On a new database records `hash_seed`; on an existing one returns kFailedPrecondition
  // when it differs (block keys on disk were computed with the stored seed).
  [[nodiscard]] virtual Status CheckHashSeed(uint64_t hash_seed) = 0;

  // The revision of the last applied write (0 for a new database).
  [[nodiscard]] virtual Result<Revision> AppliedIndex() const = 0;

  // Writes `mutations` and applied_index atomically (one WriteBatch).
  [[nodiscard]] virtual Status Write(Revision applied_index,
                                     std::span<const Mutation> mutations) = 0;

  // Hands every context, holder, block and entry record to `loader` (an empty Index) in the
  // order record_loader.h states.
  [[nodiscard]] virtual Status LoadInto(RecordLoader* loader) const = 0;

  // Loads every registration, stream position and server addresses record into `registry`
  // (which must be empty).
  [[nodiscard]] virtual Status LoadRegistry(Registry* registry) const = 0;

  // A consistent point-in-time image of the whole database (a replicated-log snapshot, an
  // online backup). CaptureAll() is cheap (pins a RocksDB snapshot) and may be called from
  // any thread: every Write carries its applied_index in the same atomic batch, so the image
  // is the state after exactly one applied revision (on the applying thread, after the last
  // one). Serialize() and ForEachRecord() read everything and may run on another thread,
  // concurrently with later Writes.
  class Capture {
   public:
    virtual ~Capture() = default;
    // docs/storage.md §Snapshots: "KVSN", u8 version, le64 applied_index, then every record
    // as (varint key length, key, varint value length, value), then le64 record count.
    [[nodiscard]] virtual Result<std::string> Serialize() const = 0;
    // The same bytes, appended to `out` (kResourceExhausted when its allocator fails): a
    // raft snapshot's serialisation, handed to libraft chunk by chunk with no second copy.
    [[nodiscard]] virtual Status SerializeInto(ChunkedBytes* out) const = 0;
    // Calls fn(key, value) for every record of the image in the order Serialize() writes
    // them (the default family's in key order, then the entries family's), stopping at the
    // first non-OK Status. Any thread; memory stays constant (a backup streams this).
    [[nodiscard]] virtual Status ForEachRecord(
        const std::function<Status(std::string_view key, std::string_view value)>& fn) const = 0;
  };
  [[nodiscard]] virtual Result<std::unique_ptr<Capture>> CaptureAll() const = 0;

  // Reads the applied_index a serialized capture was taken at (kCorruption if malformed).
  [[nodiscard]] static Result<Revision> SnapshotAppliedIndex(std::string_view snapshot);
  // The same from the capture's header alone, checking nothing after it: cheap, for
  // deciding whether a snapshot is newer than the state before checking all of it.
  [[nodiscard]] static Result<Revision> SnapshotHeaderAppliedIndex(std::string_view snapshot);
  // Checks a serialized capture as SnapshotAppliedIndex does and calls fn(key, value) for
  // every record in order, stopping at the first non-OK Status. Returns its applied_index.
  [[nodiscard]] static Result<Revision> WalkSnapshot(
      std::string_view snapshot,
      const std::function<Status(std::string_view key, std::string_view value)>& fn);

  // Replaces every record with those of a serialized capture, atomically (one WriteBatch):
  // after a crash the database holds either the old records or the new ones. Checks the
  // whole snapshot before writing anything (kCorruption naming the problem).
  [[nodiscard]] virtual Status ReplaceAll(std::string_view snapshot) = 0;

  // Deletes every record but the database's format version and hash seed, atomically and
  // synced (one WriteBatch: after a crash the database holds the old records or none), and
  // then compacts the database so that their disk space is freed: the database is then as
  // a new one with the same seed (applied index 0). For a replica this server no longer
  // holds (StateMachine::DropReplica).
  [[nodiscard]] virtual Status Clear() = 0;

  // Makes all writes so far durable (WAL fsync). Called at shutdown.
  [[nodiscard]] virtual Status Flush() = 0;

  // Approximate on-disk size of the database, for /v1/stats.
  virtual uint64_t ApproximateSizeBytes() const = 0;

  // What RocksDB holds in memory, for /v1/stats and the metrics: the block cache's usage
  // (with a memory budget it includes the memtables charged to it) and the memtables and
  // table readers on their own. A soak tells a budget filling up from a leak with these.
  struct MemoryUsage {
    uint64_t block_cache_bytes = 0;
    uint64_t memtable_bytes = 0;
    uint64_t table_reader_bytes = 0;
    uint64_t budget_bytes = 0;  // StorageOptions::memory_bytes; 0 = no budget
    // Bytes counted once: the cache (memtables inside it under a budget) plus the table
    // readers, and the memtables too when no budget charges them to the cache.
    uint64_t total_bytes = 0;
  };
  virtual MemoryUsage ApproximateMemoryUsage() const = 0;
};

}  // namespace kvatlas::server
