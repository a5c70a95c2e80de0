// Every malformed request gets a 4xx with {code, message} naming the problem, and changes
// nothing: the state (revision, index counts, a lookup answer) is compared after each case.
#include <doctest/doctest.h>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

json Stored() {
  return json{{"event_type", "stored"},   {"model_name", "m"}, {"block_size", 2},
              {"backend_id", "engine"},   {"medium", "gpu"},   {"seq_hashes", {1, 2}},
              {"token_ids", {5, 6, 7, 8}}};
}

// `Stored()` with `key` set to `value` (or removed when value is discarded).
std::string StoredWith(const std::string& key, const json& value) {
  json event = Stored();
  if (value.is_discarded()) {
    event.erase(key);
  } else {
    event[key] = value;
  }
  return json::array({event}).dump();
}

const json kRemove = json(json::value_t::discarded);

struct BadCase {
  std::string name;
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::string code;
  std::string message;  // a substring the message must contain
  std::string content_type = "application/json";
};

std::vector<BadCase> Cases() {
  json removed = Stored();
  removed["event_type"] = "removed";
  removed.erase("seq_hashes");
  const json lookup = {{"model_name", "m"}, {"block_size", 2}, {"token_ids", {1, 2}}};
  json both = lookup;
  both["seq_hashes"] = {1};
  json no_size = lookup;
  no_size.erase("block_size");
  json nine_blocks = Stored();
  nine_blocks.erase("token_ids");
  nine_blocks["seq_hashes"] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  json six_events = json::array();
  for (int i = 0; i < 6; ++i) six_events.push_back(Stored());
  return {
      {"invalid JSON", "POST", "/v1/events", R"([{"event_type": )", 400, "invalid_argument",
       "body: invalid JSON"},
      {"empty body", "POST", "/v1/events", "", 400, "invalid_argument", "body: invalid JSON"},
      {"body of the wrong type", "POST", "/v1/events", "42", 400, "invalid_argument",
       "body: must be a JSON array of events"},
      {"events not an array", "POST", "/v1/events", R"({"events": {}})", 400, "invalid_argument",
       "events: must be an array of events"},
      {"event not an object", "POST", "/v1/events", "[1]", 400, "invalid_argument",
       "events[0]: must be a JSON object"},
      {"unknown event_type", "POST", "/v1/events", StoredWith("event_type", "evicted"), 400,
       "invalid_argument", "events[0].event_type: unknown event type \"evicted\""},
      {"missing event_type", "POST", "/v1/events", StoredWith("event_type", kRemove), 400,
       "invalid_argument", "events[0].event_type: is required"},
      {"missing model_name", "POST", "/v1/events", StoredWith("model_name", kRemove), 400,
       "invalid_argument", "events[0].model_name: is required"},
      {"zero block_size", "POST", "/v1/events", StoredWith("block_size", 0), 400,
       "invalid_argument", "events[0].block_size: must be a positive integer"},
      {"negative block_size", "POST", "/v1/events", StoredWith("block_size", -2), 400,
       "invalid_argument", "events[0].block_size: must be a positive integer"},
      {"block_size as text", "POST", "/v1/events", StoredWith("block_size", "2"), 400,
       "invalid_argument", "events[0].block_size: must be a positive integer"},
      {"missing backend_id", "POST", "/v1/events", StoredWith("backend_id", kRemove), 400,
       "invalid_argument", "events[0].backend_id: is required"},
      {"negative dp_rank", "POST", "/v1/events", StoredWith("dp_rank", -1), 400, "invalid_argument",
       "events[0].dp_rank:"},
      {"numeric medium", "POST", "/v1/events", StoredWith("medium", 3), 400, "invalid_argument",
       "events[0].medium: must be a string"},
      {"seq_hashes not an array", "POST", "/v1/events", StoredWith("seq_hashes", 5), 400,
       "invalid_argument", "events[0].seq_hashes: must be an array of hashes"},
      {"fractional hash", "POST", "/v1/events", StoredWith("seq_hashes", {1, 2.5}), 400,
       "invalid_argument", "events[0].seq_hashes[1]: must be a 64-bit hash"},
      {"garbage hash text", "POST", "/v1/events", StoredWith("seq_hashes", {"0xZZ", 1}), 400,
       "invalid_argument", "events[0].seq_hashes[0]: must be a 64-bit hash"},
      {"bad parent_hash", "POST", "/v1/events", StoredWith("parent_hash", "abc"), 400,
       "invalid_argument", "events[0].parent_hash: must be a 64-bit hash"},
      {"token over u32", "POST", "/v1/events", StoredWith("token_ids", {5, 6, 7, 4294967296ull}),
       400, "invalid_argument", "events[0].token_ids[3]:"},
      {"negative token", "POST", "/v1/events", StoredWith("token_ids", {5, -6, 7, 8}), 400,
       "invalid_argument", "events[0].token_ids[1]:"},
      {"tokens not covering the hashes", "POST", "/v1/events", StoredWith("token_ids", {5, 6, 7}),
       400, "invalid_argument", "events[0].token_ids: 3 tokens do not cover exactly the 2 blocks"},
      {"stored without hashes or tokens", "POST", "/v1/events",
       json::array({json{{"event_type", "stored"},
                         {"model_name", "m"},
                         {"block_size", 2},
                         {"backend_id", "e"}}})
           .dump(),
       400, "invalid_argument", "events[0].seq_hashes: a stored event needs"},
      {"removed without seq_hashes", "POST", "/v1/events", json::array({removed}).dump(), 400,
       "invalid_argument", "events[0].seq_hashes: a removed event needs hashes"},
      {"location count mismatch", "POST", "/v1/events", StoredWith("location", {"a", "b", "c"}),
       400, "invalid_argument", "events[0].location: has 3 entries"},
      {"text timestamp", "POST", "/v1/events", StoredWith("timestamp", "now"), 400,
       "invalid_argument", "events[0].timestamp: must be a number"},
      {"one bad event rejects the batch", "POST", "/v1/events",
       json::array({Stored(), Stored(), json::parse(StoredWith("block_size", 0))[0]}).dump(), 400,
       "invalid_argument", "events[2].block_size"},
      {"too many events", "POST", "/v1/events", six_events.dump(), 413, "payload_too_large",
       "max_events_per_batch"},
      {"too many blocks in an event", "POST", "/v1/events", json::array({nine_blocks}).dump(), 413,
       "payload_too_large", "max_blocks_per_event"},
      {"oversized body", "POST", "/v1/events", std::string(70'000, ' '), 413, "payload_too_large",
       "max_body_bytes"},
      {"wrong content type", "POST", "/v1/events", json::array({Stored()}).dump(), 415,
       "unsupported_media_type", "Content-Type must be application/json", "text/plain"},
      {"unknown route", "GET", "/v2/nothing", "", 404, "not_found", "/v2/nothing"},
      {"wrong method on events", "GET", "/v1/events", "", 405, "method_not_allowed",
       "allowed: POST"},
      {"wrong method on stats", "DELETE", "/v1/stats", "", 405, "method_not_allowed",
       "allowed: GET"},
      {"lookup without block_size", "POST", "/v1/lookup", no_size.dump(), 400, "invalid_argument",
       "block_size: is required"},
      {"lookup with tokens and hashes", "POST", "/v1/lookup", both.dump(), 400, "invalid_argument",
       "not both"},
      {"lookup body not an object", "POST", "/v1/lookup", "[1,2]", 400, "invalid_argument",
       "body: must be a JSON object"},
      {"query without model", "POST", "/query", R"({"block_size": 2, "token_ids": [1]})", 400,
       "invalid_argument", "model: is required"},
      {"query with text tokens", "POST", "/query",
       R"({"model": "m", "block_size": 2, "token_ids": "1 2"})", 400, "invalid_argument",
       "token_ids: must be an array of token ids"},
      {"query_by_hash without hashes", "POST", "/query_by_hash",
       R"({"model": "m", "block_size": 2})", 400, "invalid_argument", "seq_hashes: is required"},
      {"block key not a number", "GET", "/v1/blocks/xyz", "", 400, "invalid_argument",
       "key: \"xyz\" is not a decimal or 0x-hex 64-bit hash"},
      {"block context without block_size", "GET", "/v1/blocks/12?model_name=m", "", 400,
       "invalid_argument", "block_size: must be a positive integer"},
  };
}

// What must not change: the revision, the index counts and a lookup answer.
json Snapshot(httplib::Client& client) {
  const json stats = Get(client, "/v1/stats").body;
  const json lookup = {{"model_name", "m"}, {"block_size", 2}, {"seq_hashes", {1, 2, 3}}};
  return json{{"revision", stats["revision"]},
              {"index", stats["index"]},
              {"lookup", Post(client, "/v1/lookup", lookup).body}};
}

TEST_SUITE("Integration.BadInput") {
  TEST_CASE("BadInput: every malformed request is a JSON 4xx and changes nothing") {
    TempDir dir;
    ServerProcess server(dir.path() / "data",
                         {"--max-events-per-batch", "5", "--max-blocks-per-event", "8",
                          "--max-body-bytes", "65536"});
    auto client = server.Client();
    Ingest(client, json::array({Stored()}));
    const json before = Snapshot(client);
    REQUIRE(before["index"]["entries"] == 2);

    for (const BadCase& c : Cases()) {
      CAPTURE(c.name);
      httplib::Result result = c.method == "POST"
                                   ? client.Post(c.path.c_str(), c.body, c.content_type.c_str())
                               : c.method == "GET" ? client.Get(c.path.c_str())
                                                   : client.Delete(c.path.c_str());
      REQUIRE(result);
      CHECK(result->status == c.status);
      CHECK(result->get_header_value("Content-Type") == "application/json");
      const json body = json::parse(result->body, nullptr, false);
      REQUIRE_FALSE(body.is_discarded());
      CHECK(body.size() == 2);
      CHECK(body["code"] == c.code);
      CHECK(body["message"].get<std::string>().find(c.message) != std::string::npos);
      CHECK(Snapshot(client) == before);
    }
  }

  TEST_CASE("BadInput: the limits on blocks per event count token_ids blocks too") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--max-blocks-per-event", "8"});
    auto client = server.Client();
    json event = Stored();
    event.erase("seq_hashes");
    event["token_ids"] = Tokens(0, 18);  // 9 blocks of 2
    const Answer answer = Post(client, "/v1/events", json::array({event}));
    CHECK(answer.status == 413);
    CHECK(answer.body["code"] == "payload_too_large");
    CHECK(answer.body["message"] ==
          "events[0]: the event names 9 blocks; the limit is 8 (max_blocks_per_event)");
    CHECK(Get(client, "/v1/stats").body["revision"] == 0);
  }
}

}  // namespace
}  // namespace kvatlas::testing
