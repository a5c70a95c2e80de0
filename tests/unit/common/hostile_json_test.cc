// Hostile request bodies against the JSON decoders (and the binary decoders of the same
// requests): nesting far past any real body, duplicate keys, names of megabytes. Each must be
// refused with a short kInvalidArgument naming the problem, without recursing over the value.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/protocol.h"
#include "kvatlas/common/routing.h"

namespace kvatlas {
namespace {

using nlohmann::json;

// `depth` nested arrays around 1: "[[[1]]]" for 3.
std::string Nested(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

// A lookup body as text with `value` (raw JSON text) spliced in as `field`.
std::string LookupWith(const std::string& field, const std::string& value) {
  std::string body = "{";
  for (const char* key : {"model_name", "model", "token_ids"}) {
    if (field == key) continue;
    body += "\"" + std::string(key) +
            (key == std::string("token_ids") ? "\": [1, 2], " : "\": \"m\", ");
  }
  return body + "\"block_size\": 2, \"" + field + "\": " + value + "}";
}

json StoredEvent() {
  return json{{"event_type", "stored"}, {"model_name", "m"},    {"block_size", 2},
              {"backend_id", "engine"}, {"seq_hashes", {1, 2}}, {"token_ids", {5, 6, 7, 8}}};
}

// The message of decoding a one-event batch whose `field` is `value`.
std::string EventError(const std::string& field, const json& value) {
  json event = StoredEvent();
  event[field] = value;
  return DecodeEventBatch(json::array({event}).dump()).status().message();
}

Status RouteStatus(const std::string& body) { return DecodeRouteRequest(body).status(); }

TEST_SUITE("HostileJson") {
  TEST_CASE("HostileJson: a value nested 100k deep is refused by every decoder, briefly") {
    const std::string deep = Nested(100'000);
    const std::string expected = "body: nested deeper than 64 levels";
    const std::string lookup = LookupWith("model_name", deep);
    for (const Status& status :
         {DecodeLookupRequest(lookup).status(),
          DecodeConductorQuery(LookupWith("model", deep)).status(),
          DecodeConductorQueryByHash(LookupWith("model", deep)).status(),
          DecodeLookupRequest(LookupWith("token_ids", deep)).status(), RouteStatus(lookup),
          DecodeEventBatch("[" + deep + "]").status(), DecodeEventBatch(deep).status(),
          DecodeEventBatch(R"({"events": [], "writer_id": )" + deep + "}").status()}) {
      CHECK(status.code() == StatusCode::kInvalidArgument);
      CHECK(status.message() == expected);
    }
    json event = StoredEvent();
    const std::string text = event.dump();
    // The same deep value inside an event's field.
    const std::string in_event =
        "[" + text.substr(0, text.size() - 1) + R"(, "location": )" + deep + "}]";
    CHECK(DecodeEventBatch(in_event).status().message() == expected);
  }

  TEST_CASE("HostileJson: 64 levels are accepted, 65 are not") {
    // The body object is level 1: token_ids at 63 more arrays is level 64.
    const Status at_limit = DecodeLookupRequest(LookupWith("x", Nested(63))).status();
    CHECK(at_limit.ok());
    const Status past = DecodeLookupRequest(LookupWith("x", Nested(64))).status();
    CHECK(past.message() == "body: nested deeper than 64 levels");
    CHECK(DecodeEventBatch(Nested(64)).status().message() != "body: nested deeper than 64 levels");
    CHECK(DecodeEventBatch(Nested(65)).status().message() == "body: nested deeper than 64 levels");
  }

  TEST_CASE("HostileJson: duplicate keys are refused, naming the key") {
    const Status lookup =
        DecodeLookupRequest(R"({"model_name": "a", "block_size": 2, "model_name": "b",
                                "token_ids": [1, 2]})")
            .status();
    CHECK(lookup.code() == StatusCode::kInvalidArgument);
    CHECK(lookup.message() == "body: duplicate key \"model_name\"");
    const std::string event = StoredEvent().dump();
    const std::string twice =
        "[" + event.substr(0, event.size() - 1) + R"(, "backend_id": "other"}])";
    CHECK(DecodeEventBatch(twice).status().message() == "body: duplicate key \"backend_id\"");
    // Keys of different objects may repeat; the same key in a nested object is still one.
    CHECK(DecodeEventBatch(json::array({StoredEvent(), StoredEvent()}).dump()).has_value());
    CHECK(DecodeRouteRequest(R"({"model_name": "m", "block_size": 2, "token_ids": [1, 2],
                                 "candidates": [{"instance_id": "a"}, {"instance_id": "b",
                                 "instance_id": "c"}]})")
              .status()
              .message() == "body: duplicate key \"instance_id\"");
    CHECK(DecodeConductorQuery(R"({"model": "m", "block_size": 2, "token_ids": [1],
                                   "token_ids": [2]})")
              .status()
              .message() == "body: duplicate key \"token_ids\"");
  }

  TEST_CASE("HostileJson: event names past their limits are refused, naming field and limit") {
    const std::string name(257, 'n');
    CHECK(EventError("model_name", std::string(256, 'n')).empty());
    CHECK(EventError("model_name", name) ==
          "events[0].model_name: 257 bytes, longer than the limit of 256 bytes");
    CHECK(EventError("lora_name", name) ==
          "events[0].lora_name: 257 bytes, longer than the limit of 256 bytes");
    CHECK(EventError("tenant_id", name) ==
          "events[0].tenant_id: 257 bytes, longer than the limit of 256 bytes");
    CHECK(EventError("backend_id", name) ==
          "events[0].backend_id: 257 bytes, longer than the limit of 256 bytes");
    CHECK(EventError("medium", name) ==
          "events[0].medium: 257 bytes, longer than the limit of 256 bytes");
    CHECK(EventError("additional_salt", std::string(1024, 's')).empty());
    CHECK(EventError("additional_salt", std::string(1025, 's')) ==
          "events[0].additional_salt: 1025 bytes, longer than the limit of 1024 bytes");
    CHECK(EventError("location", std::string(4096, 'l')).empty());
    CHECK(EventError("location", std::string(4097, 'l')) ==
          "events[0].location: 4097 bytes, longer than the limit of 4096 bytes");
    CHECK(EventError("location", json::array({"a", std::string(4097, 'l')})) ==
          "events[0].location: 4097 bytes, longer than the limit of 4096 bytes");
    json by_instance = StoredEvent();
    by_instance.erase("backend_id");
    by_instance["instance_id"] = name;
    CHECK(DecodeEventBatch(json::array({by_instance}).dump()).status().message() ==
          "events[0].backend_id: 257 bytes, longer than the limit of 256 bytes");
    const std::string huge(15 << 20, 'x');
    const std::string message = EventError("model_name", huge);
    CHECK(message == "events[0].model_name: 15728640 bytes, longer than the limit of 256 bytes");
  }

  TEST_CASE("HostileJson: lookup names past their limits are refused") {
    const std::string name = "\"" + std::string(257, 'n') + "\"";
    CHECK(DecodeLookupRequest(LookupWith("model_name", name)).status().message() ==
          "model_name: 257 bytes, longer than the limit of 256 bytes");
    CHECK(DecodeLookupRequest(LookupWith("instance_id", name)).status().message() ==
          "instance_id: 257 bytes, longer than the limit of 256 bytes");
    CHECK(DecodeLookupRequest(LookupWith("tenant_id", name)).status().message() ==
          "tenant_id: 257 bytes, longer than the limit of 256 bytes");
    CHECK(DecodeLookupRequest(LookupWith("lora_name", name)).status().message() ==
          "lora_name: 257 bytes, longer than the limit of 256 bytes");
    const std::string salt = "\"" + std::string(1025, 's') + "\"";
    CHECK(DecodeLookupRequest(LookupWith("additional_salt", salt)).status().message() ==
          "additional_salt: 1025 bytes, longer than the limit of 1024 bytes");
    CHECK(DecodeConductorQuery(LookupWith("cache_salt", salt)).status().message() ==
          "cache_salt: 1025 bytes, longer than the limit of 1024 bytes");
    CHECK(DecodeConductorQuery(LookupWith("model", name)).status().message() ==
          "model: 257 bytes, longer than the limit of 256 bytes");
    CHECK(RouteStatus(R"({"model_name": "m", "block_size": 2, "token_ids": [1, 2],
                          "candidates": [{"instance_id": )" +
                      name + "}]}")
              .message() ==
          "candidates[0].instance_id: 257 bytes, longer than the limit of 256 "
          "bytes");
  }

  TEST_CASE("HostileJson: the binary decoders apply the same name limits") {
    BlockEvent event;
    event.context = ContextKey{"default", std::string(257, 'm'), "", 2, ""};
    event.holder = HolderKey{"engine", 0};
    event.seq_hashes = {1};
    protocol::IngestRequest ingest;
    ingest.events.push_back(event);
    const Status model =
        protocol::DecodeIngestRequest(protocol::EncodeIngestRequest(ingest)).status();
    CHECK(model.code() == StatusCode::kInvalidArgument);
    CHECK(model.message() == "events[0].model_name: 257 bytes, longer than the limit of 256 bytes");
    ingest.events[0].context.model = "m";
    ingest.events[0].locations = {std::string(4097, 'l')};
    CHECK(protocol::DecodeIngestRequest(protocol::EncodeIngestRequest(ingest)).status().message() ==
          "events[0].location: 4097 bytes, longer than the limit of 4096 bytes");

    LookupRequest lookup;
    lookup.context = ContextKey{"default", "m", "", 2, std::string(1025, 's')};
    lookup.token_ids = {1, 2};
    CHECK(protocol::DecodeLookupRequestBinary(protocol::EncodeLookupRequestBinary(lookup))
              .status()
              .message() == "additional_salt: 1025 bytes, longer than the limit of 1024 bytes");
    lookup.context.salt.clear();
    lookup.instance_id = std::string(257, 'i');
    CHECK(protocol::DecodeLookupRequestBinary(protocol::EncodeLookupRequestBinary(lookup))
              .status()
              .message() == "instance_id: 257 bytes, longer than the limit of 256 bytes");
  }
  TEST_CASE("HostileJson: PreviewJson is the start of dump(), short for any value") {
    for (const char* text : {R"({"a":[1,"x",true],"b":null,"c":{}})", "[]", "{}", "-5", "\"s\"",
                             R"([1.5,[2,[3,[4]]]])"}) {
      const json value = json::parse(text);
      CHECK(PreviewJson(value) == DumpJson(value));
    }
    const json long_array = json(std::vector<int>(40, 1));  // [1,1,...]: 81 characters
    CHECK(PreviewJson(long_array) == DumpJson(long_array).substr(0, 45) + "...");

    // 100k levels, built without recursion; dump() would overflow the stack here.
    json deep = json::array();
    json* innermost = &deep;
    for (int i = 0; i < 100'000; ++i) {
      innermost->push_back(json::array());
      innermost = &innermost->back();
    }
    CHECK(PreviewJson(deep) == std::string(45, '[') + "...");

    json wide = json::array();
    for (int i = 0; i < 1'000'000; ++i) wide.push_back(i);
    CHECK(PreviewJson(wide).size() == 48);
    const json huge_string = std::string(15 << 20, 'x');
    CHECK(PreviewJson(huge_string) == "\"" + std::string(44, 'x') + "...");
    const json huge_key = {{std::string(1 << 20, 'k'), 1}};
    CHECK(PreviewJson(huge_key) == "{\"" + std::string(43, 'k') + "...");
    CHECK(PreviewJson(long_array, 10) == "[1,1,1,...");
  }

  TEST_CASE("HostileJson: ParseJsonBody parses what is allowed and names what is not") {
    json doc;
    REQUIRE(ParseJsonBody(R"({"a": [1, {"a": 2}], "b": {"a": 3}})", &doc).ok());
    CHECK(doc["a"][1]["a"] == 2);
    CHECK(ParseJsonBody(Nested(64), &doc).ok());
    CHECK(ParseJsonBody(Nested(65), &doc).message() == "body: nested deeper than 64 levels");
    CHECK(ParseJsonBody(std::string(1'000'000, '['), &doc).message() ==
          "body: nested deeper than 64 levels");
    CHECK(ParseJsonBody(R"({"k": 1, "k": 1})", &doc).message() == "body: duplicate key \"k\"");
    const std::string key(1000, 'k');
    CHECK(ParseJsonBody("{\"" + key + "\": 1, \"" + key + "\": 2}", &doc).message() ==
          "body: duplicate key \"" + std::string(44, 'k') + "...");
    CHECK(ParseJsonBody("[1,", &doc).message().starts_with("body: invalid JSON: "));
  }

  // Found by tests/fuzz/json_codec_fuzz: each of these echoed a megabyte of the body.
  TEST_CASE("HostileJson: error messages stay short whatever the body echoes") {
    const std::string big(1 << 20, 'x');
    json doc;
    // nlohmann's parse error quotes the whole token it read ("last read: '\"xxx...").
    const std::string unterminated = ParseJsonBody("\"" + big, &doc).message();
    CHECK(unterminated.starts_with("body: invalid JSON: "));
    CHECK(unterminated.size() <= 300);
    CHECK(unterminated.ends_with("..."));
    const std::string type = EventError("event_type", big);
    CHECK(type.starts_with("events[0].event_type: unknown event type \"xxx"));
    CHECK(type.size() <= 200);
    const std::string weight =
        RouteStatus(R"({"model_name": "m", "block_size": 1, "seq_hashes": [5], )"
                    R"("candidates": [{"instance_id": "x"}], "weights": {")" +
                    big + R"(": 1}})")
            .message();
    CHECK(weight.starts_with("weights.xxx"));
    CHECK(weight.size() <= 200);
  }
}

}  // namespace
}  // namespace kvatlas
