// SseReader: a GET /v1/watch client for the integration tests, on its own thread.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/server_process.h"

namespace kvatlas::testing {

// Reads the `data:` records of GET `path` (parsed JSON) until `enough` says so, an
// `event: error` arrives (saw_error), or 20 s pass. Read `records` after Join().
struct SseReader {
  SseReader(const ServerProcess& server, std::string path,
            std::function<bool(const std::vector<nlohmann::json>&)> enough);
  ~SseReader() { Join(); }
  void Join() {
    if (thread.joinable()) thread.join();
  }

  std::vector<nlohmann::json> records;
  bool saw_error = false;
  std::thread thread;
};

}  // namespace kvatlas::testing
