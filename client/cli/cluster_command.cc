#include "client/cli/cluster_command.h"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/cli/help.h"
#include "client/cli/json_text.h"
#include "client/cli/rest_client.h"
#include "kvatlas/common/json_codec.h"

namespace kvatlas::cli {
namespace {

using nlohmann::json;

std::optional<uint64_t> ParseId(std::string_view text) {
  uint64_t id = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || id == 0) {
    return std::nullopt;
  }
  return id;
}

std::string Text(const json& object, const char* name) { return FieldText(object, name); }

// "120ms", "4.2s", "3m10s": the time since the leader last heard from a member; "never"
// when it is known unreachable and was never heard from, "-" when not known here.
std::string Contact(const json& member) {
  const auto ms = member.find("last_contact_ms");
  if (ms == member.end() || !ms->is_number()) {
    const auto reachable = member.find("reachable");
    return reachable != member.end() && *reachable == json(false) ? "never" : "-";
  }
  const double value = ms->get<double>();
  char text[32];
  if (value < 10'000) {
    std::snprintf(text, sizeof text, "%.0fms", value);
  } else if (value < 120'000) {
    std::snprintf(text, sizeof text, "%.1fs", value / 1000);
  } else {
    const auto seconds = static_cast<long long>(value / 1000);
    std::snprintf(text, sizeof text, "%lldm%02llds", seconds / 60, seconds % 60);
  }
  return text;
}

std::string LeaderText(const json& doc) {
  const std::string id = Text(doc, "leader_id");
  return id == "-" || id == "0" ? "unknown" : id;
}

int ExpectNoOperands(const std::string& sub, size_t operands) {
  if (operands == 0) return 0;
  return UsageError("cluster " + sub, "cluster " + sub + " takes no arguments");
}

// Rows as columns two spaces apart, each as wide as its widest cell.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string FormatStatus(const json& s) {
  std::string out = "server " + Text(s, "id") + " (" + Text(s, "state") + ") answered: leader " +
                    LeaderText(s) + ", term " + Text(s, "term") + ", commit index " +
                    Text(s, "commit_index") + ", applied " + Text(s, "applied_index") + "\n";
  static const char* const kHeader[] = {"ID",  "ROLE",    "STATE", "RAFT",   "HTTP",
                                        "RPC", "APPLIED", "LAG",   "CONTACT"};
  std::vector<std::vector<std::string>> rows = {{std::begin(kHeader), std::end(kHeader)}};
  std::vector<std::string> unreachable;
  std::string draining;
  bool leader_only_unknown = false;
  const json members = s.value("members", json::array());
  for (const json& m : members.is_array() ? members : json::array()) {
    rows.push_back({Text(m, "id"), Text(m, "role"), Text(m, "state"), Text(m, "raft_address"),
                    Text(m, "http_address"), Text(m, "rpc_address"), Text(m, "applied_index"),
                    Text(m, "lag_entries"), Contact(m)});
    if (Text(m, "state") == "unreachable" || m.value("reachable", json()) == json(false)) {
      unreachable.push_back(Text(m, "id"));
    }
    if (Text(m, "lag_entries") == "-") leader_only_unknown = true;
    if (m.value("draining", json()) == json(true)) {
      draining += (draining.empty() ? "" : ", ") + Text(m, "id");
    }
  }
  out += FormatTable(rows);
  if (!draining.empty()) out += "draining (leads no group once handed over): " + draining + "\n";
  if (!unreachable.empty()) {
    std::string ids;
    for (const std::string& id : unreachable) ids += (ids.empty() ? "" : ", ") + id;
    out +=
        "unreachable (the leader has not heard from it within an election timeout): " + ids + "\n";
  }
  if (leader_only_unknown && Text(s, "state") != "leader") {
    const std::string leader_http = Text(s, "leader_http_address");
    out += "LAG and CONTACT are known on the leader only";
    out += leader_http == "-" ? ".\n" : ": kvatlas cluster status --http " + leader_http + "\n";
  }
  return out;
}

// One line per group: id, leader, preferred leader, members, contexts, entries, last
// snapshot, applied index.
std::string FormatGroups(const json& doc) {
  std::string out = "directory epoch " + Text(doc, "epoch") + "\n";
  static const char* const kHeader[] = {"GROUP",   "LEADER",   "PREFERRED", "MEMBERS",   "CONTEXTS",
                                        "ENTRIES", "SNAPSHOT", "APPLIED",   "ACCEPTING", "PLACED"};
  std::vector<std::vector<std::string>> rows = {{std::begin(kHeader), std::end(kHeader)}};
  const json groups = doc.value("groups", json::array());
  for (const json& g : groups.is_array() ? groups : json::array()) {
    // The members the directory records (replicas on some servers), else raft's as the
    // answering server knows them.
    std::string members;
    const json recorded = g.value("replicas", json::array());
    for (const json& id : recorded.is_array() ? recorded : json::array()) {
      members += (members.empty() ? "" : ",") + id.dump();
    }
    const json list = g.value("members", json::array());
    for (const json& m : members.empty() && list.is_array() ? list : json::array()) {
      members += (members.empty() ? "" : ",") + Text(m, "id");
    }
    rows.push_back({Text(g, "id"), LeaderText(g), Text(g, "preferred_leader"),
                    members.empty() ? "-" : members, Text(g, "contexts"), Text(g, "entries"),
                    Text(g, "snapshot_bytes"), Text(g, "applied_index"), Text(g, "accepting"),
                    Text(g, "placed_contexts")});
  }
  return out + FormatTable(rows);
}

// The placement directory: its epoch, the groups taking no new contexts, and one line per
// context it places off its home group.
std::string FormatDirectory(const json& doc) {
  std::string out = "directory epoch " + Text(doc, "epoch");
  std::string refusing;
  const json groups = doc.value("groups", json::array());
  for (const json& g : groups.is_array() ? groups : json::array()) {
    if (g.value("accepting", json(true)) == json(false)) {
      refusing += (refusing.empty() ? "" : ",") + Text(g, "id");
    }
  }
  out += refusing.empty() ? "; every group takes new contexts\n"
                          : "; groups taking no new contexts: " + refusing + "\n";
  static const char* const kHeader[] = {"TENANT", "MODEL",      "LORA", "BLOCK_SIZE",
                                        "SALT",   "HOME_GROUP", "GROUP"};
  std::vector<std::vector<std::string>> rows = {{std::begin(kHeader), std::end(kHeader)}};
  const json contexts = doc.value("contexts", json::array());
  for (const json& c : contexts.is_array() ? contexts : json::array()) {
    std::string placed;
    const json ranges = c.value("ranges", json::array());
    for (const json& r : ranges.is_array() ? ranges : json::array()) {
      placed += (placed.empty() ? "" : ",") + Text(r, "group");
    }
    const auto or_dash = [](const std::string& text) { return text.empty() ? "-" : text; };
    rows.push_back({Text(c, "tenant_id"), Text(c, "model_name"), or_dash(Text(c, "lora_name")),
                    Text(c, "block_size"), or_dash(Text(c, "additional_salt")),
                    Text(c, "home_group"), placed.empty() ? "-" : placed});
  }
  if (rows.size() == 1) return out + "no context is placed off its home group\n";
  return out + FormatTable(rows);
}

// One line for a single group's backup; a line per group for a server hosting several.
std::string FormatBackup(const json& answer) {
  const std::string head =
      "server " + Text(answer, "server_id") + " backed up to " + Text(answer, "path") + ": ";
  const auto part = [](const json& p) {
    return "applied index " + Text(p, "applied_index") + ", " + Text(p, "records") + " records, " +
           Text(p, "bytes") + " bytes, state digest " + Text(p, "state_digest") + "\n";
  };
  const auto groups = answer.find("groups");
  if (groups == answer.end() || !groups->is_array() || groups->size() < 2) {
    return head + part(answer);
  }
  std::string out = head + std::to_string(groups->size()) + " raft groups, " +
                    Text(answer, "records") + " records, " + Text(answer, "bytes") + " bytes\n";
  for (const json& g : *groups) {
    if (g.is_object()) out += "  group " + Text(g, "group") + ": " + part(g);
  }
  return out;
}

// One line for a single group; a line per group for a server hosting several.
std::string FormatDigest(const json& answer) {
  const auto part = [](const json& p) {
    return " at applied index " + Text(p, "applied_index") + ": state digest " +
           Text(p, "state_digest") + "\n";
  };
  const auto groups = answer.find("groups");
  if (groups == answer.end() || !groups->is_array() || groups->size() < 2) {
    return "server " + Text(answer, "server_id") + part(answer);
  }
  std::string out = "server " + Text(answer, "server_id") + ": " + std::to_string(groups->size()) +
                    " raft groups\n";
  for (const json& g : *groups) {
    if (g.is_object()) out += "  group " + Text(g, "group") + part(g);
  }
  return out;
}

}  // namespace

std::string FormatClusterAnswer(const std::string& sub, const std::string& document) {
  const json answer = json::parse(document, nullptr, /*allow_exceptions=*/false);
  if (!answer.is_object()) return document + "\n";
  std::string out;
  if (sub == "status") {
    out = FormatStatus(answer);
  } else if (sub == "groups") {
    out = FormatGroups(answer);
  } else if (sub == "directory") {
    out = FormatDirectory(answer);
  } else if (sub == "ready") {
    out = "ready (revision " + Text(answer, "revision") + ")\n";
  } else if (sub == "add") {
    out = "added server " + Text(answer, "added") + " (raft " + Text(answer, "raft_address") +
          ") as a voter\n";
  } else if (sub == "remove") {
    out = "removed server " + Text(answer, "removed") + "\n";
  } else if (sub == "drain" || sub == "undrain") {
    out = "server " + Text(answer, "id") +
          (answer.value("draining", json()) == json(true)
               ? " drains: its groups go to other servers (kvatlas cluster groups shows their "
                 "leaders)\n"
               : " no longer drains: it takes its share of the groups' leaderships again\n");
  } else if (sub == "backup") {
    out = FormatBackup(answer);
  } else if (sub == "digest") {
    out = FormatDigest(answer);
  } else if (answer.contains("leader_id")) {  // transfer
    const std::string leader = LeaderText(answer);
    out = leader == "unknown" ? "leadership transferred: the new leader is not known yet "
                                "(kvatlas cluster status shows it once elected)\n"
                              : "leadership transferred: server " + leader + " leads now\n";
  } else {  // a server from before leader_id: only the id asked for, if any
    const std::string to = Text(answer, "transfer_to");
    out = "leadership transferred to " +
          (to == "-" || to == "0" ? std::string("another up-to-date voter") : "server " + to) +
          "\n";
  }
  return out;
}

int RunCluster(const Args& args, std::chrono::milliseconds timeout) {
  if (args.positional.empty()) {
    return UsageError("cluster",
                      "cluster: give a subcommand: status, groups, directory, ready, add, remove, "
                      "transfer, drain, undrain, backup, digest");
  }
  const std::string& sub = args.positional[0];
  const std::string path_of_sub = "cluster " + sub;
  const size_t operands = args.positional.size() - 1;
  std::string method = "POST";
  std::string path;
  json body = json::object();
  if (sub == "status" || sub == "ready" || sub == "digest" || sub == "groups" ||
      sub == "directory") {
    if (int rc = ExpectNoOperands(sub, operands); rc != 0) return rc;
    method = "GET";
    // GET /readyz needs no token: container health checks run this without one.
    path = sub == "status"      ? "/v1/cluster"
           : sub == "ready"     ? "/readyz"
           : sub == "groups"    ? "/v1/groups"
           : sub == "directory" ? "/v1/directory"
                                : "/v1/admin/digest";
  } else if (sub == "add") {
    const std::optional<uint64_t> id = operands == 2 ? ParseId(args.positional[1]) : std::nullopt;
    if (!id || !SplitHostPort(args.positional[2])) {
      return UsageError(path_of_sub,
                        "cluster add ID RAFT_ADDRESS: give a positive server id and HOST:PORT");
    }
    path = "/v1/cluster/members";
    body = {{"id", *id}, {"raft_address", args.positional[2]}};
  } else if (sub == "remove") {
    const std::optional<uint64_t> id = operands == 1 ? ParseId(args.positional[1]) : std::nullopt;
    if (!id) return UsageError(path_of_sub, "cluster remove ID: give one positive server id");
    method = "DELETE";
    path = "/v1/cluster/members/" + std::to_string(*id);
  } else if (sub == "transfer") {
    const std::optional<uint64_t> id = operands == 1 ? ParseId(args.positional[1]) : std::nullopt;
    if (operands > 1 || (operands == 1 && !id)) {
      return UsageError(path_of_sub, "cluster transfer [ID]: give at most one positive server id");
    }
    if (id) body["id"] = *id;
    path = "/v1/cluster/transfer";
  } else if (sub == "drain" || sub == "undrain") {
    const std::optional<uint64_t> id = operands == 1 ? ParseId(args.positional[1]) : std::nullopt;
    if (!id) return UsageError(path_of_sub, "cluster " + sub + " ID: give one positive server id");
    path = "/v1/cluster/drain";
    body = {{"id", *id}, {"draining", sub == "drain"}};
  } else if (sub == "backup") {
    if (operands != 1 || args.positional[1].empty()) {
      return UsageError(path_of_sub,
                        "cluster backup DIR: give one directory (under the server's backup_dir)");
    }
    path = "/v1/admin/backup";
    body = {{"to", args.positional[1]}};
  } else {
    return UsageError(
        "cluster", "cluster: unknown subcommand \"" + sub +
                       "\" (status, groups, ready, add, remove, transfer, drain, undrain, backup, "
                       "digest)");
  }

  Result<std::string> address = RestAddress(args);
  if (!address) return UsageError(path_of_sub, address.error().message());
  Result<TlsFlags> tls = ParseTlsFlags(args);
  if (!tls) return UsageError(path_of_sub, tls.error().message());
  const RestTarget target{*address, *tls, TokenFrom(args), timeout};
  Result<RestAnswer> result = RestRequest(target, method, path, body.dump());
  if (!result) {
    std::fprintf(stderr, "kvatlas: %s\n%s\n", result.error().message().c_str(),
                 RestUnreachableAdvice(*address, *tls).c_str());
    return 1;
  }
  if (result->status != 200) {
    std::fprintf(stderr, "kvatlas: cluster %s: %s\n", sub.c_str(), RestErrorText(*result).c_str());
    return 1;
  }
  if (args.Has("json")) {
    const json answer = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
    std::printf("%s\n", answer.is_discarded() ? result->body.c_str() : DumpJson(answer).c_str());
    return 0;
  }
  std::fputs(FormatClusterAnswer(sub, result->body).c_str(), stdout);
  return 0;
}

}  // namespace kvatlas::cli
