// HugeBuffer: uninitialised memory for large hash tables (the server's index, the client's
// LocalIndex), 2 MiB-aligned and marked for transparent huge pages when it is at least that
// large. Their accesses are random over tens to hundreds of MB; with 4 KiB pages nearly
// every one is also a TLB miss, and the first touch of each page a page fault (measured:
// ~1.6x ingest rate with huge pages).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace kvatlas {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

inline constexpr size_t kHugePage = size_t{2} << 20;

// Returns `bytes` (rounded up to whole huge pages when ≥ one) of uninitialised memory.
// Throws std::bad_alloc when out of memory, like new.
inline std::unique_ptr<void, FreeDeleter> AllocateHuge(size_t bytes) {
  void* p = nullptr;
  if (bytes >= kHugePage) {
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    p = std::aligned_alloc(kHugePage, bytes);
    if (p) madvise(p, bytes, MADV_HUGEPAGE);  // advisory: failure only costs speed
  } else {
    p = std::malloc(bytes);
  }
  if (!p) throw std::bad_alloc();
  return std::unique_ptr<void, FreeDeleter>(p);
}

// Bytes AllocateHuge(bytes) really takes.
inline size_t HugeAllocatedBytes(size_t bytes) {
  return bytes >= kHugePage ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
}

}  // namespace kvatlas
