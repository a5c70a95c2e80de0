// Ingest and query over REST against the real server binary.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

constexpr uint32_t kBlockSize = 16;

json Event(const std::string& type, const std::string& backend, const std::string& medium,
           uint32_t dp_rank = 0) {
  return json{{"event_type", type},    {"model_name", "llama"}, {"block_size", kBlockSize},
              {"backend_id", backend}, {"medium", medium},      {"dp_rank", dp_rank}};
}

json Slice(const std::vector<uint64_t>& v, size_t from, size_t to) {
  return json(std::vector<uint64_t>(v.begin() + from, v.begin() + to));
}

// Four blocks of a prompt spread over instances, ranks, tiers and a shared pool:
//   engine-a rank 0: blocks 0-1 in GPU (sent as token_ids), 2-3 in CPU (as seq_hashes);
//   engine-a rank 1: block 0 in GPU;  engine-b: blocks 0-2 on DISK;
//   pool (shared storage): blocks 0-3 with a location each.
struct Scenario {
  std::vector<uint32_t> prompt = Tokens(1000, 4 * kBlockSize);
  std::vector<uint64_t> keys = ReferenceSeqHashes(prompt, kBlockSize);

  json Events() const {
    json gpu = Event("stored", "engine-a", "gpu");
    gpu["token_ids"] = std::vector<uint32_t>(prompt.begin(), prompt.begin() + 2 * kBlockSize);
    gpu["parent_hash"] = nullptr;
    gpu["base_block_idx"] = 0;
    json cpu = Event("stored", "engine-a", "cpu");
    cpu["seq_hashes"] = Slice(keys, 2, 4);
    cpu["parent_hash"] = keys[1];
    cpu["base_block_idx"] = 2;
    json rank1 = Event("stored", "engine-a", "GPU", 1);
    rank1["seq_hashes"] = Slice(keys, 0, 1);
    json disk = Event("stored", "engine-b", "disk");
    disk["seq_hashes"] = Slice(keys, 0, 3);
    json pool = Event("stored", "pool", "shared");
    pool["seq_hashes"] = Slice(keys, 0, 4);
    pool["location"] = {"nvme://pool/0", "nvme://pool/1", "nvme://pool/2", "nvme://pool/3"};
    return json{{"events", {gpu, cpu, rank1, disk, pool}}};
  }

  json Lookup() const {
    std::vector<uint32_t> tokens = prompt;
    tokens.insert(tokens.end(), {1, 2, 3, 4, 5});  // a partial block never counts
    return json{{"model_name", "llama"}, {"block_size", kBlockSize}, {"token_ids", tokens}};
  }
};

// A fresh server holding the Scenario's blocks.
struct ScenarioServer {
  explicit ScenarioServer(std::vector<std::string> args = {})
      : server(dir.path() / "data", std::move(args)),
        client(server.Client()),
        ack(Ingest(client, s.Events())) {}

  TempDir dir;
  ServerProcess server;
  httplib::Client client;
  const Scenario s;
  const json ack;
};

TEST_SUITE("Integration.Rest") {
  TEST_CASE("REST: ingested blocks are found per instance, rank, tier and shared backend") {
    ScenarioServer f;
    auto& client = f.client;
    const Scenario& s = f.s;
    const json& ack = f.ack;
    CHECK(ack["events"] == 5);
    CHECK(ack["blocks"] == 2 + 2 + 1 + 3 + 4);
    CHECK(ack["revision"].get<uint64_t>() >= 1);

    // By tokens: the server's own hashing must agree with the reference hashes that the
    // CPU, DISK and shared blocks were stored under.
    const Answer v1 = Post(client, "/v1/lookup", s.Lookup());
    REQUIRE(v1.status == 200);
    const json& a = v1.body;
    CHECK(a["revision"] == ack["revision"]);
    CHECK(a["blocks_queried"] == 4);
    CHECK(a["blocks_found"] == 4);
    REQUIRE(a["instances"].size() == 2);
    const json& ea = a["instances"][0];
    CHECK(ea["instance_id"] == "engine-a");
    CHECK(ea["longest_matched"] == json{{"blocks", 4}, {"tokens", 64}});
    CHECK(ea["tiers"] == json{{"GPU", 2}, {"CPU", 4}, {"DISK", 4}});
    CHECK(ea["media"] == json{{"GPU", 2}, {"CPU", 0}, {"DISK", 0}});  // block 0 is not on CPU
    CHECK(ea["dp_ranks"] ==
          json::parse(R"([{"dp_rank": 0, "longest_matched": {"blocks": 4, "tokens": 64},
                           "tiers": {"GPU": 2, "CPU": 4, "DISK": 4},
                           "media": {"GPU": 2, "CPU": 0, "DISK": 0}},
                          {"dp_rank": 1, "longest_matched": {"blocks": 1, "tokens": 16},
                           "tiers": {"GPU": 1, "CPU": 1, "DISK": 1},
                           "media": {"GPU": 1, "CPU": 0, "DISK": 0}}])"));
    const json& eb = a["instances"][1];
    CHECK(eb["instance_id"] == "engine-b");
    CHECK(eb["tiers"] == json{{"GPU", 0}, {"CPU", 0}, {"DISK", 3}});
    CHECK(eb["media"] == json{{"GPU", 0}, {"CPU", 0}, {"DISK", 3}});
    REQUIRE(a["shared"].size() == 1);
    CHECK(a["shared"][0]["backend_id"] == "pool");
    CHECK(a["shared"][0]["matched"] == json{{"blocks", 4}, {"tokens", 64}});
    CHECK(a["shared"][0]["locations"] ==
          json{"nvme://pool/0", "nvme://pool/1", "nvme://pool/2", "nvme://pool/3"});

    // By hashes, written as hex strings: the same answer.
    json by_hash = s.Lookup();
    by_hash.erase("token_ids");
    for (uint64_t key : s.keys) by_hash["seq_hashes"].push_back(Hex(key));
    const Answer v1_hash = Post(client, "/v1/lookup", by_hash);
    REQUIRE(v1_hash.status == 200);
    CHECK(v1_hash.body["instances"] == a["instances"]);
    CHECK(v1_hash.body["shared"] == a["shared"]);
  }

  TEST_CASE("REST: the Conductor /query and /query_by_hash answer in tokens, per tenant") {
    ScenarioServer f;
    auto& client = f.client;
    const Scenario& s = f.s;

    const json query = {{"model", "llama"}, {"lora_name", nullptr}, {"lora_id", 7},
                        {"block_size", 16}, {"cache_salt", ""},     {"token_ids", s.prompt}};
    const json expected = json::parse(R"({"default": {
        "engine-a": {"longest_matched": 64, "GPU": 32, "CPU": 0, "DISK": 0,
                     "DP": {"0": 64, "1": 16}},
        "engine-b": {"longest_matched": 48, "GPU": 0, "CPU": 0, "DISK": 48,
                     "DP": {"0": 48}}}})");
    const Answer all = Post(client, "/query", query);
    REQUIRE(all.status == 200);
    CHECK(all.body == expected);

    json one = query;
    one["instance_id"] = "engine-b";
    CHECK(Post(client, "/query", one).body ==
          json{{"default", {{"engine-b", expected["default"]["engine-b"]}}}});

    json by_hash = query;
    by_hash.erase("token_ids");
    by_hash["seq_hashes"] = s.keys;
    CHECK(Post(client, "/query_by_hash", by_hash).body == expected);
    by_hash.erase("seq_hashes");
    by_hash["block_hash"] = s.keys;  // the older drafts' name
    CHECK(Post(client, "/query_by_hash", by_hash).body == expected);

    // Another tenant, or another salt, is another namespace: nothing matches there.
    json other = query;
    other["tenant_id"] = "acme";
    CHECK(Post(client, "/query", other).body == json::parse(R"({"acme": {}})"));
    other = query;
    other["cache_salt"] = "w8a8";
    CHECK(Post(client, "/query", other).body == json::parse(R"({"default": {}})"));
  }

  TEST_CASE("REST: a lookup in a context nobody wrote to answers no matches") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    auto client = server.Client();
    const Answer answer =
        Post(client, "/v1/lookup",
             json{{"model_name", "never-seen"}, {"block_size", 16}, {"token_ids", Tokens(0, 64)}});
    CHECK(answer.status == 200);
    CHECK(answer.body["blocks_found"] == 0);
    CHECK(answer.body["instances"].empty());
    CHECK(answer.body["shared"].empty());
  }

  TEST_CASE("REST: lookups walk at most max_lookup_blocks blocks") {
    ScenarioServer f({"--max-lookup-blocks", "2"});
    auto& client = f.client;
    const Scenario& s = f.s;
    json by_hash = s.Lookup();
    by_hash.erase("token_ids");
    by_hash["seq_hashes"] = s.keys;
    for (const json& lookup : {s.Lookup(), by_hash}) {
      const json answer = Post(client, "/v1/lookup", lookup).body;
      CHECK(answer["blocks_queried"] == 2);
      CHECK(answer["instances"][0]["longest_matched"]["blocks"] == 2);
      CHECK(answer["shared"][0]["locations"].size() == 2);
    }
  }

  TEST_CASE("REST: blocks, holders, contexts and stats describe the stored state") {
    ScenarioServer f;
    auto& client = f.client;
    const Scenario& s = f.s;

    const Answer block = Get(client, "/v1/blocks/" + Hex(s.keys[3]));
    REQUIRE(block.status == 200);
    CHECK(block.body["key"] == s.keys[3]);
    REQUIRE(block.body["copies"].size() == 2);
    for (const json& copy : block.body["copies"]) {
      CHECK(copy["depth"] == 3);
      CHECK(copy["context"]["model_name"] == "llama");
      if (copy["tier"] == "SHARED") {
        CHECK(copy["holder_id"] == "pool");
        CHECK(copy["location"] == "nvme://pool/3");
      } else {
        CHECK(copy["tier"] == "CPU");
        CHECK(copy["holder_id"] == "engine-a");
      }
    }
    const std::string decimal = std::to_string(s.keys[3]);
    CHECK(Get(client, "/v1/blocks/" + decimal + "?model_name=llama&block_size=16")
              .body["copies"]
              .size() == 2);
    CHECK(Get(client, "/v1/blocks/" + decimal + "?model_name=other&block_size=16")
              .body["copies"]
              .empty());

    const json holders = Get(client, "/v1/holders").body["holders"];
    CHECK(holders.size() == 4);
    const json contexts = Get(client, "/v1/contexts").body["contexts"];
    REQUIRE(contexts.size() == 1);
    CHECK(contexts[0]["model_name"] == "llama");
    CHECK(contexts[0]["tenant_id"] == "default");
    CHECK(contexts[0]["blocks"] == 4);

    const json stats = Get(client, "/v1/stats").body;
    CHECK(stats["index"]["entries"] == 12);
    CHECK(stats["index"]["blocks"] == 4);
    CHECK(stats["index"]["holders"] == 4);
    CHECK(stats["revision"].get<uint64_t>() >= 1);
    CHECK(stats["uptime_seconds"].get<double>() >= 0);
    CHECK(stats["storage"]["approximate_bytes"].is_number_unsigned());
    // The server's allocator is the one it was built with (docs/operations.md §Sizing).
    CHECK(stats["heap"]["allocator"] == (KVATLAS_SERVER_JEMALLOC ? "jemalloc" : "glibc"));
    // Under AddressSanitizer malloc is the sanitizer's: glibc's figures stay at 0.
    CHECK(stats["heap"]["in_use_bytes"].is_number_unsigned());
    if (KVATLAS_SERVER_JEMALLOC) CHECK(stats["heap"]["in_use_bytes"].get<uint64_t>() > 0);
  }

  TEST_CASE("REST: removed and cleared events, including removal by engine alias") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    auto client = server.Client();
    const std::vector<uint32_t> prompt = Tokens(7, 4 * kBlockSize);
    const json lookup = {
        {"model_name", "llama"}, {"block_size", kBlockSize}, {"token_ids", prompt}};
    const auto tiers = [&] {
      const json instances = Post(client, "/v1/lookup", lookup).body["instances"];
      return instances.empty() ? json() : instances[0]["tiers"];
    };

    // An engine with non-standard (here: SGLang-style negative) hashes sends token_ids
    // with its own hashes; removals then name its hashes.
    json gpu = Event("stored", "engine-a", "gpu");
    gpu["token_ids"] = prompt;
    gpu["seq_hashes"] = {-11, -12, -13, -14};
    json cpu = Event("stored", "engine-a", "cpu");
    cpu["seq_hashes"] = ReferenceSeqHashes(prompt, kBlockSize);
    Ingest(client, json::array({gpu, cpu}));
    CHECK(tiers() == json{{"GPU", 4}, {"CPU", 4}, {"DISK", 4}});

    json removed = Event("removed", "engine-a", "gpu");
    removed["seq_hashes"] = {"-13"};
    Ingest(client, json::array({removed}));
    CHECK(tiers() == json{{"GPU", 2}, {"CPU", 4}, {"DISK", 4}});

    Ingest(client, json::array({Event("cleared", "engine-a", "cpu")}));
    CHECK(tiers() == json{{"GPU", 2}, {"CPU", 2}, {"DISK", 2}});

    json all_tiers = Event("cleared", "engine-a", "gpu");
    all_tiers.erase("medium");
    Ingest(client, json::array({all_tiers}));
    CHECK(tiers().is_null());
    CHECK(Get(client, "/v1/stats").body["index"]["entries"] == 0);
  }

  TEST_CASE("REST: health, readiness and Prometheus metrics") {
    ScenarioServer f;
    auto& client = f.client;
    CHECK(Get(client, "/healthz").body == json{{"status", "ok"}});
    const Answer ready = Get(client, "/readyz");
    CHECK(ready.status == 200);
    CHECK(ready.body["status"] == "ready");
    // One write so far; revisions are raft log indexes, and index 1 is the bootstrap
    // configuration.
    CHECK(ready.body["revision"] == 2);
    (void)Post(client, "/v1/lookup", f.s.Lookup());
    json odd = Event("stored", "engine-z", "cxl_memory");
    odd["seq_hashes"] = {1};
    Ingest(client, json::array({odd}));

    const auto metrics = client.Get("/metrics");
    REQUIRE(metrics);
    CHECK(metrics->status == 200);
    CHECK(metrics->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4"));
    // A request is counted just after its answer is written: scrape until the last
    // ingest shows (or the deadline passes and the checks below report what is missing).
    std::string text = metrics->body;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (text.find("route=\"/v1/events\",code=\"200\"} 2") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      text = Get(client, "/metrics").raw;
    }
    for (const char* line :
         {"kvatlas_http_requests_total{route=\"/v1/events\",code=\"200\"} 2",
          "kvatlas_http_request_duration_seconds_count{route=\"/v1/lookup\"} 1",
          "kvatlas_events_applied_total{type=\"stored\"} 6",
          "kvatlas_events_unknown_medium_total{medium=\"cxl_memory\"} 1",
          "kvatlas_index_entries 13", "kvatlas_index_holders 5", "kvatlas_index_contexts 1",
          "kvatlas_store_blocks_total{found=\"all\"} 13",
          "kvatlas_store_blocks_total{found=\"held\"} 0",
          "kvatlas_remove_blocks_total{found=\"unheld\"} 0", "kvatlas_applied_revision 3",
          "kvatlas_applier_queue_depth 0", "# TYPE kvatlas_index_blocks gauge",
          "# TYPE kvatlas_storage_bytes gauge", "# TYPE kvatlas_index_memory_bytes gauge",
          "# TYPE kvatlas_uptime_seconds gauge"}) {
      CAPTURE(line);
      CHECK(text.find(line) != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace kvatlas::testing
