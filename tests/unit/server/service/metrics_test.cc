#include "server/service/metrics.h"

#include <doctest/doctest.h>

namespace kvatlas::server {
namespace {

bool Contains(const std::string& text, std::string_view line) {
  return text.find(line) != std::string::npos;
}

TEST_SUITE("Metrics") {
  TEST_CASE("Metrics: request counts and cumulative latency buckets per route") {
    Metrics metrics;
    metrics.RecordRequest("/v1/lookup", 200, 0.0003);
    metrics.RecordRequest("/v1/lookup", 200, 0.002);
    metrics.RecordRequest("/v1/lookup", 400, 0.00005);
    metrics.RecordRequest("unmatched", 400, std::nullopt);
    const std::string text = metrics.Render(StateGauges{});
    CHECK(Contains(text, "# TYPE kvatlas_http_requests_total counter\n"));
    CHECK(Contains(text, "kvatlas_http_requests_total{route=\"/v1/lookup\",code=\"200\"} 2\n"));
    CHECK(Contains(text, "kvatlas_http_requests_total{route=\"/v1/lookup\",code=\"400\"} 1\n"));
    CHECK(Contains(text, "kvatlas_http_requests_total{route=\"unmatched\",code=\"400\"} 1\n"));
    constexpr std::string_view kBucket = "kvatlas_http_request_duration_seconds_bucket";
    CHECK(Contains(text, std::string(kBucket) + "{route=\"/v1/lookup\",le=\"0.0001\"} 1\n"));
    CHECK(Contains(text, std::string(kBucket) + "{route=\"/v1/lookup\",le=\"0.0005\"} 2\n"));
    CHECK(Contains(text, std::string(kBucket) + "{route=\"/v1/lookup\",le=\"+Inf\"} 3\n"));
    CHECK(Contains(text, "kvatlas_http_request_duration_seconds_count{route=\"/v1/lookup\"} 3\n"));
    CHECK_FALSE(Contains(text, "_count{route=\"unmatched\"}"));
  }

  TEST_CASE("Metrics: state gauges and applied events come from the snapshot") {
    Metrics metrics;
    StateGauges gauges;
    gauges.index.entries = 12;
    gauges.index.contexts = 2;
    gauges.applied.stored_commands = 5;
    gauges.applied.cleared_commands = 1;
    gauges.revision = 44;
    gauges.storage_bytes = 4096;
    gauges.storage_memory.block_cache_bytes = 3 << 20;
    gauges.storage_memory.memtable_bytes = 2 << 20;
    gauges.storage_memory.table_reader_bytes = 512;
    gauges.storage_memory.budget_bytes = 96 << 20;
    gauges.heap.in_use_bytes = 7 << 20;
    gauges.heap.free_bytes = 1 << 20;
    gauges.applied.write_lock_holds = 7;
    gauges.applied.write_lock_holds_over_1ms = 2;
    gauges.applied.write_lock_held_ns = 5'500'000;
    gauges.applied.write_lock_hold_max_ns = 2'500'000;
    metrics.ApplyStarted();
    const std::string text = metrics.Render(gauges);
    CHECK(Contains(text, "kvatlas_index_entries 12\n"));
    CHECK(Contains(text, "kvatlas_index_contexts 2\n"));
    CHECK(Contains(text, "kvatlas_events_applied_total{type=\"stored\"} 5\n"));
    CHECK(Contains(text, "kvatlas_events_applied_total{type=\"cleared\"} 1\n"));
    CHECK(Contains(text, "kvatlas_applied_revision 44\n"));
    CHECK(Contains(text, "kvatlas_storage_bytes 4096\n"));
    CHECK(Contains(text, "kvatlas_storage_memory_bytes{kind=\"block_cache\"} 3145728\n"));
    CHECK(Contains(text, "kvatlas_storage_memory_bytes{kind=\"memtables\"} 2097152\n"));
    CHECK(Contains(text, "kvatlas_storage_memory_bytes{kind=\"table_readers\"} 512\n"));
    CHECK(Contains(text, "kvatlas_storage_memory_budget_bytes 100663296\n"));
    CHECK(Contains(text, "kvatlas_heap_bytes{kind=\"in_use\"} 7340032\n"));
    CHECK(Contains(text, "kvatlas_heap_bytes{kind=\"free\"} 1048576\n"));
    CHECK(Contains(text, "kvatlas_applier_queue_depth 1\n"));
    CHECK(Contains(text, "kvatlas_index_write_lock_holds_total{duration=\"all\"} 7\n"));
    CHECK(Contains(text, "kvatlas_index_write_lock_holds_total{duration=\"over_1ms\"} 2\n"));
    CHECK(Contains(text, "kvatlas_index_write_lock_held_seconds_total 0.0055\n"));
    CHECK(Contains(text, "kvatlas_index_write_lock_hold_max_seconds 0.0025\n"));
    metrics.ApplyFinished();
    CHECK(Contains(metrics.Render(gauges), "kvatlas_applier_queue_depth 0\n"));
  }

  TEST_CASE("Metrics: unknown media are labelled once each, escaped, and bounded") {
    Metrics metrics;
    CHECK(metrics.RecordUnknownMedium("cxl \"pool\""));
    CHECK_FALSE(metrics.RecordUnknownMedium("cxl \"pool\""));
    CHECK(Contains(metrics.Render({}),
                   "kvatlas_events_unknown_medium_total{medium=\"cxl \\\"pool\\\"\"} 2\n"));
    for (size_t i = 0; i < Metrics::kMaxMediumLabels + 5; ++i) {
      (void)metrics.RecordUnknownMedium("m" + std::to_string(i));
    }
    const std::string text = metrics.Render({});
    CHECK(Contains(text, "kvatlas_events_unknown_medium_total{medium=\"other\"} 6\n"));
  }

  TEST_CASE("Metrics: binary-protocol latency by type and lookup hit counters") {
    Metrics metrics;
    metrics.RecordRpcLatency(2, 0.0002);  // kLookup
    metrics.RecordRpcLatency(2, 0.02);
    metrics.RecordLookup(10, 4);
    metrics.RecordLookup(6, 6);
    const std::string text = metrics.Render({});
    constexpr std::string_view kBucket = "kvatlas_rpc_request_duration_seconds_bucket";
    CHECK(Contains(text, "# TYPE kvatlas_rpc_request_duration_seconds histogram\n"));
    CHECK(Contains(text, std::string(kBucket) + "{type=\"lookup\",le=\"0.00025\"} 1\n"));
    CHECK(Contains(text, std::string(kBucket) + "{type=\"lookup\",le=\"0.025\"} 2\n"));
    CHECK(Contains(text, std::string(kBucket) + "{type=\"lookup\",le=\"+Inf\"} 2\n"));
    CHECK(Contains(text, "kvatlas_rpc_request_duration_seconds_count{type=\"lookup\"} 2\n"));
    CHECK_FALSE(Contains(text, "{type=\"ingest\",le="));  // types never seen: no series
    CHECK(Contains(text, "kvatlas_lookups_total 2\n"));
    CHECK(Contains(text, "kvatlas_lookup_blocks_queried_total 16\n"));
    CHECK(Contains(text, "kvatlas_lookup_blocks_matched_total 10\n"));
  }

  TEST_CASE("Metrics: raft status, member lag on the leader, log histograms and disk") {
    Metrics metrics;
    StateGauges gauges;
    CHECK_FALSE(Contains(metrics.Render(gauges), "kvatlas_raft_term"));  // no replication
    CHECK_FALSE(Contains(metrics.Render(gauges), "kvatlas_disk_free_bytes"));
    ClusterStatus c;
    c.state = "leader";
    c.leader_id = 2;
    c.term = 7;
    c.commit_index = 100;
    c.applied_index = 97;
    c.last_index = 105;
    c.members = {{1, "a", "voter", 90, false, 3000},
                 {2, "b", "voter", 105, {}, {}},
                 {3, "c", "spare", {}, true, 20}};
    gauges.cluster = c;
    LogMetrics log;
    log.leadership_changes = 3;
    log.appends_repaired = 2;
    Histogram commit;
    commit.Observe(0.003);
    log.commit_latency = commit.Read();
    log.snapshots_taken = 1;
    log.snapshot_failures = 1;
    log.failed_snapshot_index = 64;
    log.last_snapshot_bytes = 4096;
    log.log_memory_bytes = 2048;
    log.log_memory_entries = 16;
    gauges.log = log;
    gauges.disk_free_bytes = 1000;
    gauges.disk_size_bytes = 5000;
    gauges.min_free_disk_bytes = 100;
    const std::string text = metrics.Render(gauges);
    CHECK(Contains(text, "kvatlas_raft_term 7\n"));
    CHECK(Contains(text, "kvatlas_raft_commit_index 100\n"));
    CHECK(Contains(text, "kvatlas_raft_applied_index 97\n"));
    CHECK(Contains(text, "kvatlas_raft_apply_lag_entries 3\n"));
    CHECK(Contains(text, "kvatlas_raft_leader_id 2\n"));
    CHECK(Contains(text, "kvatlas_raft_is_leader 1\n"));
    CHECK(Contains(text, "kvatlas_raft_state{state=\"leader\"} 1\n"));
    CHECK(Contains(text, "kvatlas_raft_members{role=\"voter\"} 2\n"));
    CHECK(Contains(text, "kvatlas_raft_members{role=\"spare\"} 1\n"));
    CHECK(Contains(text, "kvatlas_raft_member_match_index{member=\"1\"} 90\n"));
    CHECK(Contains(text, "kvatlas_raft_member_lag_entries{member=\"1\"} 15\n"));
    CHECK(Contains(text, "kvatlas_raft_member_lag_entries{member=\"2\"} 0\n"));
    CHECK_FALSE(Contains(text, "match_index{member=\"3\"}"));  // progress unknown
    CHECK_FALSE(Contains(text, "lag_entries{member=\"3\"}"));
    CHECK(Contains(text, "kvatlas_raft_member_reachable{member=\"1\"} 0\n"));
    CHECK(Contains(text, "kvatlas_raft_member_reachable{member=\"3\"} 1\n"));
    CHECK_FALSE(Contains(text, "kvatlas_raft_member_reachable{member=\"2\"}"));  // itself
    CHECK(Contains(text, "kvatlas_raft_leadership_changes_total 3\n"));
    CHECK(Contains(text, "kvatlas_raft_appends_repaired_total 2\n"));
    CHECK(Contains(text, "kvatlas_raft_commit_duration_seconds_bucket{le=\"0.0025\"} 0\n"));
    CHECK(Contains(text, "kvatlas_raft_commit_duration_seconds_bucket{le=\"0.005\"} 1\n"));
    CHECK(Contains(text, "kvatlas_raft_commit_duration_seconds_count 1\n"));
    CHECK(Contains(text, "kvatlas_raft_snapshots_total 1\n"));
    CHECK(Contains(text, "kvatlas_raft_snapshot_failures_total 1\n"));
    CHECK(Contains(text, "kvatlas_raft_snapshot_failed 1\n"));
    CHECK(Contains(text, "kvatlas_raft_snapshot_bytes 4096\n"));
    CHECK(Contains(text, "kvatlas_raft_log_memory_bytes 2048\n"));
    CHECK(Contains(text, "kvatlas_raft_log_memory_entries 16\n"));
    CHECK(Contains(text, "kvatlas_raft_snapshot_duration_seconds_count 0\n"));
    CHECK(Contains(text, "kvatlas_disk_free_bytes 1000\n"));
    CHECK(Contains(text, "kvatlas_disk_size_bytes 5000\n"));
    CHECK(Contains(text, "kvatlas_disk_min_free_bytes 100\n"));
  }
}

}  // namespace
}  // namespace kvatlas::server
