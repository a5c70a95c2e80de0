// The access-control side of the configuration (docs/security.md): the config file's
// `tokens` entries, the token file, the rule that a server reachable from other machines
// needs tokens (or `insecure`), the REST host names, and `kvatlas-server gen-token`.
// Pure functions except LoadTokens, which reads the token file.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/service/auth.h"

namespace kvatlas::server {

struct Config;

// One entry of the config file's "tokens": {"name", "role", "sha256"} (all required).
// kInvalidArgument naming `path` and the field.
[[nodiscard]] Result<TokenEntry> TokenFromJson(const nlohmann::json& value,
                                               const std::string& path);
[[nodiscard]] nlohmann::ordered_json TokenToJson(const TokenEntry& token);

// Whether access control is on: tokens are configured (the config's list or a token file,
// even an empty one).
[[nodiscard]] bool AccessControlConfigured(const Config& config);

// "localhost", an address in 127.0.0.0/8, or ::1. Any other name or address (0.0.0.0
// included) can be reached from other machines.
[[nodiscard]] bool IsLoopbackHost(std::string_view host);

// The listeners of `config` that other machines can reach: "http_listen 0.0.0.0:7070",
// "rpc_listen ...", "raft ..." (this server's raft address: raft_listen, or its peers
// entry). Empty for a loopback-only server.
[[nodiscard]] std::vector<std::string> ExposedListeners(const Config& config);

// kFailedPrecondition when a listener is exposed, access control is off and `insecure` is
// not set: a server reachable from the network refuses to run open unless told to.
[[nodiscard]] Status CheckExposure(const Config& config);

// The token set of `config`: its `tokens` and the lines of its token_file, checked with
// CheckTokenSet. kIOError when the file cannot be read, kInvalidArgument for a bad line or
// set (naming the file and line).
[[nodiscard]] Result<std::vector<TokenEntry>> LoadTokens(const Config& config);

// The host names of the REST API's HostAllowList: http_allowed_hosts, the listen host and
// the advertised host (`advertised_http`, "HOST:PORT").
[[nodiscard]] std::vector<std::string> AllowedHostNames(const Config& config,
                                                        std::string_view advertised_http);

// `kvatlas-server gen-token --name NAME --role ROLE`: a new random token and the lines
// that configure it (a token-file line and a config-file entry), as printed. `args` are
// those after "gen-token". kInvalidArgument for a bad command line.
[[nodiscard]] Result<std::string> GenTokenText(std::span<const std::string> args);
// `kvatlas-server gen-token --help`.
[[nodiscard]] std::string GenTokenUsage();

}  // namespace kvatlas::server
