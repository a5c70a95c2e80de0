#include "kvatlas/common/routing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace kvatlas {
namespace {

// A number in an error message: short, whatever its magnitude (std::to_string writes 1e308
// as 309 digits).
std::string Shown(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

Status CheckRange(double value, double max, std::string_view field, std::string_view what) {
  if (std::isfinite(value) && value >= 0.0 && value <= max) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + ": must be " + std::string(what) + ", got " +
                                 Shown(value));
}

Status CheckFraction(double value, std::string_view field) {
  return CheckRange(value, 1.0, field, "a number from 0 to 1");
}

// A scale is bounded so that no cost overflows (kMaxRoutingScale).
static_assert(kMaxRoutingScale == 1e6, "CheckScale's message names the range");
Status CheckScale(double value, std::string_view field) {
  return CheckRange(value, kMaxRoutingScale, field, "a finite number from 0 to 1000000");
}

Status CheckNonNegative(double value, std::string_view field) {
  return CheckRange(value, std::numeric_limits<double>::max(), field, "a finite number >= 0");
}

// A uniform double in [0, 1) from the top 53 bits: mt19937_64's output is specified
// exactly by the standard, unlike std::uniform_real_distribution's, so a seed gives the same
// pick on every platform.
double Uniform(std::mt19937_64& generator) {
  return static_cast<double>(generator() >> 11) * 0x1.0p-53;
}

// The candidates' queued prefill work in blocks.
std::vector<double> QueuedBlocks(std::span<const RouteCandidate> candidates, uint32_t block_size) {
  std::vector<double> queued(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    queued[i] = static_cast<double>(candidates[i].queued_prefill_tokens) / block_size;
  }
  return queued;
}

// RoutingOptions::replica_credit's holders: the prefix each candidate holds itself (GPU ∪ CPU
// ∪ DISK, predicted blocks included, at most the prompt) when its queue is above `mean`, 0
// otherwise.
std::vector<uint32_t> LoadedHolders(std::span<const PrefixMatch> matches,
                                    std::span<const double> queued, double mean,
                                    uint32_t prompt_blocks) {
  std::vector<uint32_t> held(matches.size(), 0);
  for (size_t i = 0; i < matches.size(); ++i) {
    if (queued[i] > mean) {
      held[i] = std::min(std::max(matches[i].disk, matches[i].predicted), prompt_blocks);
    }
  }
  return held;
}

// Σ over the blocks from `from` on of (loaded holders of the block / N), `held` having one
// entry per candidate, N of them: Σ_k max(held_k − from, 0) / N.
double ReplicaBlocks(std::span<const uint32_t> held, uint32_t from) {
  double blocks = 0;
  for (const uint32_t h : held) blocks += h > from ? h - from : 0;
  return blocks / static_cast<double>(held.size());
}

}  // namespace

Status ValidateRoutingOptions(const RoutingOptions& options) {
  KVATLAS_RETURN_IF_ERROR(CheckFraction(options.weights.gpu, "weights.GPU"));
  KVATLAS_RETURN_IF_ERROR(CheckFraction(options.weights.cpu, "weights.CPU"));
  KVATLAS_RETURN_IF_ERROR(CheckFraction(options.weights.disk, "weights.DISK"));
  KVATLAS_RETURN_IF_ERROR(CheckFraction(options.weights.shared, "weights.SHARED"));
  KVATLAS_RETURN_IF_ERROR(CheckFraction(options.weights.predicted, "weights.PREDICTED"));
  KVATLAS_RETURN_IF_ERROR(CheckScale(options.prefill_scale, "prefill_scale"));
  KVATLAS_RETURN_IF_ERROR(CheckScale(options.queue_scale, "queue_scale"));
  KVATLAS_RETURN_IF_ERROR(CheckScale(options.decode_scale, "decode_scale"));
  KVATLAS_RETURN_IF_ERROR(CheckFraction(options.replica_credit, "replica_credit"));
  KVATLAS_RETURN_IF_ERROR(CheckScale(options.excess_queue_scale, "excess_queue_scale"));
  KVATLAS_RETURN_IF_ERROR(CheckScale(options.excess_queue_epsilon, "excess_queue_epsilon"));
  return CheckNonNegative(options.temperature, "temperature");
}

std::vector<PrefixMatch> MatchesFromLookup(const LookupAnswer& answer,
                                           std::span<const RouteCandidate> candidates) {
  uint32_t shared = 0;
  for (const SharedMatch& match : answer.shared) shared = std::max(shared, match.blocks);
  // Candidates and instances may both be many: index the instances by id once.
  std::unordered_map<std::string_view, const InstanceMatch*> by_id;
  by_id.reserve(answer.instances.size());
  for (const InstanceMatch& m : answer.instances) by_id.emplace(m.instance_id, &m);
  std::vector<PrefixMatch> out(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RouteCandidate& candidate = candidates[i];
    out[i].shared = shared;
    const auto found = by_id.find(candidate.instance_id);
    if (found == by_id.end()) continue;
    const InstanceMatch* instance = found->second;
    TierBlocks blocks = instance->blocks;
    if (candidate.dp_rank) {
      blocks = {};
      for (const RankMatch& rank : instance->dp_ranks) {
        if (rank.dp_rank == *candidate.dp_rank) blocks = rank.blocks;
      }
    }
    out[i].gpu = blocks.gpu;
    out[i].cpu = blocks.cpu;
    out[i].disk = blocks.disk;
  }
  // Predictions are few (the instances a router sent work to without events): one pass per
  // candidate costs less than an index.
  for (const PredictedPrefix& p : answer.predicted) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const RouteCandidate& candidate = candidates[i];
      if (candidate.instance_id != p.instance_id) continue;
      if (candidate.dp_rank && *candidate.dp_rank != p.dp_rank) continue;
      out[i].predicted = std::max(out[i].predicted, p.blocks);
    }
  }
  return out;
}

Result<std::vector<ScoredCandidate>> ScoreCandidates(const RoutingOptions& options,
                                                     uint32_t prompt_blocks, uint32_t block_size,
                                                     std::span<const RouteCandidate> candidates,
                                                     std::span<const PrefixMatch> matches) {
  KVATLAS_RETURN_IF_ERROR(ValidateRoutingOptions(options));
  if (candidates.empty()) return Status::InvalidArgument("candidates: at least one is needed");
  if (matches.size() != candidates.size()) {
    return Status::InvalidArgument("matches: one per candidate is needed, got " +
                                   std::to_string(matches.size()) + " for " +
                                   std::to_string(candidates.size()) + " candidates");
  }
  if (block_size == 0) return Status::InvalidArgument("block_size: must be a positive integer");

  const std::vector<double> queued = QueuedBlocks(candidates, block_size);
  double mean_queued = 0;
  for (double q : queued) mean_queued += q;
  mean_queued /= static_cast<double>(queued.size());
  const std::vector<uint32_t> loaded_holders =
      options.replica_credit > 0 ? LoadedHolders(matches, queued, mean_queued, prompt_blocks)
                                 : std::vector<uint32_t>{};
  std::vector<ScoredCandidate> scored(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    ScoredCandidate& s = scored[i];
    s.index = i;
    s.candidate = candidates[i];
    s.matched = matches[i];
    // Each block counts once, in the first tier that covers it; nothing past the prompt.
    const uint32_t gpu = std::min(matches[i].gpu, prompt_blocks);
    const uint32_t cpu = std::clamp(matches[i].cpu, gpu, prompt_blocks);
    const uint32_t disk = std::clamp(matches[i].disk, cpu, prompt_blocks);
    // Predicted blocks sit where the engine would have them (its device), past what it is
    // known to hold and before what every candidate reaches through a shared backend.
    const uint32_t predicted = std::clamp(matches[i].predicted, disk, prompt_blocks);
    const uint32_t shared = std::clamp(matches[i].shared, predicted, prompt_blocks);
    s.gpu_blocks = gpu;
    s.cpu_blocks = cpu - gpu;
    s.disk_blocks = disk - cpu;
    s.predicted_blocks = predicted - disk;
    s.shared_blocks = shared - predicted;
    const TierWeights& w = options.weights;
    s.credit = w.gpu * s.gpu_blocks + w.cpu * s.cpu_blocks + w.disk * s.disk_blocks +
               w.predicted * s.predicted_blocks + w.shared * s.shared_blocks;
    if (options.replica_credit > 0) {
      s.credit += options.replica_credit * ReplicaBlocks(loaded_holders, shared);
    }
    s.new_prefill_blocks = std::max(static_cast<double>(prompt_blocks) - s.credit, 0.0);
    s.queued_prefill_blocks = queued[i];
    s.prefill_cost = options.prefill_scale * s.new_prefill_blocks +
                     options.queue_scale * s.queued_prefill_blocks;
    if (options.excess_queue_scale > 0) {
      const double bound = (1.0 + options.excess_queue_epsilon) * mean_queued;
      s.prefill_cost += options.excess_queue_scale * std::max(queued[i] - bound, 0.0);
    }
    s.decode_cost = options.decode_scale * static_cast<double>(candidates[i].active_decode_blocks);
    s.cost = s.prefill_cost + s.decode_cost;
  }
  std::stable_sort(
      scored.begin(), scored.end(),
      [](const ScoredCandidate& a, const ScoredCandidate& b) { return a.cost < b.cost; });

  if (options.temperature <= 0.0) {
    scored.front().probability = 1.0;
    return scored;
  }
  // Softmax over costs normalised to [0, 1] (so the temperature does not depend on the
  // scale of the costs): p ∝ exp(−normalised / temperature).
  const double low = scored.front().cost;
  const double range = scored.back().cost - low;
  double total = 0;
  for (ScoredCandidate& s : scored) {
    const double normalised = range > 0 ? (s.cost - low) / range : 0.0;
    s.probability = std::exp(-normalised / options.temperature);
    total += s.probability;
  }
  for (ScoredCandidate& s : scored) s.probability /= total;
  std::mt19937_64 generator(options.seed ? *options.seed : std::random_device{}());
  const double u = Uniform(generator);
  size_t pick = scored.size() - 1;
  double cumulative = 0;
  for (size_t i = 0; i < scored.size(); ++i) {
    cumulative += scored[i].probability;
    if (u < cumulative) {
      pick = i;
      break;
    }
  }
  std::rotate(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(pick),
              scored.begin() + static_cast<std::ptrdiff_t>(pick) + 1);
  return scored;
}

uint32_t PromptBlocks(const LookupRequest& request) {
  if (request.by_hash)
    return static_cast<uint32_t>(std::min<size_t>(request.seq_hashes.size(), UINT32_MAX));
  if (request.context.block_size == 0) return 0;
  const uint64_t blocks =
      (request.token_ids.size() + request.context.block_size - 1) / request.context.block_size;
  return static_cast<uint32_t>(std::min<uint64_t>(blocks, UINT32_MAX));
}

Result<RoutingAnswer> RouteFromLookup(const RoutingRequest& request, const LookupAnswer& lookup) {
  return RouteFromLookup(request, lookup, {});
}

Result<RoutingAnswer> RouteFromLookup(const RoutingRequest& request, const LookupAnswer& lookup,
                                      std::span<const uint32_t> predicted) {
  RoutingAnswer answer;
  answer.revision = lookup.revision;
  answer.prompt_blocks = PromptBlocks(request.lookup);
  answer.blocks_found = lookup.blocks_found;
  std::vector<PrefixMatch> matches = MatchesFromLookup(lookup, request.candidates);
  for (size_t i = 0; i < predicted.size() && i < matches.size(); ++i) {
    matches[i].predicted = predicted[i];
  }
  KVATLAS_ASSIGN_OR_RETURN(answer.ranked, ScoreCandidates(request.options, answer.prompt_blocks,
                                                          request.lookup.context.block_size,
                                                          request.candidates, matches));
  return answer;
}

}  // namespace kvatlas
