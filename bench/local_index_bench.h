// Part (c) of feed_bench (bench/local_index_bench.cc): kvatlas::LocalIndex lookup latency.
#pragma once

#include <cstdint>
#include <string>

#include "kvatlas/client/client.h"

namespace kvatlas::bench {

// Ingests `chains` 128-block chains through `client`, replicates them into a LocalIndex
// following the server at `rpc`, and prints lookup latency percentiles (idle, during a
// concurrent ingest, and through Client::Lookup for comparison).
void LocalIndexLookups(Client& client, const std::string& rpc, uint64_t chains);

}  // namespace kvatlas::bench
