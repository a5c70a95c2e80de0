// The cost of approximate mode's PredictedTable (docs/routing.md §Approximate mode): what
// applying one prediction (Record of a request's keys) costs on an empty table and on a full
// one (`--entries` predictions kept, the cap), and what expiring them costs per entry, in
// one run. A full table drops new predictions; the point is that it does so without a pass
// over the table. Also the prefix read a route makes per candidate.
//   predicted_table_bench [--entries 1000000] [--keys 64] [--calls 20000]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/internal/predicted_table.h"

namespace kvatlas::bench {
namespace {

using kvatlas::PredictedTable;
using Clock = PredictedTable::Clock;

const ContextKey kContext{"default", "bench", "", 16, ""};

std::vector<BlockKey> KeysOf(uint64_t request, uint64_t keys) {
  std::vector<BlockKey> out(keys);
  for (uint64_t i = 0; i < keys; ++i) out[i] = Mix(request * 1'000'003 + i);
  return out;
}

HolderKey HolderOf(uint64_t request) { return HolderKey{"i" + std::to_string(request % 64), 0}; }

// p50 / p99 in µs of `calls` Records of fresh requests into `table` at `now`.
std::pair<double, double> TimeRecords(PredictedTable* table, uint64_t first_request, uint64_t calls,
                                      uint64_t keys, Clock::time_point now) {
  std::vector<double> us;
  us.reserve(calls);
  for (uint64_t r = first_request; r < first_request + calls; ++r) {
    const std::vector<BlockKey> request = KeysOf(r, keys);
    const auto start = std::chrono::steady_clock::now();
    (void)table->Record(kContext, HolderOf(r), request, now, now + std::chrono::minutes(2), now);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return {Pct(us, 0.5), Pct(us, 0.99)};
}

int Main(int argc, char** argv) {
  const uint64_t entries = Arg(argc, argv, "--entries", 1'000'000);
  const uint64_t keys = Arg(argc, argv, "--keys", 64);
  const uint64_t calls = Arg(argc, argv, "--calls", 20'000);
  const Clock::time_point t0 = Clock::now();

  // The floor: Records into a table with room (the cap never reached).
  PredictedTable roomy(entries * 4);
  const auto [empty_p50, empty_p99] = TimeRecords(&roomy, 1ULL << 40, calls, keys, t0);

  // A full table: `entries` predictions, then Records that find no room.
  PredictedTable full(entries);
  const auto fill_start = std::chrono::steady_clock::now();
  for (uint64_t r = 0; full.stats().entries < entries; ++r) {
    const std::vector<BlockKey> request = KeysOf(r, keys);
    (void)full.Record(kContext, HolderOf(r), request, t0, t0 + std::chrono::minutes(2), t0);
  }
  const double fill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();
  const auto [full_p50, full_p99] = TimeRecords(&full, 1ULL << 41, calls, keys, t0);
  const uint64_t dropped = full.stats().dropped;

  // Reads: a route's prefix read of one candidate, on the full table.
  std::vector<double> read_us;
  for (uint64_t r = 0; r < calls; ++r) {
    const std::vector<BlockKey> request = KeysOf(r % 1000, keys);
    const auto start = std::chrono::steady_clock::now();
    const uint32_t n = full.PrefixOf(kContext, HolderOf(r % 1000), request, t0);
    read_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (n != keys) {
      std::fprintf(stderr, "request %llu: prefix %u, expected %llu\n",
                   static_cast<unsigned long long>(r % 1000), n,
                   static_cast<unsigned long long>(keys));
      return 1;
    }
  }

  // Everything expires: the next Record frees the table from the queue's front.
  const Clock::time_point later = t0 + std::chrono::minutes(3);
  const auto expire_start = std::chrono::steady_clock::now();
  (void)full.Record(kContext, HolderOf(0), KeysOf(0, keys), later, later + std::chrono::minutes(2),
                    later);
  const double expire_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - expire_start).count();
  const uint64_t expired = full.stats().expired;

  std::printf("predicted table, %llu entries (the cap), Records of %llu keys, %llu calls each\n",
              static_cast<unsigned long long>(entries), static_cast<unsigned long long>(keys),
              static_cast<unsigned long long>(calls));
  std::printf("  fill: %.2f s (%.0f ns per entry)\n", fill_s,
              fill_s * 1e9 / static_cast<double>(entries));
  std::printf("  Record, table with room:  p50 %.2f us  p99 %.2f us\n", empty_p50, empty_p99);
  std::printf("  Record, full table:       p50 %.2f us  p99 %.2f us  (%llu keys dropped)\n",
              full_p50, full_p99, static_cast<unsigned long long>(dropped));
  std::printf("  full / with room:         p50 %.2f  p99 %.2f\n", full_p50 / empty_p50,
              full_p99 / empty_p99);
  std::printf("  PrefixOf (one candidate): p50 %.2f us  p99 %.2f us\n", Pct(read_us, 0.5),
              Pct(read_us, 0.99));
  std::printf("  expiry of %llu entries in one Record: %.3f s (%.0f ns per entry)\n",
              static_cast<unsigned long long>(expired), expire_s,
              expire_s * 1e9 / static_cast<double>(expired == 0 ? 1 : expired));
  return 0;
}

}  // namespace
}  // namespace kvatlas::bench

int main(int argc, char** argv) { return kvatlas::bench::Main(argc, argv); }
