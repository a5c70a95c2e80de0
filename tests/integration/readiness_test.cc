// GET /readyz through the real binary: a server that refuses every write says so.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

TEST_SUITE("Integration.Readiness") {
  TEST_CASE("Readiness: below min_free_disk_bytes writes are refused and /readyz is 503") {
    TempDir dir;
    // No disk has an exbibyte free: the disk watcher refuses writes from its first check.
    ServerProcess server(dir.path() / "data", {"--min-free-disk-bytes", "1152921504606846976"});
    auto client = server.Client();
    const json events = {{"events", json::array({{{"event_type", "stored"},
                                                  {"model_name", "m"},
                                                  {"block_size", 2},
                                                  {"backend_id", "w"},
                                                  {"token_ids", {1, 2, 3, 4}}}})}};
    Answer write;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    do {
      write = Post(client, "/v1/events", events);
      if (write.status == 429) break;
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < deadline);
    REQUIRE(write.status == 429);
    CHECK(write.body["message"].get<std::string>().find("disk space low") != std::string::npos);
    // Every write is refused now: the server must not say it is ready.
    const Answer ready = Get(client, "/readyz");
    CHECK(ready.status == 503);
    CHECK(ready.body.value("code", "") == "unavailable");
    CHECK(ready.body.value("message", "").find("disk space low") != std::string::npos);
    // Reads go on, and the process is alive.
    CHECK(Get(client, "/healthz").status == 200);
    CHECK(Get(client, "/v1/stats").status == 200);
  }
}

}  // namespace
}  // namespace kvatlas::testing
