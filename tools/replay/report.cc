#include "tools/replay/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

namespace kvatlas::replay {
namespace {

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

double Ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0 : static_cast<double>(part) / static_cast<double>(whole);
}

// The reference policies a run's figures are compared with: the prefix oracle (most reuse,
// load ignored) and bounded-load (most reuse within a load bound).
struct Reference {
  const char* policy;
  const char* table_suffix;  // column names in the table
  const char* json_suffix;   // field names in JSON
};
constexpr Reference kReferences[] = {{"prefix-oracle", "oracle", "oracle"},
                                     {"bounded-load", "bounded", "bounded_load"}};

// A policy's figures as fractions of a reference's in the same run, when it ran.
struct VsReference {
  double hit_ratio = 0, ttft_p50 = 0, ttft_p99 = 0;
};

std::optional<VsReference> Against(const std::vector<PolicyResult>& results,
                                   const Reference& reference, const PolicyResult& r) {
  for (const PolicyResult& ref : results) {
    if (ref.policy != reference.policy) continue;
    const auto fraction = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    return VsReference{fraction(r.hit_ratio, ref.hit_ratio),
                       fraction(r.ttft_p50_ms, ref.ttft_p50_ms),
                       fraction(r.ttft_p99_ms, ref.ttft_p99_ms)};
  }
  return std::nullopt;
}

}  // namespace

std::string FormatTable(const std::vector<PolicyResult>& results) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-14s %8s %9s %7s %7s %7s %9s %11s %11s %11s %11s", "policy",
                "requests", "hit_ratio", "gpu", "cpu", "shared", "imbalance", "ttft_p50_ms",
                "ttft_p99_ms", "lookup_p50", "lookup_p99");
  out += line;
  for (const Reference& ref : kReferences) {
    if (results.empty() || !Against(results, ref, results[0])) continue;
    std::snprintf(line, sizeof(line), "  %10s %10s %10s",
                  ("hit/" + std::string(ref.table_suffix)).c_str(),
                  ("p50/" + std::string(ref.table_suffix)).c_str(),
                  ("p99/" + std::string(ref.table_suffix)).c_str());
    out += line;
  }
  out += "\n";
  for (const PolicyResult& r : results) {
    const std::string p50 = r.has_latency ? Fixed(r.lookup_p50_us, 0) + " us" : "-";
    const std::string p99 = r.has_latency ? Fixed(r.lookup_p99_us, 0) + " us" : "-";
    std::snprintf(line, sizeof(line),
                  "%-14s %8zu %9.3f %7.3f %7.3f %7.3f %9.2f %11.0f %11.0f %11s %11s",
                  r.policy.c_str(), r.requests, r.hit_ratio, Ratio(r.gpu_hits, r.prompt_blocks),
                  Ratio(r.cpu_hits, r.prompt_blocks), Ratio(r.shared_hits, r.prompt_blocks),
                  r.load_imbalance, r.ttft_p50_ms, r.ttft_p99_ms, p50.c_str(), p99.c_str());
    out += line;
    for (const Reference& ref : kReferences) {
      if (const std::optional<VsReference> vs = Against(results, ref, r)) {
        std::snprintf(line, sizeof(line), "  %10.3f %10.2f %10.2f", vs->hit_ratio, vs->ttft_p50,
                      vs->ttft_p99);
        out += line;
      }
    }
    out += "\n";
  }
  return out;
}

std::string FormatCsv(const std::vector<PolicyResult>& results) {
  std::string out =
      "policy,requests,prompt_blocks,hit_blocks,hit_ratio,gpu_hits,cpu_hits,shared_hits,"
      "load_imbalance,ttft_p50_ms,ttft_p99_ms,ttft_mean_ms,lookup_p50_us,lookup_p99_us,"
      "index_mismatches\n";
  for (const PolicyResult& r : results) {
    out += r.policy + "," + std::to_string(r.requests) + "," + std::to_string(r.prompt_blocks) +
           "," + std::to_string(r.hit_blocks) + "," + Fixed(r.hit_ratio, 4) + "," +
           std::to_string(r.gpu_hits) + "," + std::to_string(r.cpu_hits) + "," +
           std::to_string(r.shared_hits) + "," + Fixed(r.load_imbalance, 3) + "," +
           Fixed(r.ttft_p50_ms, 1) + "," + Fixed(r.ttft_p99_ms, 1) + "," +
           Fixed(r.ttft_mean_ms, 1) + "," + (r.has_latency ? Fixed(r.lookup_p50_us, 1) : "") + "," +
           (r.has_latency ? Fixed(r.lookup_p99_us, 1) : "") + "," + std::to_string(r.mismatches) +
           "\n";
  }
  return out;
}

std::string FormatJsonLines(const std::vector<PolicyResult>& results) {
  std::string out;
  for (const PolicyResult& r : results) {
    nlohmann::json doc = {{"policy", r.policy},
                          {"routers", r.routers},
                          {"shared_load", r.shared_load},
                          {"load_reports", r.load_reports},
                          {"requests", r.requests},
                          {"prompt_blocks", r.prompt_blocks},
                          {"hit_blocks", r.hit_blocks},
                          {"hit_ratio", r.hit_ratio},
                          {"gpu_hits", r.gpu_hits},
                          {"cpu_hits", r.cpu_hits},
                          {"shared_hits", r.shared_hits},
                          {"load_imbalance", r.load_imbalance},
                          {"ttft_p50_ms", r.ttft_p50_ms},
                          {"ttft_p99_ms", r.ttft_p99_ms},
                          {"ttft_mean_ms", r.ttft_mean_ms},
                          {"lookup_p50_us", nullptr},
                          {"lookup_p99_us", nullptr},
                          {"index_mismatches", r.mismatches},
                          {"requests_per_instance", r.requests_per_instance}};
    for (const Reference& ref : kReferences) {
      const std::string suffix = std::string("_vs_") + ref.json_suffix;
      const std::optional<VsReference> vs = Against(results, ref, r);
      doc["hit_ratio" + suffix] = vs ? nlohmann::json(vs->hit_ratio) : nlohmann::json();
      doc["ttft_p50" + suffix] = vs ? nlohmann::json(vs->ttft_p50) : nlohmann::json();
      doc["ttft_p99" + suffix] = vs ? nlohmann::json(vs->ttft_p99) : nlohmann::json();
    }
    if (r.has_latency) {
      doc["lookup_p50_us"] = r.lookup_p50_us;
      doc["lookup_p99_us"] = r.lookup_p99_us;
    }
    out += doc.dump() + "\n";
  }
  return out;
}

}  // namespace kvatlas::replay
