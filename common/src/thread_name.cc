#include "common/internal/thread_name.h"

#include <pthread.h>

#include <string>

namespace kvatlas {

void SetCurrentThreadName(std::string_view name) {
  constexpr size_t kMaxLength = 15;  // TASK_COMM_LEN - 1
  const std::string cut(name.substr(0, kMaxLength));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace kvatlas
