// The stats document of GET /v1/stats, also carried as text by the binary protocol's kStats
// answer (one schema for both APIs, docs/api.md §Stats). Reads state under the read lock;
// safe from any thread.
#pragma once

#include <string>

#include "server/api/routes.h"

namespace kvatlas::server {

// {"revision", "uptime_seconds", "hash_seed", "index": {...}, "storage": {...},
//  "applier": {...}, "applied": {...}} as compact JSON.
[[nodiscard]] std::string StatsJson(const ApiServices& api);

}  // namespace kvatlas::server
