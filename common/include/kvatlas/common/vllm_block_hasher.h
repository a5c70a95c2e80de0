// Exact reproduction of vLLM's `--prefix-caching-hash-algo sha256_cbor` block hashes, so that a
// router can compute the keys a vLLM engine publishes in its KV events (BlockStored /
// BlockRemoved) without asking the engine. See docs/hashing.md for the byte-level recipe.
//
//   NONE_HASH = SHA-256(CBOR text string of the engine's PYTHONHASHSEED, e.g. "42")
//   H_i       = SHA-256(CBOR [ bytes(H_{i-1} or NONE_HASH), [tokens of block i], null|[extras] ])
//   event key = the last 8 bytes of H_i read big-endian (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1,
//               the default; with 0 the engine publishes the full digest, and Project() folds it
//               to the same key)
//
// Matching an engine requires the same PYTHONHASHSEED, the same block size (vLLM's hash block
// size), the same token ids and the same per-block extra keys. Only complete blocks are hashed.
// VllmBlockHasher is immutable after construction and safe to share across threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvatlas/common/export.h"

namespace kvatlas {

class KVATLAS_EXPORT VllmBlockHasher {
 public:
  using Digest = std::array<uint8_t, 32>;

  // One element of a block's extra-key list, encoded as the CBOR value vLLM's cbor2 produces
  // for the corresponding Python object.
  struct ExtraItem {
    // A multimodal item overlapping the block, as the tuple (identifier, offset of the item's
    // first token relative to the block's first token; negative when the item began in an
    // earlier block). Encoded as a CBOR array of 2: [text, int].
    struct MmRef {
      std::string identifier;
      int64_t offset = 0;
      friend bool operator==(const MmRef&, const MmRef&) = default;
    };
    // text string (LoRA name, cache salt, bare MM identifier) | unsigned int | signed int |
    // byte string (e.g. a prompt-embeds SHA-256) | [text, int] pair.
    using Value = std::variant<std::string, uint64_t, int64_t, std::vector<uint8_t>, MmRef>;
    Value value;

    static ExtraItem Text(std::string s) { return {Value(std::in_place_index<0>, std::move(s))}; }
    static ExtraItem Uint(uint64_t v) { return {Value(std::in_place_index<1>, v)}; }
    static ExtraItem Int(int64_t v) { return {Value(std::in_place_index<2>, v)}; }
    static ExtraItem Bytes(std::vector<uint8_t> b) {
      return {Value(std::in_place_index<3>, std::move(b))};
    }
    static ExtraItem Mm(std::string identifier, int64_t offset) {
      return {Value(std::in_place_index<4>, MmRef{std::move(identifier), offset})};
    }
    friend bool operator==(const ExtraItem&, const ExtraItem&) = default;
  };

  // The request-level inputs of vLLM's `generate_block_hash_extra_keys`. Block i's list is,
  // in this order (vLLM's order; it matters):
  //   [lora_name]            if lora_name is non-empty (every block)
  //   mm_keys[i]...          if i < mm_keys.size()
  //   [cache_salt]           if cache_salt is non-empty and i == 0 (the block at token 0)
  //   trailing_keys[i]...    if i < trailing_keys.size() (prompt-embeds digests as Bytes)
  // An empty list is hashed as CBOR null.
  struct Extras {
    // Empty: no LoRA adapter. (vLLM releases before the switch to names used the integer
    // adapter id instead; not supported here.)
    std::string lora_name;
    // Empty: no salt (vLLM also ignores an empty salt).
    std::string cache_salt;
    // Per-block keys between the LoRA name and the salt: the multimodal items overlapping
    // block i (Mm() pairs, or bare Text() identifiers for engines that publish those).
    std::vector<std::vector<ExtraItem>> mm_keys;
    // Per-block keys after the salt: a Bytes() prompt-embeds digest of block i.
    std::vector<std::vector<ExtraItem>> trailing_keys;
  };

  // python_hash_seed: the engine's PYTHONHASHSEED value as a string, exactly as set in its
  // environment (e.g. "0", "42"). An engine without PYTHONHASHSEED uses a random NONE_HASH
  // and cannot be matched.
  explicit VllmBlockHasher(std::string_view python_hash_seed);

  // SHA-256 of the canonical CBOR of the seed string: the parent of block 0.
  const Digest& none_hash() const { return none_hash_; }

  // One block: SHA-256(CBOR [bytes(parent), [tokens], extra.empty() ? null : [extra...]]).
  // `parent` is the previous block's digest, or none_hash() for the first block.
  [[nodiscard]] Digest HashBlock(const Digest& parent, std::span<const uint32_t> tokens,
                                 std::span<const ExtraItem> extra) const;

  // Block i's extra-key list built from `extras` as described at Extras.
  [[nodiscard]] static std::vector<ExtraItem> BlockExtraKeys(const Extras& extras,
                                                             size_t block_index);

  // Digests of every complete block of `tokens` (tokens[0] starts block 0; a trailing partial
  // block is ignored), chained from none_hash(). Returns {} when block_size is 0.
  [[nodiscard]] std::vector<Digest> BlockDigests(std::span<const uint32_t> tokens,
                                                 uint32_t block_size,
                                                 const Extras& extras = {}) const;

  // The 64-bit event hashes of BlockDigests(): Project() of each digest.
  [[nodiscard]] std::vector<uint64_t> BlockHashes(std::span<const uint32_t> tokens,
                                                  uint32_t block_size,
                                                  const Extras& extras = {}) const;

  // vLLM's event projection: int.from_bytes(digest, "big") & (2^64 - 1), i.e. the last 8 bytes
  // read big-endian.
  static uint64_t Project(const Digest& digest);

 private:
  Digest none_hash_{};
};

}  // namespace kvatlas
