// ChunkedBytes: a byte string built by appending, held in chunks of a fixed capacity instead
// of one contiguous buffer, so that a large serialisation (a raft snapshot of a big state)
// never needs a second copy of itself to grow or to be handed over. The chunks come from an
// allocator given at construction (libraft's raft_malloc for buffers libraft frees) and are
// either taken by the caller (Take) or released by the destructor.
//
// An allocation failure is sticky: further appends do nothing and ok() is false.
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace kvatlas {

class ChunkedBytes {
 public:
  using Allocate = void* (*)(size_t);
  using Release = void (*)(void*);

  struct Chunk {
    char* data = nullptr;
    size_t size = 0;  // bytes written (the capacity is chunk_bytes)
  };

  explicit ChunkedBytes(size_t chunk_bytes, Allocate allocate = &std::malloc,
                        Release release = &std::free);
  ~ChunkedBytes();
  ChunkedBytes(const ChunkedBytes&) = delete;
  ChunkedBytes& operator=(const ChunkedBytes&) = delete;

  void Append(std::string_view bytes);
  // Overwrites bytes already appended at `offset` (false, and nothing written, when
  // [offset, offset + bytes.size()) is not all appended yet).
  bool Patch(size_t offset, std::string_view bytes);

  size_t size() const { return size_; }
  bool ok() const { return ok_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }

  // Hands the chunks over (to be freed with the Release given at construction) and leaves
  // this empty.
  std::vector<Chunk> Take();

 private:
  size_t chunk_bytes_;
  Allocate allocate_;
  Release release_;
  std::vector<Chunk> chunks_;
  size_t size_ = 0;
  bool ok_ = true;
};

}  // namespace kvatlas
