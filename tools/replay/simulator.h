// The trace-replay simulator (docs/routing.md §Trace replay): N instances with a GPU and a
// CPU tier (cache_model.h) and optionally one shared storage backend, a prefill-time model,
// and a routing policy that picks an instance for each request in trace order. Time is
// simulated (trace timestamps, optionally compressed); only the policy's own calls (a
// kvatlas route) take wall-clock time, which the policy measures.
//
// Timing model: an instance prefills one request at a time, first come first served. A
// request's prefill takes overhead + ms_per_token · (uncached tokens + cpu_load_fraction ·
// tokens loaded from CPU + shared_load_fraction · tokens loaded from shared storage); its
// TTFT is its wait for the instance plus that. It then decodes output_length tokens at
// decode_ms_per_token, occupying its prompt + output blocks until done.
//
// Router replicas (SimOptions::routers = N > 1): request i is routed by replica i mod N
// (requests dealt round-robin), and the InstanceView loads the policy sees for it count
// only the requests that replica routed itself — what a replica knows of the fleet's
// in-flight work without shared load. A policy that shares load (the kvatlas policy with
// shared_load) reports each replica's requests (OnScheduled, BeforePick) and routes with
// the fleet's sum instead.
//
// Not thread-safe: Run() drives one policy on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"
#include "tools/replay/cache_model.h"
#include "tools/replay/trace.h"

namespace kvatlas::replay {

struct SimOptions {
  size_t instances = 8;
  size_t gpu_blocks = 2000;
  size_t cpu_blocks = 8000;
  size_t shared_blocks = 0;  // 0 = no shared storage backend
  uint32_t block_tokens = 512;
  double time_scale = 1.0;  // multiplies trace timestamps (< 1 compresses)
  double prefill_overhead_ms = 10;
  double prefill_ms_per_token = 0.1;  // 10k tokens/s per instance
  double cpu_load_fraction = 0.1;
  double shared_load_fraction = 0.25;
  double decode_ms_per_token = 20;
  size_t routers = 1;  // router replicas, requests dealt round-robin (see above)
};

// When the simulator scheduled a request on an instance (simulated ms), and its load as a
// router would count it: the prefill work in blocks (uncached tokens and the cost of
// loading cached ones, rounded up) and the KV blocks it holds while decoding.
struct ScheduledRequest {
  size_t router = 0;
  size_t instance = 0;
  double prefill_end_ms = 0;
  double decode_end_ms = 0;
  uint64_t prefill_blocks = 0;
  uint64_t decode_blocks = 0;
};

// What a policy sees of one instance when it picks.
struct InstanceView {
  size_t index = 0;
  std::string id;                      // "inst-<index>"
  uint64_t queued_prefill_tokens = 0;  // prefill work not yet done, incl. a running prefill
  uint64_t active_decode_blocks = 0;   // blocks of requests decoding now
  const InstanceCache* cache = nullptr;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Picks an instance index for `request` (its position in the trace is `sequence`).
  // `shared` is the shared storage backend or null.
  [[nodiscard]] virtual Result<size_t> Pick(size_t sequence, const TraceRequest& request,
                                            std::span<const InstanceView> instances,
                                            const LruBlocks* shared) = 0;
  // After the pick is served: the prefix the simulator found on the picked instance and
  // what serving it changed on that instance (and the shared backend, `shared_holder`).
  [[nodiscard]] virtual Status OnServed(size_t /*instance*/, const TraceRequest& /*request*/,
                                        const TierMatch& /*match*/,
                                        const CacheChanges& /*changes*/) {
    return Status::Ok();
  }
  // Before each Pick: the simulated time (ms) and the router replica that routes the
  // request (0 … SimOptions::routers - 1).
  [[nodiscard]] virtual Status BeforePick(double /*now_ms*/, size_t /*router*/) {
    return Status::Ok();
  }
  // After OnServed, once the simulator has timed the request's prefill and decode.
  [[nodiscard]] virtual Status OnScheduled(const ScheduledRequest& /*scheduled*/) {
    return Status::Ok();
  }
  // Whether the replicas share their load (the result's name says so).
  virtual bool SharesLoad() const { return false; }
  // Load reports the replicas sent (their Flush calls), when they share load.
  virtual uint64_t LoadReports() const { return 0; }
  // Wall-clock latencies (µs) of the index calls the policy made; empty for baselines.
  virtual std::vector<double> LatenciesUs() const { return {}; }
  // Picks whose index answer disagreed with the simulator's own cache (kvatlas policies).
  virtual size_t Mismatches() const { return 0; }
};

struct PolicyResult {
  std::string policy;  // the policy's name; "<name>@<N>r" for N replicas, "+shared" sharing
  size_t routers = 1;
  bool shared_load = false;
  uint64_t load_reports = 0;
  size_t requests = 0;
  uint64_t prompt_blocks = 0;
  uint64_t hit_blocks = 0;  // reused prefix blocks, all tiers
  uint64_t gpu_hits = 0, cpu_hits = 0, shared_hits = 0;
  double hit_ratio = 0;       // hit_blocks / prompt_blocks
  double load_imbalance = 0;  // max / mean of per-instance prefill busy time
  double ttft_p50_ms = 0, ttft_p99_ms = 0, ttft_mean_ms = 0;
  bool has_latency = false;  // the policy called kvatlas
  double lookup_p50_us = 0, lookup_p99_us = 0;
  size_t mismatches = 0;
  std::vector<size_t> requests_per_instance;
  std::vector<double> busy_ms_per_instance;
};

// The q-quantile (0..1) of `values` by nearest rank; 0 for none.
[[nodiscard]] double Quantile(std::vector<double> values, double q);

// Replays `trace` with `policy`. kInvalidArgument for bad options; a policy's error stops
// the run and is returned.
[[nodiscard]] Result<PolicyResult> Simulate(const SimOptions& options,
                                            std::span<const TraceRequest> trace, Policy& policy);

// --- Baseline policies -------------------------------------------------------------------

std::unique_ptr<Policy> MakeRoundRobinPolicy();
std::unique_ptr<Policy> MakeRandomPolicy(uint64_t seed);
// The instance with the least queued prefill plus decode work (in blocks); ties: lowest
// index.
std::unique_ptr<Policy> MakeLeastLoadedPolicy(uint32_t block_tokens);
// The instance whose cache (GPU and CPU) holds the longest prefix of the request; ties: the
// least loaded as above. The upper bound of prefix reuse for a router with an exact index
// and no delay (docs/routing.md §Trace replay).
std::unique_ptr<Policy> MakePrefixOraclePolicy(uint32_t block_tokens);
// Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam) applied to prefix
// routing: the prefix oracle's choice among the instances whose load (as least-loaded
// counts it, in blocks) is at most (1 + epsilon) × the mean load with the request's own
// prompt blocks counted in, i.e. load_i <= (1 + epsilon) · (Σ load + prompt blocks) / N;
// ties to the least loaded, then the lowest index. The least-loaded instance always
// qualifies (its load is at most the mean), so no instance is picked above the bound while
// another is under it. A large epsilon gives the prefix oracle's picks; on a trace where
// most requests share one prefix it spreads them where the oracle sends all to one
// instance. The reference for prefix reuse at a balanced load (docs/routing.md §Defaults).
std::unique_ptr<Policy> MakeBoundedLoadPolicy(uint32_t block_tokens, double epsilon);
// The load bound above, for `instances` and a request of `prompt_blocks` blocks.
[[nodiscard]] double BoundedLoadLimit(std::span<const InstanceView> instances, size_t prompt_blocks,
                                      uint32_t block_tokens, double epsilon);
// An instance's load as least-loaded and bounded-load count it: queued prefill tokens
// in blocks plus the blocks of the requests it is decoding.
[[nodiscard]] double LoadBlocks(const InstanceView& view, uint32_t block_tokens);

}  // namespace kvatlas::replay
