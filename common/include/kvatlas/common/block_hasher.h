// The standard router block hash (Mooncake RFC #1403, Dynamo standalone indexer):
//   local[i] = XXH3_64(tokens of block i as little-endian u32, seed)
//   seq[0]   = local[0]
//   seq[i]   = XXH3_64(le64(seq[i-1]) || le64(local[i]), seed)
// Only complete blocks are hashed; a trailing partial block is ignored.
// BlockHasher is immutable after construction and safe to share across threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvatlas/common/export.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// Dynamo's router seed; kvatlas's default.
inline constexpr uint64_t kDefaultHashSeed = 1337;

class KVATLAS_EXPORT BlockHasher {
 public:
  explicit BlockHasher(uint64_t seed = kDefaultHashSeed) : seed_(seed) {}

  uint64_t seed() const { return seed_; }

  // XXH3_64 of one block's tokens (little-endian u32 each).
  [[nodiscard]] uint64_t LocalHash(std::span<const uint32_t> block_tokens) const;
  // The rolling combination of a parent sequence hash and a block's local hash.
  [[nodiscard]] uint64_t Chain(uint64_t parent_seq, uint64_t local) const;
  // Sequence hashes of the complete blocks of `tokens`, continuing from `parent` (the
  // sequence hash of the block before tokens[0]) or from the root when nullopt.
  // REQUIRES: block_size > 0.
  [[nodiscard]] std::vector<BlockKey> SequenceHashes(std::span<const uint32_t> tokens,
                                                     uint32_t block_size,
                                                     std::optional<uint64_t> parent = {}) const;
  // Local hashes of the complete blocks of `tokens`. REQUIRES: block_size > 0.
  [[nodiscard]] std::vector<uint64_t> LocalHashes(std::span<const uint32_t> tokens,
                                                  uint32_t block_size) const;
  // Chains precomputed local hashes from `parent` (or the root).
  [[nodiscard]] std::vector<BlockKey> ChainLocals(std::span<const uint64_t> locals,
                                                  std::optional<uint64_t> parent = {}) const;

 private:
  uint64_t seed_;
};

}  // namespace kvatlas
