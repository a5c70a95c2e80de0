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
}

}  // namespace
}  // namespace kvatlas::server
