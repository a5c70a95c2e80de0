// The trace-replay simulator (tools/replay): cache model, timing and policies on
// small synthetic traces with known answers.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "tools/replay/cache_model.h"
#include "tools/replay/kvatlas_policy.h"
#include "tools/replay/report.h"
#include "tools/replay/simulator.h"
#include "tools/replay/trace.h"

namespace kvatlas::replay {
namespace {

TraceRequest Request(double t, uint32_t input, std::vector<uint32_t> ids, uint32_t output = 0) {
  TraceRequest r;
  r.timestamp_ms = t;
  r.input_length = input;
  r.output_length = output;
  r.hash_ids = std::move(ids);
  return r;
}

TEST_CASE("LruBlocks evicts the least recently used") {
  LruBlocks lru(2);
  std::vector<uint32_t> evicted;
  CHECK(lru.Touch(1, &evicted));
  CHECK(lru.Touch(2, &evicted));
  CHECK_FALSE(lru.Touch(1, &evicted));  // already there: now most recent
  CHECK(lru.Touch(3, &evicted));
  CHECK(evicted == std::vector<uint32_t>{2});
  CHECK(lru.Contains(1));
  CHECK(lru.Contains(3));
  CHECK(lru.Erase(3));
  CHECK_FALSE(lru.Erase(3));
  LruBlocks none(0);
  CHECK_FALSE(none.Touch(1, &evicted));
  CHECK_FALSE(none.Contains(1));
}

TEST_CASE("InstanceCache: GPU then CPU, offload on eviction, net changes") {
  InstanceCache cache(/*gpu_blocks=*/2, /*cpu_blocks=*/3);
  // A 3-block prompt on a 2-block GPU: touched tail first, so block 3 is evicted to CPU.
  CacheChanges c = cache.Admit(std::vector<uint32_t>{1, 2, 3}, nullptr);
  CHECK(c.gpu_stored == std::vector<uint32_t>{2, 1});
  CHECK(c.gpu_removed.empty());  // 3 was stored and evicted in one step: never visible
  CHECK(c.cpu_stored == std::vector<uint32_t>{3});
  CHECK(cache.Match(std::vector<uint32_t>{1, 2, 3, 4}, nullptr) == TierMatch{2, 1, 0});

  c = cache.Admit(std::vector<uint32_t>{5, 6}, nullptr);
  CHECK(c.gpu_stored == std::vector<uint32_t>{6, 5});
  CHECK(c.gpu_removed == std::vector<uint32_t>{2, 1});
  CHECK(c.cpu_stored == std::vector<uint32_t>{2, 1});
  CHECK(cache.Match(std::vector<uint32_t>{1, 2, 3}, nullptr) == TierMatch{0, 3, 0});
  CHECK(cache.Match(std::vector<uint32_t>{5, 6, 7}, nullptr) == TierMatch{2, 0, 0});
  CHECK(cache.Match(std::vector<uint32_t>{2, 1}, nullptr) == TierMatch{0, 2, 0});
  CHECK(cache.Match(std::vector<uint32_t>{9, 1}, nullptr) == TierMatch{});  // prefix only

  // GPU full (5 most recent, 6 least): 6 goes to a full CPU, which drops its oldest (3).
  c = cache.Admit(std::vector<uint32_t>{7}, nullptr);
  CHECK(c.gpu_removed == std::vector<uint32_t>{6});
  CHECK(c.cpu_stored == std::vector<uint32_t>{6});
  CHECK(c.cpu_removed == std::vector<uint32_t>{3});
}

TEST_CASE("InstanceCache: the shared backend stores computed blocks for everyone") {
  LruBlocks shared(10);
  InstanceCache a(4, 4), b(4, 4);
  CacheChanges c = a.Admit(std::vector<uint32_t>{1, 2}, &shared);
  CHECK(c.shared_stored == std::vector<uint32_t>{1, 2});
  CHECK(b.Match(std::vector<uint32_t>{1, 2, 3}, &shared) == TierMatch{0, 0, 2});
  c = b.Admit(std::vector<uint32_t>{1, 2, 3}, &shared);
  CHECK(c.shared_stored == std::vector<uint32_t>{3});  // 1 and 2 were loaded, not computed
  CHECK(c.gpu_stored == std::vector<uint32_t>{3, 2, 1});
}

SimOptions Timing() {
  SimOptions o;
  o.instances = 2;
  o.gpu_blocks = 10;
  o.cpu_blocks = 10;
  o.block_tokens = 4;
  o.prefill_overhead_ms = 0;
  o.prefill_ms_per_token = 1;
  o.decode_ms_per_token = 0;
  return o;
}

std::vector<TraceRequest> SmallTrace() {
  return {Request(0, 8, {1, 2}), Request(1, 8, {1, 2}), Request(2, 12, {1, 2, 3}),
          Request(3, 4, {9})};
}

TEST_CASE("Simulate: round-robin, with the timing model's known answers") {
  std::unique_ptr<Policy> policy = MakeRoundRobinPolicy();
  Result<PolicyResult> r = Simulate(Timing(), SmallTrace(), *policy);
  REQUIRE_MESSAGE(r.has_value(), r.status().ToString());
  // inst0: t=0 computes 8 tokens (TTFT 8); t=2 reuses blocks 1-2, computes 4 after waiting
  // until 8 (TTFT 10). inst1: t=1 computes 8 (TTFT 8); t=3 waits until 9, computes 4 (10).
  CHECK(r->requests == 4);
  CHECK(r->prompt_blocks == 8);
  CHECK(r->hit_blocks == 2);
  CHECK(r->gpu_hits == 2);
  CHECK(r->hit_ratio == doctest::Approx(0.25));
  CHECK(r->ttft_p50_ms == doctest::Approx(8));
  CHECK(r->ttft_p99_ms == doctest::Approx(10));
  CHECK(r->ttft_mean_ms == doctest::Approx(9));
  CHECK(r->load_imbalance == doctest::Approx(1.0));
  CHECK(r->requests_per_instance == std::vector<size_t>{2, 2});
  CHECK_FALSE(r->has_latency);
}

TEST_CASE("Simulate: CPU and shared loads cost their fraction") {
  SimOptions o = Timing();
  o.instances = 1;
  o.gpu_blocks = 1;
  o.cpu_load_fraction = 0.5;
  std::unique_ptr<Policy> policy = MakeRoundRobinPolicy();
  // t=0 computes [1, 2] (8 ms; block 2 ends on GPU... the tail is evicted first: 2 → CPU).
  // t=100: block 1 on GPU, block 2 on CPU: 0 + 0.5 · 4 = 2 ms.
  Result<PolicyResult> r = Simulate(
      o, std::vector<TraceRequest>{Request(0, 8, {1, 2}), Request(100, 8, {1, 2})}, *policy);
  REQUIRE(r.has_value());
  CHECK(r->gpu_hits == 1);
  CHECK(r->cpu_hits == 1);
  CHECK(r->ttft_p50_ms == doctest::Approx(2));
  CHECK(r->ttft_p99_ms == doctest::Approx(8));
}

TEST_CASE("least-loaded and kvatlas-local pick by load and by cached prefix") {
  std::unique_ptr<Policy> least = MakeLeastLoadedPolicy(4);
  Result<PolicyResult> r = Simulate(Timing(), SmallTrace(), *least);
  REQUIRE(r.has_value());
  // t=0 → inst0 (tie); t=1 → inst1 (inst0 busy); t=2 → inst0 (7 tokens queued on inst0...
  // vs 7 on inst1: tie → inst0, which has the prefix by luck); t=3 → inst1 ... as counted:
  CHECK(r->requests_per_instance.size() == 2);
  CHECK(r->requests_per_instance[0] + r->requests_per_instance[1] == 4);

  RoutingOptions routing;
  routing.decode_scale = 0;
  routing.queue_scale = 0.3;
  routing.replica_credit = 0;  // the plain cost: the figures below are worked without them
  routing.excess_queue_scale = 0;
  Result<std::unique_ptr<Policy>> local = MakeLocalScorerPolicy(routing, 4);
  REQUIRE(local.has_value());
  r = Simulate(Timing(), SmallTrace(), **local);
  REQUIRE(r.has_value());
  // t=1: inst0 has both blocks (cost = 0.3 · 7 queued tokens = 0.3 · 1.75 blocks) vs inst1
  // idle but uncached (2 blocks): inst0. t=2: inst0 has blocks 1-2, queued until 8 → cost
  // 0.3 · 1.5 + 1 vs inst1 3 → inst0. t=3: block 9 is nowhere; inst1 is idle → inst1.
  CHECK(r->requests_per_instance == std::vector<size_t>{3, 1});
  CHECK(r->hit_blocks == 4);
  CHECK(r->hit_ratio == doctest::Approx(0.5));

  std::unique_ptr<Policy> rr = MakeRoundRobinPolicy();
  Result<PolicyResult> baseline = Simulate(Timing(), SmallTrace(), *rr);
  REQUIRE(baseline.has_value());
  CHECK(r->hit_ratio > baseline->hit_ratio);
}

TEST_CASE("prefix-oracle: the longest cached prefix whatever the load, ties to the least loaded") {
  std::unique_ptr<Policy> oracle = MakePrefixOraclePolicy(4);
  CHECK(oracle->name() == "prefix-oracle");
  Result<PolicyResult> r = Simulate(Timing(), SmallTrace(), *oracle);
  REQUIRE(r.has_value());
  // t=0: nothing cached, equal loads → inst0. t=1, t=2: inst0 holds blocks 1-2 → inst0,
  // though it is busy until 8 and inst1 is idle. t=3: block 9 is nowhere, inst0 has work
  // queued → inst1.
  CHECK(r->requests_per_instance == std::vector<size_t>{3, 1});
  CHECK(r->hit_blocks == 4);
  CHECK(r->hit_ratio == doctest::Approx(0.5));
  // The oracle ignores queues: t=1 waits until 8 for a prefill of nothing (TTFT 7), t=2
  // then computes its 4 new tokens from 8 to 12 (TTFT 10).
  CHECK(r->ttft_p50_ms == doctest::Approx(7));
  CHECK(r->ttft_p99_ms == doctest::Approx(10));
}

// Delegates to a policy and records its picks; with `epsilon` set, also checks every pick
// against the bounded-load bound, computed here from the views as the docs define it.
class Recorder final : public Policy {
 public:
  Recorder(std::unique_ptr<Policy> inner, uint32_t block_tokens, double epsilon = -1)
      : inner_(std::move(inner)), block_tokens_(block_tokens), epsilon_(epsilon) {}
  std::string_view name() const override { return inner_->name(); }
  Result<size_t> Pick(size_t seq, const TraceRequest& request,
                      std::span<const InstanceView> instances, const LruBlocks* shared) override {
    Result<size_t> pick = inner_->Pick(seq, request, instances, shared);
    if (!pick) return pick;
    picks.push_back(*pick);
    if (epsilon_ >= 0) {
      const auto load = [&](const InstanceView& v) {
        return static_cast<double>(v.queued_prefill_tokens) / block_tokens_ +
               static_cast<double>(v.active_decode_blocks);
      };
      double total = static_cast<double>(request.hash_ids.size());
      for (const InstanceView& v : instances) total += load(v);
      const double bound = (1 + epsilon_) * total / static_cast<double>(instances.size());
      bool another_under = false;
      for (const InstanceView& v : instances) another_under |= load(v) <= bound;
      if (another_under && load(instances[*pick]) > bound) ++over_bound;
    }
    return pick;
  }
  std::vector<size_t> picks;
  size_t over_bound = 0;

 private:
  std::unique_ptr<Policy> inner_;
  uint32_t block_tokens_;
  double epsilon_;
};

// 200 requests sharing an 8-block system prompt, each with one block of its own, 1 ms
// apart: an instance with the prompt cached needs 4 ms per request, so it takes all four
// instances to keep up.
std::vector<TraceRequest> SharedPrefixTrace() {
  std::vector<TraceRequest> trace;
  for (uint32_t i = 0; i < 200; ++i) {
    trace.push_back(Request(1.0 * i, 36, {1, 2, 3, 4, 5, 6, 7, 8, 100 + i}));
  }
  return trace;
}

TEST_CASE("bounded-load: the longest prefix among instances within (1+eps) of the mean load") {
  // Three instances; inst0 holds the request's first 3 blocks.
  std::vector<InstanceCache> caches(3, InstanceCache(10, 0));
  (void)caches[0].Admit(std::vector<uint32_t>{1, 2, 3}, nullptr);
  (void)caches[2].Admit(std::vector<uint32_t>{1}, nullptr);
  std::vector<InstanceView> views(3);
  const uint64_t loads[] = {20, 6, 10};  // blocks of queued prefill
  for (size_t i = 0; i < 3; ++i) {
    views[i].index = i;
    views[i].cache = &caches[i];
    views[i].queued_prefill_tokens = loads[i] * 4;
  }
  const TraceRequest request = Request(0, 16, {1, 2, 3, 4});
  // Mean with the request: (36 + 4) / 3 = 13.3. eps 0.25: bound 16.7, inst0 (20) is over
  // it; of inst1 and inst2, inst2 holds block 1.
  CHECK(BoundedLoadLimit(views, 4, 4, 0.25) == doctest::Approx(1.25 * 40 / 3));
  std::unique_ptr<Policy> bounded = MakeBoundedLoadPolicy(4, 0.25);
  CHECK(bounded->name() == "bounded-load");
  CHECK(bounded->Pick(0, request, views, nullptr).value() == 2);
  // eps 0.5: bound 20, inst0 qualifies and has the longest prefix, as the oracle picks.
  CHECK(MakeBoundedLoadPolicy(4, 0.5)->Pick(0, request, views, nullptr).value() == 0);
  CHECK(MakePrefixOraclePolicy(4)->Pick(0, request, views, nullptr).value() == 0);
  // eps 0: bound 13.3; inst2 (10) still qualifies. With inst2 at 16 (bound 15.3) only inst1.
  CHECK(MakeBoundedLoadPolicy(4, 0)->Pick(0, request, views, nullptr).value() == 2);
  views[2].queued_prefill_tokens = 16 * 4;
  CHECK(MakeBoundedLoadPolicy(4, 0)->Pick(0, request, views, nullptr).value() == 1);
}

TEST_CASE("bounded-load never picks an instance over the bound while another is under it") {
  SimOptions o = Timing();
  o.instances = 4;
  o.decode_ms_per_token = 1;
  std::vector<TraceRequest> trace = SharedPrefixTrace();
  for (size_t i = 0; i < trace.size(); ++i) trace[i].output_length = static_cast<uint32_t>(i % 7);
  for (const double epsilon : {0.0, 0.1, 0.25, 1.0}) {
    Recorder bounded(MakeBoundedLoadPolicy(4, epsilon), 4, epsilon);
    Result<PolicyResult> r = Simulate(o, trace, bounded);
    REQUIRE(r.has_value());
    CHECK(bounded.picks.size() == trace.size());
    CHECK_MESSAGE(bounded.over_bound == 0, "epsilon " << epsilon);
  }
}

TEST_CASE("bounded-load with a huge epsilon picks what prefix-oracle picks") {
  SimOptions o = Timing();
  o.instances = 3;
  o.gpu_blocks = 12;
  o.cpu_blocks = 6;
  o.decode_ms_per_token = 0.5;
  std::vector<TraceRequest> trace = SharedPrefixTrace();
  for (uint32_t s = 0; s < 40; ++s) {  // and interleaved conversations, some evicted
    std::vector<uint32_t> ids;
    for (uint32_t b = 0; b <= s % 5; ++b) ids.push_back(1000 + (s % 9) * 10 + b);
    trace.push_back(Request(1.0 + 11.0 * s, 4 * static_cast<uint32_t>(ids.size()), ids, s % 3));
  }
  std::stable_sort(trace.begin(), trace.end(), [](const TraceRequest& a, const TraceRequest& b) {
    return a.timestamp_ms < b.timestamp_ms;
  });
  Recorder oracle(MakePrefixOraclePolicy(4), 4);
  Recorder bounded(MakeBoundedLoadPolicy(4, 1e12), 4);
  REQUIRE(Simulate(o, trace, oracle).has_value());
  REQUIRE(Simulate(o, trace, bounded).has_value());
  CHECK(bounded.picks == oracle.picks);
  // ... and with the default epsilon it does not on this trace.
  Recorder tight(MakeBoundedLoadPolicy(4, 0.25), 4);
  REQUIRE(Simulate(o, trace, tight).has_value());
  CHECK(tight.picks != oracle.picks);
}

TEST_CASE("on a shared-prefix trace prefix-oracle herds, bounded-load spreads") {
  SimOptions o = Timing();
  o.instances = 4;
  std::unique_ptr<Policy> oracle = MakePrefixOraclePolicy(4);
  Result<PolicyResult> herd = Simulate(o, SharedPrefixTrace(), *oracle);
  std::unique_ptr<Policy> bounded = MakeBoundedLoadPolicy(4, 0.25);
  Result<PolicyResult> spread = Simulate(o, SharedPrefixTrace(), *bounded);
  REQUIRE(herd.has_value());
  REQUIRE(spread.has_value());
  MESSAGE("oracle imbalance " << herd->load_imbalance << " hit " << herd->hit_ratio << " p99 "
                              << herd->ttft_p99_ms << "; bounded imbalance "
                              << spread->load_imbalance << " hit " << spread->hit_ratio << " p99 "
                              << spread->ttft_p99_ms);
  CHECK(herd->requests_per_instance[0] == 200);  // every request to the first instance
  CHECK(herd->load_imbalance == doctest::Approx(4.0));
  // Within about 1 + eps: three instances at the bound and one idle is max / mean 4/3.
  CHECK(spread->load_imbalance <= 1.25 + 0.1);
  // Each instance computes the prompt once; the rest is reuse.
  CHECK(spread->hit_ratio >= 0.8 * herd->hit_ratio);
  CHECK(spread->ttft_p99_ms < herd->ttft_p99_ms / 5);
}

TEST_CASE("kvatlas-local beats round-robin on a multi-turn synthetic trace") {
  // 15 sessions of 6 turns, each turn extending its session's prefix by 2 blocks,
  // interleaved, 1 s apart (no queues); 4 instances whose GPUs hold 4 sessions each.
  // Round-robin moves a session to another instance at every turn (15 mod 4 = 3).
  std::vector<TraceRequest> trace;
  for (uint32_t turn = 0; turn < 6; ++turn) {
    for (uint32_t s = 0; s < 15; ++s) {
      std::vector<uint32_t> ids;
      for (uint32_t b = 0; b < 2 * (turn + 1); ++b) ids.push_back(s * 100 + b);
      trace.push_back(
          Request(1000.0 * (turn * 16 + s), 4 * static_cast<uint32_t>(ids.size()), ids));
    }
  }
  SimOptions o = Timing();
  o.instances = 4;
  o.gpu_blocks = 48;
  o.cpu_blocks = 0;
  std::unique_ptr<Policy> rr = MakeRoundRobinPolicy();
  Result<PolicyResult> base = Simulate(o, trace, *rr);
  Result<std::unique_ptr<Policy>> local = MakeLocalScorerPolicy({}, 4);
  REQUIRE(local.has_value());
  Result<PolicyResult> kv = Simulate(o, trace, **local);
  REQUIRE(base.has_value());
  REQUIRE(kv.has_value());
  // Every turn after the first can reuse its previous turn: (1+2+3+4+5) · 2 / (2+...+12).
  CHECK(kv->hit_ratio == doctest::Approx(30.0 / 42.0));
  CHECK(base->hit_ratio < kv->hit_ratio);
  CHECK(kv->ttft_p50_ms < base->ttft_p50_ms);
}

TEST_CASE("Trace lines, token mapping and block keys") {
  Result<TraceRequest> r =
      ParseTraceLine(R"({"timestamp": 40, "input_length": 700, "output_length": 3,
                         "hash_ids": [5, 6]})");
  REQUIRE(r.has_value());
  CHECK(r->timestamp_ms == 40);
  CHECK(r->input_length == 700);
  CHECK(r->hash_ids == std::vector<uint32_t>{5, 6});
  CHECK(ParseTraceLine(R"({"timestamp": 1, "input_length": 1, "output_length": 1})")
            .status()
            .message()
            .starts_with("hash_ids:"));
  CHECK(ParseTraceLine(R"({"input_length": 1})").status().message().starts_with("timestamp:"));
  CHECK(ParseTraceLine("{").status().message().starts_with("line: invalid JSON"));

  CHECK(BlockTokens(5, 8) == BlockTokens(5, 8));
  CHECK(BlockTokens(5, 8) != BlockTokens(6, 8));
  const std::vector<TraceRequest> trace = {Request(0, 16, {1, 2}), Request(1, 16, {1, 3}),
                                           Request(2, 8, {4, 2})};
  const BlockHasher hasher;
  const BlockTable table(trace, 8, hasher);
  CHECK(table.size() == 4);
  CHECK(table.inconsistent() == 1);  // block 2 under parents 1 and 4
  const std::vector<BlockKey> keys = hasher.SequenceHashes(RequestTokens(trace[1], 8), 8);
  CHECK(table.Get(1).key == keys[0]);
  CHECK(table.Get(3).key == keys[1]);
  CHECK(table.Get(3).parent_key == keys[0]);
  CHECK(table.Get(3).depth == 1);
  CHECK_FALSE(table.Get(1).parent_key.has_value());
}

TEST_CASE("Quantile and the report formats") {
  CHECK(Quantile({}, 0.5) == 0);
  CHECK(Quantile({3, 1, 2, 4}, 0.5) == 2);
  CHECK(Quantile({3, 1, 2, 4}, 0.99) == 4);
  CHECK(Quantile({7}, 0.0) == 7);
  PolicyResult r;
  r.policy = "kvatlas";
  r.hit_ratio = 0.5;
  r.has_latency = true;
  r.lookup_p99_us = 120;
  const std::string json = FormatJsonLines({r});
  CHECK(json.find("\"policy\":\"kvatlas\"") != std::string::npos);
  CHECK(json.find("\"lookup_p99_us\":120.0") != std::string::npos);
  CHECK(FormatCsv({r}).starts_with("policy,requests,"));
  CHECK(FormatTable({r}).find("kvatlas") != std::string::npos);
  CHECK(FormatTable({r}).find("hit/oracle") == std::string::npos);
  CHECK(json.find("\"hit_ratio_vs_oracle\":null") != std::string::npos);

  // With the oracle in the same run: every policy's figures as fractions of its.
  PolicyResult oracle;
  oracle.policy = "prefix-oracle";
  oracle.hit_ratio = 0.8;
  oracle.ttft_p50_ms = 100;
  oracle.ttft_p99_ms = 1000;
  r.ttft_p50_ms = 50;
  r.ttft_p99_ms = 1500;
  CHECK(FormatTable({r, oracle}).find("hit/oracle") != std::string::npos);
  CHECK(FormatTable({r, oracle}).find("0.625       0.50       1.50") != std::string::npos);
  const std::string both = FormatJsonLines({r, oracle});
  CHECK(both.find("\"hit_ratio_vs_oracle\":0.625") != std::string::npos);
  CHECK(both.find("\"ttft_p50_vs_oracle\":0.5") != std::string::npos);
  CHECK(both.find("\"ttft_p99_vs_oracle\":1.5") != std::string::npos);
  CHECK(both.find("\"hit_ratio_vs_bounded_load\":null") != std::string::npos);
  CHECK(FormatTable({r, oracle}).find("hit/bounded") == std::string::npos);

  // With bounded-load too: three more columns and fields, against it.
  PolicyResult bounded;
  bounded.policy = "bounded-load";
  bounded.hit_ratio = 0.4;
  bounded.ttft_p50_ms = 25;
  bounded.ttft_p99_ms = 3000;
  const std::string table = FormatTable({r, oracle, bounded});
  CHECK(table.find("hit/oracle p50/oracle p99/oracle  hit/bounded p50/bounded p99/bounded") !=
        std::string::npos);
  CHECK(table.find("0.625       0.50       1.50       1.250       2.00       0.50") !=
        std::string::npos);
  const std::string three = FormatJsonLines({r, oracle, bounded});
  CHECK(three.find("\"hit_ratio_vs_bounded_load\":1.25") != std::string::npos);
  CHECK(three.find("\"ttft_p50_vs_bounded_load\":2.0") != std::string::npos);
  CHECK(three.find("\"ttft_p99_vs_bounded_load\":0.5") != std::string::npos);
}

// Records, per request, the replica that routes it and the total load it sees; picks
// instance 0 always, so that every request queues on one instance.
class ViewRecorder final : public Policy {
 public:
  std::string_view name() const override { return "recorder"; }
  Status BeforePick(double, size_t router) override {
    routers.push_back(router);
    return Status::Ok();
  }
  Result<size_t> Pick(size_t, const TraceRequest&, std::span<const InstanceView> instances,
                      const LruBlocks*) override {
    queued.push_back(instances[0].queued_prefill_tokens);
    return size_t{0};
  }
  Status OnScheduled(const ScheduledRequest& s) override {
    scheduled.push_back(s);
    return Status::Ok();
  }
  std::vector<size_t> routers;
  std::vector<uint64_t> queued;
  std::vector<ScheduledRequest> scheduled;
};

TEST_CASE("router replicas: each sees only the load of the requests it routed") {
  SimOptions o;
  o.instances = 2;
  o.block_tokens = 4;
  o.prefill_overhead_ms = 0;
  o.prefill_ms_per_token = 1;  // a 4-token prefill takes 4 ms
  o.decode_ms_per_token = 0;
  // Four 4-token requests at t = 0, 0, 0, 0 on one instance: each queues behind the others.
  const std::vector<TraceRequest> trace = {Request(0, 4, {1}), Request(0, 4, {2}),
                                           Request(0, 4, {3}), Request(0, 4, {4})};
  ViewRecorder one;
  REQUIRE(Simulate(o, trace, one).has_value());
  CHECK(one.routers == std::vector<size_t>{0, 0, 0, 0});
  CHECK(one.queued == std::vector<uint64_t>{0, 4, 8, 12});  // the whole queue

  o.routers = 2;
  ViewRecorder two;
  Result<PolicyResult> r = Simulate(o, trace, two);
  REQUIRE(r.has_value());
  CHECK(r->policy == "recorder@2r");
  CHECK(r->routers == 2);
  CHECK(two.routers == std::vector<size_t>{0, 1, 0, 1});   // dealt round-robin
  CHECK(two.queued == std::vector<uint64_t>{0, 0, 4, 4});  // only its own requests
  REQUIRE(two.scheduled.size() == 4);
  CHECK(two.scheduled[3].router == 1);
  CHECK(two.scheduled[3].instance == 0);
  CHECK(two.scheduled[3].prefill_end_ms == doctest::Approx(16));
  CHECK(two.scheduled[3].prefill_blocks == 1);
  CHECK(two.scheduled[3].decode_blocks == 1);

  o.routers = 0;
  CHECK(Simulate(o, trace, two).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvatlas::replay
