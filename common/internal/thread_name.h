// Thread names: what `top -H`, `perf` and /proc/PID/task/*/comm show for our threads, so
// that a profile or a CPU sample of a server names the loop it comes from.
#pragma once

#include <string_view>

namespace kvatlas {

// Names the calling thread. Linux keeps 15 characters; longer names are cut. Best effort:
// naming never fails the caller.
void SetCurrentThreadName(std::string_view name);

}  // namespace kvatlas
