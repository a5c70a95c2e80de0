// Shapes an Index::Lookup result into the answer both lookup dialects encode: holders
// grouped into instances (one id over its dp ranks, GPU/CPU/DISK tiers) and shared
// backends (SHARED tier, with locations). Pure function: safe from any thread.
#pragma once

#include <string_view>

#include "kvatlas/common/json_codec.h"
#include "server/index/index.h"

namespace kvatlas::server {

// An instance's values are the max over its ranks; ranks and instances without a GPU/CPU/
// DISK match are left out. Instances are ordered by longest match (descending), then id;
// shared matches by blocks (descending), then backend id and rank. When `instance_id` is
// not empty only that instance is reported, with zeros if it matched nothing (a router
// asking about one instance gets an answer about it); shared backends are all kept.
[[nodiscard]] LookupAnswer BuildLookupAnswer(const LookupResult& result, const ContextKey& context,
                                             std::string_view instance_id, Revision revision);

}  // namespace kvatlas::server
