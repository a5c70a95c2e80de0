// What the REST decoders' JSON parser costs: ParseJsonBody (nlohmann's SAX-free parser with
// a per-token callback that refuses depth > 64 and duplicate keys, common/src/json_codec.cc)
// against nlohmann::json::parse without a callback, on the bodies of the hot routes. Both
// run in one process, alternating, so the ratio is what the limits cost. Prints figures;
// asserts nothing.
//   json_body_bench [--seconds S]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kvatlas/common/json_codec.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string Tokens(size_t n, uint64_t seed) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    out += (i ? "," : "") + std::to_string(kvatlas::bench::Mix(seed + i) % 150'000);
  }
  return out + "]";
}

// A Conductor /query of a 128-block (16 tokens each) prompt.
std::string QueryBody() {
  return R"({"model": "llama", "block_size": 16, "token_ids": )" + Tokens(128 * 16, 1) + "}";
}

// A /v1/events batch: 32 stored events of 16 blocks each.
std::string EventsBody() {
  std::string out = "[";
  for (int e = 0; e < 32; ++e) {
    out += (e ? "," : "");
    out += R"({"event_type": "stored", "model_name": "llama", "block_size": 16, )"
           R"("backend_id": "vllm-)" +
           std::to_string(e % 8) + R"(", "medium": "gpu", "token_ids": )" +
           Tokens(256, 1000 + e * 256) + "}";
  }
  return out + "]";
}

// A /v1/route request with 16 candidates.
std::string RouteBody() {
  std::string out = R"({"model_name": "llama", "block_size": 16, "token_ids": )" +
                    Tokens(64 * 16, 7) + R"(, "candidates": [)";
  for (int c = 0; c < 16; ++c) {
    out += (c ? "," : "");
    out += R"({"backend_id": "vllm-)" + std::to_string(c) +
           R"(", "queued_prefill_tokens": 1234, "active_decode_blocks": 99})";
  }
  return out + "]}";
}

struct Timing {
  double ns_per_parse = 0;
  double mb_per_s = 0;
};

template <typename Parse>
Timing Measure(const std::string& body, double seconds, Parse parse) {
  size_t n = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int i = 0; i < 16; ++i) parse(body);
    n += 16;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return {elapsed * 1e9 / static_cast<double>(n),
          static_cast<double>(body.size()) * static_cast<double>(n) / elapsed / 1e6};
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  }
  struct Case {
    const char* name;
    std::string body;
  };
  const std::vector<Case> cases = {{"query (128 blocks)", QueryBody()},
                                   {"events (32 x 16 blocks)", EventsBody()},
                                   {"route (64 blocks, 16 candidates)", RouteBody()}};
  std::printf("%-34s %9s %14s %14s %9s\n", "body", "bytes", "plain ns", "limited ns", "ratio");
  for (const Case& c : cases) {
    nlohmann::json doc;
    if (!kvatlas::ParseJsonBody(c.body, &doc).ok()) {
      std::fprintf(stderr, "%s: does not parse\n", c.name);
      return 1;
    }
    // Three alternating rounds each; the best of each (the machine is shared).
    Timing plain{1e18, 0}, limited{1e18, 0};
    for (int round = 0; round < 3; ++round) {
      const Timing p = Measure(c.body, seconds / 3, [](const std::string& body) {
        nlohmann::json parsed = nlohmann::json::parse(body);
        if (parsed.is_null()) std::abort();
      });
      const Timing l = Measure(c.body, seconds / 3, [](const std::string& body) {
        nlohmann::json parsed;
        if (!kvatlas::ParseJsonBody(body, &parsed).ok()) std::abort();
      });
      if (p.ns_per_parse < plain.ns_per_parse) plain = p;
      if (l.ns_per_parse < limited.ns_per_parse) limited = l;
    }
    std::printf("%-34s %9zu %14.0f %14.0f %8.2fx\n", c.name, c.body.size(), plain.ns_per_parse,
                limited.ns_per_parse, limited.ns_per_parse / plain.ns_per_parse);
  }
  return 0;
}
