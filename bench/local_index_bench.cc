// Part (c) of feed_bench: kvatlas::LocalIndex lookups of 128-block chains over a replica of
// ~1M block copies, idle and while the replica applies a concurrent ingest; the same
// lookups through Client::Lookup (one loopback round trip) for comparison.
#include "bench/local_index_bench.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/local_chains.h"
#include "kvatlas/client/local_index.h"

namespace kvatlas::bench {
namespace {

using Clock = std::chrono::steady_clock;

const ContextKey kContext{"default", "localbench", "", 16, ""};

BlockEvent Stored(uint64_t c) {
  BlockEvent e;
  e.type = EventType::kStored;
  e.context = kContext;
  e.holder = HolderKey{"instance-" + std::to_string(c % 8), 0};
  e.tier = c % 5 == 0 ? Tier::kCpu : Tier::kGpu;
  e.medium_known = true;
  e.seq_hashes = ChainKeys(c);
  return e;
}

Revision Ingest(Client& client, uint64_t first, uint64_t n) {
  return IngestEvents(client, first, n, Stored);
}

struct Latencies {
  std::vector<double> us;
  uint64_t blocks_found = 0;
};

// `n` lookups of random loaded chains (1 in 8 cut short by a block nobody has).
Latencies Measure(const LocalIndex& local, uint64_t chains, size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  Latencies out;
  out.us.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<BlockKey> keys = ChainKeys(rng() % chains);
    if (rng() % 8 == 0) keys[64 + rng() % 64] = rng();
    const auto t0 = Clock::now();
    Result<LookupAnswer> answer = local.Lookup(kContext, keys);
    const auto t1 = Clock::now();
    if (answer.has_value()) out.blocks_found += answer->blocks_found;
    out.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return out;
}

void Print(const char* what, const Latencies& l) {
  std::printf(
      "    %-34s p50 %.2f us  p99 %.2f us  p999 %.2f us  max %.1f us  (%zu lookups, "
      "%.1f blocks found on average)\n",
      what, Pct(l.us, 0.5), Pct(l.us, 0.99), Pct(l.us, 0.999), Pct(l.us, 1.0), l.us.size(),
      l.us.empty() ? 0.0 : static_cast<double>(l.blocks_found) / l.us.size());
}

}  // namespace

Revision IngestEvents(Client& client, uint64_t first, uint64_t n,
                      const std::function<BlockEvent(uint64_t)>& event) {
  Revision last = 0;
  std::vector<std::future<Result<IngestAnswer>>> pending;
  for (uint64_t c = first; c < first + n; c += 16) {
    std::vector<BlockEvent> batch;
    for (uint64_t i = c; i < std::min(first + n, c + 16); ++i) batch.push_back(event(i));
    pending.push_back(client.IngestAsync(std::move(batch)));
    if (pending.size() >= 64 || c + 16 >= first + n) {
      for (auto& f : pending) {
        Result<IngestAnswer> answer = f.get();
        if (!answer.has_value()) {
          std::fprintf(stderr, "ingest: %s\n", answer.error().ToString().c_str());
          return 0;
        }
        last = std::max(last, answer->revision);
      }
      pending.clear();
    }
  }
  return last;
}

void LocalIndexLookups(Client& client, const std::string& rpc, uint64_t chains) {
  std::printf(
      "(c) LocalIndex: %llu chains x %u blocks (%u-block prompts shared by %llu chains "
      "each), 8 holders\n",
      static_cast<unsigned long long>(chains), kChainBlocks, kSharedPrefix,
      static_cast<unsigned long long>(chains / kPrompts));
  const Revision loaded = Ingest(client, 0, chains);
  if (loaded == 0) return;

  LocalIndexOptions options;
  options.client.endpoints = {rpc};
  options.contexts = {kContext};
  const auto t0 = Clock::now();
  Result<std::unique_ptr<LocalIndex>> local = LocalIndex::Start(options);
  if (!local.has_value()) {
    std::fprintf(stderr, "LocalIndex: %s\n", local.error().ToString().c_str());
    return;
  }
  if (Status s = (*local)->WaitForRevision(loaded, std::chrono::seconds(120)); !s.ok()) {
    std::fprintf(stderr, "LocalIndex: %s\n", s.ToString().c_str());
    return;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const LocalIndexStats stats = (*local)->Stats();
  std::printf(
      "    snapshot + sync: %.2f s for %llu copies of %llu blocks, %.1f MiB in the replica\n",
      load_s, static_cast<unsigned long long>(stats.copies),
      static_cast<unsigned long long>(stats.blocks),
      static_cast<double>(stats.memory_bytes) / (1 << 20));

  // The server flushes and compacts what it just ingested; on a 2-core machine that takes a
  // core from the lookups. Let it settle: the replica's latency is what is measured.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  Measure(**local, chains, 20'000, 1);  // warm up
  Print("LocalIndex, idle:", Measure(**local, chains, 200'000, 2));

  // While the replica applies a concurrent ingest of fresh chains (writers take the lock).
  std::atomic<bool> done{false};
  Revision last = 0;
  std::thread writer([&] {
    for (uint64_t c = chains; !done.load(); c += 512) last = Ingest(client, c, 512);
  });
  const Latencies busy = Measure(**local, chains, 200'000, 3);
  done = true;
  writer.join();
  Print("LocalIndex, during ingest:", busy);
  if (last != 0 && (*local)->WaitForRevision(last, std::chrono::seconds(30)).ok()) {
    const LocalIndexStats after = (*local)->Stats();
    std::printf(
        "    replica followed the ingest to revision %llu: %llu records applied, %llu "
        "snapshot loads, %llu watch resumes\n",
        static_cast<unsigned long long>(after.revision),
        static_cast<unsigned long long>(after.records_applied),
        static_cast<unsigned long long>(after.snapshots_loaded),
        static_cast<unsigned long long>(after.watch_resumes));
  }

  // The same lookups over the network, for the ratio.
  Latencies remote;
  std::mt19937_64 rng(4);
  for (int i = 0; i < 5000; ++i) {
    LookupRequest request;
    request.context = kContext;
    request.by_hash = true;
    request.seq_hashes = ChainKeys(rng() % chains);
    const auto t = Clock::now();
    Result<LookupAnswer> answer = client.Lookup(std::move(request));
    remote.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    if (answer.has_value()) remote.blocks_found += answer->blocks_found;
  }
  Print("Client::Lookup (binary, loopback):", remote);
}

}  // namespace kvatlas::bench
