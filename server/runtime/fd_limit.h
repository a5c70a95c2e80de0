// The process's open-file limit. The usual soft limit (1,024) is below what the default
// connection caps and registrations need (each registration holds three ZMQ sockets and
// about four descriptors), and a process out of descriptors fails accepts and connects
// at random; the hard limit is usually far higher.
#pragma once

#include <cstdint>

namespace kvatlas::server {

struct Config;

// The descriptors `config` can use at its limits: HTTP connections, four per registration,
// and 1,024 for binary-protocol connections, raft, RocksDB files and the rest.
[[nodiscard]] uint64_t DescriptorsWanted(const Config& config);

// Raises the soft RLIMIT_NOFILE to the hard limit when it is below DescriptorsWanted, and
// logs a warning naming both numbers when even the hard limit is below it.
void RaiseOpenFileLimit(const Config& config);

}  // namespace kvatlas::server
