// ThreadCount: how many threads this process runs now (/proc/self/task), for tests that
// check that what they started left no thread behind.
#pragma once

#include <cstddef>
#include <filesystem>

namespace kvatlas::testing {

inline size_t ThreadCount() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

}  // namespace kvatlas::testing
