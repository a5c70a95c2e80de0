// Output of the replay: a text table, CSV and JSON lines, one row / object per policy.
#pragma once

#include <string>
#include <vector>

#include "tools/replay/simulator.h"

namespace kvatlas::replay {

[[nodiscard]] std::string FormatTable(const std::vector<PolicyResult>& results);
[[nodiscard]] std::string FormatCsv(const std::vector<PolicyResult>& results);
// One JSON object per line and policy: policy, requests, hit_ratio, gpu_hits, cpu_hits,
// shared_hits, load_imbalance, ttft_p50_ms, ttft_p99_ms, ttft_mean_ms, lookup_p50_us and
// lookup_p99_us (null when the policy did not call kvatlas), index_mismatches,
// requests_per_instance, hit_ratio_vs_oracle, ttft_p50_vs_oracle, ttft_p99_vs_oracle
// (fractions of the prefix-oracle's figures in the same run; null without it) and the same
// three _vs_bounded_load (fractions of bounded-load's). The table has those columns too
// (hit/oracle ..., hit/bounded ...) for each reference that ran.
[[nodiscard]] std::string FormatJsonLines(const std::vector<PolicyResult>& results);

}  // namespace kvatlas::replay
