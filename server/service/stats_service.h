// The server's statistics: the stats document of GET /v1/stats, also carried as text by the
// binary protocol's kStats answer (one schema for both APIs, docs/api.md §Stats), and the
// Prometheus text of GET /metrics. Reads state under the read lock; safe from any thread.
#pragma once

#include <string>

#include "server/service/metrics.h"
#include "server/service/services.h"

namespace kvatlas::server {

// Index stats and the revision they reflect (read together under the read lock), apply
// counters, storage size, applier health and uptime.
[[nodiscard]] StateGauges ReadGauges(const Services& services);

// {"revision", "uptime_seconds", "hash_seed", "index": {...}, "storage": {...},
//  "applier": {...}, "applied": {...}} as compact JSON.
[[nodiscard]] std::string StatsDocument(const Services& services);

// Every metric of the process in the Prometheus text exposition format 0.0.4: requests and
// state (Metrics::Render), engine streams and the change feed when they run.
[[nodiscard]] std::string MetricsText(const Services& services);

}  // namespace kvatlas::server
