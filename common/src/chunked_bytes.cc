#include "common/internal/chunked_bytes.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvatlas {

ChunkedBytes::ChunkedBytes(size_t chunk_bytes, Allocate allocate, Release release)
    : chunk_bytes_(std::max<size_t>(chunk_bytes, 1)), allocate_(allocate), release_(release) {}

ChunkedBytes::~ChunkedBytes() {
  for (const Chunk& chunk : chunks_) release_(chunk.data);
}

void ChunkedBytes::Append(std::string_view bytes) {
  while (ok_ && !bytes.empty()) {
    if (chunks_.empty() || chunks_.back().size == chunk_bytes_) {
      auto* data = static_cast<char*>(allocate_(chunk_bytes_));
      if (data == nullptr) {
        ok_ = false;
        return;
      }
      chunks_.push_back(Chunk{data, 0});
    }
    Chunk& last = chunks_.back();
    const size_t n = std::min(bytes.size(), chunk_bytes_ - last.size);
    std::memcpy(last.data + last.size, bytes.data(), n);
    last.size += n;
    size_ += n;
    bytes.remove_prefix(n);
  }
}

bool ChunkedBytes::Patch(size_t offset, std::string_view bytes) {
  if (offset > size_ || bytes.size() > size_ - offset) return false;
  // Every chunk but the last is full: offset / chunk_bytes_ is the chunk that holds it.
  while (!bytes.empty()) {
    Chunk& chunk = chunks_[offset / chunk_bytes_];
    const size_t at = offset % chunk_bytes_;
    const size_t n = std::min(bytes.size(), chunk.size - at);
    std::memcpy(chunk.data + at, bytes.data(), n);
    offset += n;
    bytes.remove_prefix(n);
  }
  return true;
}

std::vector<ChunkedBytes::Chunk> ChunkedBytes::Take() {
  size_ = 0;
  return std::exchange(chunks_, {});
}

}  // namespace kvatlas
