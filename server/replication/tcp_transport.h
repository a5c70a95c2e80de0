// TcpTransport: libraft's TCP transport, with a peer handshake on every raft connection
// and TCP_NODELAY on every raft stream.
//
// Peer handshake (docs/replication.md §Peer handshake, peer_handshake.h): this transport
// accepts connections itself instead of letting raft_uv_tcp do it. It reads libraft's
// connection preamble (bounded: kMaxRaftAddressBytes) and then runs a mutual
// challenge-response: both ends prove knowledge of the cluster secret with an HMAC over
// both nonces, the cluster id and both server ids (PeerAuth::RaftProof), and the acceptor
// checks that the connecting server is in its raft configuration (any server while that
// configuration is still empty: a server waiting to be added). Outgoing connections are
// made by raft_uv_tcp (which writes the preamble) and then run the connector's side. Only
// a connection that passed is handed to raft; one that fails, or does not finish within
// the handshake timeout, is closed, counted and logged (PeerAuth::Refuse) before raft has
// read a byte of it. At most `max_pending` handshakes run at once; more connections are
// closed at once.
//
// TCP_NODELAY: libraft 0.15's raft_uv_tcp never disables Nagle's algorithm. Raft sends
// small messages back to back (AppendEntries while the previous one is unacknowledged,
// then the follower's small results), so Nagle holds the next message until the peer's
// delayed ACK arrives, ~40 ms on Linux. Measured on a 3-server cluster at half load: every
// third entry in a burst waited 40-50 ms to commit, which set the commit p50 and p99.
//
// Raft traffic itself is not encrypted or authenticated per message after the handshake
// (docs/security.md §Peers says what the operator must do about it).
//
// Host names: libraft 0.15's raft_uv_tcp takes only numeric IPv4 addresses. A peer address
// whose host is a name ("kvatlas-1.kvatlas-peers:7072") is resolved here, asynchronously
// (uv_getaddrinfo, IPv4), at every connect, so a peer that came back with a new IP is
// reached at it; a failed resolution is a failed connect, which raft retries. The raft
// configuration and the handshake keep the name. Lookups run in libuv's thread pool, which
// libraft's disk writes share (4 threads), so at most 2 run at once and a connect beyond
// that fails at once: a DNS server that does not answer cannot take the pool from the log.
// The listener binds `bind_address` when set, else the server's own raft address, which
// must then be numeric.
//
// Groups on one port: a server hosting several raft groups (each a RaftLog with a loop
// thread of its own) listens on one raft port. Group g's raft address is "HOST:PORT/g"
// (group 1's stays "HOST:PORT"; peer_handshake.h), so libraft's preamble, which carries the
// connector's own address, names the group the connection belongs to. Every group's
// transport registers with the server's RaftPortShare; one of them listens. When an
// accepted connection's preamble names another group, the listener hands the socket (a
// duplicate of its descriptor, with what was read of it) to that group's transport, on
// that group's loop thread, which runs the rest of the handshake with its own membership
// check. A connection for a group this server does not host is closed and counted as
// kNotMember. Outgoing connections dial the address without its suffix.
//
// Thread-safety: as raft_uv_tcp, loop thread only; RaftPortShare from any thread.
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "server/peer/peer_auth.h"

namespace kvatlas::server {

class PeerGate;  // tcp_transport.cc: the listener and the handshakes in progress

// The raft groups of one server that share its raft port (§Groups on one port). Owned by
// the server; must outlive every transport registered with it.
class RaftPortShare {
 public:
  RaftPortShare() = default;
  RaftPortShare(const RaftPortShare&) = delete;
  RaftPortShare& operator=(const RaftPortShare&) = delete;

  // A connection whose preamble the listener read, handed to its group's transport.
  struct Handoff {
    int fd = -1;  // owned: closed by whoever takes it, or by Deliver when nobody does
    uint64_t connector_id = 0;
    std::string connector_address;
    std::string peer;  // "ip:port", for the logs
  };

 private:
  friend class PeerGate;
  // Registered while the gate's transport listens (or would): from its Listen to its Close.
  void Add(uint32_t group, PeerGate* gate);
  void Remove(uint32_t group, PeerGate* gate);
  // Queues `handoff` on `group`'s gate; false (and the descriptor closed) without one.
  bool Deliver(uint32_t group, Handoff handoff);

  std::mutex mu_;
  std::map<uint32_t, PeerGate*> gates_;  // guarded by mu_
};

struct TcpTransportOptions {
  PeerAuth* auth = nullptr;  // required; outlives the transport
  // Whether server `id` may connect (called on the loop thread).
  std::function<bool(uint64_t)> is_member;
  std::chrono::milliseconds handshake_timeout{5'000};
  size_t max_pending = 64;
  // IPv4 HOST:PORT the listener binds (e.g. 0.0.0.0:7072); empty = this server's raft
  // address. Needed when the raft address is a host name (a Kubernetes pod's DNS name).
  std::string bind_address;
  // A socket already bound to that address and not listening (the server binds it before
  // it recovers its state): the listener listens on a duplicate of it; -1 = it binds.
  int listen_fd = -1;
  // The server's shared raft port (§Groups on one port); null = this transport is alone on
  // its port (every connection is its own). With a share, only a transport with `listen`
  // set listens (on its address's endpoint, or bind_address / listen_fd); the others
  // receive their connections from it.
  RaftPortShare* share = nullptr;
  bool listen = true;
};

struct TcpTransport {
  // First member: the callbacks get `struct raft_uv_transport*` and cast it back to the
  // TcpTransport it belongs to (standard layout, checked in the .cc).
  struct raft_uv_transport transport;
  // raft_uv_tcp's implementation, which ours wraps.
  int (*tcp_init)(struct raft_uv_transport*, raft_id, const char*) = nullptr;
  int (*tcp_connect)(struct raft_uv_transport*, struct raft_uv_connect*, raft_id, const char*,
                     raft_uv_connect_cb) = nullptr;
  void (*tcp_close)(struct raft_uv_transport*, raft_uv_transport_close_cb) = nullptr;
  PeerGate* gate = nullptr;
};

// As raft_uv_tcp_init: 0 or a raft error code. Pass `&t->transport` to raft_uv_init.
int TcpTransportInit(TcpTransport* t, uv_loop_t* loop, TcpTransportOptions options);

// As raft_uv_tcp_close (after the transport closed, or if it never listened).
void TcpTransportClose(TcpTransport* t);

}  // namespace kvatlas::server
