#include "server/replication/tcp_transport.h"

#include <new>
#include <type_traits>

namespace kvatlas::server {
namespace {

static_assert(std::is_standard_layout_v<TcpTransport>,
              "callbacks cast raft_uv_transport* back to its TcpTransport");

TcpTransport* Of(struct raft_uv_transport* t) { return reinterpret_cast<TcpTransport*>(t); }

// Best effort: a stream without TCP_NODELAY is only slower.
void DisableNagle(struct uv_stream_s* stream) {
  if (stream != nullptr && stream->type == UV_TCP) {
    uv_tcp_nodelay(reinterpret_cast<uv_tcp_t*>(stream), 1);
  }
}

void OnAccepted(struct raft_uv_transport* t, raft_id id, const char* address,
                struct uv_stream_s* stream) {
  DisableNagle(stream);
  Of(t)->accept_cb(t, id, address, stream);
}

int Listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
  Of(t)->accept_cb = cb;
  return Of(t)->tcp_listen(t, &OnAccepted);
}

// raft's connect request, relayed through one of ours: raft_uv_tcp owns `inner` until it
// calls back (connected, failed or cancelled by close), exactly once.
struct ConnectRelay {
  struct raft_uv_connect inner;
  struct raft_uv_connect* outer;
};

void OnConnected(struct raft_uv_connect* inner, struct uv_stream_s* stream, int status) {
  auto* relay = static_cast<ConnectRelay*>(inner->data);
  struct raft_uv_connect* outer = relay->outer;
  delete relay;
  if (status == 0) DisableNagle(stream);
  outer->cb(outer, stream, status);
}

int Connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id,
            const char* address, raft_uv_connect_cb cb) {
  req->cb = cb;  // as raft_uv_tcp does: the callback is called through the request
  auto* relay = new (std::nothrow) ConnectRelay{{}, req};
  if (relay == nullptr) return RAFT_NOMEM;
  relay->inner.data = relay;
  const int rv = Of(t)->tcp_connect(t, &relay->inner, id, address, &OnConnected);
  if (rv != 0) delete relay;
  return rv;
}

}  // namespace

int TcpTransportInit(TcpTransport* t, uv_loop_t* loop) {
  const int rv = raft_uv_tcp_init(&t->transport, loop);
  if (rv != 0) return rv;
  t->tcp_listen = t->transport.listen;
  t->tcp_connect = t->transport.connect;
  t->transport.listen = &Listen;
  t->transport.connect = &Connect;
  return 0;
}

void TcpTransportClose(TcpTransport* t) { raft_uv_tcp_close(&t->transport); }

}  // namespace kvatlas::server
