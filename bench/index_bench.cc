// In-process index benchmark: ingest rate, prefix-lookup latency and memory per entry.
// Prints figures; asserts nothing (targets are checked by reading them, see
// scripts/bench/index). Usage: index_bench [--entries N]... [--holders H] [--chain L]
//   [--shared-prefix S] [--prefix-holders K] [--lookups Q] [--tiers 1|2] [--stall] [--digest]
//   [--apply [--group G] [--readers R] [--rounds N] [--rate E]]
// --stall adds, per size, the longest write-lock hold and lookup stall during ingest, hash
// tables growing (incrementally, flat_table.h) included.
// --digest instead measures what keeping the replica digest (server/model/replica_digest.h)
// costs: the same ingest with and without it, alternated, on the Index alone and through a
// StateMachine writing RocksDB (as a server applies), in CPU time.
// --apply instead measures the StateMachine's apply of log entries of G batches (RunApply)
// with R reader threads looking up meanwhile, N rounds per size, paced to E block events/s
// (0: as fast as it applies).
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/index/index.h"
#include "server/state/state_machine.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::vector<uint64_t> entries;
  uint32_t holders = 1000;
  uint32_t chain = 128;          // blocks per stored chain (and per lookup)
  uint32_t shared_prefix = 32;   // leading blocks shared by a group of holders
  uint32_t prefix_holders = 10;  // holders per group (one group's system prompt, say)
  uint32_t lookups = 200000;
  uint32_t tiers = 1;   // 2: every chain is also offloaded to CPU (two entries per block)
  bool stall = false;   // also RunStall
  bool digest = false;  // RunDigestCost only
  bool apply = false;   // RunApply only
  uint32_t group = 64;  // batches per log entry (RunApply)
  uint32_t readers = 1;
  uint32_t rounds = 5;
  uint64_t rate = 0;  // block events/s the apply is paced to (RunApply); 0 = unpaced
};

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

const ContextKey kContext{"default", "bench-model", "", 16, ""};

// Chain c is stored by holder c % holders. Its blocks [0, shared_prefix) are the prefix of
// the holder's group (prefix_holders holders share one), the rest unique to c.
std::vector<uint64_t> ChainKeys(const Config& cfg, uint64_t c) {
  std::vector<uint64_t> keys(cfg.chain);
  const uint64_t prefix = (c % cfg.holders) / cfg.prefix_holders;
  for (uint32_t i = 0; i < cfg.chain; ++i) {
    keys[i] = i < cfg.shared_prefix ? SplitMix((prefix << 20) | i)
                                    : SplitMix(0x8000000000000000ULL | (c << 12) | i);
  }
  return keys;
}

uint64_t RssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * 4096ull : 0;
}

// This thread's CPU time in µs: unlike the wall clock, it excludes time the thread was
// preempted, which on a loaded machine dominates the longest lock holds.
double ThreadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double Percentile(std::vector<double>& v, double p) {
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return v[i];
}

// The machine's own latency tail: the same percentiles for a pure CPU spin of about
// `micros` µs. On a VM, timer and host interrupts (~40 µs here) hit ~1% of 10 µs windows,
// so a lookup's p99 is only meaningful next to this.
void CalibrateTail(double micros) {
  volatile uint64_t sink = 0;
  auto spin = [&](uint64_t n) {
    for (uint64_t j = 0; j < n; ++j) sink = sink + j;
  };
  uint64_t n = 1000;
  for (;;) {  // find n that takes ~micros
    const auto a = Clock::now();
    spin(n);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
    if (us >= micros) {
      n = static_cast<uint64_t>(static_cast<double>(n) * micros / us);
      break;
    }
    n *= 2;
  }
  std::vector<double> us;
  for (int i = 0; i < 100000; ++i) {
    const auto a = Clock::now();
    spin(n);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  std::printf("environment: a CPU spin of p50 %.2f us has p99 %.2f us, p999 %.2f us\n",
              Percentile(us, 0.50), Percentile(us, 0.99), Percentile(us, 0.999));
}

// Chains are sized to reach `target_entries` unique (block, holder, tier) copies: a
// holder's chains share its group's prefix, which it holds once.
uint64_t ChainCount(const Config& cfg, uint64_t target_entries) {
  const uint64_t prefix_entries = uint64_t{cfg.holders} * cfg.shared_prefix * cfg.tiers;
  const uint64_t per_chain = uint64_t{cfg.chain - cfg.shared_prefix} * cfg.tiers;
  return target_entries > prefix_entries ? (target_entries - prefix_entries) / per_chain + 1 : 1;
}

std::vector<StoreCommand> BuildCommands(const Config& cfg, uint64_t chains) {
  std::vector<StoreCommand> commands(chains * cfg.tiers);
  for (uint64_t c = 0; c < chains; ++c) {
    for (uint32_t t = 0; t < cfg.tiers; ++t) {
      StoreCommand& cmd = commands[c * cfg.tiers + t];
      cmd.context = kContext;
      cmd.holder = HolderKey{"instance-" + std::to_string(c % cfg.holders), 0};
      cmd.tier = t == 0 ? Tier::kGpu : Tier::kCpu;
      cmd.hashes = ChainKeys(cfg, c);
      cmd.base_depth = 0;
    }
  }
  return commands;
}

void Run(const Config& cfg, uint64_t target_entries) {
  const uint64_t chains = ChainCount(cfg, target_entries);
  std::printf(
      "\n== index: %llu entries target, %llu chains of %u blocks in %u tier(s), %u "
      "holders, %u-block prefixes shared by groups of %u holders ==\n",
      static_cast<unsigned long long>(target_entries), static_cast<unsigned long long>(chains),
      cfg.chain, cfg.tiers, cfg.holders, cfg.shared_prefix, cfg.prefix_holders);
  // Commands are built up front so that only Apply is timed.
  std::vector<StoreCommand> commands = BuildCommands(cfg, chains);
  IndexOptions options;
  options.max_entries_per_context = target_entries * 2;
  const uint64_t rss_before = RssBytes();
  Index index(options);
  MutationList mutations;
  const auto t0 = Clock::now();
  for (uint64_t c = 0; c < commands.size(); ++c) {
    index.Apply(commands[c], 0, &mutations);
    if (mutations.size() > 64 * 1024) mutations.clear();  // as the state machine's group
  }
  const double ingest_s = std::chrono::duration<double>(Clock::now() - t0).count();
  mutations.clear();
  mutations.shrink_to_fit();
  commands.clear();
  commands.shrink_to_fit();
  const IndexStats st = index.Stats();
  const uint64_t block_events = chains * cfg.chain * cfg.tiers;
  std::printf(
      "ingest: %llu block events in %.3f s = %.2f M block events/s (one core, with "
      "mutation records)\n",
      static_cast<unsigned long long>(block_events), ingest_s,
      static_cast<double>(block_events) / ingest_s / 1e6);
  std::printf("index: %llu entries, %llu blocks (%.2f entries/block), %llu holders\n",
              static_cast<unsigned long long>(st.entries),
              static_cast<unsigned long long>(st.blocks),
              static_cast<double>(st.entries) / static_cast<double>(st.blocks),
              static_cast<unsigned long long>(st.holders));
  const uint64_t rss_after = RssBytes();
  std::printf(
      "memory: %.1f bytes/entry by the index's own accounting; RSS growth %.1f "
      "bytes/entry\n",
      static_cast<double>(st.memory_bytes) / static_cast<double>(st.entries),
      static_cast<double>(rss_after - rss_before) / static_cast<double>(st.entries));

  // Lookups of whole stored chains (full 128-block hits, the most work per lookup), then
  // of chains that diverge after their shared prefix (a miss at block `shared_prefix`).
  std::mt19937_64 rng(42);
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<double> us;
    us.reserve(cfg.lookups);
    uint64_t matched = 0;
    std::vector<std::vector<uint64_t>> sample(1024);
    for (auto& keys : sample) {
      keys = ChainKeys(cfg, rng() % chains);
      if (kind == 1) keys[cfg.shared_prefix] ^= 1;
    }
    for (uint32_t q = 0; q < cfg.lookups; ++q) {
      // A fresh random chain each time keeps caches honest; the sample is refreshed.
      if (q % 1024 == 0 && q) {
        for (auto& keys : sample) {
          keys = ChainKeys(cfg, rng() % chains);
          if (kind == 1) keys[cfg.shared_prefix] ^= 1;
        }
      }
      const auto& keys = sample[q % 1024];
      const auto a = Clock::now();
      const LookupResult r = index.Lookup(kContext, keys);
      const auto b = Clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
      matched += r.blocks_found;
    }
    std::printf(
        "lookup (%s, %u-block chain): p50 %.2f us, p99 %.2f us, p999 %.2f us "
        "(avg blocks found %.1f)\n",
        kind == 0 ? "full hit" : "miss after prefix", cfg.chain, Percentile(us, 0.50),
        Percentile(us, 0.99), Percentile(us, 0.999), static_cast<double>(matched) / cfg.lookups);
  }

  // Clearing one holder (an engine's reset, or its registration expiring): its inline copies
  // are linked from no list, so the clear passes over every block record once.
  ClearCommand clear;
  clear.holder = HolderKey{"instance-0", 0};
  const uint64_t entries_before = index.Stats().entries;
  const auto c0 = Clock::now();
  index.Apply(clear, 0, &mutations);
  const double clear_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
  std::printf("clear of one holder (%llu entries, %llu block records passed over): %.1f ms\n",
              static_cast<unsigned long long>(entries_before - index.Stats().entries),
              static_cast<unsigned long long>(st.blocks), clear_ms);

  // A hundred holders going silent together (their leases expire in one batch): one pass.
  std::vector<HolderKey> silent;
  for (uint32_t h = 1; h <= 100 && h < cfg.holders; ++h) {
    silent.push_back(HolderKey{"instance-" + std::to_string(h), 0});
  }
  const uint64_t entries_before_expiry = index.Stats().entries;
  const auto e0 = Clock::now();
  const size_t expired = index.ExpireHolders(silent, &mutations);
  const double expiry_ms = std::chrono::duration<double, std::milli>(Clock::now() - e0).count();
  std::printf("expiry of %zu holders in one batch (%llu entries): %.1f ms\n", expired,
              static_cast<unsigned long long>(entries_before_expiry - index.Stats().entries),
              expiry_ms);
}

// The longest lookup stall during ingest. The applying thread takes the write lock per
// command (one batch; StateMachine::ApplyBatches holds it for a whole log entry, which
// --apply measures), while a reader thread looks up random applied chains under the read
// lock. The tables grow inside the inserts, under the
// write lock, a few slots per insert, into spares made ahead outside the lock. Reports the longest
// write-lock hold (what any lookup may wait, and, under raft, what a growth adds to one apply on
// every replica; wall clock and the applier's CPU time, which leaves out preemption) and the
// longest lookup the reader saw, lock wait included. On a loaded machine the wall-clock figures
// carry the scheduler's noise (a writer preempted inside the lock).
void RunStall(const Config& cfg, uint64_t target_entries) {
  const uint64_t chains = ChainCount(cfg, target_entries);
  std::vector<StoreCommand> commands = BuildCommands(cfg, chains);
  std::printf("stall: %llu entries target, %zu store batches of %u blocks, one reader thread\n",
              static_cast<unsigned long long>(target_entries), commands.size(), cfg.chain);
  {
    IndexOptions options;
    options.max_entries_per_context = target_entries * 2;
    Index index(options);
    std::shared_mutex mu;
    std::atomic<bool> done{false};
    std::atomic<uint64_t> applied{0};  // commands applied: the reader picks among their chains
    double longest_lookup_us = 0;
    uint64_t lookups = 0;
    std::thread reader([&] {
      std::mt19937_64 rng(7);
      while (!done.load(std::memory_order_relaxed)) {
        const uint64_t have = applied.load(std::memory_order_relaxed) / cfg.tiers;
        const std::vector<uint64_t> keys = ChainKeys(cfg, have == 0 ? 0 : rng() % have);
        const auto a = Clock::now();
        {
          std::shared_lock lock(mu);
          const LookupResult r = index.Lookup(kContext, keys);
          (void)r;
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
        longest_lookup_us = std::max(longest_lookup_us, us);
        ++lookups;
      }
    });
    // Reserved as the state machine's scratch list keeps its capacity across groups:
    // otherwise its one-time doublings (~35 ms at 128K) would be the longest hold.
    MutationList mutations;
    mutations.reserve(2 * 64 * 1024);
    double longest_hold_us = 0, longest_hold_cpu_us = 0;
    const auto t0 = Clock::now();
    for (const StoreCommand& cmd : commands) {
      // Spares for the next growths, made outside the lock and the timing as the state
      // machine's SpareMaker thread makes them (flat_table.h §Spares).
      for (const SpareNeed& need : index.SparesWanted()) {
        index.ProvideSpare(Index::MakeSpare(need));
      }
      std::unique_lock lock(mu);
      const auto a = Clock::now();
      const double cpu_a = ThreadCpuMicros();
      index.Apply(cmd, 0, &mutations);
      const double cpu_b = ThreadCpuMicros();
      const auto b = Clock::now();
      lock.unlock();
      longest_hold_us =
          std::max(longest_hold_us, std::chrono::duration<double, std::micro>(b - a).count());
      longest_hold_cpu_us = std::max(longest_hold_cpu_us, cpu_b - cpu_a);
      applied.fetch_add(1, std::memory_order_relaxed);
      if (mutations.size() > 64 * 1024) mutations.clear();  // as the state machine's group
    }
    const double ingest_s = std::chrono::duration<double>(Clock::now() - t0).count();
    done.store(true);
    reader.join();
    const TableCapacities capacities = index.table_capacities();
    std::printf(
        "stall: ingest %.2f s; longest write-lock hold %.2f ms (%.2f ms of CPU); "
        "longest lookup (lock wait included) %.2f ms of %llu; forward table %llu slots\n",
        ingest_s, longest_hold_us / 1e3, longest_hold_cpu_us / 1e3, longest_lookup_us / 1e3,
        static_cast<unsigned long long>(lookups),
        static_cast<unsigned long long>(capacities.forward));
  }
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// CPU seconds of one ingest of `commands` with the replica digest on or off: on the Index
// alone (this thread's CPU), or through a StateMachine over RocksDB as a server applies
// (groups of 64 batches; the process's CPU, RocksDB's flush threads included).
double DigestIngestCpu(const std::vector<StoreCommand>& commands, uint64_t target_entries,
                       bool digest, bool storage) {
  IndexOptions options;
  options.max_entries_per_context = target_entries * 2;
  options.replica_digest = digest;
  if (!storage) {
    Index index(options);
    MutationList mutations;
    const double t0 = ThreadCpuMicros();
    for (const StoreCommand& command : commands) {
      index.Apply(command, 0, &mutations);
      if (mutations.size() > 64 * 1024) mutations.clear();
    }
    const double cpu = (ThreadCpuMicros() - t0) / 1e6;
    if (digest) {
      // The elements alone, all of them once: what the incremental digest adds per new
      // copy, without the apply around it (steadier than the difference of two ingests).
      const double r0 = ThreadCpuMicros();
      const uint64_t full = index.RecomputeReplicaDigest();
      const double ns = (ThreadCpuMicros() - r0) * 1e3 / static_cast<double>(index.Stats().entries);
      std::printf("  full recomputation: %.1f ns/entry (%s the incremental digest)\n", ns,
                  full == index.ReplicaDigest() ? "equal to" : "DIFFERENT FROM");
    }
    return cpu;
  }
  testing::TempDir dir;
  StorageOptions storage_options;
  storage_options.path = dir.str();
  storage_options.disable_wal = true;  // as a server without storage_sync
  auto opened = Storage::Open(storage_options);
  if (!opened.has_value()) {
    std::fprintf(stderr, "storage: %s\n", opened.error().ToString().c_str());
    std::exit(1);
  }
  StateMachineOptions machine_options;
  machine_options.index = options;
  StateMachine machine(machine_options, opened->get());
  if (!machine.Recover().ok()) std::exit(1);
  std::vector<CommandBatch> batches(64);
  std::vector<const CommandBatch*> group;
  const double t0 = ProcessCpuSeconds();
  for (size_t c = 0; c < commands.size(); c += batches.size()) {
    group.clear();
    for (size_t i = 0; i < batches.size() && c + i < commands.size(); ++i) {
      batches[i].commands.assign(1, commands[c + i]);
      group.push_back(&batches[i]);
    }
    if (!machine.Apply(group).has_value()) std::exit(1);
  }
  if (!opened->get()->Flush().ok()) std::exit(1);
  return ProcessCpuSeconds() - t0;
}

void RunDigestCost(const Config& cfg, uint64_t target_entries) {
  const uint64_t chains = ChainCount(cfg, target_entries);
  const std::vector<StoreCommand> commands = BuildCommands(cfg, chains);
  const uint64_t block_events = chains * cfg.chain * cfg.tiers;
  std::printf("\n== replica digest cost: %llu block events (%llu chains of %u blocks) ==\n",
              static_cast<unsigned long long>(block_events),
              static_cast<unsigned long long>(chains), cfg.chain);
  for (const bool storage : {false, true}) {
    std::vector<double> with, without;
    for (int round = 0; round < 5; ++round) {  // alternated, so that drift hits both
      without.push_back(DigestIngestCpu(commands, target_entries, false, storage));
      with.push_back(DigestIngestCpu(commands, target_entries, true, storage));
    }
    const double off = Percentile(without, 0.5), on = Percentile(with, 0.5);
    const double off_min = *std::min_element(without.begin(), without.end());
    const double on_min = *std::min_element(with.begin(), with.end());
    const double per = 1e9 / static_cast<double>(block_events);
    std::printf(
        "%s: without the digest %.1f ns/block event, with it %.1f (medians of %zu runs each, "
        "alternated): the digest costs %.1f%% of the apply CPU; between the fastest runs "
        "(%.1f, %.1f ns) %.1f%%\n",
        storage ? "state machine + RocksDB (process CPU)" : "index alone (thread CPU)", off * per,
        on * per, with.size(), 100.0 * (on - off) / off, off_min * per, on_min * per,
        100.0 * (on_min - off_min) / off_min);
  }
}

// The state machine's apply as `raft-apply` runs it: log entries of `cfg.group` batches (one
// stored chain each) through StateMachine::ApplyAt, in memory (no RocksDB: the part a
// change of the index's locking can move), while `cfg.readers` threads look up random
// applied chains through StateMachine::Read; paced to `cfg.rate` block events/s (a server's
// apply is bounded by raft and RocksDB: ~0.5M/s on 2 cores, README.md), or as fast as it
// goes. Per round: the apply rate (wall clock and the applying thread's CPU), the
// write-lock holds (StateMachine::counters) and the lookups' latency, lock wait included.
// Compare two builds by running them alternately.
void RunApply(const Config& cfg, uint64_t target_entries) {
  const uint64_t chains = ChainCount(cfg, target_entries);
  std::vector<CommandBatch> batches;
  for (StoreCommand& command : BuildCommands(cfg, chains)) {
    batches.emplace_back().commands.emplace_back(std::move(command));
  }
  const uint64_t block_events = chains * cfg.chain * cfg.tiers;
  std::printf(
      "\n== apply: %llu block events in %zu batches, %u batches per log entry, %u "
      "reader(s) ==\n",
      static_cast<unsigned long long>(block_events), batches.size(), cfg.group, cfg.readers);
  const uint32_t group = std::max<uint32_t>(cfg.group, 1);
  for (uint32_t round = 0; round < cfg.rounds; ++round) {
    StateMachineOptions options;
    options.index.max_entries_per_context = target_entries * 2;
    StateMachine machine(options, nullptr);
    if (!machine.Recover().ok()) std::exit(1);
    std::atomic<bool> done{false};
    std::vector<std::vector<double>> latencies(cfg.readers);
    std::vector<std::thread> readers;
    for (uint32_t r = 0; r < cfg.readers; ++r) {
      readers.emplace_back([&, r] {
        std::mt19937_64 rng(r + 1);
        while (!done.load(std::memory_order_relaxed)) {
          const auto a = Clock::now();
          machine.Read([&](const Index& index, Revision revision) {
            // Entries 1 … revision are applied: batches [0, revision · group).
            const uint64_t have = std::min<uint64_t>(revision * group, batches.size()) / cfg.tiers;
            const LookupResult found = index.Lookup(kContext, ChainKeys(cfg, rng() % (have + 1)));
            (void)found;
            return 0;
          });
          latencies[r].push_back(
              std::chrono::duration<double, std::micro>(Clock::now() - a).count());
        }
      });
    }
    std::vector<const CommandBatch*> entry;
    Revision revision = 0;
    const double cpu0 = ThreadCpuMicros();
    const auto t0 = Clock::now();
    for (size_t b = 0; b < batches.size(); b += group) {
      entry.clear();
      for (size_t i = b; i < std::min<size_t>(batches.size(), b + group); ++i) {
        entry.push_back(&batches[i]);
      }
      if (!machine.ApplyAt(++revision, entry).ok()) std::exit(1);
      if (cfg.rate > 0) {
        const double due_s =
            static_cast<double>((b + entry.size()) * cfg.chain) / static_cast<double>(cfg.rate);
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due_s)));
      }
    }
    const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu_s = (ThreadCpuMicros() - cpu0) / 1e6;
    done.store(true);
    for (std::thread& reader : readers) reader.join();
    std::vector<double> all;
    for (const std::vector<double>& v : latencies) all.insert(all.end(), v.begin(), v.end());
    const ApplyCounters counters = machine.counters();
    std::printf(
        "round %u: %.2f M block events/s (wall), %.2f M/s of the applier's CPU; write lock: "
        "%llu holds, longest %.2f ms, held %.0f%% of the time",
        round, static_cast<double>(block_events) / wall_s / 1e6,
        static_cast<double>(block_events) / cpu_s / 1e6,
        static_cast<unsigned long long>(counters.write_lock_holds),
        static_cast<double>(counters.write_lock_hold_max_ns) / 1e6,
        100.0 * static_cast<double>(counters.write_lock_held_ns) / (wall_s * 1e9));
    if (all.empty()) {
      std::printf("\n");
      continue;
    }
    const double longest = *std::max_element(all.begin(), all.end());
    std::printf("; %zu lookups: p50 %.1f us, p99 %.1f us, p999 %.1f us, longest %.2f ms\n",
                all.size(), Percentile(all, 0.50), Percentile(all, 0.99), Percentile(all, 0.999),
                longest / 1e3);
  }
}

}  // namespace
}  // namespace kvatlas::server

int main(int argc, char** argv) {
  kvatlas::server::Config cfg;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> uint64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", argv[i]);
        std::exit(2);
      }
      return std::strtoull(argv[++i], nullptr, 10);
    };
    const std::string arg = argv[i];
    if (arg == "--entries")
      cfg.entries.push_back(next());
    else if (arg == "--holders")
      cfg.holders = static_cast<uint32_t>(next());
    else if (arg == "--chain")
      cfg.chain = static_cast<uint32_t>(next());
    else if (arg == "--shared-prefix")
      cfg.shared_prefix = static_cast<uint32_t>(next());
    else if (arg == "--prefix-holders")
      cfg.prefix_holders = static_cast<uint32_t>(next());
    else if (arg == "--lookups")
      cfg.lookups = static_cast<uint32_t>(next());
    else if (arg == "--tiers")
      cfg.tiers = static_cast<uint32_t>(std::clamp<uint64_t>(next(), 1, 2));
    else if (arg == "--stall")
      cfg.stall = true;
    else if (arg == "--digest")
      cfg.digest = true;
    else if (arg == "--apply")
      cfg.apply = true;
    else if (arg == "--group")
      cfg.group = static_cast<uint32_t>(next());
    else if (arg == "--readers")
      cfg.readers = static_cast<uint32_t>(next());
    else if (arg == "--rounds")
      cfg.rounds = static_cast<uint32_t>(next());
    else if (arg == "--rate")
      cfg.rate = next();
    else {
      std::fprintf(stderr,
                   "usage: %s [--entries N]... [--holders H] [--chain L] [--shared-prefix S] "
                   "[--prefix-holders K] [--lookups Q] [--tiers 1|2] [--stall] [--digest] "
                   "[--apply [--group G] [--readers R] [--rounds N] [--rate E]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (cfg.entries.empty()) cfg.entries = {1'000'000, 10'000'000};
  if (cfg.shared_prefix >= cfg.chain) cfg.shared_prefix = cfg.chain - 1;
  if (cfg.prefix_holders == 0) cfg.prefix_holders = 1;
  if (cfg.digest) {
    for (uint64_t n : cfg.entries) kvatlas::server::RunDigestCost(cfg, n);
    return 0;
  }
  if (cfg.apply) {
    for (uint64_t n : cfg.entries) kvatlas::server::RunApply(cfg, n);
    return 0;
  }
  kvatlas::server::CalibrateTail(10.0);
  for (uint64_t n : cfg.entries) {
    kvatlas::server::Run(cfg, n);
    if (cfg.stall) kvatlas::server::RunStall(cfg, n);
  }
  return 0;
}
