// kvatlas::Scorer: routing decisions in the scheduler's own process, with exactly the cost
// of the server's POST /v1/route and binary kRoute (common/routing.h, docs/routing.md).
// Feed it the per-candidate matches of a lookup — Client::Lookup's answer, or a future
// LocalIndex's — and the candidates' load; it ranks them with the per-candidate breakdown.
//
// Thread-safety: every method may be called from any number of threads at once. With a
// temperature > 0 and a seed, each call samples with its own seed derived from the
// options' seed and a call counter, so a sequence of calls is reproducible when it is made
// from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "kvatlas/common/export.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/routing.h"

namespace kvatlas {

class KVATLAS_EXPORT Scorer {
 public:
  // kInvalidArgument from Create for options out of range (ValidateRoutingOptions).
  [[nodiscard]] static Result<Scorer> Create(RoutingOptions options = {});

  Scorer(const Scorer& other) : options_(other.options_), calls_(other.calls_.load()) {}
  Scorer& operator=(const Scorer&) = delete;

  const RoutingOptions& options() const { return options_; }

  // Ranks `candidates` for a request of `prompt_blocks` blocks given each one's match
  // (parallel to `candidates`). block_size converts queued prefill tokens to blocks.
  [[nodiscard]] Result<std::vector<ScoredCandidate>> Score(
      uint32_t prompt_blocks, uint32_t block_size, std::span<const RouteCandidate> candidates,
      std::span<const PrefixMatch> matches) const;

  // Ranks `candidates` for `request` from `lookup`, the answer to that request's lookup
  // over every instance (no instance_id): what the server's route answers.
  [[nodiscard]] Result<RoutingAnswer> Score(const LookupRequest& request,
                                            const LookupAnswer& lookup,
                                            std::span<const RouteCandidate> candidates) const;

 private:
  explicit Scorer(RoutingOptions options) : options_(options) {}
  RoutingOptions NextOptions() const;

  RoutingOptions options_;
  mutable std::atomic<uint64_t> calls_{0};
};

}  // namespace kvatlas
