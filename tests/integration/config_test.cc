// The kvatlas-server command line and config file, through the real binary.
#include <doctest/doctest.h>

#include <fstream>

#include "kvatlas_version.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

namespace fs = std::filesystem;

fs::path WriteConfig(const TempDir& dir, const std::string& text,
                     const std::string& name = "kvatlas.json") {
  const fs::path path = dir.path() / name;
  std::ofstream(path) << text;
  return path;
}

TEST_SUITE("Integration.Config") {
  TEST_CASE("Config: --help lists every flag with its default and exits 0") {
    TempDir dir;
    const RunResult run = RunServerToExit({"--help"}, dir.path());
    CHECK(run.exit_code == 0);
    for (const char* flag : {"--data-dir", "--http-listen", "--config", "--hash-seed",
                             "--max-entries-per-context", "--storage-sync", "--http-threads",
                             "--max-body-bytes", "--max-events-per-batch", "--log-level"}) {
      CAPTURE(flag);
      CHECK(run.out.find(flag) != std::string::npos);
    }
    CHECK(run.out.find("(default: \"127.0.0.1:7070\")") != std::string::npos);
    CHECK(run.out.find("(default: 1337)") != std::string::npos);
    // A switch is shown with the value it may take, not one it needs.
    CHECK(run.out.find("--insecure [true|false]") != std::string::npos);
    CHECK(run.out.find("--storage-sync [true|false]") != std::string::npos);
    CHECK(run.out.find("--insecure VALUE") == std::string::npos);
    CHECK(run.out.find("--http-listen HOST:PORT") != std::string::npos);
    CHECK(run.out.find("--http-threads N") != std::string::npos);
    const RunResult short_flag = RunServerToExit({"-h"}, dir.path());
    CHECK(short_flag.exit_code == 0);
    CHECK(short_flag.out == run.out);
  }

  TEST_CASE("Config: every subcommand prints its own help; usage errors are one line and a hint") {
    TempDir dir;
    for (const char* command : {"gen-token", "backup", "restore", "verify-backup"}) {
      for (const char* help : {"--help", "-h"}) {
        CAPTURE(command);
        CAPTURE(help);
        const RunResult run = RunServerToExit({command, help}, dir.path());
        CAPTURE(run.err);
        CHECK(run.exit_code == 0);
        CHECK(run.out.starts_with("Usage: kvatlas-server " + std::string(command) + " "));
        CHECK(run.err.empty());
      }
    }
    struct Case {
      std::vector<std::string> args;
      std::string error;  // the first line
      std::string help;   // the command the second line names
    };
    const std::vector<Case> cases = {
        {{"--colour", "blue"}, "kvatlas-server: unknown flag --colour", "kvatlas-server"},
        {{"--http-threads"}, "kvatlas-server: --http-threads: needs a value", "kvatlas-server"},
        {{"stray"}, "kvatlas-server: unexpected argument \"stray\"", "kvatlas-server"},
        // Unknown before short of a value, in the subcommands too.
        {{"gen-token", "--nmae"},
         "kvatlas-server: gen-token: unknown argument \"--nmae\"",
         "kvatlas-server gen-token"},
        {{"gen-token", "--name"},
         "kvatlas-server: gen-token: --name needs a value",
         "kvatlas-server gen-token"},
        {{"backup", "--bogus", "x"},
         "kvatlas-server: unknown argument \"--bogus\"",
         "kvatlas-server backup"},
        {{"restore", "--from"}, "kvatlas-server: --from needs a value", "kvatlas-server restore"},
        {{"verify-backup"},
         "kvatlas-server: verify-backup needs --from",
         "kvatlas-server verify-backup"},
    };
    for (const Case& c : cases) {
      const RunResult run = RunServerToExit(c.args, dir.path());
      CAPTURE(c.error);
      CHECK(run.exit_code == 2);
      CHECK(run.err == c.error + "\nRun '" + c.help + " --help' for usage.\n");
      CHECK(run.out.empty());
    }
  }

  TEST_CASE("Config: flags override the file, and the example file holds the defaults") {
    TempDir dir;
    const fs::path file =
        WriteConfig(dir, R"({"http_threads": 3, "max_body_bytes": 4096, "storage_sync": false})");
    const RunResult run = RunServerToExit(
        {"--config", file.string(), "--http-threads=5", "--print-config"}, dir.path());
    REQUIRE(run.exit_code == 0);
    const json printed = json::parse(run.out);
    CHECK(printed["http_threads"] == 5);
    CHECK(printed["max_body_bytes"] == 4096);
    CHECK(printed["storage_sync"] == false);
    CHECK(printed["hash_seed"] == 1337);
    CHECK(printed["max_name_bytes"] == 256);
    CHECK(printed["replicas"] == 3);
    const RunResult lowered = RunServerToExit({"--max-name-bytes=64", "--max-salt-bytes=100",
                                               "--max-location-bytes=200", "--print-config"},
                                              dir.path());
    REQUIRE(lowered.exit_code == 0);
    CHECK(json::parse(lowered.out)["max_name_bytes"] == 64);
    CHECK(json::parse(lowered.out)["max_salt_bytes"] == 100);
    CHECK(json::parse(lowered.out)["max_location_bytes"] == 200);

    const RunResult defaults = RunServerToExit({"--print-config"}, dir.path());
    const RunResult example = RunServerToExit(
        {"--config", std::string(KVATLAS_SOURCE_DIR) + "/deploy/config/kvatlas.example.json",
         "--print-config"},
        dir.path());
    REQUIRE(example.exit_code == 0);
    CHECK(json::parse(example.out) == json::parse(defaults.out));
  }

  TEST_CASE("Config: bad settings are named and the server exits non-zero") {
    TempDir dir;
    int files = 0;
    const auto config = [&](const std::string& text) {
      const std::string name = "bad-" + std::to_string(++files) + ".json";
      return std::vector<std::string>{"--config", WriteConfig(dir, text, name).string()};
    };
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {config(R"({"http_thread": 4, "data_dir": "x", "colour": 1})"),
         "unknown key(s) \"colour\", \"http_thread\""},
        {config(R"({"http_threads": "four"})"),
         "http_threads: must be an unsigned integer, got \"four\""},
        {config("http_threads = 4"), "invalid JSON"},
        {{"--config", (dir.path() / "absent.json").string()}, "cannot read config file"},
        {{"--colour", "blue"}, "unknown flag --colour"},
        {{"--http-threads", "0"}, "http_threads: 0 is out of range [1, 1024]"},
        {{"--raft-segment-bytes", "4096"},
         "raft_segment_bytes: 4096 is out of range [1048576, 1073741824]"},
        {{"--storage-sync", "maybe"}, "--storage-sync: expected true or false"},
        {{"--min-free-disk-bytes", "0"},
         "min_free_disk_bytes: 0 is less than raft_segment_bytes (67108864)"},
        {{"--storage-memory-bytes", "33554432"},
         "storage_memory_bytes: must be 0 or hold storage_block_cache_bytes plus one "
         "storage_write_buffer_bytes"},
        {{"--http-listen", "localhost"}, "http_listen: expected HOST:PORT"},
        {{"--log-level", "loud"}, "log_level: expected debug, info, warning or error"},
        {{"--data-dir"}, "--data-dir: needs a value"},
        // A typo'd last flag is unknown, not short of a value.
        {{"--http-lisen"}, "unknown flag --http-lisen"},
        // Name limits: the decoders' maxima are hard caps (docs/limits.md).
        {{"--max-name-bytes", "257"}, "max_name_bytes: 257 is out of range [1, 256]"},
        {{"--max-name-bytes", "0"}, "max_name_bytes: 0 is out of range [1, 256]"},
        {{"--max-salt-bytes", "1025"}, "max_salt_bytes: 1025 is out of range [1, 1024]"},
        {{"--max-location-bytes", "4097"}, "max_location_bytes: 4097 is out of range [1, 4096]"},
        // Peer authentication (docs/security.md §Peers): peers reached over a non-loopback
        // address need a cluster secret.
        {{"--peers", "1@127.0.0.1:7101,2@127.0.0.1:7102", "--http-listen", "0.0.0.0:0"},
         "cluster_secret_file: required for a cluster whose servers use non-loopback addresses"},
        {{"--cluster-secret-file", "s"}, "cluster_id: must be set with cluster_secret_file"},
        {{"--cluster-id", "a b"}, "cluster_id: only letters, digits"},
        // The raft transport binds IPv4 addresses; a name is for peers to resolve.
        {{"--raft-bind", "localhost:7072"},
         "raft_bind: localhost:7072: the host must be an IPv4 address"},
        {{"--peers", "1@127.0.0.1:7101,2@127.0.0.1:7102", "--raft-bind", "0.0.0.0:7101"},
         "cluster_secret_file: required for a cluster whose servers use non-loopback addresses"},
        {{"--peers", "1@kvatlas-0.kvatlas-peers:7072,2@127.0.0.1:7102"},
         "raft_bind: must be set when this server's raft address kvatlas-0.kvatlas-peers:7072 "
         "is a host name"},
        {{"--raft-handshake-timeout-ms", "10"},
         "raft_handshake_timeout_ms: 10 is out of range [100, 60000]"},
        // One group is on every server: a replication factor given with it is a mistake
        // (the default, 3, is not given).
        {{"--replicas", "3"}, "replicas: places the replicas of groups 2 and up"},
        {config(R"({"replicas": 2, "groups": 1})"), "replicas: places the replicas of groups"},
        {{"--groups", "4", "--replicas", "16"}, "replicas: 16 is out of range [0, 15]"},
    };
    for (const auto& [args, expected] : cases) {
      const RunResult run = RunServerToExit(args, dir.path());
      CAPTURE(expected);
      CAPTURE(run.err);
      CHECK(run.exit_code == 2);
      CHECK(run.err.find(expected) != std::string::npos);
    }
  }

  TEST_CASE("Config: --version prints the version, commit and build type") {
    TempDir dir;
    const RunResult run = RunServerToExit({"--version"}, dir.path());
    CHECK(run.exit_code == 0);
    CAPTURE(run.out);
    CHECK(run.out.starts_with("kvatlas-server " KVATLAS_VERSION " (commit "));
    CHECK(run.out.find(KVATLAS_BUILD_TYPE ")") != std::string::npos);
  }

  TEST_CASE("Config: --insecure allows exposed peers without a secret; a bad secret file stops") {
    TempDir dir;
    const RunResult insecure =
        RunServerToExit({"--peers", "1@127.0.0.1:7101,2@127.0.0.1:7102", "--http-listen",
                         "0.0.0.0:0", "--insecure", "true", "--print-config"},
                        dir.path());
    CHECK(insecure.exit_code == 0);
    // Loopback peers need no secret.
    CHECK(RunServerToExit({"--peers", "1@127.0.0.1:7101,2@127.0.0.1:7102", "--print-config"},
                          dir.path())
              .exit_code == 0);
    const fs::path secret = dir.path() / "short.secret";
    std::ofstream(secret) << "short\n";
    const RunResult run = RunServerToExit(
        {"--data-dir", (dir.path() / "d").string(), "--http-listen", "127.0.0.1:0", "--rpc-listen",
         "127.0.0.1:0", "--cluster-id", "c", "--cluster-secret-file", secret.string()},
        dir.path());
    CAPTURE(run.err);
    CHECK(run.exit_code != 0);
    CHECK(run.err.find("the secret must be at least 16 bytes") != std::string::npos);
  }

  TEST_CASE("Config: the server runs with the file's data dir and address") {
    TempDir dir;
    const fs::path data = dir.path() / "from-file";
    const fs::path file =
        WriteConfig(dir, json{{"data_dir", data.string()}, {"http_listen", "127.0.0.1:0"}}.dump());
    ServerProcess server(data, {"--config", file.string()}, ServerProcess::Placement::kFromArgs);
    CHECK(fs::exists(data / "db"));
    auto client = server.Client();
    CHECK(Get(client, "/healthz").status == 200);
    CHECK(server.Terminate() == 0);
  }

  TEST_CASE("Config: a data dir keeps its hash seed and refuses to start with another") {
    TempDir dir;
    {
      ServerProcess server(dir.path() / "data", {"--hash-seed", "7"});
      CHECK(server.Terminate() == 0);
    }
    const RunResult other = RunServerToExit(
        {"--data-dir", (dir.path() / "data").string(), "--http-listen", "127.0.0.1:0"}, dir.path());
    CHECK(other.exit_code == 1);
    CHECK(other.err.find("failed_precondition") != std::string::npos);
    ServerProcess same(dir.path() / "data", {"--hash-seed", "7"});
    auto client = same.Client();
    CHECK(Get(client, "/v1/stats").body["hash_seed"] == 7);
  }

  TEST_CASE("Config: a second server on the same data dir refuses to start") {
    TempDir dir;
    ServerProcess first(dir.path() / "data");
    const RunResult second = RunServerToExit(
        {"--data-dir", (dir.path() / "data").string(), "--http-listen", "127.0.0.1:0"}, dir.path());
    CHECK(second.exit_code == 1);
    CHECK(second.err.find("cannot start") != std::string::npos);
    // The first server still serves, and still owns its address file.
    CHECK(fs::exists(dir.path() / "data" / "http.addr"));
    auto client = first.Client();
    CHECK(Get(client, "/readyz").status == 200);
  }
}

}  // namespace
}  // namespace kvatlas::testing
