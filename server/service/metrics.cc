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

// One unlabelled metric, for tables of them.
struct SingleMetric {
  std::string_view name;
  std::string_view type;
  std::string_view help;
  double value;
};

void Single(std::string* out, const SingleMetric& metric) {
  Single(out, metric.name, metric.type, metric.help, metric.value);
}

std::string Label(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + Escape(value) + "\"";
}

// A family of `type` with one sample per (label value → figure) of `samples`.
template <typename Map>
void LabelledFamily(std::string* out, std::string_view name, std::string_view type,
                    std::string_view help, std::string_view label, const Map& samples) {
  Family(out, name, type, help);
  for (const auto& [value, figure] : samples) {
    Sample(out, name, Label(label, value), static_cast<double>(figure));
  }
}

template <typename Map>
void LabelledCounter(std::string* out, std::string_view name, std::string_view help,
                     std::string_view label, const Map& samples) {
  LabelledFamily(out, name, "counter", help, label, samples);
}

// The _bucket, _sum and _count samples of one histogram (the family line is the caller's).
// +Inf is at least the last bucket: a scrape during an Observe may see a bucket first.
void HistogramSamples(std::string* out, std::string_view name, const std::string& labels,
                      const HistogramData& h) {
  const std::string prefix = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kNumLatencyBuckets; ++i) {
    cumulative += h.buckets[i];
    Sample(out, std::string(name) + "_bucket", prefix + Label("le", Number(kLatencyBuckets[i])),
           static_cast<double>(cumulative));
  }
  const uint64_t count = std::max(cumulative, h.count);
  Sample(out, std::string(name) + "_bucket", prefix + Label("le", "+Inf"),
         static_cast<double>(count));
  Sample(out, std::string(name) + "_sum", labels, h.sum);
  Sample(out, std::string(name) + "_count", labels, static_cast<double>(count));
}

// A histogram family with one unlabelled histogram.
void SingleHistogram(std::string* out, std::string_view name, std::string_view help,
                     const HistogramData& h) {
  Family(out, name, "histogram", help);
  HistogramSamples(out, name, "", h);
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

// The data dir's file system, when known.
void RenderDisk(std::string* out, const StateGauges& g) {
  if (g.disk_free_bytes) {
    Single(out, "kvatlas_disk_free_bytes", "gauge",
           "Bytes available to the server on the data dir's file system.",
           static_cast<double>(*g.disk_free_bytes));
  }
  if (g.disk_size_bytes) {
    Single(out, "kvatlas_disk_size_bytes", "gauge", "Size of the data dir's file system.",
           static_cast<double>(*g.disk_size_bytes));
  }
  Single(out, "kvatlas_disk_min_free_bytes", "gauge",
         "min_free_disk_bytes: below this much free space, writes are refused.",
         static_cast<double>(g.min_free_disk_bytes));
}

// Raft as this server sees it; on the leader, each member's replication progress.
void RenderCluster(std::string* out, const ClusterStatus& c) {
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  Single(out, "kvatlas_raft_term", "gauge", "Current raft term.", d(c.term));
  Single(out, "kvatlas_raft_commit_index", "gauge", "Highest log index known committed.",
         d(c.commit_index));
  Single(out, "kvatlas_raft_applied_index", "gauge",
         "Highest log index applied to this server's state.", d(c.applied_index));
  Single(out, "kvatlas_raft_last_index", "gauge", "Highest index in this server's log.",
         d(c.last_index));
  Single(out, "kvatlas_raft_apply_lag_entries", "gauge",
         "Committed log entries not yet applied here (commit index - applied index).",
         d(c.commit_index > c.applied_index ? c.commit_index - c.applied_index : 0));
  Single(out, "kvatlas_raft_leader_id", "gauge", "Id of the leader this server knows; 0: none.",
         d(c.leader_id));
  Single(out, "kvatlas_raft_is_leader", "gauge", "1 when this server is the leader.",
         c.state == "leader" ? 1.0 : 0.0);
  constexpr std::string_view kState = "kvatlas_raft_state";
  Family(out, kState, "gauge", "This server's raft state: 1 for the current one.");
  for (std::string_view state : {"leader", "follower", "candidate", "unavailable"}) {
    Sample(out, kState, Label("state", state), c.state == state ? 1.0 : 0.0);
  }
  std::map<std::string, uint64_t> roles = {{"voter", 0}, {"standby", 0}, {"spare", 0}};
  for (const ClusterMember& m : c.members) ++roles[m.role];
  Family(out, "kvatlas_raft_members", "gauge", "Members of the configuration, by role.");
  for (const auto& [role, count] : roles) {
    Sample(out, "kvatlas_raft_members", Label("role", role), d(count));
  }
  constexpr std::string_view kMatch = "kvatlas_raft_member_match_index";
  constexpr std::string_view kLag = "kvatlas_raft_member_lag_entries";
  Family(out, kMatch, "gauge", "Leader only: highest log index known replicated on each member.");
  for (const ClusterMember& m : c.members) {
    if (m.match_index)
      Sample(out, kMatch, Label("member", std::to_string(m.id)), d(*m.match_index));
  }
  Family(out, kLag, "gauge",
         "Leader only: log entries each member lacks (leader's last index - member's match "
         "index).");
  for (const ClusterMember& m : c.members) {
    if (const std::optional<uint64_t> lag = MemberLagEntries(c, m)) {
      Sample(out, kLag, Label("member", std::to_string(m.id)), d(*lag));
    }
  }
  constexpr std::string_view kReachable = "kvatlas_raft_member_reachable";
  Family(out, kReachable, "gauge",
         "Leader only: 1 when the leader heard from the member within an election timeout, "
         "0 when not (the leader itself has no sample).");
  for (const ClusterMember& m : c.members) {
    if (m.reachable) {
      Sample(out, kReachable, Label("member", std::to_string(m.id)), *m.reachable ? 1.0 : 0.0);
    }
  }
}

void RenderLog(std::string* out, const LogMetrics& m) {
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  const SingleMetric singles[] = {
      {"kvatlas_raft_leadership_changes_total", "counter",
       "Times this server saw the leader change (sampled every 50 ms).", d(m.leadership_changes)},
      {"kvatlas_raft_appends_repaired_total", "counter",
       "AppendEntries this follower received with their previous entry below its snapshot, "
       "rewritten to start at the snapshot (the raft library would refuse them).",
       d(m.appends_repaired)},
      {"kvatlas_raft_snapshots_total", "counter",
       "Raft snapshots taken since start (attempts: the failed ones too).", d(m.snapshots_taken)},
      {"kvatlas_raft_snapshot_failures_total", "counter",
       "Raft snapshots taken since start that did not become the log's snapshot (their write "
       "or serialisation failed): the log was not compacted.",
       d(m.snapshot_failures)},
      {"kvatlas_raft_snapshot_failed", "gauge",
       "1 while the last raft snapshot attempt failed (the log is not being compacted).",
       m.failed_snapshot_index != 0 ? 1.0 : 0.0},
      {"kvatlas_raft_log_memory_bytes", "gauge",
       "What the raft library holds of its log in memory (entries since the last snapshot and "
       "the trailing ones, with a per-entry overhead), as last measured; bounded by "
       "raft_snapshot_log_bytes or 1/16 of the last snapshot. 0 when that budget is off.",
       d(m.log_memory_bytes)},
      {"kvatlas_raft_log_memory_entries", "gauge",
       "Entries of the raft log held in memory, as last measured.", d(m.log_memory_entries)},
      {"kvatlas_raft_snapshot_bytes", "gauge",
       "Size of the last raft snapshot taken here (0 before the first): the raft log may hold "
       "1/16 of it in memory before the next.",
       d(m.last_snapshot_bytes)},
      {"kvatlas_raft_snapshot_restores_total", "counter",
       "Raft snapshots restored (at start, or sent by the leader) since start.",
       d(m.snapshots_restored)},
  };
  for (const auto& single : singles) Single(out, single);
  SingleHistogram(out, "kvatlas_raft_commit_duration_seconds",
                  "Proposals made on this server (the leader), from proposal to applied here.",
                  m.commit_latency);
  SingleHistogram(out, "kvatlas_raft_snapshot_duration_seconds",
                  "Raft snapshots, from capturing the state to the snapshot written.",
                  m.snapshot_duration);
  SingleHistogram(out, "kvatlas_raft_snapshot_restore_duration_seconds",
                  "Time to restore the state from a raft snapshot.", m.restore_duration);
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
  if (it == latency_.end()) it = latency_.try_emplace(std::string(route)).first;
  it->second.Observe(*seconds);
}

void Metrics::RecordRpcLatency(uint8_t type, double seconds) {
  rpc_latency_[std::min<size_t>(type, kRpcTypes - 1)].Observe(seconds);
}

void Metrics::RecordLookup(uint64_t blocks_queried, uint64_t blocks_matched) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  lookup_blocks_queried_.fetch_add(blocks_queried, std::memory_order_relaxed);
  lookup_blocks_matched_.fetch_add(blocks_matched, std::memory_order_relaxed);
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

void Metrics::RecordGroupForward(uint32_t group, bool ok) {
  std::lock_guard lock(mu_);
  ++group_forwards_[{group, ok}];
}

void Metrics::RecordGroupRead(uint32_t group, bool ok) {
  std::lock_guard lock(mu_);
  ++group_reads_[{group, ok}];
}

void Metrics::RecordReplicaDropped(uint32_t group) {
  std::lock_guard lock(mu_);
  ++replicas_dropped_[group];
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
      HistogramSamples(&out, kLatency, Label("route", route), h.Read());
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
    const auto by_group_and_outcome = [&out](std::string_view name, std::string_view help,
                                             const auto& counts) {
      if (counts.empty()) return;
      Family(&out, name, "counter", help);
      for (const auto& [key, count] : counts) {
        Sample(&out, name,
               Label("group", std::to_string(key.first)) + "," +
                   Label("outcome", key.second ? "ok" : "failed"),
               static_cast<double>(count));
      }
    };
    by_group_and_outcome("kvatlas_group_forwarded_batches_total",
                         "Write parts forwarded to the leader of a raft group this server does "
                         "not lead, by group and outcome (applied there: ok).",
                         group_forwards_);
    by_group_and_outcome("kvatlas_group_forwarded_reads_total",
                         "Reads of a raft group this server holds no replica of, sent on to a "
                         "member, by group and outcome (answered there: ok).",
                         group_reads_);
    if (!replicas_dropped_.empty()) {
      Family(&out, "kvatlas_replicas_dropped_total", "counter",
             "Copies of a raft group this server no longer holds that it dropped (its state, "
             "storage and raft log emptied), by group.");
      for (const auto& [group, count] : replicas_dropped_) {
        Sample(&out, "kvatlas_replicas_dropped_total", Label("group", std::to_string(group)),
               static_cast<double>(count));
      }
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
  constexpr std::string_view kRpcLatency = "kvatlas_rpc_request_duration_seconds";
  Family(&out, kRpcLatency, "histogram",
         "Time from decoding a binary-protocol request to appending its answer (an ingest: to "
         "its batch applied), by message type.");
  for (size_t t = 0; t < kRpcTypes; ++t) {
    const HistogramData h = rpc_latency_[t].Read();
    if (h.count == 0) continue;
    HistogramSamples(&out, kRpcLatency, Label("type", RpcTypeName(t)), h);
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

  LabelledCounter(&out, "kvatlas_store_blocks_total",
                  "Blocks placed by applied stores since start, every source (ZMQ, REST, binary): "
                  "all, and those the holder already held in that tier (re-reports or "
                  "duplicate copies).",
                  "found",
                  std::map<std::string_view, uint64_t>{{"all", a.tally.stored_blocks},
                                                       {"held", a.tally.held_stores}});
  LabelledCounter(&out, "kvatlas_remove_blocks_total",
                  "Block hashes named by applied removes since start, every source: all, and "
                  "those the holder did not hold.",
                  "found",
                  std::map<std::string_view, uint64_t>{{"all", a.tally.removed_blocks},
                                                       {"unheld", a.tally.unheld_removes}});
  LabelledCounter(&out, "kvatlas_index_write_lock_holds_total",
                  "Holds of the index's write lock by the applying thread (one per log entry), "
                  "all and those over 1 ms: lookups wait for them.",
                  "duration",
                  std::map<std::string_view, uint64_t>{{"all", a.write_lock_holds},
                                                       {"over_1ms", a.write_lock_holds_over_1ms}});
  LabelledCounter(&out, "kvatlas_tls_handshake_failures_total",
                  "TLS handshakes that failed or timed out since start, by listener.", "listener",
                  std::map<std::string_view, uint64_t>{
                      {"http", tls_failures_http_.load(std::memory_order_relaxed)},
                      {"rpc", tls_failures_rpc_.load(std::memory_order_relaxed)}});
  const Storage::MemoryUsage& memory = gauges.storage_memory;
  LabelledFamily(
      &out, "kvatlas_storage_memory_bytes", "gauge",
      "RocksDB's memory: the block cache's usage (under a memory budget it includes "
      "the memtables charged to it), the memtables, the table readers.",
      "kind",
      std::map<std::string_view, uint64_t>{{"block_cache", memory.block_cache_bytes},
                                           {"memtables", memory.memtable_bytes},
                                           {"table_readers", memory.table_reader_bytes}});
  Single(&out, "kvatlas_storage_memory_budget_bytes", "gauge",
         "storage_memory_bytes: the budget the block cache and memtables share (0 = none).",
         static_cast<double>(memory.budget_bytes));
  LabelledFamily(&out, "kvatlas_heap_bytes", "gauge",
                 "The heap as the allocator (jemalloc, or glibc) sees it: allocated and not "
                 "freed (in_use), and freed but kept resident by the allocator (free).",
                 "kind",
                 std::map<std::string_view, uint64_t>{{"in_use", gauges.heap.in_use_bytes},
                                                      {"free", gauges.heap.free_bytes}});
  const IndexStats& s = gauges.index;
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  const SingleMetric singles[] = {
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
      {"kvatlas_lookups_total", "counter", "Prefix lookups answered (every dialect).",
       d(lookups_.load(std::memory_order_relaxed))},
      {"kvatlas_lookup_blocks_queried_total", "counter",
       "Complete blocks named by prefix lookups (after the lookup cap).",
       d(lookup_blocks_queried_.load(std::memory_order_relaxed))},
      {"kvatlas_lookup_blocks_matched_total", "counter",
       "Leading blocks of prefix lookups that some holder has: over "
       "kvatlas_lookup_blocks_queried_total, the prefix-hit rate.",
       d(lookup_blocks_matched_.load(std::memory_order_relaxed))},
  };
  for (const auto& m : singles) Single(&out, m);
  RenderDisk(&out, gauges);
  if (gauges.cluster) RenderCluster(&out, *gauges.cluster);
  if (gauges.log) RenderLog(&out, *gauges.log);
  if (gauges.peers) RenderPeers(&out, *gauges.peers);
  return out;
}

}  // namespace kvatlas::server
