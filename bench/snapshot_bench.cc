// Context snapshot benchmark (scripts/bench/snapshot, docs/feed.md §Snapshots): loads one
// context of --copies copies (128-block chains of one holder) into a running server, then
// starts a kvatlas::LocalIndex on it and measures, in the same run:
//   - the LocalIndex's sync time (Start → WaitSynced) and snapshot throughput;
//   - the server's RSS growth during the sync (sampled every 20 ms, vs just before);
//   - the server's write latency (a 16-block ingest at a time, closed loop) and lookup
//     latency (a 128-block Client::Lookup at a time: these take the state's read lock, so
//     their max bounds any lock hold) before the sync and during it.
// Prints figures only.
//   snapshot_bench --rpc HOST:PORT --server-pid PID [--copies N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/local_index_bench.h"
#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"

namespace {

using namespace kvatlas;
using bench::Pct;
using Clock = std::chrono::steady_clock;

const ContextKey kContext{"default", "snapbench", "", 16, ""};
constexpr uint64_t kChainBlocks = 128;

std::vector<BlockKey> Chain(uint64_t c) {
  std::vector<BlockKey> keys(kChainBlocks);
  for (uint64_t b = 0; b < kChainBlocks; ++b) keys[b] = bench::Mix((c << 8) | b);
  return keys;
}

BlockEvent Stored(uint64_t c) {
  BlockEvent e;
  e.type = EventType::kStored;
  e.context = kContext;
  e.holder = HolderKey{"instance-0", 0};
  e.tier = Tier::kGpu;
  e.medium_known = true;
  e.seq_hashes = Chain(c);
  return e;
}

// Closed-loop probes until `stop`: 16-block writes (fresh chains from `next_chain`) and
// 128-block lookups of loaded chains; latencies in ms.
struct Probes {
  std::vector<double> write_ms, lookup_ms;
};

Probes Probe(Client& client, uint64_t chains, uint64_t* next_chain, const std::atomic<bool>& stop) {
  Probes out;
  std::thread writer([&] {
    while (!stop.load()) {
      BlockEvent e = Stored((*next_chain)++);
      e.seq_hashes.resize(16);
      const auto t = Clock::now();
      Result<IngestAnswer> answer = client.Ingest({e});
      if (!answer.has_value()) break;
      out.write_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (uint64_t i = 0; !stop.load(); ++i) {
    LookupRequest request;
    request.context = kContext;
    request.by_hash = true;
    request.seq_hashes = Chain(bench::Mix(i) % chains);
    const auto t = Clock::now();
    Result<LookupAnswer> answer = client.Lookup(std::move(request));
    if (!answer.has_value()) break;
    out.lookup_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  writer.join();
  return out;
}

void PrintProbes(const char* when, const Probes& p) {
  std::printf(
      "  %-14s writes p50 %.2f ms p99 %.2f ms max %.1f ms (%zu) | lookups p50 %.3f ms p99 %.3f "
      "ms max %.1f ms (%zu)\n",
      when, Pct(p.write_ms, 0.5), Pct(p.write_ms, 0.99), Pct(p.write_ms, 1.0), p.write_ms.size(),
      Pct(p.lookup_ms, 0.5), Pct(p.lookup_ms, 0.99), Pct(p.lookup_ms, 1.0), p.lookup_ms.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string rpc;
  long pid = 0;
  uint64_t copies = 10'000'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rpc") {
      rpc = v;
    } else if (k == "--server-pid") {
      pid = std::atol(v.c_str());
    } else if (k == "--copies") {
      copies = std::strtoull(v.c_str(), nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (rpc.empty() || pid == 0 || copies < kChainBlocks) {
    std::fprintf(stderr, "usage: snapshot_bench --rpc HOST:PORT --server-pid PID [--copies N]\n");
    return 2;
  }
  ClientOptions options;
  options.endpoints = {rpc};
  options.default_deadline = std::chrono::seconds(60);
  auto client = Client::Connect(options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return 1;
  }
  const uint64_t chains = copies / kChainBlocks;
  const auto t_load = Clock::now();
  if (bench::IngestEvents(**client, 0, chains, Stored) == 0) return 1;
  std::printf("loaded %llu copies (%llu chains x %llu) in %.1f s; server RSS %.0f MiB\n",
              static_cast<unsigned long long>(chains * kChainBlocks),
              static_cast<unsigned long long>(chains),
              static_cast<unsigned long long>(kChainBlocks),
              std::chrono::duration<double>(Clock::now() - t_load).count(),
              static_cast<double>(bench::RssBytesOf(pid)) / (1 << 20));
  // Let the server's flushes and compactions of the load settle.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  uint64_t next_chain = chains + 1;

  std::atomic<bool> stop{false};
  auto idle =
      std::async(std::launch::async, [&] { return Probe(**client, chains, &next_chain, stop); });
  std::this_thread::sleep_for(std::chrono::seconds(5));
  stop = true;
  const Probes before = idle.get();

  const uint64_t rss_before = bench::RssBytesOf(pid);
  std::atomic<uint64_t> rss_peak{rss_before};
  std::atomic<bool> syncing{true};
  std::atomic<const LocalIndex*> syncing_index{nullptr};
  uint64_t buffered_peak_records = 0, buffered_peak_bytes = 0;  // the sampler's
  std::thread sampler([&] {
    while (syncing.load()) {
      rss_peak = std::max(rss_peak.load(), bench::RssBytesOf(pid));
      if (const LocalIndex* index = syncing_index.load()) {
        const LocalIndexContextStatus s = index->ContextStatus()[0];
        buffered_peak_records = std::max(buffered_peak_records, s.buffered_records);
        buffered_peak_bytes = std::max(buffered_peak_bytes, s.buffered_bytes);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  stop = false;
  auto busy =
      std::async(std::launch::async, [&] { return Probe(**client, chains, &next_chain, stop); });
  LocalIndexOptions local_options;
  local_options.client.endpoints = {rpc};
  local_options.contexts = {kContext};
  local_options.on_error = [](const ContextKey&, const Status& error) {
    std::fprintf(stderr, "LocalIndex: %s\n", error.ToString().c_str());
  };
  const auto t0 = Clock::now();
  auto local = LocalIndex::Start(local_options);
  if (!local.has_value()) {
    std::fprintf(stderr, "LocalIndex: %s\n", local.error().ToString().c_str());
    return 1;
  }
  syncing_index = local->get();
  const Status synced = (*local)->WaitSynced(std::chrono::minutes(20));
  const double sync_s = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  syncing = false;
  sampler.join();
  const Probes during = busy.get();
  if (!synced.ok()) {
    std::fprintf(stderr, "sync: %s\n", synced.ToString().c_str());
    return 1;
  }
  const LocalIndexStats stats = (*local)->Stats();
  const LocalIndexContextStatus status = (*local)->ContextStatus()[0];
  std::printf(
      "LocalIndex sync: %.1f s for a snapshot of %llu copies at revision %llu (%.2f M copies/s); "
      "replica %llu copies, %.0f MiB\n",
      sync_s, static_cast<unsigned long long>(status.snapshot_copies),
      static_cast<unsigned long long>(status.snapshot_revision),
      static_cast<double>(status.snapshot_copies) / sync_s / 1e6,
      static_cast<unsigned long long>(stats.copies),
      static_cast<double>(stats.memory_bytes) / (1 << 20));
  std::printf("server RSS: %.0f MiB before the sync, peak %.0f MiB during it (+%.1f MiB)\n",
              static_cast<double>(rss_before) / (1 << 20),
              static_cast<double>(rss_peak.load()) / (1 << 20),
              (static_cast<double>(rss_peak.load()) - static_cast<double>(rss_before)) / (1 << 20));
  std::printf(
      "feed buffered during the load: peak %llu records, %.1f MiB; snapshots loaded %llu, "
      "failed attempts %llu, records applied %llu\n",
      static_cast<unsigned long long>(buffered_peak_records),
      static_cast<double>(buffered_peak_bytes) / (1 << 20),
      static_cast<unsigned long long>(stats.snapshots_loaded),
      static_cast<unsigned long long>(status.failures),
      static_cast<unsigned long long>(stats.records_applied));
  PrintProbes("before sync:", before);
  PrintProbes("during sync:", during);
  return 0;
}
