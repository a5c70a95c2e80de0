// The change feed over REST against the real server (docs/api.md §Change feed): list a
// context with GET /v1/snapshot, then watch from its revision with GET /v1/watch (SSE), and
// the two together equal the state after more writes; parameter errors; the stream limit;
// predicted records only for the streams that ask.
#include <doctest/doctest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/sse_reader.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

json Stored(const std::string& backend, const std::vector<uint32_t>& tokens) {
  return {{"event_type", "stored"},
          {"model_name", "llama"},
          {"block_size", 4},
          {"backend_id", backend},
          {"token_ids", tokens}};
}

std::set<std::pair<std::string, uint64_t>> Copies(const json& snapshot) {
  std::set<std::pair<std::string, uint64_t>> out;
  for (const json& c : snapshot["copies"]) {
    out.emplace(c["backend_id"].get<std::string>(), c["key"].get<uint64_t>());
  }
  return out;
}

TEST_SUITE("Integration.Watch") {
  TEST_CASE("Watch: records applied on top of the snapshot reproduce the final snapshot") {
    TempDir dir;
    // One copy per page: the snapshots are streamed in several chunks, the last one empty.
    ServerProcess server(dir.path() / "data", {"--snapshot-page-copies", "1"});
    httplib::Client rest = server.Client();
    Ingest(rest, json::array({Stored("e0", Tokens(1, 8)), Stored("e1", Tokens(1, 4))}));
    Answer first = Get(rest, "/v1/snapshot?model_name=llama&block_size=4");
    REQUIRE(first.status == 200);
    std::set<std::pair<std::string, uint64_t>> state = Copies(first.body);
    CHECK(state.size() == 3);

    std::vector<json> records;
    {
      SseReader reader(server,
                       "/v1/watch?from=" + std::to_string(first.body["revision"].get<uint64_t>()) +
                           "&model_name=llama",
                       [](const std::vector<json>& r) { return r.size() >= 3; });
      Ingest(rest, json::array({Stored("e2", Tokens(100, 4))}));
      json removed = {{"event_type", "removed"},
                      {"model_name", "llama"},
                      {"block_size", 4},
                      {"backend_id", "e1"},
                      {"seq_hashes", ReferenceSeqHashes(Tokens(1, 4), 4)}};
      Ingest(rest, json::array({removed}));
      json other = Stored("e3", Tokens(7, 4));
      other["model_name"] = "other";
      Ingest(rest, json::array({other}));
      json cleared = {{"event_type", "cleared"},
                      {"model_name", "llama"},
                      {"block_size", 4},
                      {"backend_id", "e0"}};
      Ingest(rest, json::array({cleared}));
      reader.Join();
      records = reader.records;
    }
    REQUIRE(records.size() == 3);
    CHECK(records[0]["op"] == "stored");
    CHECK(records[1]["op"] == "removed");
    CHECK(records[2]["op"] == "cleared");
    for (const json& r : records) {
      CHECK(r["model_name"] == "llama");
      for (const json& key : r["keys"]) {
        if (r["op"] == "stored") {
          state.emplace(r["backend_id"].get<std::string>(), key.get<uint64_t>());
        } else {
          state.erase({r["backend_id"].get<std::string>(), key.get<uint64_t>()});
        }
      }
    }
    Answer final_state = Get(rest, "/v1/snapshot?model_name=llama&block_size=4");
    const std::set<std::pair<std::string, uint64_t>> expected = Copies(final_state.body);
    CHECK(state == expected);
    CHECK(expected.size() == 1);  // e2's one block
  }

  TEST_CASE("Watch: bad parameters and revisions are 4xx with a JSON body") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--http-threads", "2"});
    httplib::Client rest = server.Client();
    Answer future = Get(rest, "/v1/watch?from=1000000");
    CHECK(future.status == 400);
    CHECK(future.body["message"].get<std::string>().find("in the future") != std::string::npos);
    CHECK(Get(rest, "/v1/watch?from=abc").status == 400);
    CHECK(Get(rest, "/v1/watch?medium=warp").body["message"] == "medium: unknown medium \"warp\"");
    CHECK(Get(rest, "/v1/snapshot?block_size=4").body["message"] == "model_name: is required");
    CHECK(Get(rest, "/v1/snapshot?model_name=m&block_size=0").status == 400);

    // Two HTTP workers: one watch stream at most, the other worker stays for requests.
    SseReader reader(server, "/v1/watch", [](const std::vector<json>&) { return false; });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    Answer second;
    do {
      std::this_thread::sleep_for(20ms);
      second = Get(rest, "/v1/watch");
    } while (second.status != 429 && std::chrono::steady_clock::now() < deadline);
    CHECK(second.status == 429);
    CHECK(second.body["code"] == "resource_exhausted");
    CHECK(Get(rest, "/v1/stats").status == 200);
    REQUIRE(server.Terminate() == 0);  // an open stream does not hold up shutdown
  }

  TEST_CASE("Watch: predicted records reach only the streams that ask (predicted=1)") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    httplib::Client rest = server.Client();
    const json first = Ingest(rest, json::array({Stored("e0", Tokens(1, 4))}));
    const std::string from = std::to_string(first["revision"].get<uint64_t>());
    const auto until_stored = [](const std::vector<json>& r) {
      return !r.empty() && r.back()["op"] == "stored";
    };
    SseReader plain(server, "/v1/watch?model_name=llama&from=" + from, until_stored);
    SseReader predicted(server, "/v1/watch?model_name=llama&predicted=1&from=" + from,
                        until_stored);
    const auto now_ms =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    // A router's local decision, then (once it is applied) a real event as an end marker.
    const Answer posted = Post(
        rest, "/v1/predictions",
        json{{"model_name", "llama"}, {"block_size", 4}, {"backend_id", "p"}, {"keys", {11, 12}}});
    REQUIRE(posted.status == 200);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (Post(rest, "/v1/route",
                json{{"model_name", "llama"},
                     {"block_size", 4},
                     {"seq_hashes", {11, 12}},
                     {"candidates", {{{"instance_id", "p"}}}}})
                   .body["candidates"][0]["predicted_blocks"] != 2 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    Ingest(rest, json::array({Stored("e1", Tokens(1, 4))}));
    plain.Join();
    predicted.Join();

    REQUIRE(plain.records.size() == 1);
    CHECK(plain.records[0]["backend_id"] == "e1");
    REQUIRE(predicted.records.size() == 2);
    const json& p = predicted.records[0];
    CHECK(p["op"] == "predicted");
    CHECK(p["backend_id"] == "p");
    CHECK(p["dp_rank"] == 0);
    CHECK(p["keys"] == json::array({11, 12}));
    CHECK(p["expires_at_ms"].get<uint64_t>() > now_ms);
    CHECK_FALSE(p.contains("medium"));
    // The same stored record, at the same revision, ends both streams.
    CHECK(predicted.records.back() == plain.records[0]);
  }
}

}  // namespace
}  // namespace kvatlas::testing
