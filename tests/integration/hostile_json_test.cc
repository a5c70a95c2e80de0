// Hostile JSON against the real server: a value nested 100k levels deep in any route's body,
// duplicate keys and megabyte names must each get a 400 with a JSON body naming the
// problem, leave the server serving, and store nothing.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

const std::string kDeep = std::string(100'000, '[') + std::string(100'000, ']');

// A stored event as JSON text with `value` (raw JSON text) as `field`.
std::string EventWith(const std::string& field, const std::string& value) {
  return R"([{"event_type": "stored", "block_size": 2, "backend_id": "engine",)"
         R"( "token_ids": [1, 2], ")" +
         field + "\": " + value + (field == "model_name" ? "" : R"(, "model_name": "m")") + "}]";
}

std::string Quoted(size_t bytes, char c = 'x') { return "\"" + std::string(bytes, c) + "\""; }

// `answer` is a 400 invalid_argument whose JSON message is `message`.
void CheckRefused(const Answer& answer, const std::string& message) {
  CHECK(answer.status == 400);
  REQUIRE_MESSAGE(answer.body.is_object(), answer.raw.substr(0, 200));
  CHECK(answer.body["code"] == "invalid_argument");
  CHECK(answer.body["message"] == message);
}

void CheckServingAndEmpty(httplib::Client& client) {
  CHECK(Get(client, "/healthz").status == 200);
  const Answer contexts = Get(client, "/v1/contexts");
  REQUIRE(contexts.status == 200);
  CHECK(contexts.body["contexts"].empty());
  const Answer registrations = Get(client, "/v1/registrations");
  REQUIRE(registrations.status == 200);
  CHECK(registrations.body["registrations"].empty());
}

TEST_SUITE("Integration.HostileJson") {
  TEST_CASE("HostileJson: a 100k-deep value in any body is a 400, and the server lives") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    httplib::Client client = server.Client();
    const std::string expected = "body: nested deeper than 64 levels";
    const std::string lookup = R"({"model_name": "m", "block_size": 2, "token_ids": )" + kDeep;
    const std::vector<std::pair<std::string, std::string>> bodies = {
        {"/v1/lookup", lookup + "}"},
        {"/v1/events", EventWith("seq_hashes", kDeep)},
        {"/v1/events", EventWith("model_name", kDeep)},
        {"/query", R"({"model": "m", "block_size": 2, "token_ids": )" + kDeep + "}"},
        {"/v1/route", lookup + R"(, "candidates": [{"instance_id": "a"}]})"},
        {"/register", R"({"endpoint": )" + kDeep + "}"},
        {"/v1/cluster/members", R"({"id": 2, "raft_address": )" + kDeep + "}"},
        {"/v1/heartbeat", R"({"holders": )" + kDeep + "}"},
        {"/v1/events", kDeep},
    };
    for (const auto& [path, body] : bodies) {
      CAPTURE(path);
      CheckRefused(Post(client, path, body), expected);
      REQUIRE(Get(client, "/healthz").status == 200);
    }
    CheckServingAndEmpty(client);
  }

  TEST_CASE("HostileJson: megabyte names and duplicate keys are a 400; nothing is stored") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    httplib::Client client = server.Client();
    const std::string mib = Quoted(1 << 20);
    CheckRefused(Post(client, "/v1/events", EventWith("model_name", mib)),
                 "events[0].model_name: 1048576 bytes, longer than the limit of 256 bytes");
    CheckRefused(Post(client, "/v1/events", EventWith("additional_salt", mib)),
                 "events[0].additional_salt: 1048576 bytes, longer than the limit of 1024 bytes");
    CheckRefused(Post(client, "/v1/events", EventWith("location", mib)),
                 "events[0].location: 1048576 bytes, longer than the limit of 4096 bytes");
    CheckRefused(Post(client, "/v1/events", EventWith("backend_id", "\"other\"")),
                 "body: duplicate key \"backend_id\"");
    CheckRefused(Post(client, "/v1/lookup",
                      R"({"block_size": 2, "token_ids": [1, 2], "model_name": )" + mib + "}"),
                 "model_name: 1048576 bytes, longer than the limit of 256 bytes");
    const std::string registration =
        R"({"endpoint": "tcp://127.0.0.1:1", "type": "vLLM", "instance_id": "i",)"
        R"( "block_size": 2, )";
    CheckRefused(Post(client, "/register", registration + R"("modelname": )" + mib + "}"),
                 "body.modelname: 1048576 bytes, longer than the limit of 256 bytes");
    CheckRefused(Post(client, "/register",
                      registration + R"("modelname": "m", "topic": )" + Quoted(2048) + "}"),
                 "body.topic: 2048 bytes, longer than the limit of 1024 bytes");
    CheckRefused(Post(client, "/v1/heartbeat", R"({"holders": [{"instance_id": )" + mib + "}]}"),
                 "body.holders[0].instance_id: 1048576 bytes, longer than the limit of 256 bytes");
    CheckServingAndEmpty(client);

    // At the limit the same names are accepted.
    const Answer ok = Post(client, "/v1/events", EventWith("model_name", Quoted(256, 'm')));
    CHECK_MESSAGE(ok.status == 200, ok.raw);
    CHECK(Get(client, "/v1/contexts").body["contexts"].size() == 1);
  }
}

}  // namespace
}  // namespace kvatlas::testing
