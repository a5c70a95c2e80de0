// Pool: ids, freed ids reused, and spare chunks made ahead (pool.h).
#include "server/index/pool.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace kvatlas::server {
namespace {

struct Rec {
  uint64_t a;
  uint64_t b;
};
using RecPool = Pool<Rec>;

// Allocates ids until `n` are live, each record set to its id.
void AllocateUpTo(RecPool& pool, uint32_t n) {
  while (pool.live() < n) {
    const uint32_t id = pool.Allocate();
    pool[id] = Rec{id, ~uint64_t{id}};
  }
}

TEST_CASE("Pool hands out dense ids, reuses freed ones first, and keeps records in place") {
  RecPool pool;
  AllocateUpTo(pool, RecPool::kChunkSize + 10);  // into a second chunk
  CHECK(pool.capacity() == 2 * RecPool::kChunkSize);
  pool.Free(7);
  CHECK(pool.Allocate() == 7);
  for (uint32_t id : {0u, 1u, RecPool::kChunkSize - 1, RecPool::kChunkSize + 9}) {
    CHECK(pool[id].a == id);
    CHECK(pool[id].b == ~uint64_t{id});
  }
}

TEST_CASE(
    "Pool wants a spare chunk past half of its last chunk, and its next chunk is that "
    "spare") {
  RecPool pool;
  CHECK_FALSE(pool.SpareWanted());  // empty: the first chunk comes with the first record
  AllocateUpTo(pool, RecPool::kChunkSize / 2);
  CHECK_FALSE(pool.SpareWanted());
  AllocateUpTo(pool, RecPool::kChunkSize / 2 + 1);
  REQUIRE(pool.SpareWanted());

  const size_t before = pool.memory_bytes();
  RecPool::ChunkBuffer spare = RecPool::MakeSpareChunk();
  const void* spare_at = spare.get();
  pool.ProvideSpare(std::move(spare));
  CHECK(pool.spare_held());
  CHECK_FALSE(pool.SpareWanted());
  CHECK(pool.memory_bytes() == before + HugeAllocatedBytes(RecPool::kChunkBytes));
  // A second spare is dropped: the first stays the one the next chunk takes.
  pool.ProvideSpare(RecPool::MakeSpareChunk());
  CHECK(pool.memory_bytes() == before + HugeAllocatedBytes(RecPool::kChunkBytes));

  AllocateUpTo(pool, RecPool::kChunkSize + 1);
  CHECK(pool.capacity() == 2 * RecPool::kChunkSize);
  CHECK(static_cast<const void*>(&pool[RecPool::kChunkSize]) == spare_at);
  CHECK_FALSE(pool.spare_held());
  // The spare's bytes are the chunk's now (plus the chunk list's own growth).
  CHECK(pool.memory_bytes() >= before + HugeAllocatedBytes(RecPool::kChunkBytes));
  CHECK(pool.memory_bytes() < before + HugeAllocatedBytes(RecPool::kChunkBytes) + 4096);
  CHECK(pool[RecPool::kChunkSize].a == RecPool::kChunkSize);
  // Wanted again only once the new chunk is half used.
  CHECK_FALSE(pool.SpareWanted());
  AllocateUpTo(pool, RecPool::kChunkSize + RecPool::kChunkSize / 2 + 1);
  CHECK(pool.SpareWanted());
}

TEST_CASE("Pool counts freed ids as room: no spare while they cover half a chunk") {
  RecPool pool;
  AllocateUpTo(pool, RecPool::kChunkSize - 10);
  REQUIRE(pool.SpareWanted());
  for (uint32_t id = 0; id < RecPool::kChunkSize / 2; ++id) pool.Free(id);
  CHECK_FALSE(pool.SpareWanted());
}

}  // namespace
}  // namespace kvatlas::server
