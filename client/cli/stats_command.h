// `kvatlas stats` and `kvatlas ping` over the binary protocol.
#pragma once

#include <string>

#include "client/cli/args.h"
#include "client/cli/rpc_client.h"

namespace kvatlas::cli {

// Exit code 0 (printed), 1 (failure printed), 2 (usage error printed).
int RunStats(const Args& args, const RpcTarget& target);
int RunPing(const Args& args, const RpcTarget& target);

// The summary `kvatlas stats` prints for the statistics document (GET /v1/stats): the
// server's role and revision, the index, what it applied since it started and the average
// rates; "-" for a field the document lacks. A document that is not a JSON object is
// returned as is.
[[nodiscard]] std::string FormatStats(const std::string& document);

}  // namespace kvatlas::cli
