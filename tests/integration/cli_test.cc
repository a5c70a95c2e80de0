// The kvatlas CLI run as a process against the real server binary (part of
// client_tools_test): help and usage errors, addresses given the wrong way, the stats
// summary, lookup hints, the cluster table, ingest progress, and watch after a restart.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/run_program.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

const std::string kCli = KVATLAS_CLI;

std::string RpcAddress(const ServerProcess& server) {
  return server.host() + ":" + std::to_string(server.rpc_port());
}

std::string HttpAddress(const ServerProcess& server) {
  return server.host() + ":" + std::to_string(server.port());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// Waits (bounded) until the file at `path` contains `needle`; its content then.
std::string WaitForText(const std::string& path, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string text = ReadFile(path);
  while (text.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    text = ReadFile(path);
  }
  return text;
}

// The pieces of a progress output: the text between "\r" and "\n" characters, in order.
std::vector<std::string> Redraws(const std::string& output) {
  std::vector<std::string> pieces;
  std::string piece;
  for (const char c : output) {
    if (c == '\r' || c == '\n') {
      if (!piece.empty()) pieces.push_back(piece);
      piece.clear();
    } else {
      piece.push_back(c);
    }
  }
  if (!piece.empty()) pieces.push_back(piece);
  return pieces;
}

// The percentages shown by the progress lines of `output`, in order.
std::vector<int> Percentages(const std::string& output) {
  std::vector<int> shown;
  for (const std::string& piece : Redraws(output)) {
    if (!piece.starts_with("[")) continue;
    const size_t close = piece.find("] ");
    REQUIRE(close != std::string::npos);
    shown.push_back(std::stoi(piece.substr(close + 2)));
  }
  return shown;
}

json Stored(const std::string& model, uint32_t block_size, const std::string& backend,
            const std::vector<uint32_t>& tokens) {
  return {{"event_type", "stored"},
          {"model_name", model},
          {"block_size", block_size},
          {"backend_id", backend},
          {"token_ids", tokens}};
}

TEST_SUITE("Integration.Cli") {
  TEST_CASE("CLI: -h/--help print the global help, COMMAND --help the command's own") {
    for (const std::vector<std::string>& global :
         {std::vector<std::string>{"-h"}, {"--help"}, {"help"}}) {
      std::vector<std::string> line = {kCli};
      line.insert(line.end(), global.begin(), global.end());
      const Run run = RunProgram(line);
      CHECK_MESSAGE(run.exit_code == 0, global[0]);
      CHECK(run.output.starts_with("usage: kvatlas [global flags] COMMAND"));
      CHECK(run.output.find("  watch ") != std::string::npos);
    }
    const std::vector<std::string> commands = {"lookup",
                                               "blocks",
                                               "ingest",
                                               "stats",
                                               "ping",
                                               "watch",
                                               "cluster",
                                               "cluster status",
                                               "cluster groups",
                                               "cluster ready",
                                               "cluster add",
                                               "cluster remove",
                                               "cluster transfer",
                                               "cluster backup",
                                               "cluster digest",
                                               "version",
                                               "help"};
    for (const std::string& command : commands) {
      for (const char* flag : {"--help", "-h"}) {
        std::vector<std::string> line = {kCli};
        std::istringstream words(command);
        for (std::string w; words >> w;) line.push_back(w);
        line.push_back(flag);
        const Run run = RunProgram(line);
        CHECK_MESSAGE(run.exit_code == 0, command << " " << flag << ": " << run.output);
        CHECK_MESSAGE(run.output.starts_with("usage: kvatlas " + command), run.output);
        CHECK_MESSAGE(run.output.find("\ncommands:\n") == std::string::npos, command);
      }
    }
    // Help wins over a bad line; `help COMMAND` is COMMAND --help.
    CHECK(RunProgram({kCli, "lookup", "--modle", "x", "--help"}).exit_code == 0);
    CHECK(RunProgram({kCli, "help", "cluster", "add"})
              .output.starts_with("usage: kvatlas cluster add"));
  }

  TEST_CASE("CLI: a usage error is one line and a pointer to the help, exit 2") {
    const auto two_lines = [](const std::vector<std::string>& line, const std::string& error,
                              const std::string& command) {
      const Run run = RunProgram(line);
      CHECK(run.exit_code == 2);
      CHECK(run.output == "kvatlas: " + error + "\nRun 'kvatlas " + command +
                              (command.empty() ? "" : " ") + "--help' for usage.\n");
    };
    two_lines({kCli, "lookup", "--model", "llama"}, "lookup: --block-size is required", "lookup");
    // The unknown flag is named first, not the last flag's missing value.
    two_lines({kCli, "lookup", "--modle", "llama", "--block-size"}, "lookup: unknown flag --modle",
              "lookup");
    two_lines({kCli, "lookup", "--model", "llama", "--blok-size"},
              "lookup: unknown flag --blok-size", "lookup");
    two_lines({kCli, "watch", "--model"}, "watch: --model needs a value", "watch");
    two_lines({kCli, "stats", "--json=yes"}, "stats: --json takes no value", "stats");
    two_lines({kCli, "cluster", "remove", "zero"}, "cluster remove ID: give one positive server id",
              "cluster remove");
    two_lines({kCli, "cluster", "status", "--frob"}, "cluster: unknown flag --frob",
              "cluster status");
    two_lines({kCli, "watch", "--from", "snapshot", "--model", "llama"},
              "watch: --from snapshot lists one context: give --model and --block-size (and "
              "--tenant, --lora, --salt when it has them)",
              "watch");
    const Run unknown = RunProgram({kCli, "frobnicate"});
    CHECK(unknown.exit_code == 2);
    CHECK(unknown.output.starts_with("kvatlas: unknown command \"frobnicate\" (lookup, "));
    CHECK(unknown.output.ends_with("\nRun 'kvatlas --help' for usage.\n"));
    CHECK(RunProgram({kCli}).exit_code == 2);
  }

  TEST_CASE("CLI: --server given the REST port, or a URL, says what it takes") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const Run rest_port = RunProgram({kCli, "--server", HttpAddress(server), "ping"});
    CHECK(rest_port.exit_code == 1);
    CHECK_MESSAGE(rest_port.output.find(HttpAddress(server) +
                                        " answered in HTTP: this looks like a REST (HTTP) port") !=
                      std::string::npos,
                  rest_port.output);
    CHECK(rest_port.output.find("--server (KVATLAS_SERVER) takes the binary protocol port "
                                "(kvatlas-server --rpc-listen), e.g. 127.0.0.1:7071") !=
          std::string::npos);
    CHECK(rest_port.output.find("protocol version") == std::string::npos);
    CHECK(rest_port.output.find("TLS") == std::string::npos);  // not the advice that fits

    const Run url = RunProgram({kCli, "--server", "http://" + RpcAddress(server), "stats"});
    CHECK(url.exit_code == 2);
    CHECK(url.output.starts_with("kvatlas: --server takes HOST:PORT without a scheme"));
    CHECK(url.output.find("IPv6") == std::string::npos);
    for (const char* command : {"cluster", "watch"}) {
      std::vector<std::string> line = {kCli, command, "--http", "http://" + HttpAddress(server)};
      if (std::string_view(command) == "cluster") line.push_back("status");
      const Run rest_url = RunProgram(line);
      CHECK(rest_url.exit_code == 2);
      CHECK_MESSAGE(rest_url.output.starts_with("kvatlas: --http takes HOST:PORT without a scheme"),
                    rest_url.output);
    }
    setenv("KVATLAS_SERVER", ("http://" + RpcAddress(server)).c_str(), 1);
    const Run env = RunProgram({kCli, "ping"});
    unsetenv("KVATLAS_SERVER");
    CHECK(env.exit_code == 2);
    CHECK(env.output.starts_with("kvatlas: KVATLAS_SERVER takes HOST:PORT without a scheme"));
  }

  TEST_CASE("CLI: stats prints a summary, --json the document; cluster status its columns") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    httplib::Client rest = server.Client();
    const json ingested =
        Ingest(rest, json::array({Stored("llama", 4, "engine-a", Tokens(1, 12))}));
    const std::string at = RpcAddress(server);
    const Run summary = RunProgram({kCli, "--server", at, "stats"});
    REQUIRE_MESSAGE(summary.exit_code == 0, summary.output);
    CHECK(summary.output.starts_with("server      1 (leader, term "));
    CHECK(summary.output.find("\nrevision    " + ingested["revision"].dump() + "\n") !=
          std::string::npos);
    CHECK(summary.output.find("\nentries     3 (3 blocks,") != std::string::npos);
    CHECK(summary.output.find("\ncontexts    1\n") != std::string::npos);
    CHECK(summary.output.find("\ninstances   1 ") != std::string::npos);
    CHECK(summary.output.find("\nrates       ") != std::string::npos);
    const Run as_json = RunProgram({kCli, "--server", at, "stats", "--json"});
    REQUIRE_MESSAGE(as_json.exit_code == 0, as_json.output);
    CHECK(as_json.output.find('\n') == as_json.output.size() - 1);  // one line
    const json doc = json::parse(as_json.output);
    CHECK(doc["index"]["blocks"] == 3);
    CHECK(doc["revision"] == ingested["revision"]);

    const std::string http = HttpAddress(server);
    const Run status = RunProgram({kCli, "cluster", "status", "--http", http});
    REQUIRE_MESSAGE(status.exit_code == 0, status.output);
    std::istringstream lines(status.output);
    std::string header;
    std::string row;
    std::getline(lines, header);  // "server 1 (leader) answered: ..."
    std::getline(lines, header);
    std::getline(lines, row);
    std::istringstream header_words(header);
    std::vector<std::string> columns;
    for (std::string w; header_words >> w;) columns.push_back(w);
    CHECK(columns == std::vector<std::string>{"ID", "ROLE", "STATE", "RAFT", "HTTP", "RPC",
                                              "APPLIED", "LAG", "CONTACT"});
    CHECK(row.starts_with("1 "));
    CHECK(row.find(" leader ") != std::string::npos);
    CHECK(row.substr(header.find("LAG")).starts_with("0 "));
    CHECK(row.substr(header.find("CONTACT")) == "-");  // the leader itself
    const Run status_json = RunProgram({kCli, "cluster", "status", "--http", http, "--json"});
    REQUIRE(status_json.exit_code == 0);
    CHECK(json::parse(status_json.output)["members"][0]["lag_entries"] == 0);

    // The one group: its leader, member, the context and entries ingested above.
    const Run groups = RunProgram({kCli, "cluster", "groups", "--http", http});
    REQUIRE_MESSAGE(groups.exit_code == 0, groups.output);
    CHECK(groups.output.starts_with(
        "directory epoch 0\nGROUP  LEADER  PREFERRED  MEMBERS  CONTEXTS  ENTRIES  SNAPSHOT  "
        "APPLIED  ACCEPTING  PLACED\n1      1       1          1        1         3        "));
    CHECK(groups.output.ends_with("  true       0\n"));
    const Run directory = RunProgram({kCli, "cluster", "directory", "--http", http});
    REQUIRE_MESSAGE(directory.exit_code == 0, directory.output);
    CHECK(directory.output.find("directory epoch 0; every group takes new contexts\nno context "
                                "is placed off its home group\n") != std::string::npos);
    const Run groups_json = RunProgram({kCli, "cluster", "groups", "--http", http, "--json"});
    REQUIRE(groups_json.exit_code == 0);
    const json group = json::parse(groups_json.output)["groups"][0];
    CHECK(group["id"] == 1);
    CHECK(group["members"] == json::array({{{"id", 1}, {"role", "voter"}}}));
    CHECK(group["this_server"] == "leader");
    CHECK(group["preferred_leader"] == 1);
    CHECK(group["contexts"] == 1);
    CHECK(group["entries"] == 3);
    CHECK(group["revision"] == ingested["revision"]);
    CHECK(group["applied_index"].get<uint64_t>() > 0);
  }

  TEST_CASE("CLI: a lookup that finds nothing says what the server has") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const std::string at = RpcAddress(server);
    const std::vector<std::string> lookup16 = {kCli,
                                               "--server",
                                               at,
                                               "lookup",
                                               "--model",
                                               "llama",
                                               "--block-size",
                                               "16",
                                               "--tokens",
                                               "1,2,3,4,5,6,7,8,"
                                               "9,10,11,12,13,14,15,16"};
    const Run empty = RunProgram(lookup16);
    REQUIRE_MESSAGE(empty.exit_code == 0, empty.output);
    CHECK(empty.output.find("the server has no blocks in any context yet") != std::string::npos);

    httplib::Client rest = server.Client();
    Ingest(rest, json::array({Stored("llama", 4, "engine-a", Tokens(1, 8)),
                              Stored("qwen", 16, "engine-b", Tokens(1, 16))}));
    const Run other = RunProgram(lookup16);
    REQUIRE_MESSAGE(other.exit_code == 0, other.output);
    CHECK_MESSAGE(other.output.find("no blocks stored in context model llama, block size 16; "
                                    "known contexts:\n"
                                    "  model llama, block size 4 (2 blocks)\n"
                                    "  model qwen, block size 16 (1 block)\n") != std::string::npos,
                  other.output);
    const Run known = RunProgram({kCli, "--server", at, "lookup", "--model", "llama",
                                  "--block-size", "4", "--tokens", "9,9,9,9"});
    CHECK(known.output.find("context model llama, block size 4 holds 2 blocks, but not the first "
                            "block of this prompt") != std::string::npos);
    // --json is the REST answer, nothing more.
    std::vector<std::string> as_json = lookup16;
    as_json.push_back("--json");
    const Run json_run = RunProgram(as_json);
    REQUIRE(json_run.exit_code == 0);
    CHECK(json::parse(json_run.output)["blocks_found"] == 0);
    CHECK(json_run.output.find("known contexts") == std::string::npos);
  }

  TEST_CASE("CLI: ingest progress is the share of the file applied, redrawn in place") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const std::string file = (dir.path() / "events.jsonl").string();
    {
      // 4,000 lines of one length: the batches of 1,000 events are a quarter each.
      std::ofstream out(file);
      for (uint32_t i = 1000; i < 5000; ++i) {
        out << Stored("m", 4, "e" + std::to_string(i), Tokens(i, 4)).dump() << "\n";
      }
    }
    const std::string at = RpcAddress(server);
    const Run forced = RunProgram({kCli, "--server", at, "ingest", file, "--progress"});
    REQUIRE_MESSAGE(forced.exit_code == 0, forced.output);
    CHECK_MESSAGE((Percentages(forced.output) == std::vector<int>{25, 50, 75, 100, 100}),
                  forced.output);
    CHECK(forced.output.find("[#####---------------]  25%  1000 events, 1000 blocks\r") !=
          std::string::npos);
    CHECK(forced.output.find("100%  4000 events, 4000 blocks\n") != std::string::npos);
    CHECK(forced.output.find("ingested 4000 events, 4000 blocks") != std::string::npos);
    // Not a terminal, no --progress: no progress line.
    const Run quiet = RunProgram({kCli, "--server", at, "ingest", file, "--json"});
    REQUIRE_MESSAGE(quiet.exit_code == 0, quiet.output);
    CHECK(json::parse(quiet.output)["events"] == 4000);
    // A pipe: its size is unknown, so counts without a percentage.
    // (RunProgram single-quotes each argument: double quotes inside.)
    const Run piped = RunProgram(
        {"/bin/sh", "-c",
         "cat \"" + file + "\" | \"" + kCli + "\" --server " + at + " ingest - --progress"});
    REQUIRE_MESSAGE(piped.exit_code == 0, piped.output);
    CHECK(piped.output.find("%") == std::string::npos);
    CHECK(piped.output.find("\r1000 events, 1000 blocks\r2000 events") != std::string::npos);
    // On a terminal (a pty, through script(1)) the same as --progress.
    if (access("/usr/bin/script", X_OK) == 0) {
      const Run tty =
          RunProgram({"/usr/bin/script", "-qec",
                      "\"" + kCli + "\" --server " + at + " ingest \"" + file + "\"", "/dev/null"});
      REQUIRE_MESSAGE(tty.exit_code == 0, tty.output);
      CHECK_MESSAGE((Percentages(tty.output) == std::vector<int>{25, 50, 75, 100, 100}),
                    tty.output);
    } else {
      MESSAGE("no /usr/bin/script: the terminal case is not run");
    }
  }

  TEST_CASE(
      "CLI: watch after a restart: --from 0 says to list; --from snapshot lists, then "
      "follows") {
    TempDir dir;
    {
      ServerProcess before(dir.path() / "data");
      httplib::Client rest = before.Client();
      Ingest(rest, json::array({Stored("llama", 4, "engine-a", Tokens(1, 8))}));
      Ingest(rest, json::array({Stored("qwen", 4, "engine-a", Tokens(1, 4))}));
      REQUIRE(before.Terminate() == 0);
    }
    ServerProcess server(dir.path() / "data");
    const std::string http = HttpAddress(server);
    const Run compacted = RunProgram(
        {kCli, "watch", "--http", http, "--from", "0", "--model", "llama", "--count", "1"});
    CHECK(compacted.exit_code == 1);
    CHECK_MESSAGE(compacted.output.find("kvatlas watch --from snapshot --model llama "
                                        "--block-size N --http " +
                                        http) != std::string::npos,
                  compacted.output);
    CHECK(compacted.output.find("GET /v1/snapshot") == std::string::npos);

    // Two watchers, human and JSON, each exiting after one record (the snapshot is not one).
    const std::string human_out = (dir.path() / "human.out").string();
    const std::string json_out = (dir.path() / "json.out").string();
    const std::string watch = "'" + kCli + "' watch --http " + http +
                              " --from snapshot --model llama --block-size 4 --count 1";
    FILE* human = popen((watch + " >'" + human_out + "' 2>&1 </dev/null").c_str(), "r");
    REQUIRE(human != nullptr);
    FILE* as_json = popen((watch + " --json >'" + json_out + "' 2>&1 </dev/null").c_str(), "r");
    REQUIRE(as_json != nullptr);
    // Ingest once both have listed: the record comes after their snapshots.
    const std::string listed = WaitForText(human_out, "holds");
    const std::string listed_json = WaitForText(json_out, "\n");
    httplib::Client rest = server.Client();
    const json later = Ingest(rest, json::array({Stored("llama", 4, "engine-b", Tokens(1, 4))}));
    const int human_status = pclose(human);
    const int json_status = pclose(as_json);
    const std::string human_text = ReadFile(human_out);
    const std::string json_text = ReadFile(json_out);
    CHECK_MESSAGE((WIFEXITED(human_status) && WEXITSTATUS(human_status) == 0), human_text);
    CHECK_MESSAGE((WIFEXITED(json_status) && WEXITSTATUS(json_status) == 0), json_text);

    const std::string revision = std::to_string(later["revision"].get<uint64_t>() - 1);
    CHECK_MESSAGE(human_text.starts_with("snapshot at revision " + revision +
                                         ": 2 copies in model llama, block size 4\n"),
                  human_text);
    const std::vector<uint64_t> keys = ReferenceSeqHashes(Tokens(1, 8), 4);
    CHECK(human_text.find("holds    engine-a/0               GPU   llama                    key " +
                          std::to_string(keys[1]) + ", depth 1\n") != std::string::npos);
    CHECK(human_text.find(later["revision"].dump() + " ") != std::string::npos);
    CHECK(human_text.find("stored   engine-b/0") != std::string::npos);

    std::istringstream json_lines(json_text);
    std::string first;
    std::string second;
    std::getline(json_lines, first);
    std::getline(json_lines, second);
    const json snapshot = json::parse(first);
    CHECK(snapshot["revision"] == later["revision"].get<uint64_t>() - 1);
    CHECK(snapshot["copies"].size() == 2);
    const json record = json::parse(second);
    CHECK(record["revision"] == later["revision"]);
    CHECK(record["backend_id"] == "engine-b");
  }
}

}  // namespace
}  // namespace kvatlas::testing
