#include "server/zmq/stream_stats.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>

namespace kvatlas::server {

nlohmann::json StreamViewJson(const StreamView& view, int64_t now_unix_ms) {
  const StreamCounters& c = view.counters;
  auto get = [](const auto& counter) { return counter.load(std::memory_order_relaxed); };
  nlohmann::json j;
  j["key"] = view.key;
  j["mode"] = view.mode;
  j["endpoint"] = view.endpoint;
  j["replay_endpoint"] =
      view.replay_endpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(view.replay_endpoint);
  j["type"] = view.type;
  j["instance_id"] = view.instance_id;
  j["tenant_id"] = view.tenant_id;
  j["model"] = view.model;
  j["dp_rank"] = view.dp_rank;
  j["topic"] = view.topic;
  const int64_t last = get(c.last_sequence);
  j["last_seq"] = last < 0 ? nlohmann::json(nullptr) : nlohmann::json(last);
  const bool connecting = get(c.connecting);
  j["state"] = connecting ? "connecting" : get(c.replaying) ? "replaying" : "live";
  j["connecting_for_ms"] =
      connecting
          ? nlohmann::json(std::max<int64_t>(0, now_unix_ms - get(c.connecting_since_unix_ms)))
          : nlohmann::json(nullptr);
  const int64_t last_event = get(c.last_event_unix_ms);
  j["lag_seconds"] = last_event == 0
                         ? nlohmann::json(nullptr)
                         : nlohmann::json(static_cast<double>(now_unix_ms - last_event) / 1000.0);
  j["batches"] = get(c.batches_received);
  j["batches_applied"] = get(c.batches_applied);
  j["block_events"] = get(c.block_events);
  j["events"] = {{"stored", get(c.stored_events)},
                 {"removed", get(c.removed_events)},
                 {"cleared", get(c.cleared_events)}};
  j["skipped_events"] = get(c.skipped_events);
  j["unknown_fields"] = get(c.unknown_fields);
  j["skipped_namespace_events"] = get(c.skipped_namespace_events);
  j["decode_failures"] = get(c.decode_failures);
  j["malformed_messages"] = get(c.malformed_messages);
  j["apply_failures"] = get(c.apply_failures);
  j["refused_new_context_stores"] = get(c.refused_new_context_stores);
  j["duplicates"] = get(c.duplicates);
  j["gaps"] = get(c.gaps);
  j["lost_batches"] = get(c.lost_batches);
  j["replays"] = get(c.replays);
  j["replay_failures"] = get(c.replay_failures);
  j["replayed_batches"] = get(c.replayed_batches);
  j["restarts"] = get(c.restarts);
  j["reconnects"] = get(c.reconnects);
  j["report_mode"] = view.report_mode;
  j["stored_blocks"] = get(c.stored_blocks);
  j["repeated_stores"] = get(c.repeated_stores);
  j["removed_blocks"] = get(c.removed_blocks);
  j["unheld_removes"] = get(c.unheld_removes);
  auto text_or_null = [](const std::string& text) {
    return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
  };
  j["error"] = text_or_null(view.error());
  j["last_error"] = text_or_null(view.last_error());
  j["report_mode_warning"] = text_or_null(view.report_mode_warning());
  return j;
}

std::string ReportModeMismatch(EngineType engine, ReportMode mode, const StreamTally& tally) {
  if (engine != EngineType::kVllm) return "";
  if (mode == ReportMode::kIncremental && tally.stored_blocks >= kMinTalliedBlocks &&
      tally.held_stores * 2 >= tally.stored_blocks) {
    return std::to_string(tally.held_stores) + " of " + std::to_string(tally.stored_blocks) +
           " stored blocks were already held: the engine looks like it re-reports prefix hits "
           "(kv_cache_report_mode=full), which incremental mode counts as new copies that "
           "outlive their eviction; register the publisher with report_mode \"full\"";
  }
  if (mode == ReportMode::kFull && tally.removed_blocks >= kMinTalliedBlocks &&
      tally.unheld_removes * 5 >= tally.removed_blocks) {
    return std::to_string(tally.unheld_removes) + " of " + std::to_string(tally.removed_blocks) +
           " removed blocks were not held: full mode takes stores without a parent as "
           "re-reports, so duplicate copies were counted once; if no request sets "
           "kv_cache_report_mode=full, register the publisher with report_mode \"incremental\" "
           "(lost batches show the same way: see gaps and lost_batches)";
  }
  return "";
}

namespace {

std::string EscapeLabel(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string RenderStreamMetrics(std::span<const std::shared_ptr<const StreamView>> views,
                                int64_t now_unix_ms) {
  std::string out;
  auto family = [&](std::string_view name, std::string_view type, std::string_view help,
                    const std::function<void(const StreamView&, const std::string&)>& samples) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n";
    out += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
    for (const auto& view : views) samples(*view, "stream=\"" + EscapeLabel(view->key) + "\"");
  };
  auto sample = [&](std::string_view name, const std::string& labels, double value) {
    out += std::string(name) + "{" + labels + "} " + nlohmann::json(value).dump() + "\n";
  };
  auto counter = [&](std::string_view name, std::string_view help,
                     std::atomic<uint64_t> StreamCounters::*member) {
    family(name, "counter", help, [&](const StreamView& v, const std::string& labels) {
      sample(name, labels, static_cast<double>((v.counters.*member).load()));
    });
  };
  out += "# HELP kvatlas_zmq_streams Engine event streams followed.\n";
  out += "# TYPE kvatlas_zmq_streams gauge\nkvatlas_zmq_streams " + std::to_string(views.size()) +
         "\n";
  family("kvatlas_zmq_events_applied_total", "counter", "Engine events applied, by type.",
         [&](const StreamView& v, const std::string& labels) {
           sample("kvatlas_zmq_events_applied_total", labels + ",event_type=\"stored\"",
                  static_cast<double>(v.counters.stored_events.load()));
           sample("kvatlas_zmq_events_applied_total", labels + ",event_type=\"removed\"",
                  static_cast<double>(v.counters.removed_events.load()));
           sample("kvatlas_zmq_events_applied_total", labels + ",event_type=\"cleared\"",
                  static_cast<double>(v.counters.cleared_events.load()));
         });
  family("kvatlas_zmq_batches_total", "counter", "Engine event batches, by outcome.",
         [&](const StreamView& v, const std::string& labels) {
           const StreamCounters& c = v.counters;
           const std::pair<const char*, uint64_t> outcomes[] = {
               {"received", c.batches_received.load()},
               {"applied", c.batches_applied.load()},
               {"duplicate", c.duplicates.load()},
               {"decode_failed", c.decode_failures.load()},
               {"malformed", c.malformed_messages.load()},
               {"apply_failed", c.apply_failures.load()},
               {"lost", c.lost_batches.load()}};
           for (const auto& [status, n] : outcomes) {
             sample("kvatlas_zmq_batches_total", labels + ",status=\"" + status + "\"",
                    static_cast<double>(n));
           }
         });
  counter("kvatlas_zmq_block_events_total", "Blocks named by applied stored/removed events.",
          &StreamCounters::block_events);
  counter("kvatlas_zmq_skipped_events_total",
          "Events skipped: unknown tag, malformed, or not mappable to blocks.",
          &StreamCounters::skipped_events);
  counter("kvatlas_zmq_unknown_fields_total", "Event fields ignored because unknown.",
          &StreamCounters::unknown_fields);
  counter("kvatlas_zmq_skipped_namespace_events_total",
          "Stored events skipped because their cache salt could not be read exactly.",
          &StreamCounters::skipped_namespace_events);
  counter("kvatlas_zmq_stored_blocks_total",
          "Blocks placed by the stream's applied stores (copies and reports).",
          &StreamCounters::stored_blocks);
  counter("kvatlas_zmq_repeated_stores_total",
          "Stored blocks the stream's holder already held in that tier (re-reports or "
          "duplicate copies).",
          &StreamCounters::repeated_stores);
  counter("kvatlas_zmq_removed_blocks_total", "Block hashes named by the stream's applied removes.",
          &StreamCounters::removed_blocks);
  counter("kvatlas_zmq_unheld_removes_total",
          "Removed block hashes the stream's holder did not hold.",
          &StreamCounters::unheld_removes);
  counter("kvatlas_zmq_gaps_total", "Sequence gaps detected.", &StreamCounters::gaps);
  counter("kvatlas_zmq_replays_total", "Replay requests sent.", &StreamCounters::replays);
  counter("kvatlas_zmq_replay_failures_total", "Replays that timed out or returned nothing.",
          &StreamCounters::replay_failures);
  counter("kvatlas_zmq_replayed_batches_total", "Batches received over replay.",
          &StreamCounters::replayed_batches);
  counter("kvatlas_zmq_restarts_total", "Publisher restarts detected.", &StreamCounters::restarts);
  counter("kvatlas_zmq_reconnects_total",
          "Connections to a registered publisher lost after the stream was live (the stream "
          "went back to connecting).",
          &StreamCounters::reconnects);
  family("kvatlas_zmq_stream_connecting", "gauge",
         "1 while a registered stream has no confirmed connection to its publisher (since it "
         "was registered or lost its connection).",
         [&](const StreamView& v, const std::string& labels) {
           sample("kvatlas_zmq_stream_connecting", labels,
                  v.counters.connecting.load() ? 1.0 : 0.0);
         });
  family("kvatlas_zmq_stream_lag_seconds", "gauge",
         "Seconds since the stream's last message (NaN before the first).",
         [&](const StreamView& v, const std::string& labels) {
           const int64_t last = v.counters.last_event_unix_ms.load();
           out += "kvatlas_zmq_stream_lag_seconds{" + labels + "} " +
                  (last == 0
                       ? std::string("NaN")
                       : nlohmann::json(static_cast<double>(now_unix_ms - last) / 1000.0).dump()) +
                  "\n";
         });
  return out;
}

}  // namespace kvatlas::server
