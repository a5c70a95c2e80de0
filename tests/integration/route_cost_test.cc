// POST /v1/route at the edges of its ranges: every cost in an answer is a finite number
// (JSON has no infinity: an overflowed cost would be written as null), and a scale past its
// range is a 400 naming the field.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

json Route(double prefill_scale, double queue_scale, double decode_scale) {
  const uint64_t most = 18446744073709551615ULL;
  return {
      {"model_name", "m"},
      {"block_size", 1},
      {"token_ids", Tokens(1, 64)},
      {"prefill_scale", prefill_scale},
      {"queue_scale", queue_scale},
      {"decode_scale", decode_scale},
      {"temperature", 0.5},
      {"seed", 7},
      {"candidates",
       json::array(
           {{{"instance_id", "a"}, {"queued_prefill_tokens", most}, {"active_decode_blocks", most}},
            {{"instance_id", "b"}}})}};
}

TEST_SUITE("Integration.Route") {
  TEST_CASE("Route: overflowing scales are refused; the largest inputs give finite costs") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    auto client = server.Client();
    for (const auto& [prefill, queue, decode, field] :
         {std::tuple{1e308, 1.0, 1.0, "prefill_scale"}, std::tuple{1.0, 1e308, 1.0, "queue_scale"},
          std::tuple{1.0, -1.0, 1.0, "queue_scale"}, std::tuple{1.0, 1.0, 1e300, "decode_scale"}}) {
      CAPTURE(field);
      const Answer answer = Post(client, "/v1/route", Route(prefill, queue, decode));
      CHECK(answer.status == 400);
      CHECK(answer.body.value("code", "") == "invalid_argument");
      CHECK(answer.body.value("message", "").rfind(std::string(field) + ":", 0) == 0);
    }
    // The largest accepted scales with the largest loads: every number is finite.
    const Answer answer = Post(client, "/v1/route", Route(1e6, 1e6, 1e6));
    REQUIRE(answer.status == 200);
    REQUIRE(answer.body["candidates"].size() == 2);
    for (const json& c : answer.body["candidates"]) {
      for (const char* key : {"cost", "probability", "credit", "new_prefill_blocks",
                              "queued_prefill_blocks", "prefill_cost", "decode_cost"}) {
        CAPTURE(key);
        REQUIRE(c[key].is_number());
        CHECK(std::isfinite(c[key].get<double>()));
      }
    }
    CHECK(answer.body["candidates"][0]["instance_id"] == "b");
  }
}

}  // namespace
}  // namespace kvatlas::testing
