// TcpTransport: libraft's TCP transport with TCP_NODELAY on every raft connection.
//
// libraft 0.15's raft_uv_tcp never disables Nagle's algorithm. Raft sends small messages
// back to back (AppendEntries while the previous one is unacknowledged, then the
// follower's small results), so Nagle holds the next message until the peer's delayed ACK
// arrives, ~40 ms on Linux. Measured on a 3-server cluster at half load: every third
// entry in a burst waited 40-50 ms to commit, which set the commit p50 and p99. This
// wrapper forwards to raft_uv_tcp and sets TCP_NODELAY on each stream it hands to raft,
// outgoing (where raft writes) and accepted.
//
// Thread-safety: as raft_uv_tcp, loop thread only.
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

namespace kvatlas::server {

struct TcpTransport {
  // First member: the callbacks get `struct raft_uv_transport*` and cast it back to the
  // TcpTransport it belongs to (standard layout, checked in the .cc).
  struct raft_uv_transport transport;
  int (*tcp_listen)(struct raft_uv_transport*, raft_uv_accept_cb) = nullptr;
  int (*tcp_connect)(struct raft_uv_transport*, struct raft_uv_connect*, raft_id, const char*,
                     raft_uv_connect_cb) = nullptr;
  raft_uv_accept_cb accept_cb = nullptr;  // raft's, given to listen
};

// As raft_uv_tcp_init: 0 or a raft error code. Pass `&t->transport` to raft_uv_init.
int TcpTransportInit(TcpTransport* t, uv_loop_t* loop);

// As raft_uv_tcp_close.
void TcpTransportClose(TcpTransport* t);

}  // namespace kvatlas::server
