#include "server/service/metrics.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "kvatlas/common/protocol.h"

namespace kvatlas::server {
namespace {

// Label values escape backslash, double quote and newline (exposition format 0.0.4).
std::string Escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", value);
  return buf;
}

// Writes the HELP and TYPE lines of one metric family.
void Family(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void Sample(std::string* out, std::string_view name, std::string_view labels, double value) {
  *out += name;
  if (!labels.empty()) {
    *out += '{';
    *out += labels;
    *out += '}';
  }
  *out += ' ';
  *out += Number(value);
  *out += '\n';
}

// A metric family with one unlabelled sample.
void Single(std::string* out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  Family(out, name, type, help);
  Sample(out, name, "", value);
}

std::string Label(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + Escape(value) + "\"";
}

// A counter family with one sample per (label value → count) of `samples`.
template <typename Map>
void LabelledCounter(std::string* out, std::string_view name, std::string_view help,
                     std::string_view label, const Map& samples) {
  Family(out, name, "counter", help);
  for (const auto& [value, count] : samples) {
    Sample(out, name, Label(label, value), static_cast<double>(count));
  }
}

// Label of a binary-protocol message type number (protocol.h MessageType).
std::string_view RpcTypeName(size_t type) {
  return protocol::MessageTypeName(static_cast<protocol::MessageType>(type));
}

// Peer authentication: handshakes and verified internal calls, and every refusal by channel
// and reason (only those that happened: the label set is fixed, the series appear on use).
void RenderPeers(std::string* out, const PeerCounters& peers) {
  Single(out, "kvatlas_peer_handshakes_total", "counter",
         "Raft connections (accepted and opened) whose peer handshake passed.",
         static_cast<double>(peers.handshakes));
  Single(out, "kvatlas_peer_calls_verified_total", "counter",
         "Internal HTTP calls from other members whose signature verified.",
         static_cast<double>(peers.calls_verified));
  constexpr std::string_view kRefused = "kvatlas_peer_refusals_total";
  Family(out, kRefused, "counter",
         "Refused peer handshakes, internal calls and answers, by channel and reason.");
  for (size_t c = 0; c < kPeerChannels; ++c) {
    for (size_t r = 0; r < kPeerRefusals; ++r) {
      if (peers.refused[c][r] == 0) continue;
      Sample(out, kRefused,
             Label("channel", PeerChannelName(static_cast<PeerChannel>(c))) + "," +
                 Label("reason", PeerRefusalName(static_cast<PeerRefusal>(r))),
             static_cast<double>(peers.refused[c][r]));
    }
  }
}

}  // namespace

void Metrics::RecordRpcRequest(uint8_t type, StatusCode code) {
  const size_t t = std::min<size_t>(type, kRpcTypes - 1);
  const size_t c = std::min<size_t>(static_cast<size_t>(code), kRpcCodes - 1);
  rpc_requests_[t][c].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RpcConnectionOpened() {
  rpc_connections_open_.fetch_add(1, std::memory_order_relaxed);
  rpc_connections_total_.fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RpcConnectionClosed() {
  rpc_connections_open_.fetch_sub(1, std::memory_order_relaxed);
}

void Metrics::RecordRequest(std::string_view route, int status, std::optional<double> seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(route), status}];
  if (!seconds) return;
  auto it = latency_.find(route);
  if (it == latency_.end()) it = latency_.emplace(std::string(route), Histogram{}).first;
  Histogram& h = it->second;
  const double* bucket =
      std::lower_bound(std::begin(kLatencyBuckets), std::end(kLatencyBuckets), *seconds);
  if (bucket != std::end(kLatencyBuckets)) ++h.buckets[bucket - std::begin(kLatencyBuckets)];
  ++h.count;
  h.sum += *seconds;
}

void Metrics::RecordAuthFailure(std::string_view reason) {
  std::lock_guard lock(mu_);
  auto it = auth_failures_.find(reason);
  if (it == auth_failures_.end()) it = auth_failures_.emplace(std::string(reason), 0).first;
  ++it->second;
}

void Metrics::RecordAdminAction(std::string_view action, std::string_view outcome) {
  std::lock_guard lock(mu_);
  ++admin_actions_[{std::string(action), std::string(outcome)}];
}

void Metrics::RecordTokenReload(bool ok, size_t tokens) {
  std::lock_guard lock(mu_);
  ++token_reloads_[ok ? "ok" : "failed"];
  if (ok) auth_tokens_ = tokens;
}

void Metrics::SetAuthTokens(size_t tokens) {
  std::lock_guard lock(mu_);
  auth_tokens_ = tokens;
}

bool Metrics::RecordUnknownMedium(std::string_view medium) {
  std::lock_guard lock(mu_);
  auto it = unknown_media_.find(medium);
  if (it != unknown_media_.end()) {
    ++it->second;
    return false;
  }
  // Each label is a time series: bound what publishers can create.
  if (unknown_media_.size() >= kMaxMediumLabels) {
    ++unknown_media_["other"];
    return false;
  }
  unknown_media_.emplace(std::string(medium), 1);
  return true;
}

std::string Metrics::Render(const StateGauges& gauges) const {
  std::string out;
  {
    std::lock_guard lock(mu_);
    Family(&out, "kvatlas_http_requests_total", "counter",
           "HTTP requests answered, by route pattern and status code.");
    for (const auto& [key, count] : requests_) {
      Sample(&out, "kvatlas_http_requests_total",
             Label("route", key.first) + "," + Label("code", std::to_string(key.second)),
             static_cast<double>(count));
    }
    constexpr std::string_view kLatency = "kvatlas_http_request_duration_seconds";
    Family(&out, kLatency, "histogram",
           "Time from routing a request to writing its answer, by route pattern.");
    for (const auto& [route, h] : latency_) {
      const std::string route_label = Label("route", route);
      uint64_t cumulative = 0;
      for (size_t i = 0; i < kNumBuckets; ++i) {
        cumulative += h.buckets[i];
        Sample(&out, std::string(kLatency) + "_bucket",
               route_label + "," + Label("le", Number(kLatencyBuckets[i])),
               static_cast<double>(cumulative));
      }
      Sample(&out, std::string(kLatency) + "_bucket", route_label + "," + Label("le", "+Inf"),
             static_cast<double>(h.count));
      Sample(&out, std::string(kLatency) + "_sum", route_label, h.sum);
      Sample(&out, std::string(kLatency) + "_count", route_label, static_cast<double>(h.count));
    }
    LabelledCounter(&out, "kvatlas_events_unknown_medium_total",
                    "Accepted events whose medium is not a known name, by medium (mapped to "
                    "the nearest tier).",
                    "medium", unknown_media_);
    LabelledCounter(&out, "kvatlas_auth_failures_total",
                    "Requests and connections refused by access control (REST and binary "
                    "protocol), by reason.",
                    "reason", auth_failures_);
    Family(&out, "kvatlas_admin_actions_total", "counter",
           "Admin requests (registrations, cluster membership, leadership transfer) that "
           "passed access control, by action and outcome.");
    for (const auto& [key, count] : admin_actions_) {
      Sample(&out, "kvatlas_admin_actions_total",
             Label("action", key.first) + "," + Label("outcome", key.second),
             static_cast<double>(count));
    }
    LabelledCounter(&out, "kvatlas_auth_token_reloads_total",
                    "Token set reloads (SIGHUP), by outcome; a failed reload keeps the old set.",
                    "outcome", token_reloads_);
    Single(&out, "kvatlas_auth_tokens", "gauge",
           "Access tokens configured (0 with access control off).",
           static_cast<double>(auth_tokens_));
  }
  Family(&out, "kvatlas_rpc_requests_total", "counter",
         "Binary-protocol requests answered, by message type and status code.");
  for (size_t t = 0; t < kRpcTypes; ++t) {
    for (size_t c = 0; c < kRpcCodes; ++c) {
      const uint64_t count = rpc_requests_[t][c].load(std::memory_order_relaxed);
      if (count == 0) continue;
      Sample(&out, "kvatlas_rpc_requests_total",
             Label("type", RpcTypeName(t)) + "," +
                 Label("code", WireNameOf(static_cast<StatusCode>(c))),
             static_cast<double>(count));
    }
  }
  const ApplyCounters& a = gauges.applied;
  LabelledCounter(&out, "kvatlas_events_applied_total",
                  "Events (commands) applied to the state machine since start, by type.", "type",
                  std::map<std::string_view, uint64_t>{{"stored", a.stored_commands},
                                                       {"removed", a.removed_commands},
                                                       {"cleared", a.cleared_commands}});
  LabelledCounter(&out, "kvatlas_entry_changes_total",
                  "Index entries added, removed and evicted since start.", "change",
                  std::map<std::string_view, uint64_t>{{"added", a.entries_added},
                                                       {"removed", a.entries_removed},
                                                       {"evicted", a.entries_evicted}});

  LabelledCounter(&out, "kvatlas_index_write_lock_holds_total",
                  "Holds of the index's write lock by the applying thread (one per batch), all "
                  "and those over 1 ms: lookups wait for them.",
                  "duration",
                  std::map<std::string_view, uint64_t>{{"all", a.write_lock_holds},
                                                       {"over_1ms", a.write_lock_holds_over_1ms}});
  LabelledCounter(&out, "kvatlas_tls_handshake_failures_total",
                  "TLS handshakes that failed or timed out since start, by listener.", "listener",
                  std::map<std::string_view, uint64_t>{
                      {"http", tls_failures_http_.load(std::memory_order_relaxed)},
                      {"rpc", tls_failures_rpc_.load(std::memory_order_relaxed)}});
  const IndexStats& s = gauges.index;
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  const struct {
    std::string_view name;
    std::string_view type;
    std::string_view help;
    double value;
  } singles[] = {
      {"kvatlas_index_entries", "gauge", "Entries (block x holder x tier) in the index.",
       d(s.entries)},
      {"kvatlas_index_blocks", "gauge", "Distinct blocks in the index.", d(s.blocks)},
      {"kvatlas_index_holders", "gauge", "Holders (instance or backend, dp_rank) known.",
       d(s.holders)},
      {"kvatlas_index_contexts", "gauge", "Contexts (hash namespaces) known.", d(s.contexts)},
      {"kvatlas_index_aliases", "gauge", "Engine-hash aliases kept for removals.", d(s.aliases)},
      {"kvatlas_index_locations", "gauge", "Entries carrying a location descriptor.",
       d(s.locations)},
      {"kvatlas_index_memory_bytes", "gauge", "Bytes held by the index's tables and pools.",
       d(s.memory_bytes)},
      {"kvatlas_index_evicted_blocks_total", "counter",
       "Blocks evicted by the per-context entry cap since start.", d(s.evicted_blocks)},
      {"kvatlas_storage_bytes", "gauge", "Approximate on-disk size of the RocksDB database.",
       d(gauges.storage_bytes)},
      {"kvatlas_applied_revision", "gauge", "Revision of the last applied write batch.",
       d(gauges.revision)},
      {"kvatlas_applier_queue_depth", "gauge",
       "Write batches submitted over REST or RPC and not yet applied.", d(applier_queue_depth())},
      {"kvatlas_rpc_connections", "gauge", "Open binary-protocol connections.",
       d(rpc_connections_open_.load(std::memory_order_relaxed))},
      {"kvatlas_rpc_connections_total", "counter",
       "Binary-protocol connections accepted since start.",
       d(rpc_connections_total_.load(std::memory_order_relaxed))},
      {"kvatlas_rpc_buffered_bytes", "gauge",
       "Bytes held for incomplete large binary-protocol frames (of rpc_max_buffered_bytes).",
       d(rpc_buffered_bytes_.load(std::memory_order_relaxed))},
      {"kvatlas_index_write_lock_held_seconds_total", "counter",
       "Time the applying thread held the index's write lock, since start.",
       d(a.write_lock_held_ns) / 1e9},
      {"kvatlas_index_write_lock_hold_max_seconds", "gauge",
       "The longest hold of the index's write lock since start.",
       d(a.write_lock_hold_max_ns) / 1e9},
      {"kvatlas_holders_expired_total", "counter",
       "Holders whose entries were dropped because their lease expired, since start.",
       d(a.holders_expired)},
      {"kvatlas_holder_expiries_skipped_total", "counter",
       "Holder expiries skipped: the holder came back or is a registered publisher.",
       d(a.expiries_skipped)},
      {"kvatlas_applier_failed", "gauge",
       "1 once a storage write failed (the server takes no writes).",
       gauges.applier_failed ? 1.0 : 0.0},
      {"kvatlas_uptime_seconds", "gauge", "Seconds since the server started.",
       gauges.uptime_seconds},
  };
  for (const auto& m : singles) Single(&out, m.name, m.type, m.help, m.value);
  if (gauges.peers) RenderPeers(&out, *gauges.peers);
  return out;
}

}  // namespace kvatlas::server
