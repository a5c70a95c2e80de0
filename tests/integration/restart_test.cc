// Durability of the real server: a clean restart answers exactly as before, and a crash
// (SIGKILL) loses no acknowledged write.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

constexpr uint32_t kBlockSize = 4;

// Holder `i` stores a chain of `blocks` blocks of its own prompt (tokens from i * 1000).
json StoreChain(int i, uint32_t blocks, const std::string& medium) {
  return json{{"event_type", "stored"},
              {"model_name", "m"},
              {"tenant_id", i % 2 == 0 ? "even" : "odd"},
              {"block_size", kBlockSize},
              {"backend_id", "engine-" + std::to_string(i)},
              {"dp_rank", i % 3},
              {"medium", medium},
              {"token_ids", Tokens(static_cast<uint32_t>(i) * 1000, blocks * kBlockSize)}};
}

json LookupChain(int i, uint32_t blocks) {
  return json{{"model_name", "m"},
              {"tenant_id", i % 2 == 0 ? "even" : "odd"},
              {"block_size", kBlockSize},
              {"token_ids", Tokens(static_cast<uint32_t>(i) * 1000, blocks * kBlockSize)}};
}

TEST_SUITE("Integration.Restart") {
  TEST_CASE("Restart: after SIGTERM the server answers exactly as before") {
    TempDir dir;
    const auto data = dir.path() / "data";
    std::vector<json> lookups;
    json before;
    {
      ServerProcess server(data);
      auto client = server.Client();
      for (int i = 0; i < 6; ++i) {
        json events = json::array({StoreChain(i, 3 + i, "gpu"), StoreChain(i, 2, "cpu")});
        json shared = StoreChain(i, 4, "shared");
        shared["backend_id"] = "pool";
        shared["location"] = "s3://bucket/" + std::to_string(i);
        events.push_back(shared);
        Ingest(client, events);
        lookups.push_back(LookupChain(i, 12));
      }
      json removed = StoreChain(1, 0, "gpu");
      removed["event_type"] = "removed";
      removed["seq_hashes"] = {ReferenceSeqHashes(Tokens(1000, 12), kBlockSize)[2]};
      Ingest(client, json::array({removed}));
      before = ObservableState(client, lookups);
      REQUIRE(before["index"]["entries"].get<uint64_t>() > 0);
      CHECK(server.Terminate() == 0);
      CHECK_FALSE(std::filesystem::exists(data / "http.addr"));
    }
    ServerProcess again(data);
    auto client = again.Client();
    CHECK(ObservableState(client, lookups) == before);
  }

  TEST_CASE("Restart: after SIGKILL every acknowledged write is still there") {
    TempDir dir;
    const auto data = dir.path() / "data";
    // Writes keep arriving while the server is killed: every one that was answered 200
    // must survive, whatever happened to the ones in flight.
    std::vector<int> acknowledged;
    uint64_t last_revision = 0;
    {
      ServerProcess server(data, {"--http-threads", "4"});
      std::atomic<int> next{0};
      std::mutex mu;
      const auto writer = [&] {
        auto client = server.Client();
        client.set_read_timeout(std::chrono::seconds(5));
        while (true) {
          const int i = next.fetch_add(1);
          const auto result = client.Post(
              "/v1/events", json::array({StoreChain(i, 2, "gpu")}).dump(), "application/json");
          if (!result || result->status != 200) return;  // the server is gone
          std::lock_guard lock(mu);
          acknowledged.push_back(i);
          last_revision =
              std::max(last_revision, json::parse(result->body)["revision"].get<uint64_t>());
        }
      };
      std::thread w1(writer), w2(writer);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < deadline) {
        {
          std::lock_guard lock(mu);
          if (acknowledged.size() >= 200) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      server.Kill();
      w1.join();
      w2.join();
    }
    REQUIRE(acknowledged.size() >= 200);
    ServerProcess again(data);
    auto client = again.Client();
    CHECK(Get(client, "/v1/stats").body["revision"].get<uint64_t>() >= last_revision);
    for (int i : acknowledged) {
      CAPTURE(i);
      const json answer = Post(client, "/v1/lookup", LookupChain(i, 2)).body;
      REQUIRE(answer["instances"].size() == 1);
      CHECK(answer["instances"][0]["instance_id"] == "engine-" + std::to_string(i));
      CHECK(answer["instances"][0]["longest_matched"]["blocks"] == 2);
    }
  }
}

}  // namespace
}  // namespace kvatlas::testing
