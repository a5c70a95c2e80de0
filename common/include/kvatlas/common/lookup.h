// A prefix lookup and its answer: the one vocabulary of every lookup dialect (REST
// /v1/lookup, the Conductor /query and /query_by_hash, the binary protocol's kLookup) and of
// the client library. Encodings live beside their wire: json_codec.h for JSON, protocol.h
// for the binary protocol. Plain values: thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvatlas/common/types.h"

namespace kvatlas {

// A prefix lookup, from any of the three request dialects.
struct LookupRequest {
  ContextKey context;
  // Exactly one is the query: token_ids (only complete blocks count) or seq_hashes.
  bool by_hash = false;
  std::vector<uint32_t> token_ids;
  std::vector<uint64_t> seq_hashes;
  // Report only this instance (all its dp ranks); empty = every instance.
  std::string instance_id;
  // Report the per-block locations of shared-backend matches.
  bool include_locations = true;
  // Read consistency (kvatlas extension, every dialect): answer only once this server has
  // applied at least this revision (read-your-writes after a write answered revision R)...
  std::optional<uint64_t> min_revision;
  // ...or linearizably: through the leader, after everything committed before the request
  // ("consistency": "linearizable"; default "any" = this server's applied state).
  bool linearizable = false;
};

// Prefix lengths in blocks. gpu ≤ cpu ≤ disk are cumulative (GPU, GPU∪CPU, GPU∪CPU∪DISK:
// `disk` is the instance's longest match); cpu_only and disk_only are per medium alone, as
// the Conductor API reports media.
struct TierBlocks {
  uint32_t gpu = 0;
  uint32_t cpu = 0;
  uint32_t disk = 0;
  uint32_t cpu_only = 0;
  uint32_t disk_only = 0;

  friend bool operator==(const TierBlocks&, const TierBlocks&) = default;
};

struct RankMatch {
  uint32_t dp_rank = 0;
  TierBlocks blocks;

  friend bool operator==(const RankMatch&, const RankMatch&) = default;
};

// An instance (a holder id over its dp ranks). Its values are the max over its ranks.
struct InstanceMatch {
  std::string instance_id;
  TierBlocks blocks;
  std::vector<RankMatch> dp_ranks;  // ascending dp_rank, ranks with a match only

  friend bool operator==(const InstanceMatch&, const InstanceMatch&) = default;
};

// A shared backend (SHARED tier) holding a prefix, with a location per matched block.
struct SharedMatch {
  std::string backend_id;
  uint32_t dp_rank = 0;
  uint32_t blocks = 0;
  std::vector<std::string> locations;  // empty unless requested

  friend bool operator==(const SharedMatch&, const SharedMatch&) = default;
};

// A prefix predicted on an instance's rank (approximate mode, docs/routing.md): the leading
// blocks of the query a route or a local decision sent there, not known from its events.
struct PredictedPrefix {
  std::string instance_id;
  uint32_t dp_rank = 0;
  uint32_t blocks = 0;

  friend bool operator==(const PredictedPrefix&, const PredictedPrefix&) = default;
};

struct LookupAnswer {
  Revision revision = 0;
  ContextKey context;
  uint32_t blocks_queried = 0;  // complete blocks of the query (after the lookup cap)
  uint32_t blocks_found = 0;    // leading blocks some holder has, in any tier
  std::vector<InstanceMatch> instances;
  std::vector<SharedMatch> shared;
  // The predicted prefixes of the query, by instance and rank (blocks > 0). Filled by a
  // LocalIndex with predictions on (LocalIndexOptions::predictions); servers' lookup answers
  // leave it empty (their routes read predictions themselves). MatchesFromLookup credits it.
  std::vector<PredictedPrefix> predicted;

  friend bool operator==(const LookupAnswer&, const LookupAnswer&) = default;
};

}  // namespace kvatlas
