// The C ABI test program (c_api_test.c) and the kvatlas CLI, run as processes against the
// real server binary.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "kvatlas_version.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/run_program.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

std::string RpcEndpoint(const ServerProcess& server) {
  return server.host() + ":" + std::to_string(server.rpc_port());
}

std::vector<uint64_t> From(const std::vector<uint64_t>& v, size_t first) {
  return {v.begin() + static_cast<std::ptrdiff_t>(first), v.end()};
}

// An endpoint where nothing listens: a server's port after it stopped.
std::string DeadEndpoint(const TempDir& dir) {
  ServerProcess server(dir.path() / "dead");
  const std::string endpoint = RpcEndpoint(server);
  REQUIRE(server.Terminate() == 0);
  return endpoint;
}

TEST_SUITE("Integration.ClientTools") {
  TEST_CASE("C ABI: the C test program passes against a real server") {
    TempDir dir;
    const std::string dead = DeadEndpoint(dir);
    ServerProcess server(dir.path() / "data");
    const Run run = RunProgram({KVATLAS_C_API_TEST, RpcEndpoint(server), dead});
    CHECK_MESSAGE(run.exit_code == 0, run.output);
    CHECK(run.output.find("c_api_test: ok") != std::string::npos);
  }

  TEST_CASE("C ABI and CLI: the access token is sent, and a refusal is reported") {
    TempDir dir;
    const std::string read = "kvt_cli_reader";
    const std::string admin = "kvt_cli_admin";
    // NAME:ROLE:SHA256 lines (the hashes by sha256sum, apart from kvatlas's own code).
    const auto line_of = [&](const std::string& name, const std::string& role,
                             const std::string& token) {
      const Run sum = RunProgram({"/bin/sh", "-c", "printf %s '" + token + "' | sha256sum"});
      REQUIRE(sum.exit_code == 0);
      return name + ":" + role + ":" + sum.output.substr(0, 64) + "\n";
    };
    {
      std::ofstream tokens(dir.path() / "tokens");
      tokens << line_of("reader", "read", read) << line_of("ops", "admin", admin);
    }
    ServerProcess server(dir.path() / "data", {"--token-file", (dir.path() / "tokens").string()});
    const Run c_api = RunProgram({KVATLAS_C_API_TEST, RpcEndpoint(server), read});
    CHECK_MESSAGE(c_api.exit_code == 0, c_api.output);
    CHECK(c_api.output.find("c_api_test: ok (token)") != std::string::npos);

    const std::string cli = KVATLAS_CLI;
    const std::string at = RpcEndpoint(server);
    const std::string http = server.host() + ":" + std::to_string(server.port());
    const Run refused = RunProgram({cli, "--server", at, "stats"});
    CHECK(refused.exit_code == 1);
    CHECK(refused.output.find("unauthenticated") != std::string::npos);
    CHECK(refused.output.find("KVATLAS_TOKEN") != std::string::npos);
    const Run stats = RunProgram({"env", "KVATLAS_TOKEN=" + read, cli, "--server", at, "stats"});
    CHECK_MESSAGE(stats.exit_code == 0, stats.output);
    const Run ping = RunProgram({cli, "--server", at, "--token", read, "ping"});
    CHECK_MESSAGE(ping.exit_code == 0, ping.output);
    {
      std::ofstream events(dir.path() / "events.jsonl");
      events << json{{"event_type", "stored"},
                     {"model_name", "llama"},
                     {"block_size", 4},
                     {"backend_id", "engine-a"},
                     {"token_ids", Tokens(1, 4)}}
                    .dump()
             << "\n";
    }
    const std::string events = (dir.path() / "events.jsonl").string();
    const Run denied = RunProgram({cli, "--server", at, "--token", read, "ingest", events});
    CHECK(denied.exit_code == 1);
    CHECK(denied.output.find("permission_denied") != std::string::npos);
    const Run ingest =
        RunProgram({"env", "KVATLAS_TOKEN=" + admin, cli, "--server", at, "ingest", events});
    CHECK_MESSAGE(ingest.exit_code == 0, ingest.output);

    const Run cluster = RunProgram({cli, "cluster", "status", "--http", http, "--token", read});
    CHECK_MESSAGE(cluster.exit_code == 0, cluster.output);
    const Run no_cluster = RunProgram({cli, "cluster", "status", "--http", http});
    CHECK(no_cluster.exit_code == 1);
    CHECK(no_cluster.output.find("HTTP 401 unauthenticated") != std::string::npos);
    // A container health check: /readyz needs no token.
    const Run ready = RunProgram({cli, "cluster", "ready", "--http", http});
    CHECK_MESSAGE(ready.exit_code == 0, ready.output);
    CHECK(ready.output.find("ready (revision ") != std::string::npos);
    const Run transfer = RunProgram({cli, "cluster", "transfer", "--http", http, "--token", read});
    CHECK(transfer.exit_code == 1);
    CHECK(transfer.output.find("HTTP 403 permission_denied") != std::string::npos);
    const Run watch = RunProgram({"env", "KVATLAS_TOKEN=" + read, cli, "watch", "--http", http,
                                  "--from", "0", "--count", "1", "--json"});
    CHECK_MESSAGE(watch.exit_code == 0, watch.output);
    CHECK(watch.output.find("engine-a") != std::string::npos);
    const Run no_watch = RunProgram({cli, "watch", "--http", http, "--count", "1"});
    CHECK(no_watch.exit_code == 1);
    CHECK(no_watch.output.find("unauthenticated") != std::string::npos);
  }

  TEST_CASE("CLI: ingest, lookup (table and REST-shaped JSON), blocks, stats, ping") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const std::string cli = KVATLAS_CLI;
    const std::string at = RpcEndpoint(server);
    const std::vector<uint32_t> prompt = Tokens(1, 12);
    {
      std::ofstream events(dir.path() / "events.jsonl");
      events << json{{"event_type", "stored"},   {"model_name", "llama"}, {"block_size", 4},
                     {"backend_id", "engine-a"}, {"medium", "gpu"},       {"token_ids", prompt}}
                    .dump()
             << "\n\n"
             << json::array({json{{"event_type", "stored"},
                                  {"model_name", "llama"},
                                  {"block_size", 4},
                                  {"backend_id", "engine-b"},
                                  {"medium", "cpu"},
                                  {"seq_hashes", From(ReferenceSeqHashes(prompt, 4), 1)}}})
                    .dump()
             << "\n";
    }
    Run ingest =
        RunProgram({cli, "--server", at, "ingest", (dir.path() / "events.jsonl").string()});
    CHECK_MESSAGE(ingest.exit_code == 0, ingest.output);
    CHECK(ingest.output.find("ingested 2 events, 5 blocks") != std::string::npos);

    // From stdin ("-"), through KVATLAS_SERVER.
    setenv("KVATLAS_SERVER", at.c_str(), 1);
    Run from_stdin = RunProgram({cli, "ingest", "-"}, (dir.path() / "events.jsonl").string());
    unsetenv("KVATLAS_SERVER");
    CHECK_MESSAGE(from_stdin.exit_code == 0, from_stdin.output);

    const std::string tokens = "1,2,3,4,5,6,7,8,9,10,11,12";
    Run table = RunProgram({cli, "--server", at, "lookup", "--model", "llama", "--block-size", "4",
                            "--tokens", tokens});
    CHECK_MESSAGE(table.exit_code == 0, table.output);
    CHECK(table.output.find("3 of 3 blocks found") != std::string::npos);
    CHECK(table.output.find("engine-a") != std::string::npos);

    Run as_json = RunProgram({cli, "--server", at, "lookup", "--model", "llama", "--block-size",
                              "4", "--tokens", tokens, "--json"});
    REQUIRE_MESSAGE(as_json.exit_code == 0, as_json.output);
    httplib::Client rest = server.Client();
    Answer via_rest = Post(rest, "/v1/lookup",
                           json{{"model_name", "llama"}, {"block_size", 4}, {"token_ids", prompt}});
    CHECK(json::parse(as_json.output) == via_rest.body);

    Run conductor = RunProgram({cli, "--server", at, "lookup", "--model", "llama", "--block-size",
                                "4", "--tokens", tokens, "--conductor"});
    REQUIRE_MESSAGE(conductor.exit_code == 0, conductor.output);
    Answer query =
        Post(rest, "/query", json{{"model", "llama"}, {"block_size", 4}, {"token_ids", prompt}});
    CHECK(json::parse(conductor.output) == query.body);

    const uint64_t key = ReferenceSeqHashes(prompt, 4)[1];
    Run blocks = RunProgram({cli, "--server", at, "blocks", Hex(key), "--json"});
    REQUIRE_MESSAGE(blocks.exit_code == 0, blocks.output);
    CHECK(json::parse(blocks.output) == Get(rest, "/v1/blocks/" + std::to_string(key)).body);

    Run stats = RunProgram({cli, "--server", at, "stats", "--json"});
    REQUIRE_MESSAGE(stats.exit_code == 0, stats.output);
    CHECK(json::parse(stats.output)["index"]["blocks"] == 3);
    CHECK(RunProgram({cli, "--server", at, "ping"}).output.find("pong") != std::string::npos);

    // A bad line stops the ingest with its file:line and the field.
    {
      std::ofstream bad(dir.path() / "bad.jsonl");
      bad << R"({"event_type": "stored", "model_name": "m", "block_size": 0})"
          << "\n";
    }
    Run rejected = RunProgram({cli, "--server", at, "ingest", (dir.path() / "bad.jsonl").string()});
    CHECK(rejected.exit_code == 1);
    CHECK(rejected.output.find("bad.jsonl:1: block_size") != std::string::npos);
  }

  TEST_CASE("CLI: watch prints the records of later ingests, as JSON lines") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const std::string http = server.host() + ":" + std::to_string(server.port());
    const std::string out = (dir.path() / "watch.out").string();
    // In the background, through the shell: the test ingests while it watches.
    const std::string command = "'" + std::string(KVATLAS_CLI) + "' watch --http " + http +
                                " --json --count 2 --from 0 --model llama >'" + out +
                                "' 2>&1 </dev/null";
    FILE* watcher = popen(command.c_str(), "r");
    REQUIRE(watcher != nullptr);
    httplib::Client rest = server.Client();
    const json first = Ingest(rest, json::array({json{{"event_type", "stored"},
                                                      {"model_name", "llama"},
                                                      {"block_size", 4},
                                                      {"backend_id", "engine-a"},
                                                      {"medium", "gpu"},
                                                      {"token_ids", Tokens(1, 8)}}}));
    Ingest(rest, json::array({json{{"event_type", "stored"},
                                   {"model_name", "other"},  // filtered out
                                   {"block_size", 4},
                                   {"backend_id", "engine-a"},
                                   {"token_ids", Tokens(1, 4)}}}));
    const json second =
        Ingest(rest, json::array({json{{"event_type", "removed"},
                                       {"model_name", "llama"},
                                       {"block_size", 4},
                                       {"backend_id", "engine-a"},
                                       {"medium", "gpu"},
                                       {"seq_hashes", ReferenceSeqHashes(Tokens(1, 8), 4)}}}));
    const int status = pclose(watcher);  // --count 2: it exits by itself
    std::ifstream in(out);
    std::vector<json> records;
    std::string all;
    for (std::string line; std::getline(in, line);) {
      all += line + "\n";
      records.push_back(json::parse(line, nullptr, /*allow_exceptions=*/false));
    }
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), all);
    REQUIRE_MESSAGE(records.size() == 2, all);
    CHECK(records[0]["op"] == "stored");
    CHECK(records[0]["revision"] == first["revision"]);
    CHECK(records[0]["backend_id"] == "engine-a");
    CHECK(records[0]["medium"] == "GPU");
    CHECK(records[0]["keys"] == json(ReferenceSeqHashes(Tokens(1, 8), 4)));
    CHECK(records[1]["op"] == "removed");
    CHECK(records[1]["revision"] == second["revision"]);

    // The human form, from the start again: one line per record with its revision and op.
    Run human = RunProgram({KVATLAS_CLI, "watch", "--http", http, "--from", "0", "--count", "3"});
    CHECK_MESSAGE(human.exit_code == 0, human.output);
    CHECK(human.output.find(first["revision"].dump() + " ") == 0);
    CHECK(human.output.find("stored   engine-a/0") != std::string::npos);
    CHECK(human.output.find("removed  engine-a/0") != std::string::npos);
    CHECK(human.output.find("2 keys, first " + std::to_string(ReferenceSeqHashes(
                                                   Tokens(1, 8), 4)[0])) != std::string::npos);

    // Server-side errors end it with the server's message.
    Run future = RunProgram({KVATLAS_CLI, "watch", "--http", http, "--from", "1000000"});
    CHECK(future.exit_code == 1);
    CHECK(future.output.find("in the future") != std::string::npos);
    Run medium = RunProgram({KVATLAS_CLI, "watch", "--http", http, "--medium", "warp"});
    CHECK(medium.exit_code == 1);
    CHECK(medium.output.find("unknown medium") != std::string::npos);
  }

  TEST_CASE("CLI: watch with a bad flag or no server is a clear error") {
    TempDir dir;
    const std::string cli = KVATLAS_CLI;
    Run version = RunProgram({cli, "--version"});
    CHECK(version.exit_code == 0);
    CHECK(version.output.starts_with("kvatlas " KVATLAS_VERSION " (commit "));
    Run bad_flag = RunProgram({cli, "watch", "--modle", "llama"});
    CHECK(bad_flag.exit_code == 2);
    CHECK(bad_flag.output.find("unknown flag --modle") != std::string::npos);
    Run bad_from = RunProgram({cli, "watch", "--from", "yesterday"});
    CHECK(bad_from.exit_code == 2);
    CHECK(bad_from.output.find("--from") != std::string::npos);
    CHECK(RunProgram({cli, "watch", "--count", "0"}).exit_code == 2);
    CHECK(RunProgram({cli, "watch", "--block-size", "x"}).exit_code == 2);

    std::string dead;
    {
      ServerProcess server(dir.path() / "dead");
      dead = server.host() + ":" + std::to_string(server.port());
      REQUIRE(server.Terminate() == 0);
    }
    Run down = RunProgram({cli, "watch", "--http", dead, "--count", "1"});
    CHECK(down.exit_code == 1);
    CHECK(down.output.find("cannot reach the kvatlas REST API at " + dead +
                           ": the connection was refused or the address is unreachable") !=
          std::string::npos);
    setenv("KVATLAS_HTTP", dead.c_str(), 1);  // the same through the environment
    Run env = RunProgram({cli, "watch"});
    unsetenv("KVATLAS_HTTP");
    CHECK(env.exit_code == 1);
    CHECK(env.output.find("at " + dead) != std::string::npos);
  }

  TEST_CASE("CLI: an unreachable server and a bad command line are clear errors") {
    TempDir dir;
    const std::string dead = DeadEndpoint(dir);
    const std::string cli = KVATLAS_CLI;
    Run down = RunProgram({cli, "--server", dead, "stats"});
    CHECK(down.exit_code == 1);
    CHECK(down.output.find("cannot reach a kvatlas server at " + dead) != std::string::npos);

    Run usage = RunProgram({cli, "--server", dead, "lookup", "--model", "llama"});
    CHECK(usage.exit_code == 2);
    CHECK(usage.output.find("--block-size is required") != std::string::npos);
    CHECK(RunProgram({cli, "frobnicate"}).exit_code == 2);
    CHECK(RunProgram({cli, "--help"}).exit_code == 0);
  }
}

}  // namespace
}  // namespace kvatlas::testing
