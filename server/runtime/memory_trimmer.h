// MemoryTrimmer: gives freed heap memory back to the system (ReleaseFreeHeap: jemalloc's
// purge of every arena, or glibc's malloc_trim(0)) on a thread of its own, when asked, at
// most once per `min_interval` (a minute by default: a glibc trim holds each arena's lock
// for up to ~0.9 s on a server with 50M entries, stalling whatever allocates there).
//
// After a raft snapshot drops the log it replaced, or a RocksDB flush drops a memtable,
// tens of MB are freed at once; glibc keeps them in its arenas until a trim (60 MB on a
// server with 10M entries), jemalloc until their decay (about a second with
// server/jemalloc_conf.cc). A glibc trim walks every arena under its lock, which took
// 67-245 ms on a server with 10M entries: never on a hot path or on the raft loop, so
// Request only wakes this thread. Requests coalesce: one arriving during a trim or within
// min_interval of the last one is served once the interval has passed.
//
// Thread-safety: Request from any thread (it never blocks on a trim, and allocates
// nothing, so it is fine from RocksDB's listeners and the raft loop).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace kvatlas::server {

// Caps glibc's malloc arenas at `arena_max` (mallopt M_ARENA_MAX) unless it is 0, the
// MALLOC_ARENA_MAX environment variable is set (glibc has read that one already) or jemalloc
// is the process's malloc (its arenas are MALLOC_CONF's). Call it
// before the process starts threads: arenas are made as threads contend, and a cap does
// not remove those made before it. Logs (debug) when the environment variable decides, and
// warns when mallopt fails.
void LimitMallocArenas(uint64_t arena_max);

class MemoryTrimmer {
 public:
  explicit MemoryTrimmer(std::chrono::milliseconds min_interval = std::chrono::seconds(60));
  ~MemoryTrimmer();  // joins the thread; a pending request is dropped
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // Asks for a trim (see the class comment for when it runs).
  void Request();

  uint64_t trims() const;
  // Duration of the longest trim so far.
  std::chrono::microseconds longest() const;

 private:
  void Run();

  const std::chrono::milliseconds min_interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false;                // guarded by mu_
  bool stopping_ = false;                 // guarded by mu_
  uint64_t trims_ = 0;                    // guarded by mu_
  std::chrono::microseconds longest_{0};  // guarded by mu_
  std::thread thread_;
};

}  // namespace kvatlas::server
