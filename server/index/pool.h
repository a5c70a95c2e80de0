// Pool<T>: a chunked arena of T addressed by 32-bit ids, with a free list. Chunks never
// move, so growth copies nothing and wastes at most one chunk (a doubling vector would
// transiently double the index's memory). Freed ids are reused first.
//
// Thread-safety: const access may run concurrently; Allocate/Free need exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "kvatlas/common/huge_buffer.h"

namespace kvatlas::server {

// Chunks are whole huge pages when T allows it: a 40-byte record takes 2^18 per chunk
// (10 MiB, five huge pages) rather than 2^16 (2.5 MiB, whose last huge page would be mostly
// unused). At least 2^16 records, at most 2^20; 2^16 when no size in between fits.
template <size_t kRecordBytes>
constexpr uint32_t PoolChunkBits() {
  for (uint32_t bits = 16; bits <= 20; ++bits) {
    if ((kRecordBytes << bits) % kHugePage == 0) return bits;
  }
  return 16;
}

template <typename T>
class Pool {
 public:
  static constexpr uint32_t kChunkBits = PoolChunkBits<sizeof(T)>();
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;

  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

  T& operator[](uint32_t id) { return Chunk(id >> kChunkBits)[id & (kChunkSize - 1)]; }
  const T& operator[](uint32_t id) const { return Chunk(id >> kChunkBits)[id & (kChunkSize - 1)]; }

  // Returns the id of a slot (contents unspecified; the caller initialises it).
  uint32_t Allocate() {
    ++live_;
    if (!free_.empty()) {
      const uint32_t id = free_.back();
      free_.pop_back();
      return id;
    }
    if (next_ == chunks_.size() * kChunkSize) {
      chunks_.push_back(AllocateHuge(kChunkSize * sizeof(T)));  // callers set every field
    }
    return next_++;
  }

  void Free(uint32_t id) {
    --live_;
    free_.push_back(id);
  }

  size_t live() const { return live_; }
  size_t memory_bytes() const {
    return chunks_.size() * HugeAllocatedBytes(kChunkSize * sizeof(T)) +
           free_.capacity() * sizeof(uint32_t) + chunks_.capacity() * sizeof(void*);
  }

 private:
  T* Chunk(uint32_t i) const { return static_cast<T*>(chunks_[i].get()); }

  std::vector<std::unique_ptr<void, FreeDeleter>> chunks_;
  std::vector<uint32_t> free_;
  uint32_t next_ = 0;
  size_t live_ = 0;
};

}  // namespace kvatlas::server
