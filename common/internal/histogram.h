// Histogram: a lock-free latency histogram for Prometheus (cumulative buckets, count, sum),
// recorded from any thread and read at scrape time. Each counter is exact; a read taken
// during an Observe may see the bucket without the count (scrapes tolerate that).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>

namespace kvatlas {

// Upper bounds, in seconds, of the latency buckets every kvatlas histogram uses: 100 µs (an
// in-memory lookup) to 10 s (a group commit behind a slow disk, a large snapshot).
inline constexpr double kLatencyBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                             0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                             1,      2.5,     5,      10};
inline constexpr size_t kNumLatencyBuckets = std::size(kLatencyBuckets);

// What a scrape reads: per-bucket counts (not cumulative; the renderer accumulates), the
// observations past the last bound count only in `count`.
struct HistogramData {
  std::array<uint64_t, kNumLatencyBuckets> buckets{};
  uint64_t count = 0;
  double sum = 0;  // seconds
};

class Histogram {
 public:
  void Observe(double seconds) {
    const double* bucket =
        std::lower_bound(std::begin(kLatencyBuckets), std::end(kLatencyBuckets), seconds);
    if (bucket != std::end(kLatencyBuckets)) {
      buckets_[bucket - std::begin(kLatencyBuckets)].fetch_add(1, std::memory_order_relaxed);
    }
    count_.fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<uint64_t>(std::max(0.0, seconds) * 1e9),
                      std::memory_order_relaxed);
  }

  [[nodiscard]] HistogramData Read() const {
    HistogramData data;
    for (size_t i = 0; i < kNumLatencyBuckets; ++i) {
      data.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    }
    data.count = count_.load(std::memory_order_relaxed);
    data.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
    return data;
  }

 private:
  std::array<std::atomic<uint64_t>, kNumLatencyBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace kvatlas
