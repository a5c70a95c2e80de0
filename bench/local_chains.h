// The chains both LocalIndex benchmarks look up (bench/local_index_bench.cc through a
// server, bench/local_table_bench.cc on the table alone), so that their figures compare.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/bench_util.h"
#include "kvatlas/common/types.h"

namespace kvatlas::bench {

constexpr uint32_t kChainBlocks = 128;
constexpr uint32_t kSharedPrefix = 32;  // blocks of a "system prompt" shared by 64 chains
constexpr uint32_t kPrompts = 64;

// Chain c: a shared prompt's 32 blocks, then 96 blocks of its own.
inline std::vector<BlockKey> ChainKeys(uint64_t c) {
  std::vector<BlockKey> keys(kChainBlocks);
  for (uint32_t i = 0; i < kChainBlocks; ++i) {
    keys[i] = i < kSharedPrefix ? Mix((c % kPrompts) * 1000 + i + 7)
                                : Mix(c * 1000 + i + 1'000'000'000'000ULL);
  }
  return keys;
}

}  // namespace kvatlas::bench
