// ReadHeapUsage follows what the program allocates and frees, under the allocator the process
// runs on: glibc's malloc in service_test, jemalloc in heap_jemalloc_test (the same file,
// linked with jemalloc, as kvatlas-server is). Under AddressSanitizer malloc is ASan's and
// neither allocator sees any of it, so the cases are skipped.
#include "server/service/heap_usage.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvatlas::server {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kOwnMalloc = false;
#else
constexpr bool kOwnMalloc = true;
#endif

#if defined(KVATLAS_EXPECT_JEMALLOC)
constexpr HeapAllocator kExpected = HeapAllocator::kJemalloc;
#else
constexpr HeapAllocator kExpected = HeapAllocator::kGlibc;
#endif

TEST_CASE("ReadHeapUsage: names the allocator the process runs on" * doctest::skip(!kOwnMalloc)) {
  CHECK(ActiveHeapAllocator() == kExpected);
  CHECK(ReadHeapUsage().allocator == kExpected);
  CHECK(HeapAllocatorName(HeapAllocator::kJemalloc) == "jemalloc");
  CHECK(HeapAllocatorName(HeapAllocator::kGlibc) == "glibc");
}

TEST_CASE("ReadHeapUsage: a large block counts as in use until it is freed" *
          doctest::skip(!kOwnMalloc)) {
  constexpr size_t kBytes = 64u << 20;  // a mapping of its own under either allocator
  const HeapUsage before = ReadHeapUsage();
  void* block = std::malloc(kBytes);
  REQUIRE(block != nullptr);
  std::memset(block, 1, kBytes);
  const HeapUsage held = ReadHeapUsage();
  CHECK(held.in_use_bytes >= before.in_use_bytes + kBytes);
  CHECK(held.mmapped_bytes >= kBytes);
  std::free(block);
  const HeapUsage after = ReadHeapUsage();
  CHECK(after.in_use_bytes + kBytes <= held.in_use_bytes);
}

// jemalloc keeps freed pages resident (dirty) until their decay, 10 s by default in this
// test process (kvatlas-server sets its own, server/jemalloc_conf.cc): a purge gives them
// back at once, and free_bytes says so.
TEST_CASE("ReleaseFreeHeap: jemalloc's freed pages go back to the system" *
          doctest::skip(!kOwnMalloc || kExpected != HeapAllocator::kJemalloc)) {
  constexpr size_t kBlock = 64u << 10;
  constexpr size_t kBlocks = 512;  // 32 MiB
  std::vector<void*> blocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks.push_back(std::malloc(kBlock));
    REQUIRE(blocks.back() != nullptr);
    std::memset(blocks.back(), 1, kBlock);
  }
  for (void* b : blocks) std::free(b);
  const HeapUsage freed = ReadHeapUsage();
  CHECK(freed.free_bytes >= kBlocks * kBlock / 2);
  ReleaseFreeHeap();
  const HeapUsage released = ReadHeapUsage();
  CHECK(released.free_bytes + kBlocks * kBlock / 2 <= freed.free_bytes);
}

}  // namespace
}  // namespace kvatlas::server
