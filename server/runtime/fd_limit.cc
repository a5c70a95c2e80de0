#include "server/runtime/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/internal/log.h"
#include "server/runtime/config.h"

namespace kvatlas::server {

uint64_t DescriptorsWanted(const Config& config) {
  return config.http_max_connections + config.rpc_max_connections + 4 * config.max_registrations +
         1024;
}

void RaiseOpenFileLimit(const Config& config) {
  const uint64_t wanted = DescriptorsWanted(config);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const uint64_t before = limit.rlim_cur;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY
                          ? static_cast<rlim_t>(wanted)
                          : std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(wanted));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
      LogInfo("open file limit raised from " + std::to_string(before) + " to " +
              std::to_string(limit.rlim_cur));
    } else {
      LogWarning(std::string("cannot raise the open file limit: ") + std::strerror(errno));
    }
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    LogWarning("open file limit " + std::to_string(limit.rlim_cur) + " is below the " +
               std::to_string(wanted) +
               " descriptors http_max_connections, rpc_max_connections and max_registrations can "
               "use: past it, "
               "connections are refused and registered streams show \"Too many open files\" "
               "(raise LimitNOFILE / ulimit -n, or lower those limits)");
  }
}

}  // namespace kvatlas::server
