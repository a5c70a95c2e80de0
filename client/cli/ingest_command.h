// `kvatlas ingest [FILE | -]`: applies engine events, one JSON event (or array of them) per
// line, in batches over the binary protocol, a few batches in flight; with a progress line
// on stderr when it is a terminal (or with --progress).
#pragma once

#include <cstdint>
#include <string>

#include "client/cli/args.h"
#include "client/cli/rpc_client.h"

namespace kvatlas::cli {

// Exit code 0 (totals printed), 1 (a bad line or a refused batch: printed, with the events
// applied before it), 2 (usage error printed).
int RunIngest(const Args& args, const RpcTarget& target);

// The progress line: with the input's size known (`total_bytes` > 0), a bar and the share
// of the input applied so far ("[#####---------------]  25%  1000 events, 1000 blocks");
// else the counts alone ("1000 events, 1000 blocks").
[[nodiscard]] std::string ProgressLine(uint64_t applied_bytes, uint64_t total_bytes,
                                       uint64_t events, uint64_t blocks);

}  // namespace kvatlas::cli
