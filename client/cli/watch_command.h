// `kvatlas watch`: follows the change feed (docs/feed.md) over REST, GET /v1/watch as
// Server-Sent Events, and prints each record: its JSON line (--json) or a human line.
// With --from snapshot it first lists the context (GET /v1/snapshot) and then watches from
// the snapshot's revision. Reconnects by itself after a `watch_cut` (from the server's
// resume point) or a stream that broke after it had started (from the last revision
// printed whole, without printing a record twice); stops with an error on `compacted`
// (saying how to list and watch with the CLI) and any other error.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "client/cli/args.h"

namespace kvatlas::cli {

// One Server-Sent Event: the fields of one block of lines ended by a blank line.
struct SseEvent {
  std::string event;  // "" when the block had no `event:` line (a "message")
  std::string data;   // the `data:` lines joined by "\n"
  std::string id;     // the `id:` field, "" when absent
};

// An incremental SSE parser (the WHATWG event-stream format): takes the stream in chunks
// split anywhere — inside a line, inside a "\r\n" — and calls `on_event` for each complete
// event. Comment lines (":...") and unknown fields are skipped; a block of only comments
// dispatches nothing. Lines end with "\n", "\r\n" or "\r".
class SseParser {
 public:
  using OnEvent = std::function<void(const SseEvent&)>;
  explicit SseParser(OnEvent on_event) : on_event_(std::move(on_event)) {}

  void Feed(std::string_view chunk);

 private:
  void Line(std::string_view line);

  OnEvent on_event_;
  std::string line_;       // the current, incomplete line
  bool after_cr_ = false;  // the last character fed was '\r' (a "\n" may follow)
  SseEvent event_;         // fields of the event being read
  bool has_data_ = false;  // event_ got at least one `data:` line
};

// Runs `kvatlas watch [flags]`. The REST address is RestAddress(args). Returns the exit
// code: 0 after --count records, 1 unreachable server or an error from it (printed), 2 bad
// command line (the usage error printed).
int RunWatch(const Args& args, std::chrono::milliseconds timeout);

}  // namespace kvatlas::cli
