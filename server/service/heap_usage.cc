#include "server/service/heap_usage.h"

#include <malloc.h>

namespace kvatlas::server {

HeapUsage ReadHeapUsage() {
  const struct mallinfo2 info = mallinfo2();
  HeapUsage usage;
  usage.in_use_bytes = info.uordblks + info.hblkhd;
  usage.free_bytes = info.fordblks;
  usage.mmapped_bytes = info.hblkhd;
  return usage;
}

}  // namespace kvatlas::server
