// The in-process cost of a split context's lookup (docs/scaling.md §Split contexts): the same
// queries answered by Index::Lookup (one group holds the context) and by the split path
// (PartitionKeys, Index::CopiesAt per group, MergeSplitLookup) over 2, 4 and 8 ranges.
// The answers are compared (a mismatch fails the run). Prints p50/p99 of each and the ratio
// to the unsplit lookup, measured in one run, interleaved. The network fan-out (one
// parallel round trip to the groups) is not in these figures.
//   split_lookup_bench [--chains 20000] [--blocks 128] [--holders 64] [--queries 20000]
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "common/internal/split_lookup.h"
#include "kvatlas/common/placement.h"
#include "server/index/index.h"

namespace kvatlas::bench {
namespace {

using server::Command;
using server::Index;
using server::MutationList;
using server::StoreCommand;

const ContextKey kContext{"default", "bench", "", 16, ""};

ContextPlacement SplitInto(int ranges) {
  ContextPlacement p;
  for (int i = 0; i < ranges; ++i) {
    const BlockKey start = i == 0 ? 0 : (UINT64_MAX / ranges) * static_cast<BlockKey>(i);
    p.ranges.push_back(KeyRange{start, static_cast<GroupId>(i + 1)});
  }
  return p;
}

int Main(int argc, char** argv) {
  const uint64_t chains = Arg(argc, argv, "--chains", 20'000);
  const auto blocks = static_cast<uint32_t>(Arg(argc, argv, "--blocks", 128));
  const uint64_t holders = Arg(argc, argv, "--holders", 64);
  const uint64_t queries = Arg(argc, argv, "--queries", 20'000);
  Index index;
  MutationList out;
  std::vector<std::vector<BlockKey>> keys(chains);
  uint64_t seed = 0;
  for (uint64_t c = 0; c < chains; ++c) {
    keys[c].resize(blocks);
    for (uint32_t i = 0; i < blocks; ++i) keys[c][i] = Mix(c * blocks + i);
    // Two holders per chain: one with all of it in GPU, one with its first half in CPU.
    for (uint64_t copy = 0; copy < 2; ++copy) {
      StoreCommand store;
      store.context = kContext;
      store.holder = {"instance-" + std::to_string((c + copy * 7) % holders), 0};
      store.tier = copy == 0 ? Tier::kGpu : Tier::kCpu;
      store.base_depth = 0;
      store.hashes.assign(keys[c].begin(), keys[c].begin() + (copy == 0 ? blocks : blocks / 2));
      out.clear();
      (void)index.Apply(Command{store}, ++seed, &out);
    }
  }
  const std::vector<int> splits = {1, 2, 4, 8};  // 1 = the unsplit Index::Lookup
  std::vector<ContextPlacement> placements;
  for (int s : splits) placements.push_back(SplitInto(s));
  std::vector<std::vector<double>> micros(splits.size());
  std::vector<GroupCopies> parts;
  for (uint64_t q = 0; q < queries; ++q) {
    const std::vector<BlockKey>& query = keys[Mix(q) % chains];
    LookupAnswer whole;
    for (size_t s = 0; s < splits.size(); ++s) {
      const auto start = std::chrono::steady_clock::now();
      LookupResult result;
      if (splits[s] == 1) {
        result = index.Lookup(kContext, query);
      } else {
        parts.clear();
        for (const GroupShare& share : PartitionKeys(placements[s], query)) {
          parts.push_back(index.CopiesAt(kContext, query, share.positions));
        }
        result = MergeSplitLookup(blocks, parts, "", true);
      }
      micros[s].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      LookupAnswer answer = BuildLookupAnswer(result, kContext, "", 0);
      if (splits[s] == 1) {
        whole = std::move(answer);
      } else if (!(answer == whole)) {
        std::fprintf(stderr, "split into %d ranges answered differently\n", splits[s]);
        return 1;
      }
    }
  }
  std::printf("split lookup, in process: %llu chains x %u blocks, %llu holders, %llu queries\n",
              static_cast<unsigned long long>(chains), blocks,
              static_cast<unsigned long long>(holders), static_cast<unsigned long long>(queries));
  const double p50_1 = Pct(micros[0], 0.5);
  const double p99_1 = Pct(micros[0], 0.99);
  for (size_t s = 0; s < splits.size(); ++s) {
    const double p50 = Pct(micros[s], 0.5);
    const double p99 = Pct(micros[s], 0.99);
    std::printf("  %d range%s  p50 %8.2f us  p99 %8.2f us   / unsplit: p50 %.2fx  p99 %.2fx\n",
                splits[s], splits[s] == 1 ? " " : "s", p50, p99, p50 / p50_1, p99 / p99_1);
  }
  return 0;
}

}  // namespace
}  // namespace kvatlas::bench

int main(int argc, char** argv) { return kvatlas::bench::Main(argc, argv); }
