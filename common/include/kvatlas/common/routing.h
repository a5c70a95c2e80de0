// Routing decisions (docs/routing.md): scores candidate instances for a request from their
// cached prefix per tier (a lookup's answer) and their current load, with a cost like
// Dynamo's KV router:
//
//   credit     = w_gpu·gpu + w_cpu·cpu + w_disk·disk + w_shared·shared
//                (blocks served from each tier, each block counted once, in the first tier
//                 of GPU, CPU, DISK, SHARED that covers it)
//   new_blocks = max(prompt_blocks − credit, 0)
//   cost       = prefill_scale · new_blocks + queue_scale · queued_prefill_blocks
//              + decode_scale · active_decode_blocks
// plus two terms relative to the other candidates (RoutingOptions::replica_credit and
// excess_queue_scale): credit for a copy of a prefix whose holders are busy, and weight
// for a queue far above the candidates' mean.
//
// The lowest cost wins (temperature 0), or a candidate is sampled with probability
// ∝ exp(−normalised_cost / temperature) from a seeded generator. The same code runs in the
// server (POST /v1/route, the binary kRoute op) and in a scheduler (kvatlas::Scorer).
//
// Pure functions and plain values: safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvatlas/common/export.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// How much one matched block in each tier saves, as a fraction of computing it. Dynamo's
// defaults: device 1.0, host 0.75, disk 0.25, shared 0.5.
struct TierWeights {
  double gpu = 1.0;
  double cpu = 0.75;
  double disk = 0.25;
  double shared = 0.5;
  // A predicted block (docs/routing.md §Approximate mode): one a route sent to a candidate
  // that publishes no events, so the engine has probably computed and cached it there. 1,
  // as a device block: the candidate was chosen for this prefix moments ago (TTL-bounded).
  double predicted = 1.0;

  friend bool operator==(const TierWeights&, const TierWeights&) = default;
};

// The largest prefill_scale, queue_scale and decode_scale. With it every cost is finite: a cost is
// at most 1e6 · (2^64 queued blocks + 2^32 new blocks) + 1e6 · 2^64 decode blocks ≈ 3.7e25, far
// below the largest double, whatever the candidates' loads (full u64 range) and the prompt's
// length (the excess_queue_scale term adds at most 1e6 · 2^64 more: ≈ 5.5e25). Past
// it a cost could overflow to infinity, which JSON cannot carry.
inline constexpr double kMaxRoutingScale = 1e6;

// The defaults, chosen together by the trace replay over six trace shapes and three seeds
// (docs/routing.md §Defaults): of the two settings found that give the lowest TTFT p50 and
// p99 of every policy on every shape, the one that keeps the most prefix reuse. queue_scale
// below 1 lets a request wait behind some queued work on the instance holding its prefix;
// the two relative terms keep the requests sharing one long prompt from piling onto its
// first holders.
inline constexpr double kDefaultQueueScale = 0.4;
inline constexpr double kDefaultDecodeScale = 0.01;
inline constexpr double kDefaultReplicaCredit = 1.0;
inline constexpr double kDefaultExcessQueueScale = 0.7;
inline constexpr double kDefaultExcessQueueEpsilon = 0.5;

struct RoutingOptions {
  TierWeights weights;
  // Weight of the request's own new prefill blocks (those no cached tier covers).
  double prefill_scale = 1.0;
  // Weight of the prefill work already queued on the candidate (its tokens / block_size).
  // Dynamo weighs both with one prefill_load_scale; apart, a router can let a request wait
  // behind some queued work on the instance holding its prefix (docs/routing.md §Defaults).
  double queue_scale = kDefaultQueueScale;
  // Weight of the decode term (active decode blocks). Not Dynamo's 1: in the trace replay
  // (docs/routing.md §Defaults) 1 lost 6-18% of the oracle's prefix reuse by steering
  // requests away from the instance holding their prefix.
  double decode_scale = kDefaultDecodeScale;
  // replica_credit α in [0, 1]: each block past what the candidate has credited that m of
  // the N candidates hold while their queue is above the candidates' mean is credited
  // α·m/N more (a copy made now of a prefix whose holders are busy serves later requests).
  // 0 turns the term off.
  double replica_credit = kDefaultReplicaCredit;
  // excess_queue_scale: weight of the candidate's queued prefill blocks above
  // (1 + excess_queue_epsilon) × the candidates' mean, on top of queue_scale. 0 turns the
  // term off.
  double excess_queue_scale = kDefaultExcessQueueScale;
  double excess_queue_epsilon = kDefaultExcessQueueEpsilon;
  // 0 = deterministic: lowest cost first, ties in candidate order. > 0 = softmax sampling.
  double temperature = 0.0;
  // Seed of the sampler (temperature > 0 only): equal inputs and seed give equal answers.
  // Absent: a fresh seed from std::random_device per call.
  std::optional<uint64_t> seed;

  friend bool operator==(const RoutingOptions&, const RoutingOptions&) = default;
};

// Checks ranges: weights (predicted included) and replica_credit finite and in [0, 1], scales
// (excess_queue_scale and excess_queue_epsilon included) finite and in [0, kMaxRoutingScale],
// temperature finite and >= 0. kInvalidArgument naming the field and the range
// ("weights.CPU: must be a number from 0 to 1, got 1.5"). Options that pass give finite
// costs and probabilities for any candidates (ScoreCandidates checks them itself).
[[nodiscard]] KVATLAS_EXPORT Status ValidateRoutingOptions(const RoutingOptions& options);

// A routing target and its current load.
struct RouteCandidate {
  std::string instance_id;
  // A data-parallel rank: its own match is used. Absent: the instance's best over ranks.
  std::optional<uint32_t> dp_rank;
  uint64_t queued_prefill_tokens = 0;  // prefill work waiting on the candidate
  uint64_t active_decode_blocks = 0;   // KV blocks of requests it is decoding
  // The candidate publishes no KV events (docs/routing.md §Approximate mode): when it is
  // picked, the server records the request's blocks as predicted on it for a while.
  bool predict = false;

  friend bool operator==(const RouteCandidate&, const RouteCandidate&) = default;
};

// A candidate's cached prefix of the request, in blocks from block 0. gpu <= cpu <= disk
// are cumulative (GPU, GPU ∪ CPU, GPU ∪ CPU ∪ DISK), as in TierBlocks; shared is the longest
// prefix some shared backend (reachable by every candidate) holds.
struct PrefixMatch {
  uint32_t gpu = 0;
  uint32_t cpu = 0;
  uint32_t disk = 0;
  uint32_t shared = 0;
  // Leading blocks predicted on the candidate (docs/routing.md §Approximate mode); they count
  // only past `disk`, weighed by TierWeights::predicted.
  uint32_t predicted = 0;

  friend bool operator==(const PrefixMatch&, const PrefixMatch&) = default;
};

// The matches of `candidates` in a lookup answer (one that reported every instance), in
// candidate order: the instance's values, or its rank's when dp_rank is set; zeros for an
// instance the answer does not name. shared is the longest shared-backend match; predicted
// is the rank's predicted prefix (LookupAnswer::predicted), or the best over the instance's
// ranks when dp_rank is unset — what the server's route reads from its PredictedTable.
[[nodiscard]] KVATLAS_EXPORT std::vector<PrefixMatch> MatchesFromLookup(
    const LookupAnswer& answer, std::span<const RouteCandidate> candidates);

// One candidate's score and how it was reached.
struct ScoredCandidate {
  size_t index = 0;  // position in the request's candidate list
  RouteCandidate candidate;
  PrefixMatch matched;
  // Blocks served from each tier (non-overlapping: gpu + cpu + disk + shared <= prompt).
  uint32_t gpu_blocks = 0;
  uint32_t cpu_blocks = 0;
  uint32_t disk_blocks = 0;
  uint32_t shared_blocks = 0;
  uint32_t predicted_blocks = 0;     // past disk, before shared: credited w_predicted each
  double credit = 0;                 // Σ weight · blocks (+ the replica credit, when on)
  double new_prefill_blocks = 0;     // max(prompt_blocks − credit, 0)
  double queued_prefill_blocks = 0;  // queued_prefill_tokens / block_size
  double prefill_cost = 0;           // prefill_scale · new + queue_scale · queued (+ excess)
  double decode_cost = 0;            // decode_scale · active_decode_blocks
  double cost = 0;                   // prefill_cost + decode_cost
  double probability = 0;            // of being picked: 1 for the winner at temperature 0

  friend bool operator==(const ScoredCandidate&, const ScoredCandidate&) = default;
};

// Scores every candidate. `matches` is parallel to `candidates`; prompt_blocks is the
// request's length in blocks (partial blocks included: they are computed too); block_size
// converts queued tokens to blocks. The answer is ranked: the pick first, then by cost
// (ties in candidate order). kInvalidArgument for no candidates, mismatched sizes, a zero
// block_size or invalid options.
[[nodiscard]] KVATLAS_EXPORT Result<std::vector<ScoredCandidate>> ScoreCandidates(
    const RoutingOptions& options, uint32_t prompt_blocks, uint32_t block_size,
    std::span<const RouteCandidate> candidates, std::span<const PrefixMatch> matches);

// POST /v1/route and the binary kRoute request: a lookup (tokens or block keys in a
// context; instance_id and include_locations are ignored), the candidates, the options.
struct RoutingRequest {
  LookupRequest lookup;
  std::vector<RouteCandidate> candidates;
  RoutingOptions options;
};

// The request's length in blocks for the prefill term: ceil(tokens / block_size) for a
// token query, the number of keys for a key query.
[[nodiscard]] KVATLAS_EXPORT uint32_t PromptBlocks(const LookupRequest& request);

struct RoutingAnswer {
  Revision revision = 0;
  uint32_t prompt_blocks = 0;
  uint32_t blocks_found = 0;  // leading blocks some holder has (the lookup's)
  std::vector<ScoredCandidate> ranked;

  friend bool operator==(const RoutingAnswer&, const RoutingAnswer&) = default;
};

// The route answer for `request` given its lookup answer (shared by the server and
// kvatlas::Scorer callers that have a LookupAnswer).
[[nodiscard]] KVATLAS_EXPORT Result<RoutingAnswer> RouteFromLookup(const RoutingRequest& request,
                                                                   const LookupAnswer& lookup);
// As RouteFromLookup, with each candidate's predicted prefix (`predicted[i]` for candidate i,
// PrefixMatch::predicted): the server's approximate mode.
[[nodiscard]] KVATLAS_EXPORT Result<RoutingAnswer> RouteFromLookup(
    const RoutingRequest& request, const LookupAnswer& lookup, std::span<const uint32_t> predicted);

// POST /v1/route body: the /v1/lookup fields, "candidates": [{instance_id, dp_rank?,
// queued_prefill_tokens?, active_decode_blocks?, predict?}], "weights": {GPU?, CPU?, DISK?,
// SHARED?, PREDICTED?},
// prefill_scale?, queue_scale?, decode_scale?, temperature?, seed?. kInvalidArgument naming the
// field.
[[nodiscard]] KVATLAS_EXPORT Result<RoutingRequest> DecodeRouteRequest(std::string_view body);
// The JSON answer (docs/api.md §Routing).
[[nodiscard]] KVATLAS_EXPORT std::string EncodeRouteAnswer(const RoutingAnswer& answer);

}  // namespace kvatlas
