// Measurement helpers shared by the benchmark programs under bench/.
#pragma once

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvatlas::bench {

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

}  // namespace kvatlas::bench
