// Per-stream counters of the ZMQ ingest, shared between the ingest thread (which owns the
// stream), applier callbacks (which count what was applied) and HTTP handlers (which read
// them for GET /v1/streams and /metrics). Counters are relaxed atomics: each is exact, a
// snapshot of several is not atomic as a whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "nlohmann/json_fwd.hpp"
#include "server/model/registration.h"
#include "server/state/stream_tally.h"

namespace kvatlas::server {

struct StreamCounters {
  std::atomic<uint64_t> batches_received{0};  // 3-frame messages, live and replayed
  std::atomic<uint64_t> batches_applied{0};
  std::atomic<uint64_t> stored_events{0};  // applied, by type
  std::atomic<uint64_t> removed_events{0};
  std::atomic<uint64_t> cleared_events{0};
  std::atomic<uint64_t> block_events{0};    // blocks named by applied stored/removed events
  std::atomic<uint64_t> skipped_events{0};  // unknown tag, malformed, or not mappable
  std::atomic<uint64_t> unknown_fields{0};
  // Stores left out because their namespace (cache salt) could not be read exactly.
  std::atomic<uint64_t> skipped_namespace_events{0};
  std::atomic<uint64_t> decode_failures{0};     // whole batches that did not decode
  std::atomic<uint64_t> malformed_messages{0};  // not 3 frames / bad sequence frame
  std::atomic<uint64_t> apply_failures{0};      // batches the applier refused or failed
  // Stores left out because their context is new while the group takes no new contexts
  // (Applier::DropNewContextStores).
  std::atomic<uint64_t> refused_new_context_stores{0};
  std::atomic<uint64_t> duplicates{0};        // batches dropped: sequence already seen
  std::atomic<uint64_t> gaps{0};              // sequence jumps detected
  std::atomic<uint64_t> lost_batches{0};      // sequences never received (gap not replayed)
  std::atomic<uint64_t> replays{0};           // replay requests sent
  std::atomic<uint64_t> replay_failures{0};   // replays that timed out or returned nothing
  std::atomic<uint64_t> replayed_batches{0};  // batches received over replay
  std::atomic<uint64_t> restarts{0};          // engine restarts detected (sequence went back)
  // Times a registered stream's connection was lost after it was live (its publisher went
  // away, or libzmq closed the connection for good: a message over 64 MiB, another protocol
  // error) and the stream went back to connecting.
  std::atomic<uint64_t> reconnects{0};
  // What the stream's applied stores and removes found in the index (stream_tally.h),
  // copied from the state machine once a second.
  std::atomic<uint64_t> stored_blocks{0};
  std::atomic<uint64_t> repeated_stores{0};  // stores of blocks the holder already held
  std::atomic<uint64_t> removed_blocks{0};
  std::atomic<uint64_t> unheld_removes{0};     // removes of blocks the holder did not hold
  std::atomic<int64_t> last_sequence{-1};      // last sequence handed to the applier, -1 none
  std::atomic<int64_t> last_event_unix_ms{0};  // wall clock of the last message received
  std::atomic<bool> replaying{false};
  // A registered stream is connecting from its creation, and again from a lost connection,
  // until its first message or a completed ZMTP handshake with its publisher; since when
  // (wall clock). Listener streams exist from their first message: never connecting.
  std::atomic<bool> connecting{false};
  std::atomic<int64_t> connecting_since_unix_ms{0};
};

// A stream as GET /v1/streams shows it: identity (fixed at creation) plus counters.
struct StreamView {
  std::string key;
  std::string mode;  // "connect" (registered publisher) or "bind" (listener)
  std::string endpoint;
  std::string replay_endpoint;
  std::string type;
  std::string report_mode;  // "incremental" or "full" (docs/engine-events.md §Report modes)
  std::string instance_id;
  std::string tenant_id;
  std::string model;
  uint32_t dp_rank = 0;
  std::string topic;
  StreamCounters counters;

  // The stream's current problem (empty = none), set by the ingest thread; a non-empty
  // one is also kept as last_error(), with the wall-clock time it was first set since the
  // stream was last healthy (error_since_unix_ms()).
  void SetError(std::string error, int64_t now_unix_ms) {
    std::lock_guard lock(mu_);
    if (!error.empty()) {
      if (error_.empty()) error_since_unix_ms_ = now_unix_ms;
      last_error_ = error;
    }
    error_ = std::move(error);
  }
  std::string error() const {
    std::lock_guard lock(mu_);
    return error_;
  }
  std::string last_error() const {
    std::lock_guard lock(mu_);
    return last_error_;
  }
  int64_t error_since_unix_ms() const {
    std::lock_guard lock(mu_);
    return error_.empty() ? 0 : error_since_unix_ms_;
  }

  // Set once, when the stream's tally says its report mode looks wrong (ReportModeMismatch).
  void SetReportModeWarning(std::string warning) {
    std::lock_guard lock(mu_);
    report_mode_warning_ = std::move(warning);
  }
  std::string report_mode_warning() const {
    std::lock_guard lock(mu_);
    return report_mode_warning_;
  }

 private:
  mutable std::mutex mu_;
  std::string error_;
  std::string last_error_;
  int64_t error_since_unix_ms_ = 0;
  std::string report_mode_warning_;
};

// What a stream's tally says of its report mode (docs/engine-events.md §Report modes), or
// "" when it says nothing. Only vLLM streams have a mode to get wrong (SGLang's stores are
// reports, Mooncake's copies, whatever the registration says). A vLLM stream registered
// incremental whose stores are mostly of blocks it already holds is re-reporting prefix
// hits (full mode): its blocks would outlive their eviction. One registered full whose
// removes often find nothing had duplicate copies counted once (or lost batches). Judged
// only past kMinTalliedBlocks, so a few early events do not decide.
inline constexpr uint64_t kMinTalliedBlocks = 1000;
std::string ReportModeMismatch(EngineType engine, ReportMode mode, const StreamTally& tally);

// JSON of one stream for GET /v1/streams (docs/api.md). `now_unix_ms` gives lag_seconds.
nlohmann::json StreamViewJson(const StreamView& view, int64_t now_unix_ms);

// The kvatlas_zmq_* families of /metrics (Prometheus text format, docs/api.md), one
// sample per stream labelled stream="<key>".
std::string RenderStreamMetrics(std::span<const std::shared_ptr<const StreamView>> views,
                                int64_t now_unix_ms);

}  // namespace kvatlas::server
