#include "server/api/stats_json.h"

#include <nlohmann/json.hpp>

#include "kvatlas/common/json_codec.h"

namespace kvatlas::server {

std::string StatsJson(const ApiServices& api) {
  const StateGauges g = ReadGauges(api);
  const IndexStats& s = g.index;
  const ApplyCounters& a = g.applied;
  const nlohmann::json out = {
      {"revision", g.revision},
      {"uptime_seconds", g.uptime_seconds},
      {"hash_seed", api.machine->hash_seed()},
      {"index",
       {{"contexts", s.contexts},
        {"holders", s.holders},
        {"blocks", s.blocks},
        {"entries", s.entries},
        {"aliases", s.aliases},
        {"locations", s.locations},
        {"evicted_blocks", s.evicted_blocks},
        {"memory_bytes", s.memory_bytes}}},
      {"storage", {{"approximate_bytes", g.storage_bytes}}},
      {"applier",
       {{"queue_depth", api.metrics->applier_queue_depth()}, {"failed", g.applier_failed}}},
      {"applied",
       {{"stored", a.stored_commands},
        {"removed", a.removed_commands},
        {"cleared", a.cleared_commands},
        {"entries_added", a.entries_added},
        {"entries_removed", a.entries_removed},
        {"entries_evicted", a.entries_evicted}}}};
  return DumpJson(out);
}

}  // namespace kvatlas::server
