// ReadHeapUsage follows what the program allocates and frees (glibc's malloc; under
// AddressSanitizer malloc is ASan's and glibc's arenas see none of it, so the case is skipped).
#include "server/service/heap_usage.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>

namespace kvatlas::server {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kGlibcMalloc = false;
#else
constexpr bool kGlibcMalloc = true;
#endif

TEST_CASE("ReadHeapUsage: a large block counts as in use until it is freed" *
          doctest::skip(!kGlibcMalloc)) {
  constexpr size_t kBytes = 64u << 20;  // above the mmap threshold: its own mapping
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

}  // namespace
}  // namespace kvatlas::server
