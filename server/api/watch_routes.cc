// The change feed over REST (docs/api.md §Change feed): GET /v1/watch streams the records
// after a revision as Server-Sent Events; GET /v1/snapshot lists a context's copies at one
// revision, so that a client can list, then watch from that revision, and miss nothing.

#include <atomic>
#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api/feed_json.h"
#include "server/api/forwarding.h"
#include "server/api/routes.h"
#include "server/feed/change_feed.h"
#include "server/service/feed_service.h"
#include "server/service/snapshot_stream.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

// Keep-alive comment when no record came for this long: detects clients that went away
// and keeps proxies from closing an idle stream.
constexpr std::chrono::milliseconds kKeepAlive{1000};

Result<uint64_t> ParseUnsigned(std::string_view name, const std::string& text) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return Status::InvalidArgument(std::string(name) + ": must be an unsigned integer, got \"" +
                                   text.substr(0, 32) + "\"");
  }
  return value;
}

std::optional<std::string> Param(const HttpRequest& request, const char* name) {
  if (!request.HasParam(name)) return std::nullopt;
  return request.Param(name);
}

Result<uint32_t> ParseU32(std::string_view name, const std::string& text) {
  KVATLAS_ASSIGN_OR_RETURN(uint64_t value, ParseUnsigned(name, text));
  if (value > UINT32_MAX) return Status::InvalidArgument(std::string(name) + ": too large");
  return static_cast<uint32_t>(value);
}

Result<FeedFilter> ParseFilter(const HttpRequest& request) {
  FeedFilter f;
  f.tenant = Param(request, "tenant_id");
  f.model = Param(request, "model_name");
  f.lora_name = Param(request, "lora_name");
  f.salt = Param(request, "additional_salt");
  f.holder_id = Param(request, "backend_id");
  if (auto text = Param(request, "block_size")) {
    KVATLAS_ASSIGN_OR_RETURN(f.block_size, ParseU32("block_size", *text));
  }
  if (auto text = Param(request, "dp_rank")) {
    KVATLAS_ASSIGN_OR_RETURN(f.dp_rank, ParseU32("dp_rank", *text));
  }
  if (auto text = Param(request, "medium")) {
    bool known = false;
    f.tier = TierFromMedium(*text, &known);
    if (!known) return Status::InvalidArgument("medium: unknown medium \"" + *text + "\"");
  }
  // Opt-in: predicted records (docs/feed.md §Predicted records).
  if (auto text = Param(request, "predicted")) {
    if (*text == "1" || *text == "true") {
      f.predicted = true;
    } else if (*text != "0" && *text != "false") {
      return Status::InvalidArgument("predicted: must be 1, 0, true or false, got \"" + *text +
                                     "\"");
    }
  }
  return f;
}

// One SSE stream: records as `data:` lines; the last record of each revision also carries
// `id: <revision>`, so an EventSource's Last-Event-ID resumes exactly after it.
//
// The token it was opened with is re-checked before every write (at least once per
// kKeepAlive): a stream whose token a reload removed ends with an `unauthenticated` error
// event (docs/security.md §Tokens and roles).
class WatchStream {
 public:
  WatchStream(std::unique_ptr<Watcher> watcher, std::shared_ptr<std::atomic<int>> streams,
              const Services& services, std::optional<Principal> principal, std::string peer)
      : watcher_(std::move(watcher)),
        streams_(std::move(streams)),
        services_(services),
        principal_(std::move(principal)),
        peer_(std::move(peer)) {}
  ~WatchStream() { streams_->fetch_sub(1); }

  bool Pump(const HttpReply::Write& write) {
    Result<std::vector<FeedRecord>> records = watcher_->Next(kKeepAlive);
    if (Status s = Recheck(); !s.ok()) records = s;
    if (!records.has_value()) {
      const Status& s = records.error();
      json error = {{"code", WireNameOf(s.code())},
                    {"message", s.message()},
                    {"resume_from", watcher_->ResumeFrom()}};
      write("event: error\ndata: " + error.dump() + "\n\n");
      return false;
    }
    if (records->empty()) return write(": keep-alive\n\n");
    std::string out;
    for (size_t i = 0; i < records->size(); ++i) {
      const FeedRecord& r = (*records)[i];
      const bool last_of_revision =
          i + 1 == records->size() || (*records)[i + 1].revision != r.revision;
      if (last_of_revision) out += "id: " + std::to_string(r.revision) + "\n";
      out += "data: ";
      AppendFeedRecordJson(r, &out);
      out += "\n\n";
    }
    return write(out);
  }

 private:
  // The stream's token is still configured, with a role that may read.
  Status Recheck() {
    if (!principal_ || services_.auth == nullptr) return Status::Ok();
    Result<Principal> current = services_.auth->Recheck(*principal_);
    if (current) {
      principal_ = std::move(*current);
      return Authenticator::Authorize(*principal_, Role::kRead, "GET /v1/watch");
    }
    if (services_.audit != nullptr) {
      services_.audit->Refused({"rest", peer_, "GET /v1/watch"}, AuthFailure::kRevokedToken,
                               principal_->name, current.error());
    }
    return current.error();
  }

  std::unique_ptr<Watcher> watcher_;
  std::shared_ptr<std::atomic<int>> streams_;  // open streams, this one included
  const Services& services_;
  std::optional<Principal> principal_;  // nullopt: no access control
  std::string peer_;
};

Result<HttpReply> HandleWatch(const Services& services,
                              const std::shared_ptr<std::atomic<int>>& streams,
                              const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(FeedFilter filter, ParseFilter(request.http));
  std::optional<Revision> from;
  std::string from_text = request.http.Param("from");
  if (from_text.empty()) from_text = request.http.Header("Last-Event-ID");
  if (!from_text.empty() && from_text != "now") {
    KVATLAS_ASSIGN_OR_RETURN(from, ParseUnsigned("from", from_text));
  }
  // Each stream holds an HTTP worker thread for its whole life: keep some for the others.
  if (streams->fetch_add(1) >= static_cast<int>(services.options.max_watch_streams)) {
    streams->fetch_sub(1);
    return Status::ResourceExhausted("too many watch streams (max_watch_streams = " +
                                     std::to_string(services.options.max_watch_streams) +
                                     "); use the binary protocol for more watchers");
  }
  if (const std::optional<ContextKey> context = filter.GroupContext();
      context && services.groups != nullptr) {
    if (const Services& group = ServicesFor(services, *context); !HostsGroup(group)) {
      // A group this server does not hold: its member's stream, relayed.
      std::shared_ptr<void> slot(nullptr, [streams](void*) { streams->fetch_sub(1); });
      return StreamFromMember(services, request, group, /*sse=*/true, from, std::move(slot));
    }
  }
  Result<std::unique_ptr<Watcher>> watcher = Subscribe(services, from, std::move(filter));
  if (!watcher.has_value()) {
    streams->fetch_sub(1);
    return watcher.error();
  }
  std::optional<Principal> principal;
  if (request.principal != nullptr) principal = *request.principal;
  auto stream = std::make_shared<WatchStream>(std::move(watcher).value(), streams, services,
                                              std::move(principal), request.http.remote_addr);
  HttpReply reply;
  reply.content_type = "text/event-stream";
  reply.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  reply.stream = [stream](const HttpReply::Write& write) { return stream->Pump(write); };
  return reply;
}

// A JSON string literal (invalid UTF-8 replaced by U+FFFD, as DumpJson does).
std::string JsonString(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The page's copies as JSON objects separated by commas (a GET /v1/snapshot "copies" run;
// the keys in the order nlohmann's dump of the object gives them).
void AppendSnapshotPageJson(const ContextSnapshot& page, std::string* out) {
  std::vector<std::string> ids;
  ids.reserve(page.holders.size());
  for (const HolderKey& h : page.holders) ids.push_back(JsonString(h.id));
  for (size_t i = 0; i < page.rows.size(); ++i) {
    const SnapshotRow& c = page.rows[i];
    if (i > 0) *out += ',';
    *out += "{\"backend_id\":";
    *out += ids[c.holder];
    *out += ",\"depth\":" + std::to_string(c.depth);
    *out += ",\"dp_rank\":" + std::to_string(page.holders[c.holder].dp_rank);
    *out += ",\"engine_hash\":" + std::to_string(c.engine_hash);
    *out += ",\"key\":" + std::to_string(c.key);
    if (!c.location.empty()) *out += ",\"location\":" + JsonString(c.location);
    *out += ",\"medium\":\"";
    *out += TierName(c.tier);
    *out += "\",\"refcount\":" + std::to_string(c.refcount) + "}";
  }
}

Result<HttpReply> HandleSnapshot(const Services& services, const RouteRequest& request) {
  ContextKey context;
  context.tenant = Param(request.http, "tenant_id").value_or("default");
  if (context.tenant.empty()) context.tenant = "default";
  context.model = Param(request.http, "model_name").value_or("");
  if (context.model.empty()) return Status::InvalidArgument("model_name: is required");
  context.lora_name = Param(request.http, "lora_name").value_or("");
  context.salt = Param(request.http, "additional_salt").value_or("");
  const std::optional<std::string> block_size = Param(request.http, "block_size");
  if (!block_size) return Status::InvalidArgument("block_size: is required");
  KVATLAS_ASSIGN_OR_RETURN(context.block_size, ParseU32("block_size", *block_size));
  if (context.block_size == 0) return Status::InvalidArgument("block_size: must be positive");

  if (const Services& group = ServicesFor(services, context);
      services.groups != nullptr && !HostsGroup(group)) {
    // A group this server does not hold: its member's snapshot, relayed, in a slot of
    // this server's max_snapshot_streams (it holds an HTTP worker meanwhile).
    KVATLAS_ASSIGN_OR_RETURN(std::shared_ptr<void> slot, TakeSnapshotStreamSlot(services));
    return StreamFromMember(services, request, group, /*sse=*/false, std::nullopt, std::move(slot));
  }
  // Streamed page by page (snapshot_stream.h): the first page is waited for here, so that
  // a refused or failed stream is an ordinary error answer; the rest is written as chunks.
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStream> stream,
                           SnapshotStream::Open(services, context, nullptr));
  KVATLAS_ASSIGN_OR_RETURN(SnapshotPage first, stream->Next());
  struct State {
    std::unique_ptr<SnapshotStream> stream;
    std::optional<SnapshotPage> page;
    bool head_written = false;
    bool rows_written = false;  // a page's rows follow earlier ones after a comma
  };
  auto state = std::make_shared<State>();
  state->stream = std::move(stream);
  state->page = std::move(first);
  HttpReply reply;
  reply.stream = [state, context](const HttpReply::Write& write) {
    std::string out;
    if (!state->head_written) {
      state->head_written = true;
      out = "{\"revision\":" + std::to_string(state->page->copies.revision) +
            ",\"tenant_id\":" + JsonString(context.tenant) +
            ",\"model_name\":" + JsonString(context.model) +
            ",\"lora_name\":" + JsonString(context.lora_name) +
            ",\"block_size\":" + std::to_string(context.block_size) +
            ",\"additional_salt\":" + JsonString(context.salt) + ",\"copies\":[";
    } else {
      Result<SnapshotPage> next = state->stream->Next();
      // A scan that fails mid-way ends the body unterminated: the client's JSON parse
      // fails rather than taking a partial list for the whole.
      if (!next.has_value()) return false;
      state->page = std::move(next).value();
    }
    if (!state->page->copies.rows.empty()) {
      if (state->rows_written) out += ',';
      state->rows_written = true;
      AppendSnapshotPageJson(state->page->copies, &out);
    }
    if (state->page->last) out += "]}";
    return write(out) && !state->page->last;
  };
  return reply;
}

}  // namespace

void AddWatchRoutes(const Services* services, Router* router) {
  auto streams = std::make_shared<std::atomic<int>>(0);
  router->Add(
      {"GET", "/v1/watch", RouteAccess::kRead, [services, streams](const RouteRequest& request) {
         return HandleWatch(*services, streams, request);
       }});
  router->Add({"GET", "/v1/snapshot", RouteAccess::kRead, [services](const RouteRequest& request) {
                 return HandleSnapshot(*services, request);
               }});
}

}  // namespace kvatlas::server
