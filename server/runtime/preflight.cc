#include "server/runtime/preflight.h"

#include "server/peer/peer_auth.h"
#include "server/runtime/access_config.h"

namespace kvatlas::server {
namespace {

Result<std::unique_ptr<ReloadableTlsContext>> LoadTls(const Config& config) {
  if (!config.tls_peer_ca.empty()) {
    // Used for this server's calls to other members: checked now, not at the first call.
    KVATLAS_RETURN_IF_ERROR(
        MakeClientTlsContext({config.tls_peer_ca, config.tls_cert, config.tls_key})
            .status()
            .WithContext("tls_peer_ca"));
  }
  const TlsListeners on = TlsListenersOf(config);
  if (!on.http && !on.rpc) return std::unique_ptr<ReloadableTlsContext>();
  return ReloadableTlsContext::Load({config.tls_cert, config.tls_key, config.tls_client_ca});
}

}  // namespace

Result<RaftPlacement> RaftPlacementOf(const Config& config) {
  RaftPlacement placement;
  KVATLAS_ASSIGN_OR_RETURN(placement.peers, ParsePeers(config.peers));
  placement.single = placement.peers.empty();
  placement.address = config.raft_listen;
  placement.source = "--raft-listen";
  for (const auto& [id, address] : placement.peers) {
    if (id != config.id) continue;
    placement.address = address;
    placement.initial_voter = true;
    placement.source = "--peers (this server's entry " + std::to_string(id) + "@" + address + ")";
  }
  if (placement.single && placement.address.empty()) {
    placement.address = "127.0.0.1:0";
    placement.source = "raft (a single server: any free port)";
  }
  placement.bind_address = placement.address;
  if (!config.raft_bind.empty()) {
    placement.bind_address = config.raft_bind;
    placement.source = "--raft-bind";
  }
  return placement;
}

Result<Preflight> RunPreflight(const Config& config) {
  KVATLAS_RETURN_IF_ERROR(ValidateConfig(config));
  Preflight preflight;
  KVATLAS_ASSIGN_OR_RETURN(preflight.tls, LoadTls(config));
  KVATLAS_ASSIGN_OR_RETURN(preflight.tokens, LoadTokens(config));
  if (!config.cluster_secret_file.empty()) {
    KVATLAS_ASSIGN_OR_RETURN(preflight.cluster_secret,
                             ReadClusterSecret(config.cluster_secret_file));
  }
  KVATLAS_ASSIGN_OR_RETURN(preflight.raft, RaftPlacementOf(config));
  KVATLAS_ASSIGN_OR_RETURN(preflight.http, BindListenSocket("--http-listen", config.http_listen));
  KVATLAS_ASSIGN_OR_RETURN(preflight.rpc, BindListenSocket("--rpc-listen", config.rpc_listen));
  KVATLAS_ASSIGN_OR_RETURN(preflight.raft_socket,
                           BindListenSocket(preflight.raft.source, preflight.raft.bind_address,
                                            /*ipv4_only=*/true));
  if (!config.zmq_listen.empty()) {
    KVATLAS_RETURN_IF_ERROR(ProbeZmqBind("--zmq-listen", config.zmq_listen));
  }
  for (size_t i = 0; i < config.zmq_listeners.size(); ++i) {
    KVATLAS_RETURN_IF_ERROR(ProbeZmqBind("zmq_listeners[" + std::to_string(i) + "].bind",
                                         config.zmq_listeners[i].bind));
  }
  return preflight;
}

}  // namespace kvatlas::server
