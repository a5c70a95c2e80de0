#include "client/cli/watch_command.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "client/cli/help.h"
#include "client/cli/json_text.h"
#include "client/cli/rest_client.h"
#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"

namespace kvatlas::cli {

void SseParser::Feed(std::string_view chunk) {
  for (const char c : chunk) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the "\n" of a "\r\n" split across chunks, or not
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      Line(line_);
      line_.clear();
      continue;
    }
    line_.push_back(c);
  }
}

void SseParser::Line(std::string_view line) {
  if (line.empty()) {  // end of an event
    if (has_data_) on_event_(event_);
    event_ = SseEvent();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment (": keep-alive")
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) event_.data.push_back('\n');
    event_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.event = std::string(value);
  } else if (field == "id") {
    event_.id = std::string(value);
  }
}

namespace {

using nlohmann::json;

Result<uint64_t> ParseU64(std::string_view text, std::string_view what) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(std::string(what) + ": \"" + std::string(text) +
                                   "\" is not an unsigned integer");
  }
  return value;
}

struct WatchOptions {
  std::string address;
  std::string token;  // "" = none
  TlsFlags tls;
  std::optional<uint64_t> from;  // nullopt = now (or the snapshot's revision)
  bool from_snapshot = false;    // list the context first (GET /v1/snapshot)
  httplib::Params filters;       // GET /v1/watch's query parameters
  httplib::Params context;       // the context's ones among them (GET /v1/snapshot's)
  std::optional<Tier> tier;      // --medium's tier (snapshot copies are filtered here)
  uint64_t count = 0;            // 0 = no limit
  bool json = false;
  // "kvatlas watch --from snapshot --model M ...": how to list and watch again after a
  // compacted --from, with the flags given.
  std::string relist;
};

// The flags given, as a command line: `kvatlas watch --from snapshot ...`, with M and N
// for a --model or --block-size not given.
std::string RelistCommand(const Args& args) {
  std::string command = "kvatlas watch --from snapshot";
  for (const char* flag :
       {"model", "block-size", "tenant", "lora", "salt", "backend", "dp-rank", "medium", "http"}) {
    std::optional<std::string> value = args.Flag(flag);
    if (!value && std::string_view(flag) == "model") value = "M";
    if (!value && std::string_view(flag) == "block-size") value = "N";
    if (!value) continue;
    const bool plain = !value->empty() && value->find_first_of(" '\"\\$`") == std::string::npos;
    command += std::string(" --") + flag + " " + (plain ? *value : "'" + *value + "'");
  }
  if (args.Has("json")) command += " --json";
  return command;
}

Result<WatchOptions> BuildWatch(const Args& args) {
  if (!args.positional.empty()) {
    return Status::InvalidArgument("unexpected argument \"" + args.positional[0] + "\"");
  }
  WatchOptions options;
  if (const std::optional<std::string> from = args.Flag("from"); from && *from == "snapshot") {
    options.from_snapshot = true;
    if (!args.Flag("model") || !args.Flag("block-size")) {
      return Status::InvalidArgument(
          "--from snapshot lists one context: give --model and --block-size (and --tenant, "
          "--lora, --salt when it has them)");
    }
  } else if (from && *from != "now") {
    Result<uint64_t> revision = ParseU64(*from, "--from");
    if (!revision) {
      return Status::InvalidArgument("--from: give a revision, \"now\" or \"snapshot\"; got \"" +
                                     *from + "\"");
    }
    options.from = *revision;
  }
  if (const std::optional<std::string> count = args.Flag("count")) {
    KVATLAS_ASSIGN_OR_RETURN(options.count, ParseU64(*count, "--count"));
    if (options.count == 0) return Status::InvalidArgument("--count must be positive");
  }
  // Flag → query parameter of GET /v1/watch; the numeric ones are checked here so that a
  // typo is a usage error, the medium by the server (it knows the names) unless the
  // snapshot's copies are to be filtered here.
  struct Filter {
    const char* flag;
    const char* param;
    bool context;  // a field of the context (a parameter of GET /v1/snapshot too)
  };
  static constexpr Filter kFilters[] = {
      {"model", "model_name", true},     {"tenant", "tenant_id", true},
      {"lora", "lora_name", true},       {"block-size", "block_size", true},
      {"salt", "additional_salt", true}, {"backend", "backend_id", false},
      {"dp-rank", "dp_rank", false},     {"medium", "medium", false}};
  for (const Filter& filter : kFilters) {
    const std::optional<std::string> value = args.Flag(filter.flag);
    if (!value) continue;
    const std::string_view flag = filter.flag;
    if (flag == "block-size" || flag == "dp-rank") {
      KVATLAS_RETURN_IF_ERROR(ParseU32(*value, "--" + std::string(flag)).status());
    }
    if (flag == "medium" && options.from_snapshot) {
      bool known = false;
      options.tier = TierFromMedium(*value, &known);
      if (!known) return Status::InvalidArgument("--medium: unknown medium \"" + *value + "\"");
    }
    options.filters.emplace(filter.param, *value);
    if (filter.context) options.context.emplace(filter.param, *value);
  }
  options.json = args.Has("json");
  options.token = TokenFrom(args);
  options.relist = RelistCommand(args);
  return options;
}

// "42 stored vllm-0/0 GPU llama 2 keys, first 1464...": one line per record.
void PrintHuman(const std::string& data) {
  const json r = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!r.is_object()) {
    std::printf("%s\n", data.c_str());
    return;
  }
  const auto text = [&](const char* name) { return FieldText(r, name); };
  const json keys = r.value("keys", json::array());
  const std::string first = keys.is_array() && !keys.empty() ? keys.front().dump() : "-";
  const std::string holder = text("backend_id") + "/" + text("dp_rank");
  std::printf("%-10s %-8s %-24s %-5s %-24s %5zu keys, first %s\n", text("revision").c_str(),
              text("op").c_str(), holder.c_str(), text("medium").c_str(),
              text("model_name").c_str(), keys.is_array() ? keys.size() : 0, first.c_str());
}

// One GET /v1/watch from `from`. Its outcome: the records reached --count, the server cut
// the watcher (reconnect from `resume_from`), the stream broke after it had started
// (reconnect from the last revision printed whole), or a failure that ends the command.
struct StreamEnd {
  enum Kind { kCountReached, kCut, kBroken, kFailed } kind = kFailed;
  uint64_t resume_from = 0;
  std::string message;
};

class Watch {
 public:
  explicit Watch(WatchOptions options) : options_(std::move(options)) {}

  int Run(std::chrono::milliseconds timeout) {
    std::optional<uint64_t> from = options_.from;
    if (options_.from_snapshot) {
      Result<uint64_t> revision = Snapshot(timeout);
      if (!revision) {
        std::fprintf(stderr, "kvatlas: watch: %s\n", revision.error().message().c_str());
        return 1;
      }
      from = snapshot_revision_ = *revision;
    }
    while (true) {
      const StreamEnd end = Stream(from, timeout);
      switch (end.kind) {
        case StreamEnd::kCountReached:
          return 0;
        case StreamEnd::kCut:
        // A watcher that stops reading (a stalled terminal or pipe) is cut by the server
        // too, but its full socket gets the connection closed rather than the error event.
        case StreamEnd::kBroken:
          std::fprintf(stderr, "kvatlas: watch: %s; reconnecting from revision %llu\n",
                       end.message.c_str(), static_cast<unsigned long long>(end.resume_from));
          from = end.resume_from;
          break;
        case StreamEnd::kFailed:
          std::fprintf(stderr, "kvatlas: watch: %s\n", end.message.c_str());
          return 1;
      }
    }
  }

 private:
  // Lists the context (GET /v1/snapshot) and prints its copies, those the holder filters
  // keep: a line each, or --json the document as one line. The snapshot's revision.
  Result<uint64_t> Snapshot(std::chrono::milliseconds timeout) {
    const RestTarget target{options_.address, options_.tls, options_.token, timeout};
    Result<RestAnswer> answer =
        RestRequest(target, "GET", httplib::append_query_params("/v1/snapshot", options_.context));
    if (!answer) {
      return Status::Unavailable(answer.error().message() + "\n" +
                                 RestUnreachableAdvice(options_.address, options_.tls));
    }
    if (answer->status != 200) {
      return Status::Unavailable("the snapshot: " + RestErrorText(*answer));
    }
    json doc = json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
    // A scan that failed part-way ends the body unterminated: no partial list is printed.
    if (!doc.is_object() || !doc.value("revision", json()).is_number_unsigned() ||
        !doc.value("copies", json()).is_array()) {
      return Status::Unavailable("the snapshot's answer is not a whole JSON document (" +
                                 std::to_string(answer->body.size()) + " bytes)");
    }
    json kept = json::array();
    for (json& copy : doc["copies"]) {
      if (Keeps(copy)) kept.push_back(std::move(copy));
    }
    doc["copies"] = std::move(kept);
    const uint64_t revision = doc["revision"].get<uint64_t>();
    if (options_.json) {
      std::printf("%s\n", DumpJson(doc).c_str());
    } else {
      std::printf("snapshot at revision %llu: %zu copies in %s\n",
                  static_cast<unsigned long long>(revision), doc["copies"].size(),
                  DescribeContext(doc).c_str());
      const std::string model = FieldText(doc, "model_name");
      for (const json& copy : doc["copies"]) {
        const std::string holder = FieldText(copy, "backend_id") + "/" + FieldText(copy, "dp_rank");
        std::printf("%-10llu %-8s %-24s %-5s %-24s key %s, depth %s\n",
                    static_cast<unsigned long long>(revision), "holds", holder.c_str(),
                    FieldText(copy, "medium").c_str(), model.c_str(),
                    FieldText(copy, "key").c_str(), FieldText(copy, "depth").c_str());
      }
    }
    std::fflush(stdout);
    return revision;
  }

  // Whether a snapshot copy passes --backend, --dp-rank and --medium.
  bool Keeps(const json& copy) const {
    for (const auto& [param, value] : options_.filters) {
      if (param == "backend_id" && FieldText(copy, "backend_id") != value) return false;
      if (param == "dp_rank" && FieldText(copy, "dp_rank") != value) return false;
    }
    return !options_.tier || TierFromMedium(FieldText(copy, "medium")) == *options_.tier;
  }

  // The error of a watch from a revision the feed no longer holds, and what to do.
  std::string Compacted(std::optional<uint64_t> from, std::string server_message) const {
    if (snapshot_revision_ && from == snapshot_revision_) {
      return "the snapshot's revision " + std::to_string(*from) +
             " left the server's change feed before the watch began (the server applied more "
             "changes than the feed keeps while the snapshot was read): run the command again";
    }
    // The server's own advice names its REST routes; the CLI's is the command below.
    if (const size_t advice = server_message.find(" (list with"); advice != std::string::npos) {
      server_message.resize(advice);
    }
    return "compacted: " + server_message +
           "\n  The server keeps only recent changes, and none from before its last restart. "
           "List the current state and follow it from there:\n    " +
           options_.relist;
  }

  StreamEnd Stream(std::optional<uint64_t> from, std::chrono::milliseconds timeout) {
    const auto [host, port] = *SplitHostPort(options_.address);
    const std::unique_ptr<httplib::Client> rest = MakeRestClient(host, port, options_.tls);
    httplib::Client& client = *rest;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
    client.set_connection_timeout(std::clamp<std::chrono::seconds>(seconds, std::chrono::seconds(1),
                                                                   std::chrono::seconds(3)));
    // The server sends a keep-alive comment every second: a read timeout means it is gone.
    const auto read_timeout = std::max<std::chrono::seconds>(seconds, std::chrono::seconds(5));
    client.set_read_timeout(read_timeout.count(), 0);
    client.set_tcp_nodelay(true);
    httplib::Params params = options_.filters;
    params.emplace("from", from ? std::to_string(*from) : "now");

    int status = 0;
    std::string error_body;  // the body of a non-200 answer
    StreamEnd end;
    bool ended = false;
    bool got_bytes = false;
    if (from) last_revision_ = from;
    // Records of revision from + 1 printed before the previous stream broke: they come again.
    uint64_t skip = std::exchange(partial_, 0);
    SseParser parser([&](const SseEvent& e) {
      if (ended) return;
      if (e.event == "error") {
        ended = true;
        const json error = json::parse(e.data, nullptr, /*allow_exceptions=*/false);
        const std::string code = error.is_object() ? error.value("code", "") : "";
        const std::string message = error.is_object() ? error.value("message", e.data) : e.data;
        const json resume = error.is_object() ? error.value("resume_from", json()) : json();
        if (code == "watch_cut" && resume.is_number_unsigned()) {
          end = {StreamEnd::kCut, resume.get<uint64_t>(), message};
        } else if (code == "compacted") {
          end = {StreamEnd::kFailed, 0, Compacted(from, message)};
        } else {
          end = {StreamEnd::kFailed, 0, (code.empty() ? "error" : code) + ": " + message};
        }
        return;
      }
      if (!e.event.empty() && e.event != "message") return;  // an event type we do not know
      if (skip > 0) {
        --skip;
        ++partial_;
        if (!e.id.empty()) partial_ = 0;
        return;
      }
      if (options_.json) {
        std::printf("%s\n", e.data.c_str());
      } else {
        PrintHuman(e.data);
      }
      std::fflush(stdout);
      ++partial_;
      if (!e.id.empty()) {
        if (Result<uint64_t> id = ParseU64(e.id, "id")) last_revision_ = *id;
        partial_ = 0;
      }
      if (options_.count > 0 && ++printed_ >= options_.count) {
        ended = true;
        end = {StreamEnd::kCountReached, 0, ""};
      }
    });
    httplib::Headers headers{{"Accept", "text/event-stream"}};
    for (auto& [name, value] : AuthHeaders(options_.token)) headers.emplace(name, value);
    httplib::Result result = client.Get(
        "/v1/watch", params, headers,
        [&](const httplib::Response& response) {
          status = response.status;
          return true;
        },
        [&](const char* data, size_t size) {
          got_bytes = true;
          if (status != 200) {
            error_body.append(data, size);
            return true;
          }
          parser.Feed(std::string_view(data, size));
          return !ended;
        });
    if (ended) return end;
    if (!result) {
      if (status == 200) {
        const std::string why = "the stream from " + options_.address + " broke (" +
                                DescribeRestError(result.error()) + ")";
        // Reconnecting is worth it only if this stream had got going.
        if (last_revision_ && got_bytes) return {StreamEnd::kBroken, *last_revision_, why};
        partial_ = 0;
        return {StreamEnd::kFailed, 0,
                why + (last_revision_ ? "; resume with --from " + std::to_string(*last_revision_)
                                      : std::string(" before a whole revision came"))};
      }
      return {StreamEnd::kFailed, 0,
              "cannot reach the kvatlas REST API at " + options_.address + ": " +
                  DescribeRestError(result.error()) + "\n" +
                  RestUnreachableAdvice(options_.address, options_.tls)};
    }
    if (status != 200) {
      const json answer = json::parse(error_body, nullptr, /*allow_exceptions=*/false);
      if (FieldText(answer, "code") == "compacted") {
        return {StreamEnd::kFailed, 0, Compacted(from, FieldText(answer, "message", error_body))};
      }
      return {StreamEnd::kFailed, 0, RestErrorText({status, error_body})};
    }
    const std::string resume =
        last_revision_ ? "; resume with --from " + std::to_string(*last_revision_) : "";
    return {StreamEnd::kFailed, 0, "the server ended the stream without an error" + resume};
  }

  const WatchOptions options_;
  std::optional<uint64_t> snapshot_revision_;  // with --from snapshot, once listed
  uint64_t printed_ = 0;
  // The last revision printed whole (an `id:` field closes each revision), and how many
  // records of the next one were printed since.
  std::optional<uint64_t> last_revision_;
  uint64_t partial_ = 0;
};

}  // namespace

int RunWatch(const Args& args, std::chrono::milliseconds timeout) {
  Result<WatchOptions> options = BuildWatch(args);
  if (!options) return UsageError("watch", "watch: " + options.error().message());
  Result<std::string> address = RestAddress(args);
  if (!address) return UsageError("watch", address.error().message());
  Result<TlsFlags> tls = ParseTlsFlags(args);
  if (!tls) return UsageError("watch", tls.error().message());
  options->address = *address;
  options->tls = *tls;
  return Watch(std::move(options).value()).Run(timeout);
}

}  // namespace kvatlas::cli
