#include "kvatlas/client/scorer.h"

#include <utility>

namespace kvatlas {

Result<Scorer> Scorer::Create(RoutingOptions options) {
  KVATLAS_RETURN_IF_ERROR(ValidateRoutingOptions(options));
  return Scorer(options);
}

RoutingOptions Scorer::NextOptions() const {
  RoutingOptions options = options_;
  const uint64_t call = calls_.fetch_add(1, std::memory_order_relaxed);
  if (options.temperature > 0 && options.seed) {
    // splitmix64 of (seed, call): independent draws per call, reproducible per sequence.
    uint64_t z = *options.seed + (call + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    options.seed = z ^ (z >> 31);
  }
  return options;
}

Result<std::vector<ScoredCandidate>> Scorer::Score(uint32_t prompt_blocks, uint32_t block_size,
                                                   std::span<const RouteCandidate> candidates,
                                                   std::span<const PrefixMatch> matches) const {
  return ScoreCandidates(NextOptions(), prompt_blocks, block_size, candidates, matches);
}

Result<RoutingAnswer> Scorer::Score(const LookupRequest& request, const LookupAnswer& lookup,
                                    std::span<const RouteCandidate> candidates) const {
  RoutingRequest routing;
  routing.lookup.context = request.context;
  routing.lookup.by_hash = request.by_hash;
  // Only the prompt's length matters past the lookup: avoid copying the tokens.
  if (request.by_hash) {
    routing.lookup.seq_hashes.resize(request.seq_hashes.size());
  } else {
    routing.lookup.token_ids.resize(request.token_ids.size());
  }
  routing.candidates.assign(candidates.begin(), candidates.end());
  routing.options = NextOptions();
  return RouteFromLookup(routing, lookup);
}

}  // namespace kvatlas
