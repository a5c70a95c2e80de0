#include "tests/integration/sse_reader.h"

#include <chrono>

namespace kvatlas::testing {

SseReader::SseReader(const ServerProcess& server, std::string path,
                     std::function<bool(const std::vector<nlohmann::json>&)> enough)
    : thread([this, &server, path = std::move(path), enough = std::move(enough)] {
        httplib::Client client = server.Client();
        client.set_read_timeout(20, 0);
        std::string buffer;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        client.Get(path, [&](const char* data, size_t size) {
          buffer.append(data, size);
          size_t end;
          while ((end = buffer.find("\n\n")) != std::string::npos) {
            const std::string event = buffer.substr(0, end);
            buffer.erase(0, end + 2);
            for (size_t at = 0; at < event.size();) {
              size_t eol = event.find('\n', at);
              if (eol == std::string::npos) eol = event.size();
              const std::string line = event.substr(at, eol - at);
              if (line.starts_with("data: ")) {
                records.push_back(nlohmann::json::parse(line.substr(6)));
              }
              if (line.starts_with("event: error")) saw_error = true;
              at = eol + 1;
            }
          }
          return !enough(records) && !saw_error && std::chrono::steady_clock::now() < deadline;
        });
      }) {}

}  // namespace kvatlas::testing
