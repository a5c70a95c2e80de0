// The allocator installed for libraft: growth by doubling, so that libraft's one-entry-at-a-
// time growth of its loaded log (quadratic under an allocator that copies on realloc) moves
// an array O(log n) times.
#include "server/replication/raft_heap.h"

#include <doctest/doctest.h>
#include <malloc.h>

#include <cstdint>
#include <cstring>

extern "C" {
#include <raft.h>
}

namespace kvatlas::server {
namespace {

TEST_CASE("raft heap: growing one element at a time moves the block O(log n) times") {
  InstallRaftHeap();
  InstallRaftHeap();               // idempotent
  constexpr size_t kElement = 40;  // sizeof(struct raft_entry)
  constexpr size_t kCount = 20000;
  auto* block = static_cast<unsigned char*>(raft_malloc(kElement));
  REQUIRE(block != nullptr);
  std::memset(block, 1, kElement);
  int moves = 0;
  for (size_t n = 2; n <= kCount; ++n) {
    auto* grown = static_cast<unsigned char*>(raft_realloc(block, n * kElement));
    REQUIRE(grown != nullptr);
    if (grown != block) ++moves;
    block = grown;
    std::memset(block + (n - 1) * kElement, static_cast<int>(n & 0xff), kElement);
  }
  // Contents survive every move.
  for (size_t n = 1; n <= kCount; ++n) {
    CHECK(block[(n - 1) * kElement] == static_cast<unsigned char>(n == 1 ? 1 : n & 0xff));
  }
  // Doubling from 40 bytes to 800 KB is ~15 growths; an allocator that copies on each
  // realloc (AddressSanitizer's) moves it on every one of the 19,999 calls without it.
  CHECK(moves <= 24);
  CHECK(malloc_usable_size(block) >= kCount * kElement);
  raft_free(block);
  // Each growth past what a block has reserves as much again (glibc alone: ~usable + 1).
  void* reserved = raft_malloc(100000);
  REQUIRE(reserved != nullptr);
  const size_t usable = malloc_usable_size(reserved);
  reserved = raft_realloc(reserved, usable + 1);
  REQUIRE(reserved != nullptr);
  CHECK(malloc_usable_size(reserved) >= 2 * usable);
  raft_free(reserved);
}

TEST_CASE("raft heap: a block shrunk by more than half is given back; calloc zeroes") {
  InstallRaftHeap();
  void* big = raft_malloc(1 << 20);
  REQUIRE(big != nullptr);
  void* same = raft_realloc(big, (1 << 20) - 100);
  CHECK(same == big);  // within what it has: kept
  void* small = raft_realloc(same, 1000);
  REQUIRE(small != nullptr);
  CHECK(malloc_usable_size(small) < (1 << 19));
  raft_free(small);
  auto* zeros = static_cast<unsigned char*>(raft_calloc(100, 8));
  REQUIRE(zeros != nullptr);
  for (int i = 0; i < 800; ++i) CHECK(zeros[i] == 0);
  raft_free(zeros);
  void* aligned = raft_aligned_alloc(4096, 100);  // a size that is not a multiple
  REQUIRE(aligned != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(aligned) % 4096 == 0);
  raft_aligned_free(4096, aligned);
}

}  // namespace
}  // namespace kvatlas::server
