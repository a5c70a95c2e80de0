// The process's malloc heap as glibc sees it (mallinfo2), to tell memory the program holds
// from memory malloc keeps after it was freed: RSS alone cannot.
//
// Reading it walks every arena's free lists under that arena's lock (microseconds to a few
// ms): for metrics scrapes and stats, not for hot paths.
#pragma once

#include <cstdint>

namespace kvatlas::server {

struct HeapUsage {
  uint64_t in_use_bytes = 0;   // allocated and not freed, mmapped blocks included
  uint64_t free_bytes = 0;     // freed but kept in the arenas (not given back yet)
  uint64_t mmapped_bytes = 0;  // the part of in_use_bytes in blocks of their own mapping
};

[[nodiscard]] HeapUsage ReadHeapUsage();

}  // namespace kvatlas::server
