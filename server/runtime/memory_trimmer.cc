#include "server/runtime/memory_trimmer.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"
#include "server/service/heap_usage.h"

namespace kvatlas::server {

void LimitMallocArenas(uint64_t arena_max) {
  if (ActiveHeapAllocator() == HeapAllocator::kJemalloc) {
    LogDebug("malloc arenas: jemalloc is the allocator; malloc_arena_max does not apply");
    return;
  }
  if (const char* env = std::getenv("MALLOC_ARENA_MAX"); env != nullptr) {
    LogDebug(std::string("malloc arenas: MALLOC_ARENA_MAX=") + env + " from the environment");
    return;
  }
  if (arena_max == 0) return;
  if (mallopt(M_ARENA_MAX, static_cast<int>(arena_max)) != 1) {
    LogWarning("malloc arenas: mallopt(M_ARENA_MAX, " + std::to_string(arena_max) +
               ") failed; glibc's default applies");
  }
}

MemoryTrimmer::MemoryTrimmer(std::chrono::milliseconds min_interval)
    : min_interval_(min_interval), thread_([this] { Run(); }) {}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MemoryTrimmer::Request() {
  {
    std::lock_guard lock(mu_);
    requested_ = true;
  }
  cv_.notify_all();
}

uint64_t MemoryTrimmer::trims() const {
  std::lock_guard lock(mu_);
  return trims_;
}

std::chrono::microseconds MemoryTrimmer::longest() const {
  std::lock_guard lock(mu_);
  return longest_;
}

void MemoryTrimmer::Run() {
  SetCurrentThreadName("malloc-trim");
  std::unique_lock lock(mu_);
  auto next_allowed = std::chrono::steady_clock::now();
  while (true) {
    cv_.wait(lock, [this] { return requested_ || stopping_; });
    if (stopping_) return;
    // Requests within min_interval of the last trim wait for it, and merge into one.
    if (cv_.wait_until(lock, next_allowed, [this] { return stopping_; })) return;
    requested_ = false;
    lock.unlock();
    const auto started = std::chrono::steady_clock::now();
    ReleaseFreeHeap();
    const auto finished = std::chrono::steady_clock::now();
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(finished - started);
    // A long trim stalled other threads' allocations in the arenas it held: worth knowing.
    const std::string said = "heap release took " + std::to_string(took.count()) + " us";
    if (took >= std::chrono::milliseconds(50)) {
      LogInfo(said);
    } else {
      LogDebug(said);
    }
    lock.lock();
    ++trims_;
    longest_ = std::max(longest_, took);
    next_allowed = finished + min_interval_;
  }
}

}  // namespace kvatlas::server
