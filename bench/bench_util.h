// Measurement helpers shared by the benchmark programs under bench/.
#pragma once

#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvatlas::bench {

// SplitMix64's finalizer: distinct, well-spread 64-bit keys from a counter.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The value after `name` on the command line as a number, or `fallback`.
inline uint64_t Arg(int argc, char** argv, const char* name, uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

// The value after `name` on the command line, or "".
inline std::string StrArg(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return {};
}

// Chain c's tokens: c * 1'000'000 + i, as the binding benchmarks' other halves
// (scripts/bench/python_compare.py, client/go/bench/gocompare) build them.
inline std::vector<uint32_t> ChainTokens(uint64_t chain, uint32_t blocks, uint32_t block_size) {
  std::vector<uint32_t> tokens(size_t(blocks) * block_size);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(chain * 1'000'000 + i);
  return tokens;
}

// The p-quantile (0..1; 1 = max) of `values` by nearest rank; 0 when empty.
inline double Pct(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(p * static_cast<double>(values.size()));
  return values[std::min(values.size() - 1, rank)];
}

// CPU seconds (user + system, all threads) of process `pid`, from /proc/PID/stat; 0 when
// it cannot be read.
inline double CpuSeconds(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; rest >> field && i <= 15; ++i) {
    if (i == 14 || i == 15) ticks += std::strtod(field.c_str(), nullptr);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Waits (up to 30 s) until process `pid` is idle — under 5% of a core over 250 ms — so that
// the phases after a bulk ingest do not compete with the background work it left behind
// (a kvatlas server's RocksDB flushes and compactions took ~30% of its CPU samples during
// the first lookup phase when measured without this wait). Returns the seconds waited.
inline double WaitForQuietServer(long pid) {
  const auto start = std::chrono::steady_clock::now();
  double cpu = CpuSeconds(pid);
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double now = CpuSeconds(pid);
    const bool quiet = now - cpu < 0.0125;
    cpu = now;
    if (quiet) break;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Resident set size of process `pid` in bytes, from /proc/PID/statm; 0 when unreadable.
inline uint64_t RssBytesOf(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/statm");
  uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// The request rates of a `--rates R1,R2,...` argument. Throws std::invalid_argument on a
// rate that is not a number, as std::stoull does.
inline std::vector<uint64_t> ParseRates(const std::string& list) {
  std::vector<uint64_t> rates;
  std::stringstream ss(list);
  for (std::string r; std::getline(ss, r, ',');) rates.push_back(std::stoull(r));
  return rates;
}

// Sleeps until `t` (steady_clock is CLOCK_MONOTONIC on Linux) without spinning: a spinning
// load generator takes a core from the server on a small machine.
inline void SleepUntil(std::chrono::steady_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// Open loop: a sender thread makes call i at `t0 + i / per_second` with `send(i)` (which
// returns a future), whatever the answers do; this thread takes the futures in order and
// hands each to `on_answer(i, future.get(), due_i)`. Returns when all n are answered.
template <typename Send, typename OnAnswer>
void RunOpenLoop(uint64_t n, double per_second, std::chrono::steady_clock::time_point t0, Send send,
                 OnAnswer on_answer) {
  using Future = std::invoke_result_t<Send&, uint64_t>;
  std::vector<std::chrono::steady_clock::time_point> due(n);
  for (uint64_t i = 0; i < n; ++i) {
    due[i] = t0 + std::chrono::nanoseconds(
                      static_cast<int64_t>(1e9 * static_cast<double>(i) / per_second));
  }
  std::vector<Future> futures(n);
  std::atomic<uint64_t> issued{0};
  std::thread sender([&] {
    // The default timer slack (50 us) is as long as the interval at 20k calls/s.
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    for (uint64_t i = 0; i < n; ++i) {
      if (std::chrono::steady_clock::now() < due[i]) SleepUntil(due[i]);
      futures[i] = send(i);
      issued.store(i + 1, std::memory_order_release);
      issued.notify_one();
    }
  });
  for (uint64_t i = 0; i < n; ++i) {
    for (uint64_t seen = issued.load(std::memory_order_acquire); seen <= i;
         seen = issued.load(std::memory_order_acquire)) {
      issued.wait(seen, std::memory_order_acquire);
    }
    on_answer(i, futures[i].get(), due[i]);
  }
  sender.join();
}

}  // namespace kvatlas::bench
