#include "kvatlas/common/routing.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvatlas/common/protocol.h"

namespace kvatlas {
namespace {

RouteCandidate Candidate(std::string id, uint64_t queued_tokens = 0, uint64_t decode = 0) {
  RouteCandidate c;
  c.instance_id = std::move(id);
  c.queued_prefill_tokens = queued_tokens;
  c.active_decode_blocks = decode;
  return c;
}

// The defaults without the relative terms (replica credit, excess queue): the plain cost.
RoutingOptions Plain() {
  RoutingOptions options;
  options.replica_credit = 0;
  options.excess_queue_scale = 0;
  return options;
}

std::vector<ScoredCandidate> Score(const RoutingOptions& options, uint32_t prompt_blocks,
                                   const std::vector<RouteCandidate>& candidates,
                                   const std::vector<PrefixMatch>& matches) {
  Result<std::vector<ScoredCandidate>> scored =
      ScoreCandidates(options, prompt_blocks, 16, candidates, matches);
  REQUIRE_MESSAGE(scored.has_value(), scored.status().ToString());
  return *scored;
}

TEST_CASE("ScoreCandidates: Dynamo's cost with the default tier weights") {
  // Prompt of 10 blocks of 16 tokens.
  // a: 4 blocks on GPU, 2 more on CPU, 2 more on DISK; 2 blocks queued, 5 decoding:
  //    credit 4 + 0.75·2 + 0.25·2 = 6, new 4, prefill 2 + 4 = 6, cost 11.
  // b: nothing cached, idle: new 10, cost 10.
  // c: everything on GPU, 10 blocks queued, 3 decoding: new 0, prefill 10, cost 13.
  const std::vector<RouteCandidate> candidates = {Candidate("a", 32, 5), Candidate("b"),
                                                  Candidate("c", 160, 3)};
  const std::vector<PrefixMatch> matches = {{4, 6, 8, 0}, {}, {10, 10, 10, 0}};
  RoutingOptions dynamo = Plain();  // Dynamo's load weights, so that the load decides here
  dynamo.queue_scale = 1;
  dynamo.decode_scale = 1;
  const std::vector<ScoredCandidate> ranked = Score(dynamo, 10, candidates, matches);
  REQUIRE(ranked.size() == 3);
  CHECK(ranked[0].candidate.instance_id == "b");
  CHECK(ranked[0].index == 1);
  CHECK(ranked[0].cost == doctest::Approx(10));
  CHECK(ranked[0].probability == 1.0);
  CHECK(ranked[1].candidate.instance_id == "a");
  CHECK(ranked[1].gpu_blocks == 4);
  CHECK(ranked[1].cpu_blocks == 2);
  CHECK(ranked[1].disk_blocks == 2);
  CHECK(ranked[1].shared_blocks == 0);
  CHECK(ranked[1].credit == doctest::Approx(6));
  CHECK(ranked[1].new_prefill_blocks == doctest::Approx(4));
  CHECK(ranked[1].queued_prefill_blocks == doctest::Approx(2));
  CHECK(ranked[1].prefill_cost == doctest::Approx(6));
  CHECK(ranked[1].decode_cost == doctest::Approx(5));
  CHECK(ranked[1].cost == doctest::Approx(11));
  CHECK(ranked[1].probability == 0.0);
  CHECK(ranked[2].candidate.instance_id == "c");
  CHECK(ranked[2].new_prefill_blocks == doctest::Approx(0));
  CHECK(ranked[2].cost == doctest::Approx(13));
}

TEST_CASE("ScoreCandidates: scales, shared blocks, clamping and ties") {
  RoutingOptions options;
  options.prefill_scale = 2;
  options.decode_scale = 0.5;
  // Shared backend has 8 of 10 blocks: blocks 2..7 come from it (weight 0.5): credit 5.
  std::vector<ScoredCandidate> ranked =
      Score(options, 10, {Candidate("d", 0, 4)}, {PrefixMatch{2, 2, 2, 8}});
  CHECK(ranked[0].shared_blocks == 6);
  CHECK(ranked[0].credit == doctest::Approx(5));
  CHECK(ranked[0].prefill_cost == doctest::Approx(10));
  CHECK(ranked[0].decode_cost == doctest::Approx(2));
  CHECK(ranked[0].cost == doctest::Approx(12));

  // Matches past the prompt and non-cumulative values are clamped.
  ranked = Score({}, 10, {Candidate("e")}, {PrefixMatch{20, 3, 1, 0}});
  CHECK(ranked[0].gpu_blocks == 10);
  CHECK(ranked[0].cpu_blocks == 0);
  CHECK(ranked[0].new_prefill_blocks == doctest::Approx(0));

  // Equal costs keep the candidates' order.
  ranked = Score({}, 4, {Candidate("x"), Candidate("y"), Candidate("z")}, {{}, {}, {}});
  CHECK(ranked[0].candidate.instance_id == "x");
  CHECK(ranked[1].candidate.instance_id == "y");
  CHECK(ranked[2].candidate.instance_id == "z");

  // A zero GPU weight ignores GPU matches. h's queued block weighs queue_scale.
  options = Plain();
  options.weights.gpu = 0;
  ranked = Score(options, 4, {Candidate("g"), Candidate("h", 16)}, {{4, 4, 4, 0}, {}});
  CHECK(ranked[0].candidate.instance_id == "g");
  CHECK(ranked[0].cost == doctest::Approx(4));
  CHECK(ranked[1].cost == doctest::Approx(4 + kDefaultQueueScale));
}

TEST_CASE("ScoreCandidates: queue_scale weighs queued work apart from new work") {
  // A prompt of 10 blocks. warm: 8 on GPU (2 new) behind 20 queued blocks (320 tokens);
  // cold: nothing cached (10 new), idle.
  const std::vector<RouteCandidate> candidates = {Candidate("cold"), Candidate("warm", 320)};
  const std::vector<PrefixMatch> matches = {{}, {8, 8, 8, 0}};
  RoutingOptions options = Plain();
  options.prefill_scale = 2;
  options.queue_scale = 0.25;
  // warm: 2 · 2 new + 0.25 · 20 queued = 9; cold: 2 · 10 = 20.
  std::vector<ScoredCandidate> ranked = Score(options, 10, candidates, matches);
  CHECK(ranked[0].candidate.instance_id == "warm");
  CHECK(ranked[0].new_prefill_blocks == doctest::Approx(2));
  CHECK(ranked[0].queued_prefill_blocks == doctest::Approx(20));
  CHECK(ranked[0].prefill_cost == doctest::Approx(9));
  CHECK(ranked[0].cost == doctest::Approx(9));
  CHECK(ranked[1].cost == doctest::Approx(20));
  // Weighing the queue as the new work (Dynamo's one prefill scale) flips the choice:
  // warm 2 · (2 + 20) = 44 > cold 20.
  options.queue_scale = 2;
  ranked = Score(options, 10, candidates, matches);
  CHECK(ranked[0].candidate.instance_id == "cold");
  CHECK(ranked[1].prefill_cost == doctest::Approx(44));
  // The default lets a request wait behind some queued work on its prefix: 15 queued blocks,
  // 2 + 0.4 · 15 = 8 against 10.
  const std::vector<RouteCandidate> shorter = {Candidate("cold"), Candidate("warm", 240)};
  ranked = Score(Plain(), 10, shorter, matches);
  CHECK(ranked[0].candidate.instance_id == "warm");
  CHECK(ranked[0].cost == doctest::Approx(2 + kDefaultQueueScale * 15));
  // queue_scale 0 ignores queues altogether.
  options = Plain();
  options.queue_scale = 0;
  ranked = Score(options, 10, {Candidate("cold"), Candidate("warm", 1 << 30)}, matches);
  CHECK(ranked[0].candidate.instance_id == "warm");
  CHECK(ranked[0].cost == doctest::Approx(2));
}

TEST_CASE("ScoreCandidates: the relative terms, priced as documented") {
  // Prompt of 10 blocks of 16 tokens. a holds all 10 with 10 blocks queued, b holds all 10
  // with 2 queued, c and d hold nothing and are idle: mean queue 3 blocks.
  const std::vector<RouteCandidate> candidates = {Candidate("a", 160), Candidate("b", 32),
                                                  Candidate("c"), Candidate("d")};
  const std::vector<PrefixMatch> matches = {{10, 10, 10, 0}, {10, 10, 10, 0}, {}, {}};
  RoutingOptions options = Plain();
  options.queue_scale = 0.3;
  // Off: c's 10 blocks are new (cost 10), a pays queue_scale · 10 = 3, b 0.6.
  std::vector<ScoredCandidate> off = Score(options, 10, candidates, matches);
  CHECK(off[0].candidate.instance_id == "b");
  CHECK(off[2].candidate.instance_id == "c");
  CHECK(off[2].cost == doctest::Approx(10));

  // Replica credit 0.8: only a's queue is above the mean, so each of c's 10 blocks has 1 loaded
  // holder of 4 candidates: credit 0.8 · 10 · 1/4 = 2, new 8. a and b credit nothing more.
  options.replica_credit = 0.8;
  std::vector<ScoredCandidate> ranked = Score(options, 10, candidates, matches);
  REQUIRE(ranked[2].candidate.instance_id == "c");
  CHECK(ranked[2].credit == doctest::Approx(2));
  CHECK(ranked[2].new_prefill_blocks == doctest::Approx(8));
  CHECK(ranked[2].cost == doctest::Approx(8));
  CHECK(ranked[1].candidate.instance_id == "a");
  CHECK(ranked[1].credit == doctest::Approx(10));
  CHECK(ranked[1].cost == doctest::Approx(3));

  // Excess queue 2 over (1 + 1) · mean = 6 blocks: a's 10 queued blocks are 4 over, + 8.
  options = Plain();
  options.queue_scale = 0.3;
  options.excess_queue_scale = 2;
  options.excess_queue_epsilon = 1;
  ranked = Score(options, 10, candidates, matches);
  CHECK(ranked[0].candidate.instance_id == "b");
  CHECK(ranked[0].prefill_cost == doctest::Approx(0.6));
  CHECK(ranked[1].candidate.instance_id == "c");
  CHECK(ranked[2].candidate.instance_id == "d");
  CHECK(ranked[3].candidate.instance_id == "a");
  CHECK(ranked[3].prefill_cost == doctest::Approx(3 + 8));
  CHECK(ranked[3].cost == doctest::Approx(11));

  // The defaults: replica credit 1 gives c and d 10 · 1/4 = 2.5 each (new 7.5); a pays
  // 0.4 · 10 = 4 plus 0.7 · (10 − 1.5 · 3) = 3.85 and falls behind them; b pays 0.4 · 2.
  const RoutingOptions defaults;
  CHECK(defaults.replica_credit == kDefaultReplicaCredit);
  CHECK(defaults.excess_queue_scale == kDefaultExcessQueueScale);
  CHECK(defaults.excess_queue_epsilon == kDefaultExcessQueueEpsilon);
  CHECK(defaults.queue_scale == 0.4);
  CHECK(defaults.decode_scale == 0.01);
  ranked = Score(defaults, 10, candidates, matches);
  CHECK(ranked[0].candidate.instance_id == "b");
  CHECK(ranked[0].cost == doctest::Approx(0.8));
  CHECK(ranked[1].candidate.instance_id == "c");
  CHECK(ranked[1].credit == doctest::Approx(2.5));
  CHECK(ranked[1].cost == doctest::Approx(7.5));
  CHECK(ranked[2].candidate.instance_id == "d");
  CHECK(ranked[3].candidate.instance_id == "a");
  CHECK(ranked[3].prefill_cost == doctest::Approx(4 + 3.85));

  RoutingOptions bad;
  bad.replica_credit = 1.5;
  CHECK(ValidateRoutingOptions(bad).message() ==
        "replica_credit: must be a number from 0 to 1, got 1.5");
  bad = {};
  bad.excess_queue_scale = -1;
  CHECK(ValidateRoutingOptions(bad).message().starts_with(
      "excess_queue_scale: must be a finite number from 0 to 1000000"));
  bad = {};
  bad.excess_queue_epsilon = std::nan("");
  CHECK(ValidateRoutingOptions(bad).message().starts_with("excess_queue_epsilon:"));
}

TEST_CASE("ScoreCandidates: predicted blocks count past the known ones, weighed") {
  // Prompt of 10 blocks. a: 2 on GPU, predicted 6 (4 past GPU); b: predicted 8; c: shared 5,
  // predicted 3 (the predicted ones come first, then shared past them).
  PrefixMatch a{.gpu = 2, .cpu = 2, .disk = 2, .predicted = 6};
  PrefixMatch b{.predicted = 8};
  PrefixMatch c{.shared = 5, .predicted = 3};
  RoutingOptions options;
  std::vector<ScoredCandidate> scored =
      Score(options, 10, {Candidate("a"), Candidate("b"), Candidate("c")}, {a, b, c});
  REQUIRE(scored[0].candidate.instance_id == "b");
  CHECK(scored[0].predicted_blocks == 8);
  CHECK(scored[0].credit == 8.0);
  CHECK(scored[1].candidate.instance_id == "a");
  CHECK(scored[1].gpu_blocks == 2);
  CHECK(scored[1].predicted_blocks == 4);
  CHECK(scored[1].credit == 6.0);
  CHECK(scored[2].predicted_blocks == 3);
  CHECK(scored[2].shared_blocks == 2);
  CHECK(scored[2].credit == 3.0 + 0.5 * 2);
  // Weighed by weights.predicted: at 0.5, a (2 + 0.5·4 = 4) beats b (0.5·8 = 4) on the tie
  // order; at 0 predictions count for nothing.
  options.weights.predicted = 0.5;
  scored = Score(options, 10, {Candidate("a"), Candidate("b")}, {a, b});
  CHECK(scored[0].credit == 4.0);
  CHECK(scored[1].credit == 4.0);
  options.weights.predicted = 0;
  scored = Score(options, 10, {Candidate("b"), Candidate("a")}, {b, a});
  CHECK(scored[0].candidate.instance_id == "a");
  CHECK(scored[1].credit == 0.0);
  options.weights.predicted = 1.5;
  CHECK(ScoreCandidates(options, 1, 16, std::vector<RouteCandidate>{Candidate("a")},
                        std::vector<PrefixMatch>{{}})
            .status()
            .message()
            .starts_with("weights.PREDICTED:"));
}

TEST_CASE("ScoreCandidates: invalid input names the field") {
  const std::vector<RouteCandidate> one = {Candidate("a")};
  const std::vector<PrefixMatch> match = {{}};
  CHECK(ScoreCandidates({}, 1, 16, {}, {}).status().message().starts_with("candidates:"));
  CHECK(ScoreCandidates({}, 1, 16, one, {}).status().message().starts_with("matches:"));
  CHECK(ScoreCandidates({}, 1, 0, one, match).status().message().starts_with("block_size:"));
  RoutingOptions bad;
  bad.weights.cpu = 1.5;
  CHECK(ScoreCandidates(bad, 1, 16, one, match).status().message().starts_with("weights.CPU:"));
  bad = {};
  bad.temperature = -1;
  CHECK(ScoreCandidates(bad, 1, 16, one, match).status().message().starts_with("temperature:"));
  bad = {};
  bad.prefill_scale = std::nan("");
  CHECK(ScoreCandidates(bad, 1, 16, one, match).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ScoreCandidates: scales past kMaxRoutingScale are refused, naming the range") {
  // 1e308 · 2 blocks overflows to infinity, which JSON can only write as null.
  const std::vector<RouteCandidate> one = {Candidate("a", 0, 5)};
  const std::vector<PrefixMatch> match = {{}};
  RoutingOptions bad;
  bad.prefill_scale = 1e308;
  Result<std::vector<ScoredCandidate>> scored = ScoreCandidates(bad, 2, 16, one, match);
  REQUIRE_FALSE(scored.has_value());
  CHECK(scored.status().code() == StatusCode::kInvalidArgument);
  CHECK(scored.status().message().starts_with(
      "prefill_scale: must be a finite number from 0 to 1000000"));
  bad = {};
  bad.decode_scale = kMaxRoutingScale * 2;
  CHECK(ValidateRoutingOptions(bad).message().starts_with("decode_scale:"));
  bad.decode_scale = std::numeric_limits<double>::infinity();
  CHECK(ValidateRoutingOptions(bad).message().starts_with("decode_scale:"));
  bad.decode_scale = kMaxRoutingScale;
  CHECK(ValidateRoutingOptions(bad).ok());
  for (const double v :
       {-1.0, kMaxRoutingScale * 2, std::nan(""), std::numeric_limits<double>::infinity()}) {
    CAPTURE(v);
    bad.queue_scale = v;
    CHECK(ValidateRoutingOptions(bad).message().starts_with(
        "queue_scale: must be a finite number from 0 to 1000000"));
  }
  bad.queue_scale = kMaxRoutingScale;
  CHECK(ValidateRoutingOptions(bad).ok());
}

TEST_CASE("ScoreCandidates: the largest accepted inputs give finite costs and probabilities") {
  const uint64_t most = std::numeric_limits<uint64_t>::max();
  const std::vector<RouteCandidate> candidates = {Candidate("full", most, most), Candidate("idle"),
                                                  Candidate("half", most / 2, most / 2)};
  const std::vector<PrefixMatch> matches = {{}, {}, {}};
  for (const double temperature : {0.0, 1e-300, 0.5, 1e300}) {
    CAPTURE(temperature);
    RoutingOptions options;
    options.prefill_scale = kMaxRoutingScale;
    options.queue_scale = kMaxRoutingScale;
    options.decode_scale = kMaxRoutingScale;
    options.excess_queue_scale = kMaxRoutingScale;
    options.replica_credit = 1;
    options.temperature = temperature;
    options.seed = 3;
    Result<std::vector<ScoredCandidate>> scored =
        ScoreCandidates(options, std::numeric_limits<uint32_t>::max(), 1, candidates, matches);
    REQUIRE(scored.has_value());
    double total = 0;
    for (const ScoredCandidate& s : *scored) {
      CAPTURE(s.candidate.instance_id);
      for (const double v : {s.cost, s.probability, s.credit, s.new_prefill_blocks,
                             s.queued_prefill_blocks, s.prefill_cost, s.decode_cost}) {
        CHECK(std::isfinite(v));
      }
      total += s.probability;
    }
    CHECK(total == doctest::Approx(1));
  }
}

TEST_CASE("ScoreCandidates: softmax sampling is seeded and follows the probabilities") {
  // Costs 0 and 4 blocks normalise to 0 and 1; at temperature 1, p(cheap) = 1 / (1 + e^-1).
  const std::vector<RouteCandidate> candidates = {Candidate("cheap"), Candidate("dear", 64)};
  const std::vector<PrefixMatch> matches = {{4, 4, 4, 0}, {4, 4, 4, 0}};
  RoutingOptions options;
  options.temperature = 1;
  const double expected = 1 / (1 + std::exp(-1.0));
  int cheap = 0;
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    options.seed = seed;
    const std::vector<ScoredCandidate> ranked = Score(options, 4, candidates, matches);
    const std::vector<ScoredCandidate> again = Score(options, 4, candidates, matches);
    REQUIRE(ranked == again);  // same seed, same pick
    double total = 0;
    for (const ScoredCandidate& s : ranked) total += s.probability;
    REQUIRE(total == doctest::Approx(1.0));
    const ScoredCandidate& cheap_entry =
        ranked[0].candidate.instance_id == "cheap" ? ranked[0] : ranked[1];
    REQUIRE(cheap_entry.probability == doctest::Approx(expected));
    if (ranked[0].candidate.instance_id == "cheap") ++cheap;
  }
  CHECK(cheap / 4000.0 == doctest::Approx(expected).epsilon(0.05));
}

LookupAnswer SampleLookup() {
  LookupAnswer answer;
  answer.revision = 9;
  answer.context.model = "m";
  answer.context.block_size = 16;
  answer.blocks_found = 6;
  InstanceMatch a;
  a.instance_id = "a";
  a.blocks = {3, 5, 6, 0, 0};
  a.dp_ranks = {{0, {1, 1, 1, 0, 0}}, {1, {3, 5, 6, 0, 0}}};
  answer.instances.push_back(a);
  answer.shared.push_back({"pool", 0, 4, {}});
  answer.shared.push_back({"pool2", 0, 2, {}});
  return answer;
}

TEST_CASE("MatchesFromLookup: instances, ranks, absent instances, shared backends") {
  RouteCandidate rank0 = Candidate("a");
  rank0.dp_rank = 0;
  RouteCandidate rank7 = Candidate("a");
  rank7.dp_rank = 7;
  const std::vector<RouteCandidate> candidates = {Candidate("a"), rank0, rank7, Candidate("zz")};
  const std::vector<PrefixMatch> m = MatchesFromLookup(SampleLookup(), candidates);
  REQUIRE(m.size() == 4);
  CHECK(m[0] == PrefixMatch{3, 5, 6, 4});
  CHECK(m[1] == PrefixMatch{1, 1, 1, 4});
  CHECK(m[2] == PrefixMatch{0, 0, 0, 4});
  CHECK(m[3] == PrefixMatch{0, 0, 0, 4});
}

TEST_CASE("RouteFromLookup and PromptBlocks") {
  RoutingRequest request;
  request.lookup.context.model = "m";
  request.lookup.context.block_size = 16;
  request.lookup.token_ids.assign(97, 1);  // 6 full blocks and a partial one
  CHECK(PromptBlocks(request.lookup) == 7);
  request.candidates = {Candidate("zz"), Candidate("a")};
  Result<RoutingAnswer> answer = RouteFromLookup(request, SampleLookup());
  REQUIRE(answer.has_value());
  CHECK(answer->revision == 9);
  CHECK(answer->prompt_blocks == 7);
  CHECK(answer->blocks_found == 6);
  // a: 3 GPU + 2 CPU + 1 DISK = 3 + 1.5 + 0.25 = 4.75 → cost 2.25; zz: 4 shared · 0.5 → 5.
  REQUIRE(answer->ranked.size() == 2);
  CHECK(answer->ranked[0].candidate.instance_id == "a");
  CHECK(answer->ranked[0].cost == doctest::Approx(2.25));
  CHECK(answer->ranked[1].cost == doctest::Approx(5));
  request.lookup.by_hash = true;
  request.lookup.seq_hashes = {1, 2};
  CHECK(PromptBlocks(request.lookup) == 2);
}

TEST_CASE("DecodeRouteRequest: fields, defaults and errors naming the field") {
  Result<RoutingRequest> r = DecodeRouteRequest(R"({"model_name": "m", "block_size": 4,
      "token_ids": [1,2,3,4,5], "instance_id": "ignored",
      "candidates": [{"instance_id": "a", "dp_rank": 1, "queued_prefill_tokens": 8,
                      "active_decode_blocks": 3}, {"instance_id": "b"}],
      "weights": {"CPU": 0.5, "shared": 0}, "prefill_scale": 2, "queue_scale": 0.5,
      "decode_scale": 0.25, "replica_credit": 0.5, "excess_queue_scale": 2,
      "excess_queue_epsilon": 0.25,
      "temperature": 0.5, "seed": 7})");
  REQUIRE_MESSAGE(r.has_value(), r.status().ToString());
  CHECK(r->lookup.context.model == "m");
  CHECK(r->lookup.token_ids.size() == 5);
  CHECK(r->lookup.instance_id.empty());
  REQUIRE(r->candidates.size() == 2);
  CHECK(r->candidates[0].dp_rank == 1u);
  CHECK(r->candidates[0].queued_prefill_tokens == 8);
  CHECK(r->candidates[0].active_decode_blocks == 3);
  CHECK_FALSE(r->candidates[1].dp_rank.has_value());
  CHECK(r->options.weights.gpu == 1.0);
  CHECK(r->options.weights.cpu == 0.5);
  CHECK(r->options.weights.shared == 0.0);
  CHECK(r->options.prefill_scale == 2);
  CHECK(r->options.queue_scale == 0.5);
  CHECK(r->options.decode_scale == 0.25);
  CHECK(r->options.replica_credit == 0.5);
  CHECK(r->options.excess_queue_scale == 2);
  CHECK(r->options.excess_queue_epsilon == 0.25);
  CHECK(r->options.temperature == 0.5);
  CHECK(r->options.seed == 7u);

  const auto error = [](std::string body) { return DecodeRouteRequest(body).status().message(); };
  const std::string base = R"("model_name": "m", "block_size": 4, "token_ids": [1])";
  CHECK(error("{" + base + "}").starts_with("candidates: is required"));
  CHECK(error("{" + base + R"(, "candidates": []})").starts_with("candidates:"));
  CHECK(error("{" + base + R"(, "candidates": [{"instance_id": "a"}, {}]})")
            .starts_with("candidates[1].instance_id:"));
  CHECK(error("{" + base + R"(, "candidates": [{"instance_id": "a", "dp_rank": -1}]})")
            .starts_with("candidates[0].dp_rank:"));
  CHECK(error("{" + base + R"(, "candidates": [{"instance_id": "a"}], "weights": {"HBM": 1}})")
            .starts_with("weights.HBM:"));
  CHECK(error("{" + base + R"(, "candidates": [{"instance_id": "a"}], "weights": {"GPU": 2}})")
            .starts_with("weights.GPU:"));
  CHECK(error("{" + base + R"(, "candidates": [{"instance_id": "a"}], "temperature": "hot"})")
            .starts_with("temperature:"));
  CHECK(error(R"({"block_size": 4, "token_ids": [1], "candidates": [{"instance_id": "a"}]})")
            .starts_with("model_name:"));
  CHECK(error("[1]").starts_with("body:"));
  // Scales past kMaxRoutingScale would overflow the cost to infinity (written as null).
  const std::string one = base + R"(, "candidates": [{"instance_id": "a"}])";
  CHECK(error("{" + one + R"(, "prefill_scale": 1e308})")
            .starts_with("prefill_scale: must be a finite number from 0 to 1000000"));
  CHECK(error("{" + one + R"(, "decode_scale": 1000001})").starts_with("decode_scale:"));
  // A number past the double range is refused by the JSON parser already.
  CHECK(error("{" + one + R"(, "decode_scale": 1e999})").find("number overflow") !=
        std::string::npos);
  CHECK(DecodeRouteRequest("{" + one + R"(, "prefill_scale": 1e6, "decode_scale": 1e6})")
            .has_value());
  CHECK(error("{" + one + R"(, "queue_scale": -0.5})")
            .starts_with("queue_scale: must be a finite number from 0 to 1000000, got -0.5"));
  CHECK(
      error("{" + one + R"(, "queue_scale": "low"})").starts_with("queue_scale: must be a number"));
  CHECK(error("{" + one + R"(, "replica_credit": 1.5})")
            .starts_with("replica_credit: must be a number from 0 to 1, got 1.5"));
  CHECK(error("{" + one + R"(, "excess_queue_scale": -1})").starts_with("excess_queue_scale:"));
  CHECK(error("{" + one + R"(, "excess_queue_epsilon": "x"})")
            .starts_with("excess_queue_epsilon: must be a number"));
  // Absent (or null): the default.
  Result<RoutingRequest> plain = DecodeRouteRequest("{" + one + R"(, "queue_scale": null})");
  REQUIRE(plain.has_value());
  CHECK(plain->options.queue_scale == kDefaultQueueScale);
  CHECK(DecodeRouteRequest("{" + one + "}")->options == RoutingOptions{});
}

TEST_CASE("DecodeRouteRequest: the predict flag and the PREDICTED weight") {
  const std::string body =
      R"({"model_name": "m", "block_size": 4, "token_ids": [1, 2, 3, 4], "weights":
          {"predicted": 0.25}, "candidates": [{"instance_id": "a", "predict": true},
          {"instance_id": "b"}]})";
  Result<RoutingRequest> request = DecodeRouteRequest(body);
  REQUIRE(request.has_value());
  CHECK(request->candidates[0].predict);
  CHECK(!request->candidates[1].predict);
  CHECK(request->options.weights.predicted == 0.25);
  const auto error = [](const std::string& text) {
    return DecodeRouteRequest(text).status().message();
  };
  CHECK(error(R"({"model_name": "m", "block_size": 4, "token_ids": [1],
                  "candidates": [{"instance_id": "a", "predict": 1}]})")
            .starts_with("candidates[0].predict: must be true or false"));
  CHECK(error(R"({"model_name": "m", "block_size": 4, "token_ids": [1],
                  "weights": {"PREDICTED": -1}, "candidates": [{"instance_id": "a"}]})")
            .starts_with("weights.PREDICTED:"));
  // The answer marks predicted blocks per candidate.
  RoutingAnswer answer;
  ScoredCandidate s;
  s.candidate = Candidate("a");
  s.matched.predicted = 3;
  s.predicted_blocks = 3;
  answer.ranked.push_back(s);
  const nlohmann::json json = nlohmann::json::parse(EncodeRouteAnswer(answer));
  CHECK(json["candidates"][0]["predicted_blocks"] == 3);
  CHECK(json["candidates"][0]["matched"]["PREDICTED"] == 3);
}

TEST_CASE("EncodeRouteAnswer: ranked candidates with the breakdown") {
  RoutingRequest request;
  request.lookup.context.model = "m";
  request.lookup.context.block_size = 16;
  request.lookup.token_ids.assign(96, 1);
  RouteCandidate a = Candidate("a", 16, 0);
  a.dp_rank = 1;
  request.candidates = {Candidate("zz"), a};
  Result<RoutingAnswer> answer = RouteFromLookup(request, SampleLookup());
  REQUIRE(answer.has_value());
  const nlohmann::json doc = nlohmann::json::parse(EncodeRouteAnswer(*answer));
  CHECK(doc["revision"] == 9);
  CHECK(doc["prompt_blocks"] == 6);
  CHECK(doc["instance_id"] == "a");
  CHECK(doc["dp_rank"] == 1);
  const nlohmann::json& first = doc["candidates"][0];
  CHECK(first["rank"] == 0);
  CHECK(first["index"] == 1);
  CHECK(first["matched"] == nlohmann::json({{"GPU", 3}, {"CPU", 5}, {"DISK", 6}, {"SHARED", 4}}));
  CHECK(first["blocks_from"] ==
        nlohmann::json({{"GPU", 3}, {"CPU", 2}, {"DISK", 1}, {"SHARED", 0}}));
  // rank 1 of a: 3 GPU + 2 CPU + 1 DISK → credit 4.75, new 1.25, queued 1 against a mean of
  // 0.5: cost 1.25 + 0.4 + 0.7 · (1 − 1.5 · 0.5) = 1.825; zz: 4 shared blocks · 0.5 → new 4,
  // cost 4.
  CHECK(first["credit"].get<double>() == doctest::Approx(4.75));
  CHECK(first["cost"].get<double>() ==
        doctest::Approx(1.25 + kDefaultQueueScale + kDefaultExcessQueueScale * 0.25));
  CHECK(first["queued_prefill_tokens"] == 16);
  CHECK(first["active_decode_blocks"] == 0);
  CHECK(doc["candidates"][1]["instance_id"] == "zz");
}

std::string Le64(double v) {
  std::string out(8, '\0');
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(bits >> (8 * i));
  return out;
}

TEST_CASE("kRoute request: the documented bytes and a round trip") {
  RoutingRequest request;
  request.lookup.context.model = "m";
  request.lookup.context.block_size = 2;
  request.lookup.by_hash = true;
  request.lookup.seq_hashes = {1};
  RouteCandidate a = Candidate("a", 32, 5);
  a.dp_rank = 2;
  request.candidates = {a};
  request.options.decode_scale = 0.1;  // docs/protocol.md's example gives it
  const std::string lookup = std::string("\x07", 1) + "default" + std::string("\x01", 1) + "m" +
                             std::string("\x00\x02\x00", 3) + std::string("\x01\x01", 2) +
                             std::string("\x01\x00\x00\x00\x00\x00\x00\x00", 8) +
                             std::string("\x00\x01", 2);
  REQUIRE(lookup.size() == 25);
  const std::string expected = std::string("\x19", 1) + lookup +
                               std::string(
                                   "\x01\x01"
                                   "a"
                                   "\x01\x02\x20\x05",
                                   7) +
                               Le64(1.0) + Le64(0.75) + Le64(0.25) + Le64(0.5) + Le64(1.0) +
                               Le64(0.1) + Le64(0.0) + std::string("\x00", 1);
  const std::string encoded = protocol::EncodeRouteRequestBinary(request);
  CHECK(encoded == expected);
  Result<RoutingRequest> decoded = protocol::DecodeRouteRequestBinary(encoded);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.status().ToString());
  CHECK(decoded->lookup.seq_hashes == request.lookup.seq_hashes);
  CHECK(decoded->candidates == request.candidates);
  CHECK(decoded->options == request.options);

  request.options.seed = 42;
  request.options.temperature = 0.3;
  decoded = protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request));
  REQUIRE(decoded.has_value());
  CHECK(decoded->options == request.options);
}

// A route request of two tokens in blocks of 2 to one candidate, the default options.
RoutingRequest SmallRequest() {
  RoutingRequest request;
  request.lookup.context.model = "m";
  request.lookup.context.block_size = 2;
  request.lookup.token_ids = {1, 2};
  request.candidates = {Candidate("a")};
  return request;
}

TEST_CASE("kRoute request: queue_scale is an optional trailer") {
  RoutingRequest request = SmallRequest();
  // The default is not written: the bytes are those of a request from before the field.
  const std::string plain = protocol::EncodeRouteRequestBinary(request);
  CHECK(plain.ends_with(Le64(0.0) + std::string("\x00", 1)));  // temperature, no seed
  Result<RoutingRequest> decoded = protocol::DecodeRouteRequestBinary(plain);
  REQUIRE(decoded.has_value());
  CHECK(decoded->options.queue_scale == kDefaultQueueScale);

  request.options.queue_scale = 0.75;
  request.options.seed = 5;
  const std::string with = protocol::EncodeRouteRequestBinary(request);
  CHECK(with.ends_with(std::string("\x01", 1) + Le64(0.75)));
  decoded = protocol::DecodeRouteRequestBinary(with);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.status().ToString());
  CHECK(decoded->options == request.options);
  request.options.queue_scale = 1.0;  // Dynamo's weighing, written as any non-default
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            ->options.queue_scale == 1.0);

  const auto error = [](const std::string& payload) {
    return protocol::DecodeRouteRequestBinary(payload).status().message();
  };
  const std::string body = with.substr(0, with.size() - 9);  // up to the seed
  CHECK(error(body + std::string("\x00", 1) + Le64(0.75))
            .starts_with("queue_scale: must be 0x01 when present"));
  CHECK(error(body + std::string("\x01", 1) + Le64(0.75).substr(0, 7))
            .starts_with("queue_scale: truncated"));
  CHECK(error(body + std::string("\x01", 1) + Le64(-2.0))
            .starts_with("queue_scale: must be a finite number from 0 to 1000000"));
  // A byte after queue_scale starts the approximate trailer: 0x00 there only says that the
  // terms trailer follows.
  CHECK(error(body + std::string("\x01", 1) + Le64(0.75) + std::string("\x00", 1))
            .starts_with("approximate: 0x00 only when the terms trailer follows"));
  CHECK(error(body + std::string("\x01", 1) + Le64(0.75) + std::string("\x02", 1))
            .starts_with("approximate:"));
}

TEST_CASE("kRoute request: the relative cost terms are a third optional trailer") {
  RoutingRequest request = SmallRequest();
  const std::string plain = protocol::EncodeRouteRequestBinary(request);
  // Any term off its default writes the queue_scale trailer, a lone 0x00 for approximate
  // mode, then the flag and the three terms.
  request.options.excess_queue_scale = 0;
  const std::string with = protocol::EncodeRouteRequestBinary(request);
  const std::string terms = std::string("\x01", 1) + Le64(kDefaultQueueScale) +
                            std::string("\x00\x01", 2) + Le64(kDefaultReplicaCredit) + Le64(0.0) +
                            Le64(kDefaultExcessQueueEpsilon);
  CHECK(with == plain + terms);
  Result<RoutingRequest> decoded = protocol::DecodeRouteRequestBinary(with);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.status().ToString());
  CHECK(decoded->options == request.options);
  CHECK(protocol::DecodeRouteRequestBinary(plain)->options == RoutingOptions{});

  // With approximate mode, after its trailer.
  request.options.replica_credit = 0.25;
  request.options.excess_queue_epsilon = 2;
  request.candidates[0].predict = true;
  const std::string both = protocol::EncodeRouteRequestBinary(request);
  CHECK(both.ends_with(std::string("\x01", 1) + Le64(1.0) + std::string("\x01\x00\x01", 3) +
                       Le64(0.25) + Le64(0.0) + Le64(2.0)));
  decoded = protocol::DecodeRouteRequestBinary(both);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.status().ToString());
  CHECK(decoded->options == request.options);
  CHECK(decoded->candidates == request.candidates);

  const auto error = [](const std::string& payload) {
    return protocol::DecodeRouteRequestBinary(payload).status().message();
  };
  const std::string head =
      plain + std::string("\x01", 1) + Le64(kDefaultQueueScale) + std::string("\x00", 1);
  CHECK(error(head + std::string("\x00", 1) + Le64(1.0))
            .starts_with("terms: must be 0x01 when present"));
  CHECK(error(head + std::string("\x01", 1) + Le64(1.0) + Le64(0.5))
            .starts_with("excess_queue_epsilon: truncated"));
  CHECK(error(head + std::string("\x01", 1) + Le64(1.5) + Le64(0.5) + Le64(0.5))
            .starts_with("replica_credit: must be a number from 0 to 1"));
  CHECK(error(head + std::string("\x01", 1) + Le64(1.0) + Le64(-1.0) + Le64(0.5))
            .starts_with("excess_queue_scale:"));
  CHECK(error(with + "x") == "payload: 1 trailing bytes");
}

TEST_CASE("kRoute: the approximate trailers carry predict flags and predicted blocks") {
  RoutingRequest request = SmallRequest();
  request.candidates.push_back(Candidate("b"));
  request.candidates.push_back(Candidate("c"));
  request.candidates[2].predict = true;
  const std::string with = protocol::EncodeRouteRequestBinary(request);
  // queue_scale's trailer (the default, written), then flag, PREDICTED 1.0, one index: 2.
  CHECK(with.ends_with(std::string("\x01", 1) + Le64(kDefaultQueueScale) + std::string("\x01", 1) +
                       Le64(1.0) + std::string("\x01\x02", 2)));
  Result<RoutingRequest> decoded = protocol::DecodeRouteRequestBinary(with);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.status().ToString());
  CHECK(decoded->candidates == request.candidates);
  CHECK(decoded->options == request.options);
  CHECK(protocol::RouteRequestUsesApproximate(request));
  request.candidates[2].predict = false;
  request.options.weights.predicted = 0.5;
  decoded = protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request));
  REQUIRE(decoded.has_value());
  CHECK(decoded->options.weights.predicted == 0.5);
  // An index that names no candidate, a weight out of range: named.
  const std::string body = with.substr(0, with.size() - 2);
  CHECK(protocol::DecodeRouteRequestBinary(body + std::string("\x01\x07", 2))
            .status()
            .message()
            .starts_with("predict: index 7 is not a candidate"));
  const std::string heavy = with.substr(0, with.size() - 10) + Le64(2.0) + std::string("\x00", 1);
  CHECK(protocol::DecodeRouteRequestBinary(heavy).status().message().starts_with(
      "weights.PREDICTED:"));

  // The answer's trailer: written on request, round trip, truncation.
  RoutingAnswer answer;
  ScoredCandidate s;
  s.candidate = Candidate("c");
  s.matched.predicted = 5;
  s.predicted_blocks = 4;
  answer.ranked = {s, ScoredCandidate{}};
  answer.ranked[1].candidate = Candidate("a");
  const std::string plain = protocol::EncodeRouteAnswerBinary(answer);
  const std::string marked = protocol::EncodeRouteAnswerBinary(answer, true);
  CHECK(marked == plain + std::string("\x01\x05\x04\x00\x00", 5));
  Result<RoutingAnswer> back = protocol::DecodeRouteAnswerBinary(marked);
  REQUIRE_MESSAGE(back.has_value(), back.status().ToString());
  CHECK(*back == answer);
  for (size_t cut = plain.size() + 1; cut < marked.size(); ++cut) {
    CHECK_FALSE(protocol::DecodeRouteAnswerBinary(marked.substr(0, cut)).has_value());
  }
}

TEST_CASE("kRoute request: malformed payloads name the field") {
  RoutingRequest request = SmallRequest();
  const std::string good = protocol::EncodeRouteRequestBinary(request);
  // A byte after the seed is the queue_scale trailer's flag: 'x' is no flag.
  CHECK(protocol::DecodeRouteRequestBinary(good + "x").status().message() ==
        "queue_scale: truncated or malformed");
  CHECK(protocol::DecodeRouteRequestBinary(good.substr(0, good.size() - 3))
            .status()
            .message()
            .starts_with("temperature:"));
  request.candidates[0].instance_id = "";
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            .status()
            .message()
            .starts_with("candidates[0].instance_id:"));
  request.candidates.clear();
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            .status()
            .message()
            .starts_with("candidates:"));
  request.candidates = {Candidate("a")};
  request.lookup.context.model = "";
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            .status()
            .message()
            .starts_with("lookup: model_name:"));
  request.lookup.context.model = "m";
  request.options.weights.disk = 3;
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            .status()
            .message()
            .starts_with("weights.DISK:"));
  request.options.weights.disk = 0.25;
  request.options.decode_scale = 1e300;
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            .status()
            .message()
            .starts_with("decode_scale: must be a finite number from 0 to 1000000"));
  request.options.decode_scale = 1;
  request.options.prefill_scale = kMaxRoutingScale + 1;
  CHECK(protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(request))
            .status()
            .message()
            .starts_with("prefill_scale:"));
}

TEST_CASE("kRoute answer: round trip and truncation") {
  RoutingRequest request;
  request.lookup.context.model = "m";
  request.lookup.context.block_size = 16;
  request.lookup.token_ids.assign(96, 1);
  RouteCandidate a = Candidate("a", 16, 2);
  a.dp_rank = 1;
  request.candidates = {Candidate("zz"), a};
  Result<RoutingAnswer> answer = RouteFromLookup(request, SampleLookup());
  REQUIRE(answer.has_value());
  const std::string bytes = protocol::EncodeRouteAnswerBinary(*answer);
  Result<RoutingAnswer> decoded = protocol::DecodeRouteAnswerBinary(bytes);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.status().ToString());
  CHECK(*decoded == *answer);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    REQUIRE_FALSE(protocol::DecodeRouteAnswerBinary(bytes.substr(0, cut)).has_value());
  }
}

}  // namespace
}  // namespace kvatlas
