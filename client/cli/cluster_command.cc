#include "client/cli/cluster_command.h"

#include <httplib.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "client/cli/rest_client.h"
#include "kvatlas/common/json_codec.h"

namespace kvatlas::cli {
namespace {

using nlohmann::json;

int Usage(const std::string& problem, const char* usage) {
  std::fprintf(stderr, "kvatlas: cluster: %s\n\n%s", problem.c_str(), usage);
  return 2;
}

std::optional<uint64_t> ParseId(std::string_view text) {
  uint64_t id = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || id == 0) {
    return std::nullopt;
  }
  return id;
}

std::string Text(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

void PrintStatus(const json& s) {
  std::printf("server %s (%s) answered: leader %s, term %s, commit index %s, applied %s\n",
              Text(s.value("id", json())).c_str(), Text(s.value("state", json())).c_str(),
              s.value("leader_id", json(0)) == json(0) ? "unknown"
                                                       : Text(s.value("leader_id", json())).c_str(),
              Text(s.value("term", json())).c_str(), Text(s.value("commit_index", json())).c_str(),
              Text(s.value("applied_index", json())).c_str());
  std::printf("%-4s %-8s %-9s %-22s %-22s %-22s %s\n", "ID", "ROLE", "STATE", "RAFT", "HTTP", "RPC",
              "APPLIED");
  for (const json& m : s.value("members", json::array())) {
    std::printf("%-4s %-8s %-9s %-22s %-22s %-22s %s\n", Text(m.value("id", json())).c_str(),
                Text(m.value("role", json())).c_str(), Text(m.value("state", json())).c_str(),
                Text(m.value("raft_address", json())).c_str(),
                Text(m.value("http_address", json())).c_str(),
                Text(m.value("rpc_address", json())).c_str(),
                Text(m.value("applied_index", json())).c_str());
  }
}

}  // namespace

int RunCluster(const Args& args, std::chrono::milliseconds timeout, const char* usage) {
  if (args.positional.empty())
    return Usage("give a subcommand: status, ready, add, remove, transfer, backup, digest", usage);
  const std::string& sub = args.positional[0];
  const size_t operands = args.positional.size() - 1;
  std::string method = "POST";
  std::string path;
  json body = json::object();
  if (sub == "status") {
    if (operands != 0) return Usage("status takes no arguments", usage);
    method = "GET";
    path = "/v1/cluster";
  } else if (sub == "ready") {
    // GET /readyz needs no token: container health checks run this without one.
    if (operands != 0) return Usage("ready takes no arguments", usage);
    method = "GET";
    path = "/readyz";
  } else if (sub == "add") {
    const std::optional<uint64_t> id = operands == 2 ? ParseId(args.positional[1]) : std::nullopt;
    if (!id || !SplitHostPort(args.positional[2])) {
      return Usage("usage: cluster add ID RAFT_ADDRESS (a positive id and HOST:PORT)", usage);
    }
    path = "/v1/cluster/members";
    body = {{"id", *id}, {"raft_address", args.positional[2]}};
  } else if (sub == "remove") {
    const std::optional<uint64_t> id = operands == 1 ? ParseId(args.positional[1]) : std::nullopt;
    if (!id) return Usage("usage: cluster remove ID (a positive id)", usage);
    method = "DELETE";
    path = "/v1/cluster/members/" + std::to_string(*id);
  } else if (sub == "transfer") {
    if (operands > 1) return Usage("usage: cluster transfer [ID]", usage);
    if (operands == 1) {
      const std::optional<uint64_t> id = ParseId(args.positional[1]);
      if (!id) return Usage("usage: cluster transfer [ID] (a positive id)", usage);
      body["id"] = *id;
    }
    path = "/v1/cluster/transfer";
  } else if (sub == "backup") {
    if (operands != 1 || args.positional[1].empty()) {
      return Usage("usage: cluster backup DIR (a directory under the server's backup_dir)", usage);
    }
    path = "/v1/admin/backup";
    body = {{"to", args.positional[1]}};
  } else if (sub == "digest") {
    if (operands != 0) return Usage("digest takes no arguments", usage);
    method = "GET";
    path = "/v1/admin/digest";
  } else {
    return Usage(
        "unknown subcommand \"" + sub + "\" (status, ready, add, remove, transfer, backup, digest)",
        usage);
  }

  const char* env = std::getenv("KVATLAS_HTTP");
  const std::string address =
      args.Flag("http").value_or(env != nullptr && env[0] != '\0' ? env : "127.0.0.1:7070");
  const std::optional<std::pair<std::string, int>> to = SplitHostPort(address);
  if (!to) return Usage("--http must be HOST:PORT, got \"" + address + "\"", usage);
  Result<TlsFlags> tls = ParseTlsFlags(args);
  if (!tls) return Usage(tls.error().message(), usage);
  const std::unique_ptr<httplib::Client> rest = MakeRestClient(to->first, to->second, *tls);
  httplib::Client& client = *rest;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout - seconds);
  client.set_connection_timeout(std::min<std::chrono::seconds>(seconds, std::chrono::seconds(3)));
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  httplib::Headers headers;
  for (auto& [name, value] : AuthHeaders(TokenFrom(args))) headers.emplace(name, value);
  httplib::Result result = method == "GET" ? client.Get(path, headers)
                           : method == "DELETE"
                               ? client.Delete(path, headers)
                               : client.Post(path, headers, body.dump(), "application/json");
  if (!result) {
    std::fprintf(stderr, "kvatlas: cannot reach the kvatlas REST API at %s: %s\n%s\n",
                 address.c_str(), DescribeRestError(result.error()).c_str(),
                 RestUnreachableAdvice(address, *tls).c_str());
    return 1;
  }
  const json answer = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (result->status != 200) {
    const std::string code =
        answer.is_object() ? Text(answer.value("code", json("error"))) : "error";
    const std::string message =
        answer.is_object() ? Text(answer.value("message", json(result->body))) : result->body;
    std::fprintf(stderr, "kvatlas: cluster %s: HTTP %d %s: %s\n", sub.c_str(), result->status,
                 code.c_str(), message.c_str());
    return 1;
  }
  if (args.Has("json") || !answer.is_object()) {
    std::printf("%s\n", answer.is_discarded() ? result->body.c_str() : DumpJson(answer).c_str());
    return 0;
  }
  if (sub == "status") {
    PrintStatus(answer);
  } else if (sub == "ready") {
    std::printf("ready (revision %s)\n", Text(answer.value("revision", json())).c_str());
  } else if (sub == "add") {
    std::printf("added server %s (raft %s) as a voter\n",
                Text(answer.value("added", json())).c_str(),
                Text(answer.value("raft_address", json())).c_str());
  } else if (sub == "remove") {
    std::printf("removed server %s\n", Text(answer.value("removed", json())).c_str());
  } else if (sub == "backup") {
    std::printf(
        "server %s backed up to %s: applied index %s, %s records, %s bytes, state "
        "digest %s\n",
        Text(answer.value("server_id", json())).c_str(), Text(answer.value("path", json())).c_str(),
        Text(answer.value("applied_index", json())).c_str(),
        Text(answer.value("records", json())).c_str(), Text(answer.value("bytes", json())).c_str(),
        Text(answer.value("state_digest", json())).c_str());
  } else if (sub == "digest") {
    std::printf("server %s at applied index %s: state digest %s\n",
                Text(answer.value("server_id", json())).c_str(),
                Text(answer.value("applied_index", json())).c_str(),
                Text(answer.value("state_digest", json())).c_str());
  } else {
    const json to_id = answer.value("transfer_to", json(0));
    std::printf("leadership transferred to %s\n",
                to_id == json(0) ? "another up-to-date voter" : ("server " + Text(to_id)).c_str());
  }
  return 0;
}

}  // namespace kvatlas::cli
