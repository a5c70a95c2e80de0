// `kvatlas cluster ...`: the raft cluster's REST admin endpoints (docs/api.md §Cluster)
// from the command line, over HTTP (cpp-httplib): status, groups, ready, add, remove, transfer,
// and the admin backup endpoints (POST /v1/admin/backup, GET /v1/admin/digest): backup, digest.
#pragma once

#include <chrono>
#include <string>

#include "client/cli/args.h"

namespace kvatlas::cli {

// Runs `kvatlas cluster <sub> ...` (args.positional[0] is the subcommand). The REST
// address is RestAddress(args). Prints the answer (a table or --json the server's JSON)
// and returns the exit code: 0 done, 1 unreachable or refused (the error printed), 2 bad
// command line (the usage error printed).
int RunCluster(const Args& args, std::chrono::milliseconds timeout);

// What `cluster <sub>` prints for the server's answer `document` (without --json). For
// status, a table of GET /v1/cluster: a header line, one row per member (ID ROLE STATE RAFT
// HTTP RPC APPLIED LAG CONTACT) and notes; for transfer, who leads now. Fields an older
// server does not send print as "-". A document that is not a JSON object is printed as is.
[[nodiscard]] std::string FormatClusterAnswer(const std::string& sub, const std::string& document);

}  // namespace kvatlas::cli
