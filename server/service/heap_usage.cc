#include "server/service/heap_usage.h"

#include <malloc.h>

#include <cstddef>
#include <string>

// jemalloc's control interface, when jemalloc is the process's malloc (linked, or
// preloaded): a weak reference, null otherwise.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace kvatlas::server {
namespace {

// jemalloc's MALLCTL_ARENAS_ALL: "arena.<i>.…" for every arena at once.
constexpr unsigned kAllArenas = 4096;

uint64_t JemallocStat(const char* name) {
  size_t value = 0;
  size_t length = sizeof(value);
  if (mallctl(name, &value, &length, nullptr, 0) != 0) return 0;
  return value;
}

HeapUsage ReadJemallocUsage() {
  // The statistics are a snapshot taken when the epoch advances.
  uint64_t epoch = 1;
  size_t length = sizeof(epoch);
  (void)mallctl("epoch", &epoch, &length, &epoch, length);
  HeapUsage usage;
  usage.allocator = HeapAllocator::kJemalloc;
  usage.in_use_bytes = JemallocStat("stats.allocated");
  const uint64_t resident = JemallocStat("stats.resident");
  usage.free_bytes = resident > usage.in_use_bytes ? resident - usage.in_use_bytes : 0;
  usage.mmapped_bytes = JemallocStat("stats.mapped");
  return usage;
}

}  // namespace

HeapAllocator ActiveHeapAllocator() {
  return mallctl != nullptr ? HeapAllocator::kJemalloc : HeapAllocator::kGlibc;
}

std::string_view HeapAllocatorName(HeapAllocator allocator) {
  return allocator == HeapAllocator::kJemalloc ? "jemalloc" : "glibc";
}

HeapUsage ReadHeapUsage() {
  if (ActiveHeapAllocator() == HeapAllocator::kJemalloc) return ReadJemallocUsage();
  const struct mallinfo2 info = mallinfo2();
  HeapUsage usage;
  usage.in_use_bytes = info.uordblks + info.hblkhd;
  usage.free_bytes = info.fordblks;
  usage.mmapped_bytes = info.hblkhd;
  return usage;
}

void ReleaseFreeHeap() {
  if (ActiveHeapAllocator() == HeapAllocator::kJemalloc) {
    const std::string purge = "arena." + std::to_string(kAllArenas) + ".purge";
    (void)mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
    return;
  }
  malloc_trim(0);
}

}  // namespace kvatlas::server
