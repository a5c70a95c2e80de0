// Pool<T>: a chunked arena of T addressed by 32-bit ids, with a free list. Chunks never
// move, so growth copies nothing and wastes at most one chunk (a doubling vector would
// transiently double the index's memory). Freed ids are reused first.
//
// Spare chunks: a chunk is whole huge pages, and the first write to each huge page faults
// in 2 MiB that the kernel zeroes then and there (~5 ms on the CI VM). Left to the writer,
// that is an apply stalled for 5-16 ms every few thousand new records, at the same entry on
// every replica. SpareWanted says when the last chunk is half used; MakeSpareChunk, on any
// thread, allocates a chunk and touches every page of it; ProvideSpare keeps it for the
// next chunk, which Allocate then takes instead of fresh memory.
//
// Thread-safety: const access may run concurrently; Allocate/Free/ProvideSpare need the
// writer (ProvideSpare may run beside readers: they never look at the spare).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "common/internal/huge_buffer.h"

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

  static constexpr size_t kChunkBytes = size_t{kChunkSize} * sizeof(T);

  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  using ChunkBuffer = std::unique_ptr<void, FreeDeleter>;

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
    if (next_ == capacity()) {
      // Callers set every field: a spare's contents do not matter.
      chunks_.push_back(spare_ ? TakeSpare() : AllocateHuge(kChunkBytes));
    }
    return next_++;
  }

  // Ids handed out so far: every id below it is initialised (live or freed), none above.
  uint32_t allocated() const { return next_; }

  // Records the pool holds room for (all chunks, used or not).
  size_t capacity() const { return chunks_.size() * kChunkSize; }

  // True when less than half a chunk of room is left (fresh slots and freed ids) and no
  // spare is held. An empty pool wants none: its first chunk comes with its first record.
  bool SpareWanted() const {
    return !chunks_.empty() && !spare_ && capacity() - next_ + free_.size() < kChunkSize / 2;
  }

  // A chunk with every page already faulted in. Throws std::bad_alloc.
  static ChunkBuffer MakeSpareChunk() {
    ChunkBuffer chunk = AllocateHuge(kChunkBytes);
    // One write per 4 KiB page faults in every page, huge or not.
    volatile char* bytes = static_cast<char*>(chunk.get());
    for (size_t i = 0; i < kChunkBytes; i += 4096) bytes[i] = 0;
    return chunk;
  }

  // Keeps `chunk` (from MakeSpareChunk) for the next chunk; drops it if one is held.
  void ProvideSpare(ChunkBuffer chunk) {
    if (spare_ || chunk == nullptr) return;
    spare_ = std::move(chunk);
    spare_held_.store(true, std::memory_order_relaxed);
  }

  // Whether a spare chunk is held (tests, memory figures).
  bool spare_held() const { return spare_held_.load(std::memory_order_relaxed); }

  void Free(uint32_t id) {
    --live_;
    free_.push_back(id);
  }

  size_t live() const { return live_; }
  size_t memory_bytes() const {
    return (chunks_.size() + (spare_held() ? 1 : 0)) * HugeAllocatedBytes(kChunkBytes) +
           free_.capacity() * sizeof(uint32_t) + chunks_.capacity() * sizeof(void*);
  }

 private:
  T* Chunk(uint32_t i) const { return static_cast<T*>(chunks_[i].get()); }

  ChunkBuffer TakeSpare() {
    spare_held_.store(false, std::memory_order_relaxed);
    return std::move(spare_);
  }

  std::vector<ChunkBuffer> chunks_;
  ChunkBuffer spare_;
  // Mirrors spare_ for memory_bytes, which readers call while the writer provides one.
  std::atomic<bool> spare_held_{false};
  std::vector<uint32_t> free_;
  uint32_t next_ = 0;
  size_t live_ = 0;
};

}  // namespace kvatlas::server
