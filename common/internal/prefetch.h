// Prefetch: starts loading the cache line of an address that a lookup will read soon.
#pragma once

namespace kvatlas {

// GCC 12 at -O2 deleted a __builtin_prefetch whose address is computed under a condition
// (tree DCE): one of the Index lookup's three prefetches and all of LocalTable's record
// prefetches were missing from the object code (objdump). An empty asm statement that
// takes the address keeps it: the prefetch then stays, and nothing else is emitted.
inline void Prefetch(const void* address) {
  asm volatile("" : : "r"(address));
  __builtin_prefetch(address);
}

}  // namespace kvatlas
