#include "server/replication/raft_heap.h"

#include <malloc.h>

extern "C" {
#include <raft.h>
}

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace kvatlas::server {
namespace {

void* HeapMalloc(void* /*data*/, size_t size) { return std::malloc(size); }
void HeapFree(void* /*data*/, void* ptr) { std::free(ptr); }
void* HeapCalloc(void* /*data*/, size_t count, size_t size) { return std::calloc(count, size); }

void* HeapRealloc(void* /*data*/, void* ptr, size_t size) {
  if (ptr == nullptr || size == 0) return std::realloc(ptr, size);
  const size_t usable = malloc_usable_size(ptr);
  if (size <= usable) {
    // Shrinking a block by more than half gives the memory back; otherwise it stays
    // where it is (what was reserved for growth is kept until then).
    return size < usable / 2 ? std::realloc(ptr, size) : ptr;
  }
  return std::realloc(ptr, std::max(size, 2 * usable));
}

void* HeapAlignedAlloc(void* /*data*/, size_t alignment, size_t size) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t rounded = (size + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded);
}

void HeapAlignedFree(void* /*data*/, size_t /*alignment*/, void* ptr) { std::free(ptr); }

}  // namespace

void InstallRaftHeap() {
  static std::once_flag once;
  std::call_once(once, [] {
    static raft_heap heap{nullptr,     HeapMalloc,       HeapFree,       HeapCalloc,
                          HeapRealloc, HeapAlignedAlloc, HeapAlignedFree};
    raft_heap_set(&heap);
  });
}

}  // namespace kvatlas::server
