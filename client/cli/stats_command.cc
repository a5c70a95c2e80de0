#include "client/cli/stats_command.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "client/cli/help.h"
#include "kvatlas/common/json_codec.h"

namespace kvatlas::cli {
namespace {

using nlohmann::json;

// The number at `path` ("index/blocks"), or nullopt.
std::optional<double> Number(const json& doc, std::initializer_list<const char*> path) {
  const json* at = &doc;
  for (const char* name : path) {
    if (!at->is_object()) return std::nullopt;
    const auto it = at->find(name);
    if (it == at->end()) return std::nullopt;
    at = &*it;
  }
  return at->is_number() ? std::optional<double>(at->get<double>()) : std::nullopt;
}

std::string Count(const json& doc, std::initializer_list<const char*> path) {
  const std::optional<double> value = Number(doc, path);
  return value ? std::to_string(static_cast<unsigned long long>(*value)) : "-";
}

std::string Bytes(std::optional<double> bytes) {
  if (!bytes) return "-";
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = *bytes;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string Duration(std::optional<double> seconds) {
  if (!seconds) return "-";
  char text[32];
  const auto s = static_cast<long long>(*seconds);
  if (*seconds < 60) {
    std::snprintf(text, sizeof text, "%.1fs", *seconds);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldd%02lldh", s / 86400, s / 3600 % 24);
  }
  return text;
}

std::string Rate(std::optional<double> count, std::optional<double> seconds) {
  if (!count || !seconds || *seconds <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", *count / *seconds);
  return text;
}

std::string Text(const json& doc, std::initializer_list<const char*> path) {
  const json* at = &doc;
  for (const char* name : path) {
    if (!at->is_object() || !at->contains(name)) return "-";
    at = &(*at)[name];
  }
  return at->is_string() ? at->get<std::string>() : at->is_null() ? "-" : at->dump();
}

}  // namespace

std::string FormatStats(const std::string& document) {
  const json s = json::parse(document, nullptr, /*allow_exceptions=*/false);
  if (!s.is_object()) return document + "\n";
  const std::optional<double> uptime = Number(s, {"uptime_seconds"});
  std::optional<double> events;
  if (auto st = Number(s, {"applied", "stored"}), rm = Number(s, {"applied", "removed"}),
      cl = Number(s, {"applied", "cleared"});
      st && rm && cl) {
    events = *st + *rm + *cl;
  }
  std::string out;
  const auto line = [&out](const char* name, const std::string& value) {
    char head[16];
    std::snprintf(head, sizeof head, "%-11s ", name);
    out += head + value + "\n";
  };
  line("server", Text(s, {"cluster", "id"}) + " (" + Text(s, {"cluster", "state"}) + ", term " +
                     Text(s, {"cluster", "term"}) + "), up " + Duration(uptime));
  line("revision", Count(s, {"revision"}));
  line("entries", Count(s, {"index", "entries"}) + " (" + Count(s, {"index", "blocks"}) +
                      " blocks, " + Count(s, {"index", "locations"}) + " locations, " +
                      Count(s, {"index", "aliases"}) + " aliases; " +
                      Count(s, {"index", "evicted_blocks"}) + " blocks evicted)");
  line("contexts", Count(s, {"index", "contexts"}));
  line("instances", Count(s, {"index", "holders"}) + " (holders: engines and shared backends)");
  line("memory", Bytes(Number(s, {"index", "memory_bytes"})) + " index; storage ~" +
                     Bytes(Number(s, {"storage", "approximate_bytes"})));
  line("applied", Count(s, {"applied", "stored"}) + " stored, " + Count(s, {"applied", "removed"}) +
                      " removed, " + Count(s, {"applied", "cleared"}) + " cleared events; " +
                      Count(s, {"applied", "entries_added"}) + " entries added, " +
                      Count(s, {"applied", "entries_removed"}) + " removed, " +
                      Count(s, {"applied", "entries_evicted"}) + " evicted (since the start)");
  line("rates", Rate(events, uptime) + " events/s, " +
                    Rate(Number(s, {"applied", "entries_added"}), uptime) +
                    " entries added/s (averages since the start)");
  const bool failed = Text(s, {"applier", "failed"}) == "true";
  line("applier", Count(s, {"applier", "queue_depth"}) + " write batches queued" +
                      (failed ? "; FAILED (see the server's log)" : ""));
  return out;
}

int RunStats(const Args& args, const RpcTarget& target) {
  if (!args.positional.empty()) {
    return UsageError("stats", "stats: unexpected argument \"" + args.positional[0] + "\"");
  }
  std::unique_ptr<Client> client = ConnectOrExplain(target);
  if (client == nullptr) return 1;
  Result<StatsAnswer> stats = client->Stats();
  if (!stats) return Failed(stats.error(), target);
  if (args.Has("json")) {
    const json doc = json::parse(stats->json, nullptr, /*allow_exceptions=*/false);
    std::printf("%s\n", doc.is_discarded() ? stats->json.c_str() : DumpJson(doc).c_str());
  } else {
    std::fputs(FormatStats(stats->json).c_str(), stdout);
  }
  return 0;
}

int RunPing(const Args& args, const RpcTarget& target) {
  if (!args.positional.empty()) {
    return UsageError("ping", "ping: unexpected argument \"" + args.positional[0] + "\"");
  }
  std::unique_ptr<Client> client = ConnectOrExplain(target);
  if (client == nullptr) return 1;
  const auto start = std::chrono::steady_clock::now();
  Status s = client->Ping();
  if (!s.ok()) return Failed(s, target);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  if (args.Has("json")) {
    std::printf("{\"round_trip_us\":%lld}\n", static_cast<long long>(us.count()));
  } else {
    std::printf("pong in %lld us\n", static_cast<long long>(us.count()));
  }
  return 0;
}

}  // namespace kvatlas::cli
