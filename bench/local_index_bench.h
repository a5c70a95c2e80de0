// Part (c) of feed_bench (bench/local_index_bench.cc): kvatlas::LocalIndex lookup latency.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kvatlas/client/client.h"

namespace kvatlas::bench {

// Ingests `chains` 128-block chains through `client`, replicates them into a LocalIndex
// following the server at `rpc`, and prints lookup latency percentiles (idle, during a
// concurrent ingest, and through Client::Lookup for comparison).
// Ingests event(first) … event(first + n - 1), 16 per batch, 64 batches in flight; returns
// the last revision (0 on an error, printed).
Revision IngestEvents(Client& client, uint64_t first, uint64_t n,
                      const std::function<BlockEvent(uint64_t)>& event);

void LocalIndexLookups(Client& client, const std::string& rpc, uint64_t chains);

}  // namespace kvatlas::bench
