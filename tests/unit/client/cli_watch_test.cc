#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "client/cli/watch_command.h"

namespace kvatlas::cli {
namespace {

std::vector<SseEvent> ParseInChunks(const std::string& stream, size_t chunk) {
  std::vector<SseEvent> events;
  SseParser parser([&](const SseEvent& e) { events.push_back(e); });
  for (size_t at = 0; at < stream.size(); at += chunk) {
    parser.Feed(std::string_view(stream).substr(at, chunk));
  }
  return events;
}

TEST_SUITE("CliWatch") {
  TEST_CASE("CliWatch: records, ids, comments and errors, split at every byte") {
    const std::string stream =
        ": keep-alive\n\n"
        "data: {\"revision\": 41, \"op\": \"stored\"}\n\n"
        "id: 41\r\n"
        "data: {\"revision\": 41,\r\n"
        "data:  \"op\": \"removed\"}\r\n\r\n"
        ": keep-alive\r\r"
        "event: error\n"
        "data: {\"code\": \"watch_cut\", \"resume_from\": 41}\n"
        "retry: 10\n\n"
        "data: incomplete";
    for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
      CAPTURE(chunk);
      const std::vector<SseEvent> events = ParseInChunks(stream, chunk);
      REQUIRE(events.size() == 3);
      CHECK(events[0].event.empty());
      CHECK(events[0].id.empty());
      CHECK(events[0].data == "{\"revision\": 41, \"op\": \"stored\"}");
      CHECK(events[1].id == "41");
      CHECK(events[1].data == "{\"revision\": 41,\n \"op\": \"removed\"}");
      CHECK(events[2].event == "error");
      CHECK(events[2].id.empty());  // fields do not carry over to the next event
      CHECK(events[2].data == "{\"code\": \"watch_cut\", \"resume_from\": 41}");
    }
  }

  TEST_CASE("CliWatch: a block of comments only, or a field without a colon, is no event") {
    CHECK(ParseInChunks(": a\n: b\n\n\n\n", 3).empty());
    const std::vector<SseEvent> events = ParseInChunks("data\n\n", 1);
    REQUIRE(events.size() == 1);  // "data" alone is a data line with an empty value
    CHECK(events[0].data.empty());
  }
}

}  // namespace
}  // namespace kvatlas::cli
