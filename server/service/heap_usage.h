// The process's heap as its allocator sees it, to tell memory the program holds from memory
// the allocator keeps after it was freed: RSS alone cannot.
//
// kvatlas-server links jemalloc (docs/operations.md §Sizing); a build without it (the
// sanitizer builds, or KVATLAS_JEMALLOC off) runs on glibc's malloc. Which one is in use is
// found at run time, by whether jemalloc's `mallctl` is in the process, so a preloaded
// jemalloc counts too.
//
// Reading it walks the allocator's arenas (glibc: every arena's free lists under its lock,
// microseconds to a few ms): for metrics scrapes and stats, not for hot paths.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvatlas::server {

enum class HeapAllocator { kGlibc, kJemalloc };

[[nodiscard]] HeapAllocator ActiveHeapAllocator();
[[nodiscard]] std::string_view HeapAllocatorName(HeapAllocator allocator);  // "glibc", "jemalloc"

struct HeapUsage {
  HeapAllocator allocator = HeapAllocator::kGlibc;
  // Allocated and not freed, large blocks of their own mapping included (jemalloc:
  // stats.allocated).
  uint64_t in_use_bytes = 0;
  // Freed but kept, resident, by the allocator (not given back yet). glibc: the arenas'
  // free chunks; jemalloc: its resident pages less what is allocated (stats.resident −
  // stats.allocated: dirty pages waiting for their decay, partly used pages, metadata).
  uint64_t free_bytes = 0;
  // glibc: the part of in_use_bytes in blocks of their own mapping; jemalloc: what its
  // arenas have mapped (stats.mapped).
  uint64_t mmapped_bytes = 0;
};

[[nodiscard]] HeapUsage ReadHeapUsage();

// Gives the allocator's free memory back to the system: glibc malloc_trim(0) (locks each
// arena in turn), jemalloc a purge of every arena's unused dirty pages. Slow (up to ~1 s
// with tens of millions of entries): off every hot path (MemoryTrimmer).
void ReleaseFreeHeap();

}  // namespace kvatlas::server
