#include "kvatlas/common/json_codec.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace kvatlas {
namespace {

using nlohmann::json;

// A valid stored event; tests change one field at a time.
json StoredEvent() {
  return json{{"event_id", 42},
              {"timestamp", 1739145600000},
              {"event_type", "stored"},
              {"model_name", "llama-3.1-8b"},
              {"block_size", 4},
              {"additional_salt", nullptr},
              {"lora_name", nullptr},
              {"tenant_id", "acme"},
              {"backend_id", "worker-0"},
              {"medium", "gpu"},
              {"dp_rank", 1},
              {"seq_hashes", {11, 22}},
              {"base_block_idx", 5},
              {"parent_hash", 9},
              {"token_ids", {1, 2, 3, 4, 5, 6, 7, 8}}};
}

Status BatchError(const json& events) { return DecodeEventBatch(events.dump()).status(); }

// The message of decoding `event` alone (as events[0]).
std::string EventError(const json& event) { return BatchError(json::array({event})).message(); }

TEST_SUITE("JsonCodec") {
  TEST_CASE("JsonCodec: decodes every field of a stored event") {
    const auto events = DecodeEventBatch(json::array({StoredEvent()}).dump());
    REQUIRE(events.has_value());
    REQUIRE(events->size() == 1);
    const BlockEvent& e = (*events)[0];
    CHECK(e.type == EventType::kStored);
    CHECK(e.event_id == 42u);
    CHECK(e.timestamp == doctest::Approx(1739145600000.0));
    CHECK(e.context == ContextKey{"acme", "llama-3.1-8b", "", 4, ""});
    CHECK(e.holder == HolderKey{"worker-0", 1});
    CHECK(e.medium == "gpu");
    CHECK(e.tier == Tier::kGpu);
    CHECK(e.medium_known);
    CHECK(e.seq_hashes == std::vector<uint64_t>{11, 22});
    CHECK(e.base_block_idx == 5u);
    CHECK(e.parent_hash == 9u);
    REQUIRE(e.token_ids.has_value());
    CHECK(e.token_ids->size() == 8);
    CHECK(e.locations.empty());
  }

  TEST_CASE("JsonCodec: the body is an array of events or an object with events") {
    json event = StoredEvent();
    CHECK(DecodeEventBatch(json{{"events", {event, event}}}.dump())->size() == 2);
    CHECK(DecodeEventBatch("[]")->empty());
    CHECK(DecodeEventBatch(R"({"events": 3})").status().message() ==
          "events: must be an array of events, got 3");
    CHECK(DecodeEventBatch(R"({"evts": []})").status().message() ==
          "events: is required (an array of events)");
    CHECK(DecodeEventBatch("17").status().message().starts_with("body: must be a JSON array"));
    const Status bad = DecodeEventBatch("[{\"event_type\": ").status();
    CHECK(bad.code() == StatusCode::kInvalidArgument);
    CHECK(bad.message().starts_with("body: invalid JSON: "));
    CHECK(EventError(json(5)) == "events[0]: must be a JSON object, got 5");
  }

  TEST_CASE("JsonCodec: a stored event's origin, and a batch in full report mode") {
    json reused = StoredEvent();
    reused["origin"] = "REUSED";
    json fresh = StoredEvent();
    fresh["origin"] = "new";
    json root = StoredEvent();
    root.erase("parent_hash");
    json removed = {{"event_type", "removed"}, {"model_name", "m"}, {"block_size", 4},
                    {"backend_id", "w"},       {"seq_hashes", {1}}, {"origin", "reused"}};
    auto events = DecodeEventBatch(json::array({reused, fresh, root, removed}).dump());
    REQUIRE(events.has_value());
    CHECK((*events)[0].origin == BlockOrigin::kReused);
    CHECK((*events)[1].origin == BlockOrigin::kNew);
    CHECK_FALSE((*events)[2].origin.has_value());
    CHECK_FALSE((*events)[3].origin.has_value());  // only stored events have one
    json copied = StoredEvent();
    copied["origin"] = "copied";
    CHECK(EventError(copied) == "events[0].origin: must be \"new\" or \"reused\", got \"copied\"");
    // In full mode a store without a parent is a re-report unless it says otherwise.
    events = DecodeEventBatch(
        json{{"report_mode", "full"}, {"events", {StoredEvent(), root, fresh}}}.dump());
    REQUIRE(events.has_value());
    CHECK_FALSE((*events)[0].origin.has_value());  // it continues a parent
    CHECK((*events)[1].origin == BlockOrigin::kReused);
    CHECK((*events)[2].origin == BlockOrigin::kNew);
    events = DecodeEventBatch(json{{"report_mode", "incremental"}, {"events", {root}}}.dump());
    REQUIRE(events.has_value());
    CHECK_FALSE((*events)[0].origin.has_value());
    CHECK(DecodeEventBatch(json{{"report_mode", "all"}, {"events", json::array()}}.dump())
              .status()
              .message() == "report_mode: must be \"incremental\" or \"full\", got \"all\"");
  }

  TEST_CASE("JsonCodec: a cleared event's scope is its context or the whole holder") {
    json cleared = {
        {"event_type", "cleared"}, {"model_name", "m"}, {"block_size", 4}, {"backend_id", "w"}};
    auto events = DecodeEventBatch(json::array({cleared}).dump());
    REQUIRE(events.has_value());
    CHECK_FALSE((*events)[0].clear_all_contexts);
    cleared["scope"] = "holder";
    events = DecodeEventBatch(json::array({cleared}).dump());
    REQUIRE(events.has_value());
    CHECK((*events)[0].clear_all_contexts);
    cleared["scope"] = "everything";
    CHECK(EventError(cleared) ==
          "events[0].scope: must be \"context\" or \"holder\", got \"everything\"");
  }

  TEST_CASE("JsonCodec: an events object may name its writer") {
    json body = {{"events", {StoredEvent()}}, {"writer_id", "sched-1"}, {"writer_sequence", 7}};
    std::optional<WriterPosition> writer;
    REQUIRE(DecodeEventBatch(body.dump(), &writer).has_value());
    CHECK(writer == WriterPosition{"sched-1", 7});
    writer.reset();
    REQUIRE(DecodeEventBatch(json{{"events", json::array()}}.dump(), &writer).has_value());
    CHECK_FALSE(writer.has_value());
    const auto error = [](json doc) {
      std::optional<WriterPosition> w;
      return DecodeEventBatch(doc.dump(), &w).status().message();
    };
    CHECK(error({{"events", json::array()}, {"writer_id", "a"}}) ==
          "writer_sequence: is required with writer_id");
    CHECK(error({{"events", json::array()}, {"writer_sequence", 1}}) ==
          "writer_id: is required with writer_sequence");
    CHECK(error({{"events", json::array()}, {"writer_id", "a"}, {"writer_sequence", -1}}) ==
          "writer_sequence: must be a positive integer, got -1");
    CHECK(error({{"events", json::array()}, {"writer_id", "a"}, {"writer_sequence", 0}}) ==
          "writer_sequence: must be a positive integer");
    CHECK(error({{"events", json::array()}, {"writer_id", 5}, {"writer_sequence", 1}}) ==
          "writer_id: must be a string, got 5");
    CHECK(error({{"events", json::array()}, {"writer_id", "a b"}, {"writer_sequence", 1}})
              .starts_with("writer_id: only letters"));
    CHECK(error({{"events", json::array()},
                 {"writer_id", std::string(129, 'a')},
                 {"writer_sequence", 1}})
              .starts_with("writer_id: must be 1 to 128 bytes"));
  }

  TEST_CASE("JsonCodec: envelope defaults apply to absent and null fields") {
    json event = StoredEvent();
    for (const char* key : {"tenant_id", "dp_rank", "medium", "event_id", "timestamp",
                            "parent_hash", "base_block_idx", "token_ids"}) {
      event.erase(key);
    }
    event["lora_name"] = nullptr;
    const auto events = DecodeEventBatch(json::array({event}).dump());
    REQUIRE(events.has_value());
    const BlockEvent& e = (*events)[0];
    CHECK(e.context.tenant == "default");
    CHECK(e.context.lora_name.empty());
    CHECK(e.context.salt.empty());
    CHECK(e.holder.dp_rank == 0);
    CHECK_FALSE(e.medium.has_value());
    CHECK(e.tier == Tier::kGpu);
    CHECK_FALSE(e.event_id.has_value());
    CHECK_FALSE(e.parent_hash.has_value());
    CHECK_FALSE(e.token_ids.has_value());
  }

  TEST_CASE("JsonCodec: instance_id names the holder when backend_id is absent") {
    json event = StoredEvent();
    event.erase("backend_id");
    event["instance_id"] = "engine-7";
    CHECK((*DecodeEventBatch(json::array({event}).dump()))[0].holder.id == "engine-7");
    event.erase("instance_id");
    CHECK(EventError(event) == "events[0].backend_id: is required (a non-empty string)");
  }

  TEST_CASE("JsonCodec: hashes are unsigned, signed two's complement, or decimal/hex text") {
    json event = StoredEvent();
    event.erase("token_ids");
    event["seq_hashes"] = {
        18446744073709551615ull, -1, -9223372036854775807LL - 1, "123", "0xFF", "-2"};
    const auto events = DecodeEventBatch(json::array({event}).dump());
    REQUIRE(events.has_value());
    CHECK((*events)[0].seq_hashes ==
          std::vector<uint64_t>{UINT64_MAX, UINT64_MAX, 1ull << 63, 123, 255, UINT64_MAX - 1});

    SUBCASE("a float") { event["seq_hashes"] = {1, 1.5}; }
    SUBCASE("bad text") { event["seq_hashes"] = {1, "0xZZ"}; }
    SUBCASE("too large text") { event["seq_hashes"] = {1, "18446744073709551616"}; }
    SUBCASE("a boolean") { event["seq_hashes"] = {1, true}; }
    const std::string message = EventError(event);
    CHECK(message.starts_with("events[0].seq_hashes[1]: must be a 64-bit hash"));
  }

  TEST_CASE("JsonCodec: ParseHashText accepts decimal, signed decimal and 0x-hex only") {
    CHECK(*ParseHashText("0") == 0u);
    CHECK(*ParseHashText("0x7b") == 123u);
    CHECK(*ParseHashText("0X7B") == 123u);
    CHECK(*ParseHashText("-1") == UINT64_MAX);
    CHECK(*ParseHashText("18446744073709551615") == UINT64_MAX);
    for (const char* bad : {"", "0x", "12a", " 1", "+1", "0x10000000000000000", "1e3", "-0x1"}) {
      CAPTURE(bad);
      CHECK(ParseHashText(bad).status().code() == StatusCode::kInvalidArgument);
    }
  }

  TEST_CASE("JsonCodec: block_size must be a positive integer") {
    json event = StoredEvent();
    SUBCASE("zero") { event["block_size"] = 0; }
    SUBCASE("negative") { event["block_size"] = -16; }
    SUBCASE("text") { event["block_size"] = "16"; }
    SUBCASE("fraction") { event["block_size"] = 1.5; }
    SUBCASE("over u32") { event["block_size"] = 1ull << 32; }
    CHECK(EventError(event).starts_with("events[0].block_size: must be a positive integer, got "));
  }

  TEST_CASE("JsonCodec: required and typed envelope fields name their path") {
    json event = StoredEvent();
    std::string expected;
    SUBCASE("missing event_type") {
      event.erase("event_type");
      expected = "events[0].event_type: is required (a non-empty string)";
    }
    SUBCASE("unknown event_type") {
      event["event_type"] = "evicted";
      expected =
          "events[0].event_type: unknown event type \"evicted\" (expected stored, removed or "
          "cleared)";
    }
    SUBCASE("missing model_name") {
      event.erase("model_name");
      expected = "events[0].model_name: is required (a non-empty string)";
    }
    SUBCASE("missing block_size") {
      event.erase("block_size");
      expected = "events[0].block_size: is required (a positive integer)";
    }
    SUBCASE("numeric tenant") {
      event["tenant_id"] = 7;
      expected = "events[0].tenant_id: must be a string, got 7";
    }
    SUBCASE("negative dp_rank") {
      event["dp_rank"] = -1;
      expected = "events[0].dp_rank: must be an integer from 0 to 4294967295, got -1";
    }
    SUBCASE("signed event_id") {
      event["event_id"] = -3;
      expected = "events[0].event_id: must be an unsigned integer, got -3";
    }
    SUBCASE("token out of u32 range") {
      event["token_ids"][3] = 4294967296ull;
      expected = "events[0].token_ids[3]: must be an integer from 0 to 4294967295, got 4294967296";
    }
    SUBCASE("text timestamp") {
      event["timestamp"] = "now";
      expected = "events[0].timestamp: must be a number, got \"now\"";
    }
    CHECK(EventError(event) == expected);
  }

  TEST_CASE("JsonCodec: stored needs seq_hashes or token_ids covering whole blocks") {
    json event = StoredEvent();
    std::string expected;
    SUBCASE("neither") {
      event.erase("seq_hashes");
      event.erase("token_ids");
      expected = "events[0].seq_hashes: a stored event needs seq_hashes or token_ids";
    }
    SUBCASE("tokens for fewer blocks than hashes") {
      event["token_ids"] = {1, 2, 3, 4};
      expected =
          "events[0].token_ids: 4 tokens do not cover exactly the 2 blocks of seq_hashes "
          "(expected 8 = blocks x block_size)";
    }
    SUBCASE("tokens only, with a partial block") {
      event.erase("seq_hashes");
      event["token_ids"] = {1, 2, 3, 4, 5};
      expected = "events[0].token_ids: 5 tokens are not a whole number of 4-token blocks";
    }
    CHECK(EventError(event) == expected);
  }

  TEST_CASE("JsonCodec: an empty token_ids array counts as not given") {
    json event = StoredEvent();
    event["token_ids"] = json::array();
    const auto events = DecodeEventBatch(json::array({event}).dump());
    REQUIRE(events.has_value());
    CHECK_FALSE((*events)[0].token_ids.has_value());
    event.erase("seq_hashes");
    CHECK(EventError(event) ==
          "events[0].seq_hashes: a stored event needs seq_hashes or token_ids");
  }

  TEST_CASE("JsonCodec: stored with token_ids only counts complete blocks") {
    json event = StoredEvent();
    event.erase("seq_hashes");
    event["location"] = "nvme://pool/a";
    const auto events = DecodeEventBatch(json::array({event}).dump());
    REQUIRE(events.has_value());
    CHECK((*events)[0].BlockCount() == 2);
    CHECK((*events)[0].locations == std::vector<std::string>{"nvme://pool/a", "nvme://pool/a"});
  }

  TEST_CASE("JsonCodec: location is one string or one string per block") {
    json event = StoredEvent();
    event["location"] = {"a", "b"};
    CHECK((*DecodeEventBatch(json::array({event}).dump()))[0].locations ==
          std::vector<std::string>{"a", "b"});
    event["location"] = {"a"};
    CHECK(EventError(event) ==
          "events[0].location: has 1 entries; expected one string, or one per block (2)");
    event["location"] = {"a", 2};
    CHECK(EventError(event) == "events[0].location[1]: must be a string, got 2");
    event["location"] = 5;
    CHECK(EventError(event) ==
          "events[0].location: must be a string or an array of strings, got 5");
  }

  TEST_CASE("JsonCodec: removed needs seq_hashes, cleared needs only the envelope") {
    json removed = StoredEvent();
    removed["event_type"] = "removed";
    removed.erase("token_ids");
    const auto ok = DecodeEventBatch(json::array({removed}).dump());
    REQUIRE(ok.has_value());
    CHECK((*ok)[0].type == EventType::kRemoved);
    removed.erase("seq_hashes");
    CHECK(EventError(removed) == "events[0].seq_hashes: a removed event needs hashes");

    json cleared{
        {"event_type", "cleared"}, {"model_name", "m"}, {"block_size", 16}, {"backend_id", "w"}};
    const auto c = DecodeEventBatch(json::array({cleared}).dump());
    REQUIRE(c.has_value());
    CHECK((*c)[0].type == EventType::kCleared);
    CHECK_FALSE((*c)[0].medium.has_value());
  }

  TEST_CASE("JsonCodec: an unknown medium is kept and mapped to the nearest tier") {
    json event = StoredEvent();
    event["medium"] = "cxl_mem";
    const auto events = DecodeEventBatch(json::array({event}).dump());
    REQUIRE(events.has_value());
    CHECK((*events)[0].medium == "cxl_mem");
    CHECK((*events)[0].tier == Tier::kCpu);
    CHECK_FALSE((*events)[0].medium_known);
  }

  TEST_CASE("JsonCodec: one invalid event rejects the whole batch, naming its index") {
    json bad = StoredEvent();
    bad["block_size"] = 0;
    const auto result = DecodeEventBatch(json::array({StoredEvent(), StoredEvent(), bad}).dump());
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().message().starts_with("events[2].block_size"));
  }

  TEST_CASE("JsonCodec: /v1/lookup takes token_ids or seq_hashes, not both") {
    json body{{"model_name", "m"}, {"block_size", 16}, {"token_ids", {1, 2, 3}}};
    auto by_tokens = DecodeLookupRequest(body.dump());
    REQUIRE(by_tokens.has_value());
    CHECK_FALSE(by_tokens->by_hash);
    CHECK(by_tokens->token_ids == std::vector<uint32_t>{1, 2, 3});
    CHECK(by_tokens->context == ContextKey{"default", "m", "", 16, ""});
    CHECK(by_tokens->include_locations);

    body.erase("token_ids");
    body["seq_hashes"] = {"0x10", 5};
    body["instance_id"] = "engine-1";
    body["include_locations"] = false;
    auto by_hash = DecodeLookupRequest(body.dump());
    REQUIRE(by_hash.has_value());
    CHECK(by_hash->by_hash);
    CHECK(by_hash->seq_hashes == std::vector<uint64_t>{16, 5});
    CHECK(by_hash->instance_id == "engine-1");
    CHECK_FALSE(by_hash->include_locations);

    body["token_ids"] = {1};
    CHECK(DecodeLookupRequest(body.dump()).status().message() ==
          "token_ids: give token_ids or seq_hashes, not both");
    body.erase("token_ids");
    body.erase("seq_hashes");
    CHECK(DecodeLookupRequest(body.dump()).status().message() ==
          "token_ids: is required (or seq_hashes)");
    CHECK(DecodeLookupRequest("[]").status().message() == "body: must be a JSON object, got []");
  }

  TEST_CASE("JsonCodec: Conductor /query uses model and cache_salt and ignores lora_id") {
    const json body{{"model", "deepseek"}, {"lora_name", "sql"},  {"lora_id", 3},
                    {"token_ids", {1, 2}}, {"tenant_id", "t1"},   {"instance_id", "node1"},
                    {"block_size", 64},    {"cache_salt", "w8a8"}};
    const auto query = DecodeConductorQuery(body.dump());
    REQUIRE(query.has_value());
    CHECK(query->context == ContextKey{"t1", "deepseek", "sql", 64, "w8a8"});
    CHECK(query->instance_id == "node1");
    CHECK(query->token_ids == std::vector<uint32_t>{1, 2});
    json no_model = body;
    no_model.erase("model");
    CHECK(DecodeConductorQuery(no_model.dump()).status().message() ==
          "model: is required (a non-empty string)");
    json no_tokens = body;
    no_tokens.erase("token_ids");
    CHECK(DecodeConductorQuery(no_tokens.dump()).status().message() == "token_ids: is required");
  }

  TEST_CASE("JsonCodec: Conductor /query_by_hash takes seq_hashes or the older block_hash") {
    json body{{"model", "m"}, {"block_size", 16}, {"seq_hashes", {1, 2}}};
    CHECK(DecodeConductorQueryByHash(body.dump())->seq_hashes == std::vector<uint64_t>{1, 2});
    body.erase("seq_hashes");
    body["block_hash"] = {"0x3"};
    const auto old = DecodeConductorQueryByHash(body.dump());
    REQUIRE(old.has_value());
    CHECK(old->by_hash);
    CHECK(old->seq_hashes == std::vector<uint64_t>{3});
    body.erase("block_hash");
    CHECK(DecodeConductorQueryByHash(body.dump()).status().message() == "seq_hashes: is required");
  }

  TEST_CASE("JsonCodec: the lookup answer reports blocks and tokens per instance and rank") {
    LookupAnswer answer;
    answer.revision = 7;
    answer.context = ContextKey{"default", "m", "", 16, ""};
    answer.blocks_queried = 4;
    answer.blocks_found = 3;
    answer.instances.push_back(
        InstanceMatch{"a", {1, 2, 3}, {RankMatch{0, {1, 2, 3}}, RankMatch{2, {0, 1, 1}}}});
    answer.shared.push_back(SharedMatch{"pool", 0, 2, {"x", "y"}});
    const json out = json::parse(EncodeLookupAnswer(answer));
    CHECK(out["revision"] == 7);
    CHECK(out["blocks_queried"] == 4);
    CHECK(out["blocks_found"] == 3);
    CHECK(out["context"]["block_size"] == 16);
    const json& a = out["instances"][0];
    CHECK(a["instance_id"] == "a");
    CHECK(a["longest_matched"] == json{{"blocks", 3}, {"tokens", 48}});
    CHECK(a["tiers"] == json{{"GPU", 1}, {"CPU", 2}, {"DISK", 3}});
    CHECK(a["media"] == json{{"GPU", 1}, {"CPU", 0}, {"DISK", 0}});
    CHECK(a["dp_ranks"][1]["dp_rank"] == 2);
    CHECK(a["dp_ranks"][1]["longest_matched"]["tokens"] == 16);
    CHECK(out["shared"][0] == json{{"backend_id", "pool"},
                                   {"dp_rank", 0},
                                   {"matched", {{"blocks", 2}, {"tokens", 32}}},
                                   {"locations", {"x", "y"}}});
  }

  TEST_CASE("JsonCodec: the Conductor answer is {tenant: {instance: ...}} in tokens") {
    // The Conductor documentation's example: 2 blocks on GPU, all 4 on CPU, none on DISK.
    // Its media keys are per medium, not cumulative.
    LookupAnswer answer;
    answer.context = ContextKey{"acme", "m", "", 64, ""};
    answer.instances.push_back(InstanceMatch{
        "node1", {2, 4, 4, 4, 0}, {RankMatch{0, {2, 2, 2, 0, 0}}, RankMatch{1, {0, 4, 4, 4, 0}}}});
    answer.shared.push_back(SharedMatch{"pool", 0, 9, {}});
    const json expected = json::parse(R"({"acme": {"node1": {
        "longest_matched": 256, "GPU": 128, "CPU": 256, "DISK": 0,
        "DP": {"0": 128, "1": 256}}}})");
    CHECK(json::parse(EncodeConductorAnswer(answer)) == expected);
    answer.instances.clear();
    CHECK(json::parse(EncodeConductorAnswer(answer)) == json::parse(R"({"acme": {}})"));
  }

  TEST_CASE("JsonCodec: error bodies carry the wire code and the message") {
    const json body = json::parse(EncodeErrorBody(Status::PayloadTooLarge("too big")));
    CHECK(body == json{{"code", "payload_too_large"}, {"message", "too big"}});
    // Invalid UTF-8 quoted from a request must not make encoding throw.
    CHECK_NOTHROW((void)EncodeErrorBody(Status::InvalidArgument("bad \xff byte")));
    CHECK(json::parse(EncodeIngestAnswer({5, 2, 9})) ==
          json{{"revision", 5}, {"events", 2}, {"blocks", 9}});
  }
}

}  // namespace
}  // namespace kvatlas
