#include "server/service/stats_service.h"

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>
#include <utility>

#include "kvatlas/common/json_codec.h"
#include "server/service/cluster_service.h"
#include "server/service/group_service.h"
#include "server/service/replica_audit_service.h"

namespace kvatlas::server {

StateGauges ReadGauges(const Services& services) {
  StateGauges gauges;
  std::tie(gauges.index, gauges.revision) =
      services.machine->Read([](const Index& index, Revision revision) {
        return std::make_pair(index.Stats(), revision);
      });
  gauges.applied = services.machine->counters();
  if (services.storage != nullptr) {
    gauges.storage_bytes = services.storage->ApproximateSizeBytes();
    gauges.storage_memory = services.storage->ApproximateMemoryUsage();
  }
  // A server hosting several groups: the index and storage figures are all groups' (the
  // revision and the applied counters stay group 1's: each group numbers its own).
  if (services.groups != nullptr) {
    for (const Services& group : *services.groups) {
      if (group.group == services.group) continue;
      const IndexStats more =
          group.machine->Read([](const Index& index, Revision) { return index.Stats(); });
      IndexStats& sum = gauges.index;
      sum.contexts += more.contexts;
      sum.holders += more.holders;
      sum.blocks += more.blocks;
      sum.entries += more.entries;
      sum.aliases += more.aliases;
      sum.locations += more.locations;
      sum.evicted_blocks += more.evicted_blocks;
      sum.memory_bytes += more.memory_bytes;
      if (group.storage != nullptr) {
        gauges.storage_bytes += group.storage->ApproximateSizeBytes();
        const Storage::MemoryUsage m = group.storage->ApproximateMemoryUsage();
        gauges.storage_memory.block_cache_bytes += m.block_cache_bytes;
        gauges.storage_memory.memtable_bytes += m.memtable_bytes;
        gauges.storage_memory.table_reader_bytes += m.table_reader_bytes;
        gauges.storage_memory.budget_bytes += m.budget_bytes;
        gauges.storage_memory.total_bytes += m.total_bytes;
      }
    }
  }
  gauges.heap = ReadHeapUsage();
  gauges.applier_failed = services.applier->failed();
  gauges.uptime_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - services.started).count();
  if (services.peers != nullptr) gauges.peers = services.peers->counters();
  if (services.log != nullptr) {
    gauges.cluster = services.log->GetStatus();
    gauges.log = services.log->GetMetrics();
  }
  gauges.min_free_disk_bytes = services.min_free_disk_bytes;
  if (!services.data_dir.empty()) {
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(services.data_dir, ec);
    if (!ec) {
      gauges.disk_free_bytes = space.available;
      gauges.disk_size_bytes = space.capacity;
    }
  }
  return gauges;
}

std::string StatsDocument(const Services& services) {
  const StateGauges g = ReadGauges(services);
  const IndexStats& s = g.index;
  const ApplyCounters& a = g.applied;
  nlohmann::json out = {
      {"revision", g.revision},
      {"uptime_seconds", g.uptime_seconds},
      {"hash_seed", services.machine->hash_seed()},
      {"index",
       {{"contexts", s.contexts},
        {"holders", s.holders},
        {"blocks", s.blocks},
        {"entries", s.entries},
        {"aliases", s.aliases},
        {"locations", s.locations},
        {"evicted_blocks", s.evicted_blocks},
        {"memory_bytes", s.memory_bytes}}},
      {"storage",
       {{"approximate_bytes", g.storage_bytes},
        {"memory",
         {{"total_bytes", g.storage_memory.total_bytes},
          {"block_cache_bytes", g.storage_memory.block_cache_bytes},
          {"memtable_bytes", g.storage_memory.memtable_bytes},
          {"table_reader_bytes", g.storage_memory.table_reader_bytes},
          {"budget_bytes", g.storage_memory.budget_bytes}}}}},
      {"heap",
       {{"allocator", HeapAllocatorName(g.heap.allocator)},
        {"in_use_bytes", g.heap.in_use_bytes},
        {"free_bytes", g.heap.free_bytes},
        {"mmapped_bytes", g.heap.mmapped_bytes}}},
      {"applier",
       {{"queue_depth", services.metrics->applier_queue_depth()}, {"failed", g.applier_failed}}},
      {"applied",
       {{"stored", a.stored_commands},
        {"removed", a.removed_commands},
        {"cleared", a.cleared_commands},
        {"entries_added", a.entries_added},
        {"entries_removed", a.entries_removed},
        {"entries_evicted", a.entries_evicted}}}};
  // Approximate mode's predicted blocks (docs/routing.md §Approximate mode).
  const PredictedStats p = services.machine->predicted().stats();
  out["predicted"] = {{"entries", p.entries},   {"max_entries", p.max_entries},
                      {"recorded", p.recorded}, {"expired", p.expired},
                      {"dropped", p.dropped},   {"replaced", p.replaced}};
  if (services.predictions != nullptr) {
    const PredictionRecorderStats r = services.predictions->stats();
    out["predicted"]["queue"] = {{"queued", r.queued},
                                 {"dropped", r.dropped},
                                 {"proposed", r.proposed},
                                 {"failed", r.failed},
                                 {"local", r.local},
                                 {"forwarded", r.forwarded},
                                 {"forward_failed", r.forward_failed},
                                 {"received", r.received}};
  }
  // The raft cluster as GET /v1/cluster shows it, so that binary-protocol clients (which
  // have kStats, not the REST route) see it too.
  if (services.log != nullptr) {
    if (Result<ClusterView> view = ViewCluster(services); view.has_value()) {
      out["cluster"] = ClusterViewJson(*view);
    }
  }
  return DumpJson(out);
}

std::string MetricsText(const Services& services) {
  std::string text = services.metrics->Render(ReadGauges(services));
  if (services.zmq != nullptr) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    text += RenderStreamMetrics(services.zmq->Streams(), now);
  }
  if (services.feed != nullptr) text += RenderFeedMetrics(services.feed->Stats());
  text += RenderAuditMetrics(services.machine->audit());
  if (Result<GroupsView> groups = ViewGroups(services); groups.has_value()) {
    text += RenderGroupMetrics(*groups);
  }
  return text;
}

}  // namespace kvatlas::server
