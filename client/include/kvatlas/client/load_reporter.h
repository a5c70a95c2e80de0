// kvatlas::LoadReporter: a router replica's in-flight table, reported to the cluster as an
// absolute summary (docs/routing.md §Shared load) so that every server's routes see the
// whole fleet's load. The router calls RouteStarted when it sends a request to an instance
// and PrefillDone / RouteFinished as it progresses; a background thread sends the summary
// (Client::ReportLoad, binary kLoadReport) at most once per `interval` when it changed and
// at least every ttl / 3 when it did not, so a router costs the cluster a bounded number of
// writes however many requests it routes. A lost report is harmless: the next one replaces
// it. Destroying the reporter sends an empty report (the router leaves at once).
//
// Thread-safety: every method from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "kvatlas/common/export.h"
#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/result.h"

namespace kvatlas {

class Client;

struct LoadReporterOptions {
  std::string router_id;                   // unique per router replica
  std::chrono::milliseconds interval{10};  // at most one report per interval
  uint32_t ttl_ms = 2'000;                 // the lease of each report
};

class KVATLAS_EXPORT LoadReporter {
 public:
  // Sends one report; the reporter's transport (Client::ReportLoad, or a test's).
  using Send = std::function<Status(const LoadReport&)>;

  // kInvalidArgument for an empty or too long router_id, a ttl out of [kMinLoadTtlMs,
  // kMaxLoadTtlMs] or an interval of 0 or longer than ttl / 3.
  [[nodiscard]] static Result<std::unique_ptr<LoadReporter>> Create(Client* client,
                                                                    LoadReporterOptions options);
  [[nodiscard]] static Result<std::unique_ptr<LoadReporter>> Create(Send send,
                                                                    LoadReporterOptions options);
  ~LoadReporter();
  LoadReporter(const LoadReporter&) = delete;
  LoadReporter& operator=(const LoadReporter&) = delete;

  // A request of `prompt_blocks` blocks (queued for prefill) that will hold
  // `decode_blocks` KV blocks while decoding was sent to `instance`'s `dp_rank`. Returns
  // the token naming it for PrefillDone and RouteFinished.
  uint64_t RouteStarted(const std::string& instance, uint32_t dp_rank, uint64_t prompt_blocks,
                        uint64_t decode_blocks);
  // Its prefill finished: its prompt blocks are no longer queued. Unknown tokens: no-op.
  void PrefillDone(uint64_t token);
  // It finished (or failed): none of its load counts any more. Unknown tokens: no-op.
  void RouteFinished(uint64_t token);

  // The summary the next report sends.
  LoadReport Summary() const;
  // Sends the summary now (whatever the interval); the transport's status.
  Status Flush();
  uint64_t reports_sent() const;
  uint64_t reports_failed() const;

 private:
  LoadReporter(Send send, LoadReporterOptions options);
  void Run();
  LoadReport SummaryLocked() const;

  struct InFlight {
    std::string instance;
    uint32_t dp_rank = 0;
    uint64_t prefill = 0;
    uint64_t decode = 0;
  };
  const Send send_;
  const LoadReporterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool changed_ = false;
  uint64_t next_token_ = 1;
  std::unordered_map<uint64_t, InFlight> in_flight_;
  // (instance, rank) → summed (prefill, decode): the summary, kept as requests come and go.
  std::map<std::pair<std::string, uint32_t>, std::pair<uint64_t, uint64_t>> totals_;
  uint64_t sent_ = 0;
  uint64_t failed_ = 0;
  std::mutex send_mu_;  // one report in flight at a time, in order
  std::thread thread_;
};

}  // namespace kvatlas
