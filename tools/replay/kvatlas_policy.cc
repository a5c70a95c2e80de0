#include "tools/replay/kvatlas_policy.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "kvatlas/client/load_reporter.h"
#include "kvatlas/client/scorer.h"

namespace kvatlas::replay {
namespace {

// The instances as candidates, listed from `offset` on (wrapping): equal costs go to the
// first listed, so rotating the list per request spreads ties (idle, uncached instances)
// instead of piling them on instance 0.
std::vector<RouteCandidate> Candidates(std::span<const InstanceView> instances, size_t offset) {
  std::vector<RouteCandidate> out(instances.size());
  for (size_t k = 0; k < instances.size(); ++k) {
    const InstanceView& view = instances[(offset + k) % instances.size()];
    out[k].instance_id = view.id;
    out[k].queued_prefill_tokens = view.queued_prefill_tokens;
    out[k].active_decode_blocks = view.active_decode_blocks;
  }
  return out;
}

// The router replicas' in-flight tables, each reported through its own LoadReporter, as
// the simulated clock moves (KvatlasPolicyOptions: report interval in simulated time).
class ReplicaLoads {
 public:
  static Result<std::unique_ptr<ReplicaLoads>> Create(Client* client,
                                                      const KvatlasPolicyOptions& options) {
    auto loads = std::unique_ptr<ReplicaLoads>(new ReplicaLoads(options.load_interval_ms));
    for (size_t r = 0; r < options.routers; ++r) {
      LoadReporterOptions reporter;
      reporter.router_id = options.context.model + "-r" + std::to_string(r);
      reporter.ttl_ms = options.load_ttl_ms;
      reporter.interval = std::chrono::milliseconds(options.load_ttl_ms / 3);
      KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<LoadReporter> created,
                               LoadReporter::Create(client, std::move(reporter)));
      loads->replicas_.push_back(Replica{std::move(created)});
    }
    return loads;
  }

  // Applies the prefills and requests that ended by `now_ms`, then reports each replica
  // whose table changed and whose last report is at least the interval old.
  Status AdvanceTo(double now_ms) {
    while (!due_.empty() && std::get<0>(due_.top()) <= now_ms) {
      const auto [at, token, router, finished] = due_.top();
      due_.pop();
      Replica& replica = replicas_[router];
      if (finished) {
        replica.reporter->RouteFinished(token);
      } else {
        replica.reporter->PrefillDone(token);
      }
      replica.changed = true;
    }
    for (Replica& replica : replicas_) {
      if (!replica.changed || now_ms - replica.reported_at < interval_ms_) continue;
      KVATLAS_RETURN_IF_ERROR(replica.reporter->Flush());
      replica.changed = false;
      replica.reported_at = now_ms;
      ++reports_;
    }
    return Status::Ok();
  }

  uint64_t reports() const { return reports_; }

  void Started(const ScheduledRequest& s) {
    Replica& replica = replicas_[s.router];
    const uint64_t token = replica.reporter->RouteStarted("inst-" + std::to_string(s.instance), 0,
                                                          s.prefill_blocks, s.decode_blocks);
    replica.changed = true;
    due_.emplace(s.prefill_end_ms, token, s.router, false);
    due_.emplace(s.decode_end_ms, token, s.router, true);
  }

 private:
  explicit ReplicaLoads(double interval_ms) : interval_ms_(interval_ms) {}

  struct Replica {
    std::unique_ptr<LoadReporter> reporter;  // destroyed with the policy: leaves at once
    bool changed = false;
    double reported_at = -1e300;
  };
  // (simulated ms, token, router, finished: else prefill done), earliest first.
  using Due = std::tuple<double, uint64_t, size_t, bool>;
  const double interval_ms_;
  std::vector<Replica> replicas_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  uint64_t reports_ = 0;
};

class KvatlasPolicy final : public Policy {
 public:
  KvatlasPolicy(Client* client, const BlockTable* blocks, KvatlasPolicyOptions options,
                std::unique_ptr<ReplicaLoads> loads)
      : client_(client), blocks_(blocks), options_(std::move(options)), loads_(std::move(loads)) {}

  std::string_view name() const override { return "kvatlas"; }
  bool SharesLoad() const override { return loads_ != nullptr; }
  uint64_t LoadReports() const override { return loads_ ? loads_->reports() : 0; }

  Status BeforePick(double now_ms, size_t) override {
    return loads_ ? loads_->AdvanceTo(now_ms) : Status::Ok();
  }

  Status OnScheduled(const ScheduledRequest& scheduled) override {
    if (loads_) loads_->Started(scheduled);
    return Status::Ok();
  }

  Result<size_t> Pick(size_t sequence, const TraceRequest& request,
                      std::span<const InstanceView> instances, const LruBlocks*) override {
    RoutingRequest route;
    route.lookup.context = options_.context;
    route.lookup.by_hash = options_.by_hash;
    if (options_.by_hash) {
      for (uint32_t id : request.hash_ids) route.lookup.seq_hashes.push_back(blocks_->Get(id).key);
    } else {
      route.lookup.token_ids = RequestTokens(request, options_.block_tokens);
    }
    const size_t offset = sequence % instances.size();
    route.candidates = Candidates(instances, offset);
    if (loads_) {
      // Shared load: the candidates give none, so the server scores the fleet's sum.
      for (RouteCandidate& candidate : route.candidates) {
        candidate.queued_prefill_tokens = 0;
        candidate.active_decode_blocks = 0;
      }
    }
    for (RouteCandidate& c : route.candidates) c.predict = options_.approximate;
    route.options = options_.routing;
    const auto start = std::chrono::steady_clock::now();
    Result<RoutingAnswer> answer = client_->Route(std::move(route));
    latencies_us_.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (!answer) return answer.error().WithContext("route");
    if (answer->ranked.empty()) return Status::Internal("route: no candidates in the answer");
    last_ = answer->ranked.front();
    return (offset + last_.index) % instances.size();
  }

  Status OnServed(size_t instance, const TraceRequest&, const TierMatch& match,
                  const CacheChanges& changes) override {
    // The index must have seen what the simulator has: GPU ∪ CPU prefix (no shared here:
    // the shared backend is a different holder, counted separately by the scorer).
    // (Without events the index knows nothing of the instances: no mismatch to count.)
    const bool publishes = PublishesEvents(instance);
    if (publishes && last_.matched.cpu != match.gpu + match.cpu && match.shared == 0) ++mismatches_;
    const HolderKey holder{"inst-" + std::to_string(instance), 0};
    const HolderKey shared{options_.shared_backend, 0};
    std::vector<BlockEvent> events;
    // Offloads first, then GPU evictions: a block is never briefly unknown to the index.
    if (publishes) {
      AddStored(holder, Tier::kCpu, changes.cpu_stored, &events);
      AddStored(holder, Tier::kGpu, changes.gpu_stored, &events);
    }
    AddStored(shared, Tier::kShared, changes.shared_stored, &events);
    if (publishes) {
      AddRemoved(holder, Tier::kGpu, changes.gpu_removed, &events);
      AddRemoved(holder, Tier::kCpu, changes.cpu_removed, &events);
    }
    AddRemoved(shared, Tier::kShared, changes.shared_removed, &events);
    if (events.empty()) return Status::Ok();
    Result<IngestAnswer> applied = client_->Ingest(std::move(events));
    return applied ? Status::Ok() : applied.error().WithContext("ingest");
  }

  std::vector<double> LatenciesUs() const override { return latencies_us_; }
  size_t Mismatches() const override { return mismatches_; }

 private:
  // Whether a simulated instance publishes its KV events (the index is exact for it): all
  // do, except in approximate mode, where none does (the shared backend still does).
  bool PublishesEvents(size_t /*instance*/) const { return !options_.approximate; }

  BlockEvent Event(EventType type, const HolderKey& holder, Tier tier) const {
    BlockEvent event;
    event.type = type;
    event.context = options_.context;
    event.holder = holder;
    event.tier = tier;
    return event;
  }

  // One stored event per run of blocks that follow each other in the prefix tree, with
  // its parent and depth, so the index records the blocks as the engine would.
  void AddStored(const HolderKey& holder, Tier tier, const std::vector<uint32_t>& ids,
                 std::vector<BlockEvent>* events) const {
    std::optional<uint64_t> previous;
    for (uint32_t id : ids) {
      const BlockInfo& info = blocks_->Get(id);
      if (events->empty() || events->back().type != EventType::kStored ||
          events->back().holder != holder || events->back().tier != tier || !previous ||
          info.parent_key != previous) {
        events->push_back(Event(EventType::kStored, holder, tier));
        events->back().parent_hash = info.parent_key;
        events->back().base_block_idx = info.depth;
      }
      events->back().seq_hashes.push_back(info.key);
      previous = info.key;
    }
  }

  void AddRemoved(const HolderKey& holder, Tier tier, const std::vector<uint32_t>& ids,
                  std::vector<BlockEvent>* events) const {
    if (ids.empty()) return;
    events->push_back(Event(EventType::kRemoved, holder, tier));
    for (uint32_t id : ids) events->back().seq_hashes.push_back(blocks_->Get(id).key);
  }

  Client* client_;
  const BlockTable* blocks_;
  KvatlasPolicyOptions options_;
  std::unique_ptr<ReplicaLoads> loads_;  // null: each replica routes with its own load
  ScoredCandidate last_;
  std::vector<double> latencies_us_;
  size_t mismatches_ = 0;
};

class LocalScorerPolicy final : public Policy {
 public:
  LocalScorerPolicy(Scorer scorer, uint32_t block_tokens)
      : scorer_(std::move(scorer)), block_tokens_(block_tokens) {}

  std::string_view name() const override { return "kvatlas-local"; }

  Result<size_t> Pick(size_t sequence, const TraceRequest& request,
                      std::span<const InstanceView> instances, const LruBlocks* shared) override {
    const size_t offset = sequence % instances.size();
    const std::vector<RouteCandidate> candidates = Candidates(instances, offset);
    std::vector<PrefixMatch> matches(instances.size());
    for (size_t k = 0; k < instances.size(); ++k) {
      const size_t i = (offset + k) % instances.size();
      // The simulator's per-block tiers, as the index reports them: cumulative prefixes.
      const InstanceCache& cache = *instances[i].cache;
      const TierMatch m = cache.Match(request.hash_ids, nullptr);
      uint32_t gpu = 0;
      while (gpu < request.hash_ids.size() && cache.gpu().Contains(request.hash_ids[gpu])) ++gpu;
      matches[k].gpu = gpu;
      matches[k].cpu = m.gpu + m.cpu;
      matches[k].disk = matches[k].cpu;
      if (shared != nullptr) {
        uint32_t n = 0;
        while (n < request.hash_ids.size() && shared->Contains(request.hash_ids[n])) ++n;
        matches[k].shared = n;
      }
    }
    KVATLAS_ASSIGN_OR_RETURN(std::vector<ScoredCandidate> ranked,
                             scorer_.Score(static_cast<uint32_t>(request.hash_ids.size()),
                                           block_tokens_, candidates, matches));
    return (offset + ranked.front().index) % instances.size();
  }

 private:
  Scorer scorer_;
  uint32_t block_tokens_;
};

}  // namespace

Result<std::unique_ptr<Policy>> MakeKvatlasPolicy(Client* client, const BlockTable* blocks,
                                                  KvatlasPolicyOptions options) {
  std::unique_ptr<ReplicaLoads> loads;
  if (options.shared_load) {
    if (options.routers == 0) return Status::InvalidArgument("routers: must be at least 1");
    if (!(options.load_interval_ms >= 0)) {
      return Status::InvalidArgument("load interval: must be a number of ms >= 0");
    }
    KVATLAS_ASSIGN_OR_RETURN(loads, ReplicaLoads::Create(client, options));
  }
  return std::unique_ptr<Policy>(
      std::make_unique<KvatlasPolicy>(client, blocks, std::move(options), std::move(loads)));
}

Result<std::unique_ptr<Policy>> MakeLocalScorerPolicy(const RoutingOptions& routing,
                                                      uint32_t block_tokens) {
  KVATLAS_ASSIGN_OR_RETURN(Scorer scorer, Scorer::Create(routing));
  return std::unique_ptr<Policy>(
      std::make_unique<LocalScorerPolicy>(std::move(scorer), block_tokens));
}

}  // namespace kvatlas::replay
