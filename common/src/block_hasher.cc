#include "kvatlas/common/block_hasher.h"

#include <xxhash.h>

#include <bit>
#include <cstring>

namespace kvatlas {
namespace {

void StoreLe64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

constexpr bool kLittleEndianHost = std::endian::native == std::endian::little;

}  // namespace

uint64_t BlockHasher::LocalHash(std::span<const uint32_t> block_tokens) const {
  if constexpr (kLittleEndianHost) {
    return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), seed_);
  } else {
    std::vector<unsigned char> buf(block_tokens.size() * 4);
    for (size_t i = 0; i < block_tokens.size(); ++i) {
      for (int b = 0; b < 4; ++b)
        buf[i * 4 + b] = static_cast<unsigned char>(block_tokens[i] >> (8 * b));
    }
    return XXH3_64bits_withSeed(buf.data(), buf.size(), seed_);
  }
}

uint64_t BlockHasher::Chain(uint64_t parent_seq, uint64_t local) const {
  unsigned char buf[16];
  StoreLe64(parent_seq, buf);
  StoreLe64(local, buf + 8);
  return XXH3_64bits_withSeed(buf, sizeof(buf), seed_);
}

std::vector<uint64_t> BlockHasher::LocalHashes(std::span<const uint32_t> tokens,
                                               uint32_t block_size) const {
  std::vector<uint64_t> out;
  const size_t n = tokens.size() / block_size;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i)
    out.push_back(LocalHash(tokens.subspan(i * block_size, block_size)));
  return out;
}

std::vector<BlockKey> BlockHasher::ChainLocals(std::span<const uint64_t> locals,
                                               std::optional<uint64_t> parent) const {
  std::vector<BlockKey> out;
  out.reserve(locals.size());
  std::optional<uint64_t> prev = parent;
  for (uint64_t local : locals) {
    const uint64_t seq = prev ? Chain(*prev, local) : local;
    out.push_back(seq);
    prev = seq;
  }
  return out;
}

std::vector<BlockKey> BlockHasher::SequenceHashes(std::span<const uint32_t> tokens,
                                                  uint32_t block_size,
                                                  std::optional<uint64_t> parent) const {
  const std::vector<uint64_t> locals = LocalHashes(tokens, block_size);
  return ChainLocals(locals, parent);
}

}  // namespace kvatlas
