// Groups in one process: G raft groups (server/runtime/group.h — each its own RocksDB,
// state machine, single-voter raft log with fsync and applier), as a server hosting G
// groups runs them, each written as fast as it takes by its own driver thread. Per G, for
// `--seconds` after a warm-up: block events applied per second (all groups, and per
// group), and server CPU per block event — the process's CPU time minus the drivers' own,
// over the events applied — with both as ratios to the first G of the run. Scaling per
// core holds when the CPU per event stays flat as G grows: the groups share nothing but
// the machine. Prints figures; asserts nothing (scripts/bench/scale runs it).
//
//   group_scale_bench [--groups 1,2,4,8] [--seconds 5] [--warmup 1] [--blocks 64]
//                     [--commands 16] [--in-flight 8]
//
// Each batch is --commands stores of --blocks fresh block keys each (one holder of 16 per
// store, the group's own context: contexts are what a group owns), and each driver keeps
// --in-flight batches submitted to its group's applier.
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "server/peer/peer_auth.h"
#include "server/runtime/config.h"
#include "server/runtime/group.h"
#include "server/runtime/memory_trimmer.h"
#include "server/runtime/options_from_config.h"
#include "server/runtime/preflight.h"
#include "server/state/recovery_progress.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::vector<uint64_t> groups{1, 2, 4, 8};
  double seconds = 5;
  double warmup = 1;
  uint32_t blocks = 64;
  uint32_t commands = 16;
  uint32_t in_flight = 8;
};

double CpuNow(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// 0: warming up; 1: measuring; 2: stopping.
enum Phase : int { kWarmup = 0, kMeasure = 1, kStop = 2 };

// One group's writer: keeps `in_flight` batches in its applier, counting the block events
// applied, and its own thread's CPU time over the measured phase.
class Driver {
 public:
  Driver(Applier* applier, size_t group, const BenchOptions& options, const std::atomic<int>* phase)
      : applier_(applier),
        group_(group),
        options_(options),
        phase_(phase),
        slots_(static_cast<std::ptrdiff_t>(options.in_flight)) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  // After the phase became kStop: waits for the thread and every batch it submitted.
  void Join() {
    thread_.join();
    for (uint32_t i = 0; i < options_.in_flight; ++i) slots_.acquire();
  }

  uint64_t applied() const { return applied_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  double measured_cpu() const { return cpu_end_ - cpu_start_; }

 private:
  void Run() {
    bool measuring = false;
    for (;;) {
      const int phase = phase_->load(std::memory_order_acquire);
      if (phase == kMeasure && !measuring) {
        measuring = true;
        cpu_start_ = CpuNow(CLOCK_THREAD_CPUTIME_ID);
      }
      if (phase == kStop) break;
      slots_.acquire();
      const uint64_t events = uint64_t{options_.blocks} * options_.commands;
      applier_->SubmitAsync(NextBatch(), [this, events](Result<Revision> r) {
        (r.has_value() ? applied_ : failed_)
            .fetch_add(r.has_value() ? events : 1, std::memory_order_relaxed);
        slots_.release();
      });
    }
    cpu_end_ = CpuNow(CLOCK_THREAD_CPUTIME_ID);
    if (!measuring) cpu_start_ = cpu_end_;
  }

  CommandBatch NextBatch() {
    CommandBatch batch;
    const ContextKey context{"default", "model-" + std::to_string(group_), "", 16, ""};
    for (uint32_t c = 0; c < options_.commands; ++c) {
      StoreCommand store;
      store.context = context;
      store.holder = HolderKey{"inst-" + std::to_string(next_store_ % 16), 0};
      ++next_store_;
      store.hashes.reserve(options_.blocks);
      for (uint32_t b = 0; b < options_.blocks; ++b) {
        store.hashes.push_back(bench::Mix((uint64_t{group_} << 48) ^ next_key_++));
      }
      batch.commands.emplace_back(std::move(store));
    }
    return batch;
  }

  Applier* applier_;
  const size_t group_;
  const BenchOptions& options_;
  const std::atomic<int>* phase_;
  std::counting_semaphore<> slots_;
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> failed_{0};
  uint64_t next_key_ = 0;
  uint64_t next_store_ = 0;
  double cpu_start_ = 0;
  double cpu_end_ = 0;
  std::thread thread_;
};

struct RunFigures {
  size_t groups = 0;
  double events_per_second = 0;
  double cpu_us_per_event = 0;
  double cores = 0;  // server CPU seconds per second
  uint64_t failed = 0;
};

Result<RunFigures> RunGroups(size_t count, const BenchOptions& options) {
  testing::TempDir dir;
  RecoveryProgress progress;
  MemoryTrimmer trimmer;
  PeerAuth auth(1, "group-scale-bench", "", /*random_if_no_secret=*/true);
  std::vector<std::unique_ptr<Group>> groups;
  for (size_t g = 0; g < count; ++g) {
    Config config;
    config.data_dir = (dir.path() / ("group-" + std::to_string(g + 1))).string();
    std::filesystem::create_directories(config.data_dir);
    KVATLAS_ASSIGN_OR_RETURN(const RaftPlacement placement, RaftPlacementOf(config));
    auto group = std::make_unique<Group>(GroupOptionsFrom(config, placement), &progress, &trimmer);
    KVATLAS_RETURN_IF_ERROR(group->Open());
    KVATLAS_RETURN_IF_ERROR(group->StartReplication(&auth, -1, [] {}));
    groups.push_back(std::move(group));
  }

  std::atomic<int> phase{kWarmup};
  std::vector<std::unique_ptr<Driver>> drivers;
  for (size_t g = 0; g < count; ++g) {
    drivers.push_back(std::make_unique<Driver>(groups[g]->applier(), g, options, &phase));
  }
  for (auto& d : drivers) d->Start();
  auto applied = [&] {
    uint64_t sum = 0;
    for (const auto& d : drivers) sum += d->applied();
    return sum;
  };
  std::this_thread::sleep_for(std::chrono::duration<double>(options.warmup));
  const uint64_t events_start = applied();
  const double cpu_start = CpuNow(CLOCK_PROCESS_CPUTIME_ID);
  const auto t0 = Clock::now();
  phase.store(kMeasure, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds));
  const uint64_t events_end = applied();
  const double cpu_end = CpuNow(CLOCK_PROCESS_CPUTIME_ID);
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  phase.store(kStop, std::memory_order_release);

  RunFigures figures;
  figures.groups = count;
  double driver_cpu = 0;
  for (auto& d : drivers) {
    d->Join();
    driver_cpu += d->measured_cpu();
    figures.failed += d->failed();
  }
  const double events = static_cast<double>(events_end - events_start);
  const double server_cpu = (cpu_end - cpu_start) - driver_cpu;
  figures.events_per_second = events / elapsed;
  figures.cpu_us_per_event = events > 0 ? server_cpu / events * 1e6 : 0;
  figures.cores = server_cpu / elapsed;
  drivers.clear();
  for (auto& g : groups) {
    g->StopReplication();
    if (Status s = g->Flush(); !s.ok()) return s;
  }
  return figures;
}

int Main(int argc, char** argv) {
  BenchOptions options;
  if (const std::string list = bench::StrArg(argc, argv, "--groups"); !list.empty()) {
    options.groups = bench::ParseRates(list);
  }
  options.seconds = static_cast<double>(bench::Arg(argc, argv, "--seconds", 5));
  options.warmup = static_cast<double>(bench::Arg(argc, argv, "--warmup", 1));
  options.blocks = static_cast<uint32_t>(bench::Arg(argc, argv, "--blocks", 64));
  options.commands = static_cast<uint32_t>(bench::Arg(argc, argv, "--commands", 16));
  options.in_flight = static_cast<uint32_t>(bench::Arg(argc, argv, "--in-flight", 8));
  if (options.groups.empty() || options.blocks == 0 || options.commands == 0 ||
      options.in_flight == 0 || options.seconds <= 0) {
    std::fprintf(stderr,
                 "group_scale_bench: --groups, --blocks, --commands, --in-flight and "
                 "--seconds must be positive\n");
    return 2;
  }
  std::printf(
      "groups in one process: %.0f s per run after %.0f s of warm-up, batches of %u x %u "
      "block events, %u in flight per group, %u cores\n",
      options.seconds, options.warmup, options.commands, options.blocks, options.in_flight,
      std::thread::hardware_concurrency());
  std::printf("%7s %16s %16s %12s %14s %12s %12s\n", "groups", "events/s", "per group",
              "server cores", "CPU us/event", "rate ratio", "CPU ratio");
  RunFigures first;
  for (size_t i = 0; i < options.groups.size(); ++i) {
    Result<RunFigures> run = RunGroups(static_cast<size_t>(options.groups[i]), options);
    if (!run.has_value()) {
      std::fprintf(stderr, "group_scale_bench: %s\n", run.status().ToString().c_str());
      return 1;
    }
    if (i == 0) first = *run;
    std::printf("%7zu %16.0f %16.0f %12.2f %14.3f %12.2f %12.2f%s\n", run->groups,
                run->events_per_second, run->events_per_second / static_cast<double>(run->groups),
                run->cores, run->cpu_us_per_event, run->events_per_second / first.events_per_second,
                run->cpu_us_per_event / first.cpu_us_per_event,
                run->failed > 0 ? "  (failed batches!)" : "");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kvatlas::server

int main(int argc, char** argv) { return kvatlas::server::Main(argc, argv); }
