// The data of kvatlas::LocalIndex alone, in-process and without a server: lookups of
// 128-block chains over ~800k blocks, laid out as engines store them (one record per chain:
// consecutive records) and in the worst layout (every block its own record, in random
// order), cold (a random chain each time) and warm (the same chain again). Prints figures.
//   local_table_bench [--chains N] [--lookups N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "bench/local_chains.h"
#include "client/src/local_table.h"

namespace kvatlas::bench {
namespace {

using Clock = std::chrono::steady_clock;
using client_internal::LocalTable;

const ContextKey kContext{"default", "localbench", "", 16, ""};

FeedRecord Stored(uint64_t c, std::vector<BlockKey> keys) {
  FeedRecord r;
  r.op = FeedOp::kStored;
  r.context = kContext;
  r.holder = HolderKey{"instance-" + std::to_string(c % 8), 0};
  r.tier = c % 5 == 0 ? Tier::kCpu : Tier::kGpu;
  r.keys = std::move(keys);
  return r;
}

void Load(LocalTable& table, uint64_t chains, bool scattered) {
  table.Track(kContext);
  if (!scattered) {
    for (uint64_t c = 0; c < chains; ++c) table.Apply(Stored(c, ChainKeys(c)));
    return;
  }
  std::vector<std::pair<uint64_t, uint32_t>> blocks;
  for (uint64_t c = 0; c < chains; ++c) {
    for (uint32_t i = 0; i < kChainBlocks; ++i) blocks.emplace_back(c, i);
  }
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(9));
  for (const auto& [c, i] : blocks) table.Apply(Stored(c, {ChainKeys(c)[i]}));
}

void Measure(const char* what, const LocalTable& table, uint64_t chains, size_t lookups,
             bool warm) {
  std::mt19937_64 rng(2);
  std::vector<double> us;
  us.reserve(lookups);
  uint64_t found = 0;
  for (size_t i = 0; i < lookups; ++i) {
    std::vector<BlockKey> keys = ChainKeys(rng() % chains);
    if (rng() % 8 == 0) keys[64 + rng() % 64] = rng();  // 1 in 8 cut short
    if (warm) (void)table.Lookup(kContext, keys, {}, true, 1024);
    const auto t0 = Clock::now();
    const LookupResult result = table.Lookup(kContext, keys, {}, true, 1024);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    found += result.blocks_found;
  }
  std::printf("    %-44s p50 %.2f us  p99 %.2f us  p999 %.2f us  (%.1f blocks found on average)\n",
              what, Pct(us, 0.5), Pct(us, 0.99), Pct(us, 0.999),
              static_cast<double>(found) / static_cast<double>(lookups));
}

}  // namespace
}  // namespace kvatlas::bench

int main(int argc, char** argv) {
  using namespace kvatlas::bench;
  uint64_t chains = 8192;
  size_t lookups = 200'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--chains") {
      chains = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--lookups") {
      lookups = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: local_table_bench [--chains N] [--lookups N]\n");
      return 2;
    }
  }
  if (chains == 0 || lookups == 0) {
    std::fprintf(stderr, "local_table_bench: --chains and --lookups must be positive\n");
    return 2;
  }
  std::printf("(d) LocalIndex's table alone: %llu chains x %u blocks, 8 holders\n",
              static_cast<unsigned long long>(chains), kChainBlocks);
  for (const bool scattered : {false, true}) {
    LocalTable table;
    Load(table, chains, scattered);
    std::printf("  %s: %llu blocks, %.1f MiB\n",
                scattered ? "every block its own record, in random order"
                          : "one record per chain (as engines store them)",
                static_cast<unsigned long long>(table.blocks()),
                static_cast<double>(table.memory_bytes()) / (1 << 20));
    Measure("cold (a random chain each time):", table, chains, lookups, false);
    Measure("warm (the same chain just before):", table, chains, lookups, true);
  }
  return 0;
}
