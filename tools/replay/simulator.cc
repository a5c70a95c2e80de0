#include "tools/replay/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

namespace kvatlas::replay {
namespace {

struct PrefillJob {
  double start = 0;
  double end = 0;
  double tokens = 0;  // effective tokens of work
  size_t router = 0;  // the replica that routed it
};

struct DecodeJob {
  double start = 0;  // prefill end
  double end = 0;
  uint64_t blocks = 0;
  size_t router = 0;
};

struct Instance {
  Instance(size_t gpu_blocks, size_t cpu_blocks) : cache(gpu_blocks, cpu_blocks) {}
  InstanceCache cache;
  double free_at = 0;
  std::deque<PrefillJob> prefills;
  std::vector<DecodeJob> decodes;
  double busy_ms = 0;
  size_t requests = 0;
};

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

class RoundRobin final : public Policy {
 public:
  std::string_view name() const override { return "round-robin"; }
  Result<size_t> Pick(size_t, const TraceRequest&, std::span<const InstanceView> instances,
                      const LruBlocks*) override {
    return next_++ % instances.size();
  }

 private:
  size_t next_ = 0;
};

class Random final : public Policy {
 public:
  explicit Random(uint64_t seed) : generator_(seed) {}
  std::string_view name() const override { return "random"; }
  Result<size_t> Pick(size_t, const TraceRequest&, std::span<const InstanceView> instances,
                      const LruBlocks*) override {
    return static_cast<size_t>(generator_() % instances.size());
  }

 private:
  std::mt19937_64 generator_;
};

class LeastLoaded final : public Policy {
 public:
  explicit LeastLoaded(uint32_t block_tokens) : block_tokens_(block_tokens) {}
  std::string_view name() const override { return "least-loaded"; }
  Result<size_t> Pick(size_t, const TraceRequest&, std::span<const InstanceView> instances,
                      const LruBlocks*) override {
    size_t best = 0;
    double best_load = 0;
    for (size_t i = 0; i < instances.size(); ++i) {
      const double load = LoadBlocks(instances[i], block_tokens_);
      if (i == 0 || load < best_load) {
        best = i;
        best_load = load;
      }
    }
    return best;
  }

 private:
  uint32_t block_tokens_;
};

// The longest cached prefix (the simulator's own caches: what an exact index with no delay
// would say) among the instances whose load is at most `limit`, ties to the least loaded,
// then the lowest index. The least-loaded instance is at most any limit >= the mean load.
size_t LongestPrefixWithin(const TraceRequest& request, std::span<const InstanceView> instances,
                           uint32_t block_tokens, double limit) {
  size_t best = instances.size();
  uint32_t best_prefix = 0;
  double best_load = 0;
  for (size_t i = 0; i < instances.size(); ++i) {
    const double load = LoadBlocks(instances[i], block_tokens);
    if (load > limit) continue;
    // Shared storage serves every instance alike: only the instance's own tiers differ.
    const uint32_t prefix = instances[i].cache->Match(request.hash_ids, nullptr).total();
    if (best == instances.size() || prefix > best_prefix ||
        (prefix == best_prefix && load < best_load)) {
      best = i;
      best_prefix = prefix;
      best_load = load;
    }
  }
  return best;
}

// The longest cached prefix whatever the load: the most prefix reuse a router gets when
// load does not matter; on a trace where most requests share one prefix, it herds.
class PrefixOracle final : public Policy {
 public:
  explicit PrefixOracle(uint32_t block_tokens) : block_tokens_(block_tokens) {}
  std::string_view name() const override { return "prefix-oracle"; }
  Result<size_t> Pick(size_t, const TraceRequest& request, std::span<const InstanceView> instances,
                      const LruBlocks*) override {
    return LongestPrefixWithin(request, instances, block_tokens_,
                               std::numeric_limits<double>::infinity());
  }

 private:
  uint32_t block_tokens_;
};

class BoundedLoad final : public Policy {
 public:
  BoundedLoad(uint32_t block_tokens, double epsilon)
      : block_tokens_(block_tokens), epsilon_(epsilon) {}
  std::string_view name() const override { return "bounded-load"; }
  Result<size_t> Pick(size_t, const TraceRequest& request, std::span<const InstanceView> instances,
                      const LruBlocks*) override {
    const double limit =
        BoundedLoadLimit(instances, request.hash_ids.size(), block_tokens_, epsilon_);
    const size_t pick = LongestPrefixWithin(request, instances, block_tokens_, limit);
    if (pick == instances.size()) return Status::Internal("bounded-load: no instance within bound");
    return pick;
  }

 private:
  uint32_t block_tokens_;
  double epsilon_;
};

}  // namespace

double LoadBlocks(const InstanceView& view, uint32_t block_tokens) {
  return static_cast<double>(view.queued_prefill_tokens) / block_tokens +
         static_cast<double>(view.active_decode_blocks);
}

double BoundedLoadLimit(std::span<const InstanceView> instances, size_t prompt_blocks,
                        uint32_t block_tokens, double epsilon) {
  double total = static_cast<double>(prompt_blocks);
  for (const InstanceView& view : instances) total += LoadBlocks(view, block_tokens);
  return (1 + epsilon) * total / static_cast<double>(instances.size());
}

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  const size_t k = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

Result<PolicyResult> Simulate(const SimOptions& options, std::span<const TraceRequest> trace,
                              Policy& policy) {
  if (options.instances == 0) return Status::InvalidArgument("instances: must be at least 1");
  if (options.block_tokens == 0) return Status::InvalidArgument("block_tokens: must be positive");
  if (options.routers == 0) return Status::InvalidArgument("routers: must be at least 1");
  if (!(options.time_scale >= 0) || !(options.prefill_ms_per_token >= 0) ||
      !(options.decode_ms_per_token >= 0) || !(options.prefill_overhead_ms >= 0)) {
    return Status::InvalidArgument("timing options: must be numbers >= 0");
  }
  std::vector<Instance> instances;
  instances.reserve(options.instances);
  for (size_t i = 0; i < options.instances; ++i) {
    instances.emplace_back(options.gpu_blocks, options.cpu_blocks);
  }
  std::unique_ptr<LruBlocks> shared;
  if (options.shared_blocks > 0) shared = std::make_unique<LruBlocks>(options.shared_blocks);
  std::vector<InstanceView> views(options.instances);
  for (size_t i = 0; i < views.size(); ++i) {
    views[i].index = i;
    views[i].id = "inst-" + std::to_string(i);
    views[i].cache = &instances[i].cache;
  }

  PolicyResult result;
  result.policy = std::string(policy.name());
  result.routers = options.routers;
  result.shared_load = options.routers > 1 && policy.SharesLoad();
  if (options.routers > 1) {
    result.policy += "@" + std::to_string(options.routers) + "r";
    if (result.shared_load) result.policy += "+shared";
  }
  std::vector<double> ttfts;
  ttfts.reserve(trace.size());
  for (size_t seq = 0; seq < trace.size(); ++seq) {
    const TraceRequest& request = trace[seq];
    const double now = request.timestamp_ms * options.time_scale;
    const size_t router = seq % options.routers;
    for (size_t i = 0; i < instances.size(); ++i) {
      Instance& inst = instances[i];
      while (!inst.prefills.empty() && inst.prefills.front().end <= now) inst.prefills.pop_front();
      std::erase_if(inst.decodes, [&](const DecodeJob& d) { return d.end <= now; });
      double queued = 0;
      for (const PrefillJob& job : inst.prefills) {
        if (job.end <= now) continue;        // done (a zero-length job behind a running one)
        if (job.router != router) continue;  // another replica's: this one does not know it
        const double left = job.start >= now ? 1.0 : (job.end - now) / (job.end - job.start);
        queued += job.tokens * left;
      }
      uint64_t decoding = 0;
      for (const DecodeJob& d : inst.decodes) {
        if (d.start <= now && d.router == router) decoding += d.blocks;
      }
      views[i].queued_prefill_tokens = static_cast<uint64_t>(std::llround(queued));
      views[i].active_decode_blocks = decoding;
    }
    KVATLAS_RETURN_IF_ERROR(policy.BeforePick(now, router));
    KVATLAS_ASSIGN_OR_RETURN(const size_t pick, policy.Pick(seq, request, views, shared.get()));
    if (pick >= instances.size()) {
      return Status::Internal(std::string(policy.name()) + " picked instance " +
                              std::to_string(pick) + " of " + std::to_string(instances.size()));
    }
    Instance& inst = instances[pick];
    const TierMatch match = inst.cache.Match(request.hash_ids, shared.get());
    const CacheChanges changes = inst.cache.Admit(request.hash_ids, shared.get());
    KVATLAS_RETURN_IF_ERROR(policy.OnServed(pick, request, match, changes));

    const uint64_t bt = options.block_tokens;
    const uint64_t input = request.input_length;
    const auto tokens_of = [&](uint64_t blocks) { return std::min(blocks * bt, input); };
    const uint64_t gpu_tokens = tokens_of(match.gpu);
    const uint64_t cpu_tokens = tokens_of(match.gpu + match.cpu) - gpu_tokens;
    const uint64_t shared_tokens = tokens_of(match.total()) - gpu_tokens - cpu_tokens;
    const double uncached = static_cast<double>(input - tokens_of(match.total()));
    const double work = uncached + options.cpu_load_fraction * static_cast<double>(cpu_tokens) +
                        options.shared_load_fraction * static_cast<double>(shared_tokens);
    const double prefill_ms = options.prefill_overhead_ms + options.prefill_ms_per_token * work;
    const double start = std::max(now, inst.free_at);
    const double end = start + prefill_ms;
    inst.free_at = end;
    const double decode_end = end + options.decode_ms_per_token * request.output_length;
    const uint64_t decode_blocks = CeilDiv(input + request.output_length, bt);
    inst.prefills.push_back(PrefillJob{start, end, work, router});
    inst.decodes.push_back(DecodeJob{end, decode_end, decode_blocks, router});
    KVATLAS_RETURN_IF_ERROR(policy.OnScheduled(
        ScheduledRequest{router, pick, end, decode_end,
                         CeilDiv(static_cast<uint64_t>(std::ceil(work)), bt), decode_blocks}));
    inst.busy_ms += prefill_ms;
    ++inst.requests;
    ttfts.push_back(end - now);

    ++result.requests;
    result.prompt_blocks += request.hash_ids.size();
    result.hit_blocks += match.total();
    result.gpu_hits += match.gpu;
    result.cpu_hits += match.cpu;
    result.shared_hits += match.shared;
  }

  result.hit_ratio = result.prompt_blocks == 0 ? 0
                                               : static_cast<double>(result.hit_blocks) /
                                                     static_cast<double>(result.prompt_blocks);
  double busy_max = 0, busy_sum = 0;
  for (const Instance& inst : instances) {
    busy_max = std::max(busy_max, inst.busy_ms);
    busy_sum += inst.busy_ms;
    result.requests_per_instance.push_back(inst.requests);
    result.busy_ms_per_instance.push_back(inst.busy_ms);
  }
  const double busy_mean = busy_sum / static_cast<double>(instances.size());
  result.load_imbalance = busy_mean > 0 ? busy_max / busy_mean : 1.0;
  result.ttft_p50_ms = Quantile(ttfts, 0.50);
  result.ttft_p99_ms = Quantile(ttfts, 0.99);
  result.ttft_mean_ms =
      ttfts.empty() ? 0 : std::accumulate(ttfts.begin(), ttfts.end(), 0.0) / ttfts.size();
  const std::vector<double> latencies = policy.LatenciesUs();
  result.has_latency = !latencies.empty();
  result.lookup_p50_us = Quantile(latencies, 0.50);
  result.lookup_p99_us = Quantile(latencies, 0.99);
  result.mismatches = policy.Mismatches();
  result.load_reports = policy.LoadReports();
  return result;
}

std::unique_ptr<Policy> MakeRoundRobinPolicy() { return std::make_unique<RoundRobin>(); }
std::unique_ptr<Policy> MakeRandomPolicy(uint64_t seed) { return std::make_unique<Random>(seed); }
std::unique_ptr<Policy> MakeLeastLoadedPolicy(uint32_t block_tokens) {
  return std::make_unique<LeastLoaded>(block_tokens);
}
std::unique_ptr<Policy> MakePrefixOraclePolicy(uint32_t block_tokens) {
  return std::make_unique<PrefixOracle>(block_tokens);
}
std::unique_ptr<Policy> MakeBoundedLoadPolicy(uint32_t block_tokens, double epsilon) {
  return std::make_unique<BoundedLoad>(block_tokens, epsilon);
}

}  // namespace kvatlas::replay
