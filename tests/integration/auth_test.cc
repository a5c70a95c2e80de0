// Access control against the real server (docs/security.md): token rotation on SIGHUP with
// open streams, the refusal to serve the network without tokens, browser-borne requests,
// and `kvatlas-server gen-token`.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/protocol.h"
#include "tests/integration/auth_helpers.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using protocol::Frame;
using protocol::MessageType;

json Event(const std::string& backend) {
  return json::array({{{"event_type", "stored"},
                       {"model_name", "llama"},
                       {"block_size", 4},
                       {"backend_id", backend},
                       {"token_ids", {1, 2, 3, 4}}}});
}

int PostEvent(const ServerProcess& server, const std::string& token, const std::string& backend) {
  httplib::Client client = server.Client();
  auto result = client.Post("/v1/events", Bearer(token), Event(backend).dump(), "application/json");
  REQUIRE(result);
  return result->status;
}

// Waits (bounded) until a REST call with `token` gets `status`: a SIGHUP is asynchronous.
bool EventuallyStatus(const ServerProcess& server, const std::string& token, int status) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    httplib::Client client = server.Client();
    auto result = client.Get("/v1/stats", Bearer(token));
    if (result && result->status == status) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Reads frames of an open binary watch until one names `backend` (true) or the watch ends
// with an error frame (false, its status in *ended).
bool WatchSees(AuthedRpc& rpc, const std::string& backend, StatusCode* ended) {
  for (;;) {
    std::optional<Frame> frame = rpc.Read();
    if (!frame) {
      *ended = StatusCode::kUnavailable;
      return false;
    }
    if (frame->header.status != StatusCode::kOk) {
      *ended = frame->header.status;
      return false;
    }
    if (frame->header.type != MessageType::kWatch) continue;
    Result<protocol::WatchBatch> batch = protocol::DecodeWatchBatch(frame->payload);
    REQUIRE(batch.has_value());
    for (const FeedRecord& record : batch->records) {
      if (record.holder.id == backend) return true;
    }
  }
}

TEST_SUITE("Access") {
  TEST_CASE("Access: SIGHUP rotates tokens, and streams of tokens still valid keep flowing") {
    TempDir dir;
    const auto tokens = dir.path() / "tokens";
    const TestToken old_reader{"old-reader", "read", "kvt_old_reader"};
    const TestToken kept_reader{"kept-reader", "read", "kvt_kept_reader"};
    const TestToken new_writer{"new-writer", "write", "kvt_new_writer"};
    WriteTokenFile(tokens, {old_reader, kept_reader, kWriter});
    ServerProcess server(dir.path() / "data", {"--token-file", tokens.string()});

    // Open streams with both readers: SSE and binary watches.
    StreamReader kept_sse(server.host(), server.port(), "/v1/watch?from=now",
                          Bearer(kept_reader.token));
    StreamReader old_sse(server.host(), server.port(), "/v1/watch?from=now",
                         Bearer(old_reader.token));
    AuthedRpc kept_rpc(server.rpc_port(), kept_reader.token);
    AuthedRpc old_rpc(server.rpc_port(), old_reader.token);
    for (AuthedRpc* rpc : {&kept_rpc, &old_rpc}) {
      const std::optional<Frame> started =
          rpc->Call(MessageType::kWatch, protocol::EncodeWatchRequest({}));
      REQUIRE(started.has_value());
      REQUIRE(started->header.status == StatusCode::kOk);
    }
    REQUIRE(kept_sse.WaitFor(": keep-alive"));
    REQUIRE(old_sse.WaitFor(": keep-alive"));
    CHECK(PostEvent(server, kWriter.token, "before") == 200);
    StatusCode ended = StatusCode::kOk;
    CHECK(WatchSees(kept_rpc, "before", &ended));
    CHECK(kept_sse.WaitFor("\"before\""));

    // Rotate: the old reader goes, a new writer comes, the kept reader stays.
    WriteTokenFile(tokens, {kept_reader, kWriter, new_writer});
    REQUIRE(kill(server.pid(), SIGHUP) == 0);
    CHECK(EventuallyStatus(server, old_reader.token, 401));
    CHECK(EventuallyStatus(server, new_writer.token, 200));
    CHECK(PostEvent(server, new_writer.token, "after") == 200);

    // The kept reader's streams flow on; the old reader's ended with `unauthenticated`.
    CHECK(WatchSees(kept_rpc, "after", &ended));
    CHECK(kept_sse.WaitFor("\"after\""));
    CHECK_FALSE(WatchSees(old_rpc, "after", &ended));
    CHECK(ended == StatusCode::kUnauthenticated);
    CHECK(old_sse.WaitFor("event: error"));
    CHECK(old_sse.body().find("\"unauthenticated\"") != std::string::npos);
    CHECK(old_sse.body().find("\"after\"") == std::string::npos);
    AuthedRpc refused(server.rpc_port(), old_reader.token, /*expect_ok=*/false);
    const std::optional<Frame> answer = refused.Read();
    REQUIRE(answer.has_value());
    CHECK(answer->header.status == StatusCode::kUnauthenticated);

    // A token file that does not parse keeps the current set.
    {
      std::ofstream broken(tokens, std::ios::trunc);
      broken << "not a token line\n";
    }
    REQUIRE(kill(server.pid(), SIGHUP) == 0);
    httplib::Client client = server.Client();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string metrics;
    while (metrics.find("kvatlas_auth_token_reloads_total{outcome=\"failed\"} 1") ==
               std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      metrics = client.Get("/metrics", Bearer(kept_reader.token))->body;
    }
    CHECK(metrics.find("kvatlas_auth_token_reloads_total{outcome=\"ok\"} 1") != std::string::npos);
    CHECK(metrics.find("kvatlas_auth_token_reloads_total{outcome=\"failed\"} 1") !=
          std::string::npos);
    CHECK(metrics.find("kvatlas_auth_tokens 3") != std::string::npos);
    CHECK(PostEvent(server, new_writer.token, "still") == 200);
    CHECK(server.Log().find("tokens were not reloaded") != std::string::npos);
  }

  TEST_CASE("Access: without tokens, a server reachable from the network needs --insecure") {
    TempDir dir;
    for (const std::vector<std::string>& exposed :
         {std::vector<std::string>{"--http-listen", "0.0.0.0:0"},
          std::vector<std::string>{"--rpc-listen", "0.0.0.0:0"},
          std::vector<std::string>{"--raft-listen", "0.0.0.0:0"}}) {
      CAPTURE(exposed[0]);
      std::vector<std::string> args = {"--data-dir",    (dir.path() / "data").string(),
                                       "--http-listen", "127.0.0.1:0",
                                       "--rpc-listen",  "127.0.0.1:0"};
      args.insert(args.end(), exposed.begin(), exposed.end());
      const RunResult refused = RunServerToExit(args, dir.path());
      CHECK(refused.exit_code == 2);
      CHECK(refused.err.find("no access tokens are configured") != std::string::npos);
      CHECK(refused.err.find("--insecure") != std::string::npos);
    }
    // Told explicitly: it serves, with a warning.
    {
      ServerProcess open(dir.path() / "open", {"--http-listen", "0.0.0.0:0", "--insecure"});
      httplib::Client client("127.0.0.1", open.port());
      CHECK(client.Post("/v1/events", Event("x").dump(), "application/json")->status == 200);
      CHECK(open.Log().find("ACCESS CONTROL IS OFF (--insecure)") != std::string::npos);
    }
    // With tokens it serves the network, and needs them.
    const auto tokens = dir.path() / "tokens";
    WriteTokenFile(tokens, {kWriter});
    ServerProcess guarded(dir.path() / "guarded",
                          {"--http-listen", "0.0.0.0:0", "--token-file", tokens.string()});
    httplib::Client client("127.0.0.1", guarded.port());
    CHECK(client.Post("/v1/events", Event("x").dump(), "application/json")->status == 401);
    CHECK(PostEvent(guarded, kWriter.token, "x") == 200);
    // Loopback only, no tokens: open, as the README's first commands expect, and logged.
    ServerProcess local(dir.path() / "local");
    CHECK(local.Log().find("access control off: no tokens configured") != std::string::npos);
  }

  TEST_CASE("Access: browser-borne requests are refused, and curl -d reads still work") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");  // access control off: the browser rules hold
    httplib::Client client = server.Client();
    for (const char* type :
         {"application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"}) {
      CAPTURE(type);
      auto write = client.Post("/v1/events", Event("x").dump(), type);
      REQUIRE(write);
      CHECK(write->status == 415);
      CHECK(json::parse(write->body)["code"] == "unsupported_media_type");
      CHECK(client.Post("/register", "{}", type)->status == 415);
    }
    // Reads keep curl's default: `curl -d` in the README.
    auto query = client.Post("/query", R"({"model": "llama", "block_size": 4, "token_ids": [1]})",
                             "application/x-www-form-urlencoded");
    CHECK(query->status == 200);
    // DNS rebinding: a page's own name in the Host header.
    auto rebound = client.Get("/v1/stats", {{"Host", "attacker.example:7070"}});
    CHECK(rebound->status == 403);
    CHECK(json::parse(rebound->body)["code"] == "permission_denied");
    CHECK(client.Get("/v1/stats", {{"Host", "localhost:7070"}})->status == 200);
    // No CORS: nothing grants another origin, and a preflight fails.
    auto cross = client.Get("/v1/stats", {{"Origin", "http://attacker.example"}});
    CHECK(cross->status == 200);
    CHECK_FALSE(cross->has_header("Access-Control-Allow-Origin"));
    auto answer = client.Options("/v1/events", {{"Origin", "http://attacker.example"},
                                                {"Access-Control-Request-Method", "POST"}});
    REQUIRE(answer);
    CHECK(answer->status == 405);
    CHECK_FALSE(answer->has_header("Access-Control-Allow-Origin"));
    CHECK_FALSE(answer->has_header("Access-Control-Allow-Methods"));
  }

  TEST_CASE("Access: gen-token prints a token and the lines that configure it") {
    TempDir dir;
    const RunResult run =
        RunServerToExit({"gen-token", "--name", "sched-1", "--role", "read"}, dir.path());
    REQUIRE(run.exit_code == 0);
    std::istringstream lines(run.out);
    std::vector<std::string> values;
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line[0] != '#') values.push_back(line);
    }
    REQUIRE(values.size() == 3);
    const std::string& token = values[0];
    CHECK(token.starts_with("kvt_"));
    CHECK(values[1] == "sched-1:read:" + Sha256Hex(token));
    CHECK(json::parse(values[2]) ==
          json{{"name", "sched-1"}, {"role", "read"}, {"sha256", Sha256Hex(token)}});
    // The printed line configures a server that then accepts the token.
    {
      std::ofstream file(dir.path() / "tokens");
      file << values[1] << "\n";
    }
    ServerProcess server(dir.path() / "data", {"--token-file", (dir.path() / "tokens").string()});
    httplib::Client client = server.Client();
    CHECK(client.Get("/v1/stats", Bearer(token))->status == 200);
    CHECK(client.Post("/v1/events", Bearer(token), Event("x").dump(), "application/json")->status ==
          403);
    // The config file's "tokens" entry is the same thing.
    {
      std::ofstream config(dir.path() / "config.json");
      config << json{{"tokens", json::array({json::parse(values[2])})}}.dump();
    }
    ServerProcess configured(dir.path() / "data2",
                             {"--config", (dir.path() / "config.json").string()});
    httplib::Client second = configured.Client();
    CHECK(second.Get("/v1/stats", Bearer(token))->status == 200);
    CHECK(second.Get("/v1/stats")->status == 401);

    const RunResult bad =
        RunServerToExit({"gen-token", "--name", "a b", "--role", "read"}, dir.path());
    CHECK(bad.exit_code == 2);
    CHECK(RunServerToExit({"gen-token", "--name", "a", "--role", "root"}, dir.path()).exit_code ==
          2);
  }
}

}  // namespace
}  // namespace kvatlas::testing
