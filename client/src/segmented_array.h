// SegmentedArray: a growable array of trivially copyable records whose elements never move.
// Segment 0 holds indexes [0, 2^kFirstBits); segment s ≥ 1 holds [2^(kFirstBits+s-1),
// 2^(kFirstBits+s)). Growing adds one segment (O(1), nothing copied), so it may happen under
// a lock that readers wait on; an index maps to its record with one bit scan. Segments of
// 2 MiB and more live on huge pages (huge_buffer.h).
//
// Thread-safety: none inside; const members may run concurrently with each other.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "common/internal/huge_buffer.h"

namespace kvatlas::client_internal {

template <typename T>
class SegmentedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr unsigned kFirstBits = 10;
  static constexpr size_t kSegments = 32 - kFirstBits + 1;  // enough for 32-bit indexes

  // A segment allocated ahead of time (PrepareCapacity), to be installed by Install.
  struct Segment {
    size_t index = 0;
    std::unique_ptr<void, FreeDeleter> buffer;
  };

  T& operator[](uint32_t i) { return segments_[SegmentOf(i)][Offset(i)]; }
  const T& operator[](uint32_t i) const { return segments_[SegmentOf(i)][Offset(i)]; }

  // Indexes in use: [0, size()).
  uint32_t size() const { return size_; }
  // Indexes usable without allocating.
  size_t capacity() const { return CapacityOf(installed_); }

  // Extends size() by one (allocating a segment when full) and returns the new index.
  uint32_t Append() {
    if (size_ == capacity()) Install(NewSegment(installed_));
    return size_++;
  }

  // The segments that capacity() ≥ `n` still needs, allocated but not installed: a writer
  // prepares them outside its lock and installs them under it.
  std::vector<Segment> PrepareCapacity(size_t n) const {
    std::vector<Segment> out;
    for (size_t s = installed_; CapacityOf(s) < n && s < kSegments; ++s) {
      out.push_back(NewSegment(s));
    }
    return out;
  }

  // Installs `segment` if it is the next one missing; else drops it (another growth won).
  void Install(Segment&& segment) {
    if (segment.index != installed_) return;
    buffers_[installed_] = std::move(segment.buffer);
    segments_[installed_] = static_cast<T*>(buffers_[installed_].get());
    ++installed_;
  }

  uint64_t memory_bytes() const {
    uint64_t bytes = 0;
    for (size_t s = 0; s < installed_; ++s)
      bytes += HugeAllocatedBytes(SegmentLength(s) * sizeof(T));
    return bytes;
  }

 private:
  static size_t SegmentOf(uint32_t i) { return std::bit_width(i >> kFirstBits); }
  static uint32_t Offset(uint32_t i) {
    const size_t s = SegmentOf(i);
    return s == 0 ? i : i - (uint32_t{1} << (kFirstBits + s - 1));
  }
  static size_t SegmentLength(size_t s) {
    return s == 0 ? size_t{1} << kFirstBits : size_t{1} << (kFirstBits + s - 1);
  }
  // Indexes covered by the first `segments` segments.
  static size_t CapacityOf(size_t segments) {
    return segments == 0 ? 0 : size_t{1} << (kFirstBits + segments - 1);
  }
  static Segment NewSegment(size_t s) {
    return Segment{s, AllocateHuge(SegmentLength(s) * sizeof(T))};
  }

  std::array<T*, kSegments> segments_{};
  std::array<std::unique_ptr<void, FreeDeleter>, kSegments> buffers_;
  size_t installed_ = 0;
  uint32_t size_ = 0;
};

}  // namespace kvatlas::client_internal
