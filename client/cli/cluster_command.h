// `kvatlas cluster ...`: the raft cluster's REST admin endpoints (docs/api.md §Cluster)
// from the command line, over HTTP (cpp-httplib): status, add, remove, transfer, and the
// admin backup endpoints (POST /v1/admin/backup, GET /v1/admin/digest): backup, digest.
#pragma once

#include <chrono>

#include "client/cli/args.h"

namespace kvatlas::cli {

// The flags `cluster` takes besides the global ones.
inline constexpr const char* kClusterFlags[] = {"http", "json"};

// Runs `kvatlas cluster <sub> ...` (args.positional[0] is the subcommand). The REST
// address is --http, else $KVATLAS_HTTP, else 127.0.0.1:7070. Prints the answer (a table
// or --json the server's JSON) and returns the exit code: 0 done, 1 unreachable or refused
// (the error printed), 2 bad command line (`usage` printed).
int RunCluster(const Args& args, std::chrono::milliseconds timeout, const char* usage);

}  // namespace kvatlas::cli
