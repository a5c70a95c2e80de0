// The checks Server::Start makes, and what it acquires, before it creates or opens the
// data directory: a start that is bound to fail on a listener's address, a TLS file, the
// token file or the cluster secret fails before it touches the disk (a fresh data
// directory is not even created), and before any recovery time is spent.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/internal/tls.h"
#include "kvatlas/common/result.h"
#include "server/runtime/config.h"
#include "server/runtime/listen_socket.h"
#include "server/service/auth.h"

namespace kvatlas::server {

// This server's place in raft, from a validated config (docs/replication.md).
struct RaftPlacement {
  std::vector<std::pair<uint64_t, std::string>> peers;  // --peers, parsed
  // HOST:PORT peers reach this server at: raft_listen or this id's --peers entry; for a
  // single server without raft_listen, "127.0.0.1:0" (any port: nobody connects to it).
  std::string address;
  std::string bind_address;    // what the transport binds: raft_bind, else `address`
  bool single = false;         // no --peers: a one-voter cluster
  bool initial_voter = false;  // this id is in --peers: bootstraps with them
  // The setting `bind_address` comes from, as errors name it: "--raft-bind",
  // "--raft-listen", "--peers (this server's entry)", "raft (single server)".
  std::string source;
};
[[nodiscard]] Result<RaftPlacement> RaftPlacementOf(const Config& config);

struct Preflight {
  std::unique_ptr<ReloadableTlsContext> tls;  // null when no listener serves TLS
  std::vector<TokenEntry> tokens;             // LoadTokens(config)
  std::string cluster_secret;                 // "" without cluster_secret_file
  RaftPlacement raft;
  // Bound, not listening (listen_socket.h).
  ListenSocket http;
  ListenSocket rpc;
  ListenSocket raft_socket;
};

// Validates `config` (ValidateConfig), loads the TLS context (certificate, key, client CA)
// and checks tls_peer_ca, reads the token file and the cluster secret, binds the REST,
// binary protocol and raft addresses (BindListenSocket) and probes the ZMQ listeners'
// (ProbeZmqBind). Reads files and binds sockets only. Errors name the setting and the
// file or address: kInvalidArgument, kIOError (unreadable file), kUnavailable (a bind).
[[nodiscard]] Result<Preflight> RunPreflight(const Config& config);

}  // namespace kvatlas::server
