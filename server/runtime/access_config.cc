#include "server/runtime/access_config.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/internal/host_port.h"
#include "kvatlas/common/json_codec.h"
#include "server/runtime/config.h"

namespace kvatlas::server {
namespace {

void AddListener(std::string_view key, const std::string& address,
                 std::vector<std::string>* exposed) {
  const Result<HostPort> parsed = ParseHostPort(address);
  if (parsed.has_value() && !IsLoopbackHost(parsed->host)) {
    exposed->push_back(std::string(key) + " " + address);
  }
}

}  // namespace

Result<TokenEntry> TokenFromJson(const nlohmann::json& value, const std::string& path) {
  const auto invalid = [&](const std::string& what) {
    return Status::InvalidArgument(path + ": " + what);
  };
  if (!value.is_object()) return invalid("must be an object {name, role, sha256}");
  TokenEntry token;
  for (const char* key : {"name", "role", "sha256"}) {
    if (!value.contains(key) || !value[key].is_string()) {
      return invalid(std::string(key) + ": is required (a string)");
    }
  }
  for (const auto& [key, field] : value.items()) {
    if (key != "name" && key != "role" && key != "sha256") {
      return invalid("unknown key \"" + key + "\"");
    }
  }
  token.name = value["name"].get<std::string>();
  if (Status s = ValidateTokenName(token.name); !s.ok()) return invalid(s.message());
  const std::string role = value["role"].get<std::string>();
  const std::optional<Role> parsed = ParseRole(role);
  if (!parsed) return invalid("role: must be read, write or admin, got \"" + role + "\"");
  token.role = *parsed;
  Result<TokenDigest> digest = ParseDigestHex(value["sha256"].get<std::string>());
  if (!digest) return invalid(digest.error().message());
  token.digest = *digest;
  return token;
}

nlohmann::ordered_json TokenToJson(const TokenEntry& token) {
  return {{"name", token.name},
          {"role", std::string(RoleName(token.role))},
          {"sha256", DigestHex(token.digest)}};
}

bool AccessControlConfigured(const Config& config) {
  return !config.tokens.empty() || !config.token_file.empty();
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  const std::string text(host);
  unsigned char v4[4];
  if (inet_pton(AF_INET, text.c_str(), v4) == 1) return v4[0] == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::vector<std::string> ExposedListeners(const Config& config) {
  std::vector<std::string> exposed;
  AddListener("http_listen", config.http_listen, &exposed);
  AddListener("rpc_listen", config.rpc_listen, &exposed);
  std::string raft = config.raft_listen;
  if (raft.empty()) {
    Result<std::vector<std::pair<uint64_t, std::string>>> peers = ParsePeers(config.peers);
    if (peers.has_value()) {
      for (const auto& [id, address] : *peers) {
        if (id == config.id) raft = address;
      }
    }
  }
  if (!raft.empty()) AddListener("raft", raft, &exposed);
  return exposed;
}

Status CheckExposure(const Config& config) {
  if (AccessControlConfigured(config) || config.insecure) return Status::Ok();
  const std::vector<std::string> exposed = ExposedListeners(config);
  if (exposed.empty()) return Status::Ok();
  std::string list;
  for (const std::string& e : exposed) list += (list.empty() ? "" : ", ") + e;
  return Status::FailedPrecondition(
      "no access tokens are configured, and this server would listen where other machines "
      "can reach it (" +
      list +
      "): configure tokens (token_file or tokens; `kvatlas-server gen-token` makes one) or "
      "pass --insecure to serve without access control (docs/security.md)");
}

Result<std::vector<TokenEntry>> LoadTokens(const Config& config) {
  std::vector<TokenEntry> tokens = config.tokens;
  if (!config.token_file.empty()) {
    std::ifstream in(config.token_file);
    if (!in) {
      return Status::IOError("token_file: cannot read " + config.token_file + ": " +
                             std::strerror(errno));
    }
    std::stringstream text;
    text << in.rdbuf();
    KVATLAS_ASSIGN_OR_RETURN(std::vector<TokenEntry> lines,
                             ParseTokenLines(text.str(), config.token_file));
    tokens.insert(tokens.end(), lines.begin(), lines.end());
  }
  KVATLAS_RETURN_IF_ERROR(CheckTokenSet(tokens));
  return tokens;
}

std::vector<std::string> AllowedHostNames(const Config& config, std::string_view advertised_http) {
  std::vector<std::string> names;
  std::string_view rest = config.http_allowed_hosts;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) names.push_back(item);
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  for (const std::string_view address : {std::string_view(config.http_listen), advertised_http}) {
    const Result<HostPort> parsed = ParseHostPort(address);
    if (parsed.has_value()) names.push_back(parsed->host);
  }
  return names;
}

std::string GenTokenUsage() {
  return "Usage: kvatlas-server gen-token --name NAME --role read|write|admin\n"
         "\n"
         "Prints a new random access token, the token_file line that configures it (the\n"
         "server keeps only its SHA-256) and the same as an entry of the config file's\n"
         "\"tokens\" list. Give the token to the client (KVATLAS_TOKEN, --token); add the line\n"
         "to the token file and send the server SIGHUP. docs/security.md §Tokens and roles.\n"
         "\n"
         "  --name NAME                   the token's name (audit log, metrics)\n"
         "  --role read|write|admin       what the token may do\n"
         "  -h, --help                    print this help and exit\n";
}

Result<std::string> GenTokenText(std::span<const std::string> args) {
  std::string name;
  std::string role_text;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) flag.resize(eq);
    // An unknown flag is named as such, even when it is the last argument.
    if (flag != "--name" && flag != "--role") {
      return Status::InvalidArgument("gen-token: unknown argument \"" + flag + "\"");
    }
    std::string value;
    if (eq != std::string::npos) {
      value = args[i].substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Status::InvalidArgument("gen-token: " + flag + " needs a value");
    }
    (flag == "--name" ? name : role_text) = value;
  }
  if (Status s = ValidateTokenName(name); !s.ok()) {
    return Status::InvalidArgument("gen-token: --" + s.message());
  }
  const std::optional<Role> role = ParseRole(role_text);
  if (!role) return Status::InvalidArgument("gen-token: --role must be read, write or admin");
  KVATLAS_ASSIGN_OR_RETURN(const std::string token, NewToken());
  const TokenEntry entry{name, *role, DigestOfToken(token)};
  return "# the token (give it to the client: KVATLAS_TOKEN, --token; the server keeps only "
         "its sha256):\n" +
         token + "\n# a line of the server's token_file:\n" + TokenLine(entry) +
         "\n# or an entry of the config file's \"tokens\" list:\n" + TokenToJson(entry).dump() +
         "\n";
}

}  // namespace kvatlas::server
