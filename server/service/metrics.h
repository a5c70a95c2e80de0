// Metrics: the process's Prometheus metrics (text exposition format 0.0.4), served by
// GET /metrics. Request counters and latency histograms are recorded here as requests
// finish; state gauges (index sizes, revision) are read at scrape time and passed to
// Render(), so there is no second copy of state to keep in sync. Names: docs/api.md.
//
// Thread-safe: recording takes a mutex for a few increments; Render() copies under it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/internal/histogram.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/index/index.h"
#include "server/peer/peer_auth.h"
#include "server/service/heap_usage.h"
#include "server/state/replicated_log.h"
#include "server/state/state_machine.h"
#include "server/storage/storage.h"

namespace kvatlas::server {

// State read at scrape time.
struct StateGauges {
  IndexStats index;
  ApplyCounters applied;
  Revision revision = 0;
  uint64_t storage_bytes = 0;
  Storage::MemoryUsage storage_memory;
  HeapUsage heap;
  bool applier_failed = false;
  double uptime_seconds = 0;
  // Peer authentication (docs/security.md §Peers); unset without replication.
  std::optional<PeerCounters> peers;
  // The replicated log's status and metrics; unset without replication.
  std::optional<ClusterStatus> cluster;
  std::optional<LogMetrics> log;
  // Space of the data dir's file system (statvfs: free = available to the server); unset
  // for an in-memory server or when it cannot be read. min_free_disk_bytes: the configured
  // floor under which writes are refused.
  std::optional<uint64_t> disk_free_bytes;
  std::optional<uint64_t> disk_size_bytes;
  uint64_t min_free_disk_bytes = 0;
};

class Metrics {
 public:
  // Distinct unknown medium strings reported by label; the rest count as "other".
  static constexpr size_t kMaxMediumLabels = 32;

  // One answered request. `route` is a route pattern or "unmatched" (bounded label set);
  // `seconds` is nullopt when the server could not time it (malformed request line).
  void RecordRequest(std::string_view route, int status, std::optional<double> seconds);

  // An accepted event carried a medium outside the known list (it was mapped to the
  // nearest tier). Returns true the first time this string is seen, so the caller can log
  // it once.
  bool RecordUnknownMedium(std::string_view medium);

  // Write batches submitted to the applier and not yet answered (the applier queue as
  // seen from REST).
  void ApplyStarted() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  void ApplyFinished() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  uint64_t applier_queue_depth() const { return in_flight_.load(std::memory_order_relaxed); }

  // One binary-protocol answer (server/rpc): the answer's message type number and status.
  // Lock-free (relaxed atomics): it runs on every request of the io threads.
  void RecordRpcRequest(uint8_t type, StatusCode code);
  // How long one binary-protocol request took, from its frame decoded to its answer
  // appended (an ingest: to its batch applied), by message type. Lock-free.
  void RecordRpcLatency(uint8_t type, double seconds);
  // One prefix lookup (any dialect): its complete blocks and the leading ones found.
  // Lock-free.
  void RecordLookup(uint64_t blocks_queried, uint64_t blocks_matched);
  // Binary-protocol connections accepted and closed.
  void RpcConnectionOpened();
  void RpcConnectionClosed();
  // A TLS handshake that failed or timed out on the REST (`http` true) or binary-protocol
  // listener: a client that does not trust the certificate, has none or a wrong one, speaks
  // plaintext, or stalls.
  void TlsHandshakeFailed(bool http) {
    (http ? tls_failures_http_ : tls_failures_rpc_).fetch_add(1, std::memory_order_relaxed);
  }
  // Bytes the binary protocol holds for incomplete large frames (its rpc_max_buffered_bytes
  // budget in use), set by the budget on every change.
  void SetRpcBufferedBytes(uint64_t bytes) {
    rpc_buffered_bytes_.store(bytes, std::memory_order_relaxed);
  }

  // Access control (docs/security.md §Audit log). A refused request or connection, by
  // reason (a short fixed label: missing_token, invalid_token, revoked_token, forbidden,
  // host_not_allowed).
  void RecordAuthFailure(std::string_view reason);
  // An admin request that passed access control: its action (the route, e.g. "POST
  // /register") and outcome ("ok" or the error's wire name). Both label sets are bounded.
  void RecordAdminAction(std::string_view action, std::string_view outcome);
  // A token reload (SIGHUP); on success `tokens` becomes the kvatlas_auth_tokens gauge.
  void RecordTokenReload(bool ok, size_t tokens);
  // A write part forwarded to the leader of group `group` (group_forwarder.h): applied
  // there ("ok") or not ("failed").
  void RecordGroupForward(uint32_t group, bool ok);
  // A read of group `group` (a lookup, route or listing, over either protocol) that this
  // server holds no replica of, sent on to a member: answered there ("ok") or not.
  void RecordGroupRead(uint32_t group, bool ok);
  // This server dropped its copy of group `group`, which it no longer holds (replica_dropper.h).
  void RecordReplicaDropped(uint32_t group);
  void SetAuthTokens(size_t tokens);

  [[nodiscard]] std::string Render(const StateGauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) → count
  std::map<std::string, Histogram, std::less<>> latency_;     // route → histogram
  std::map<std::string, uint64_t, std::less<>> unknown_media_;
  std::map<std::string, uint64_t, std::less<>> auth_failures_;             // reason → count
  std::map<std::pair<std::string, std::string>, uint64_t> admin_actions_;  // (action, outcome)
  std::map<std::string, uint64_t, std::less<>> token_reloads_;             // outcome → count
  std::map<std::pair<uint32_t, bool>, uint64_t> group_forwards_;           // (group, ok)
  std::map<std::pair<uint32_t, bool>, uint64_t> group_reads_;              // (group, ok)
  std::map<uint32_t, uint64_t> replicas_dropped_;  // group → copies dropped
  size_t auth_tokens_ = 0;
  std::atomic<uint64_t> in_flight_{0};
  // RPC answers by [message type][status code]; larger numbers count in the last slot.
  static constexpr size_t kRpcTypes = 16;
  static constexpr size_t kRpcCodes = 32;  // above every StatusCode number
  std::atomic<uint64_t> rpc_requests_[kRpcTypes][kRpcCodes] = {};
  std::atomic<uint64_t> rpc_connections_open_{0};
  std::atomic<uint64_t> rpc_connections_total_{0};
  std::atomic<uint64_t> rpc_buffered_bytes_{0};
  std::atomic<uint64_t> tls_failures_http_{0};
  std::atomic<uint64_t> tls_failures_rpc_{0};
  Histogram rpc_latency_[kRpcTypes];
  std::atomic<uint64_t> lookups_{0};
  std::atomic<uint64_t> lookup_blocks_queried_{0};
  std::atomic<uint64_t> lookup_blocks_matched_{0};
};

}  // namespace kvatlas::server
