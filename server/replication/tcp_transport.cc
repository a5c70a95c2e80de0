#include "server/replication/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "server/replication/peer_handshake.h"

namespace kvatlas::server {

static_assert(std::is_standard_layout_v<TcpTransport>,
              "callbacks cast raft_uv_transport* back to its TcpTransport");

namespace {

TcpTransport* Of(struct raft_uv_transport* t) { return reinterpret_cast<TcpTransport*>(t); }

// Best effort: a stream without TCP_NODELAY is only slower.
void DisableNagle(uv_stream_t* stream) {
  if (stream != nullptr && stream->type == UV_TCP) {
    uv_tcp_nodelay(reinterpret_cast<uv_tcp_t*>(stream), 1);
  }
}

std::string PeerName(uv_tcp_t* tcp) {
  struct sockaddr_storage address {};
  int length = sizeof(address);
  if (uv_tcp_getpeername(tcp, reinterpret_cast<struct sockaddr*>(&address), &length) != 0) {
    return "?";
  }
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const struct sockaddr_in*>(&address);
    uv_ip4_name(v4, host, sizeof(host));
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* v6 = reinterpret_cast<const struct sockaddr_in6*>(&address);
  uv_ip6_name(v6, host, sizeof(host));
  port = ntohs(v6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

// One connection in its handshake, accepted (incoming) or opened by raft_uv_tcp (outgoing).
// It owns the stream and a timer until it hands the stream to raft or closes it; it is
// freed once its handles are closed.
struct Handshake {
  enum class Stage { kPreamble, kAddress, kHello, kProof, kFinish, kWriteFinish };

  PeerGate* gate = nullptr;
  bool incoming = false;
  uv_tcp_t* tcp = nullptr;  // raft_malloc'd: raft frees it with its own heap
  uv_timer_t timer{};
  // One request and buffer per message written (at most two: hello and finish): libuv
  // holds both until the write's callback, which may come after the peer's answer.
  uv_write_t writes[2] = {};
  uint8_t out[2][std::max({kHelloBytes, kProofBytes, kFinishBytes})] = {};
  int writes_sent = 0;
  uint8_t in[kMaxRaftAddressBytes] = {};
  size_t want = 0, got = 0;
  Stage stage = Stage::kPreamble;
  int writes_pending = 0;
  bool finished = false;  // read the last message; waiting for the write to complete
  bool done = false;      // handed over or failing
  int handles_open = 0;
  std::string peer;  // "ip:port", for the logs

  // Incoming.
  uint64_t connector_id = 0;
  std::string connector_address;
  PeerNonce acceptor_nonce{};
  PeerFinish verdict;
  // Outgoing.
  struct raft_uv_connect* req = nullptr;
  uint64_t target = 0;
  PeerNonce connector_nonce{};
  PeerHello hello;
  std::optional<HandshakeError> hello_error;
};

}  // namespace

class PeerGate {
 public:
  PeerGate(TcpTransport* t, uv_loop_t* loop, TcpTransportOptions options)
      : t_(t), loop_(loop), options_(std::move(options)) {}

  void SetIdentity(raft_id id, const char* address) {
    id_ = id;
    address_ = address;
    group_ = RaftAddressGroup(address_).value_or(1);
  }

  int Listen(raft_uv_accept_cb cb) {
    accept_cb_ = cb;
    if (options_.share != nullptr) {
      uv_async_init(loop_, &inbox_, &OnInbox);
      inbox_.data = this;
      ++handles_open_;
      inbox_open_ = true;
      options_.share->Add(group_, this);
      if (!options_.listen) return 0;
    }
    // "HOST:PORT", IPv4, as raft_uv_tcp parses it.
    const std::string bind = options_.bind_address.empty()
                                 ? std::string(RaftAddressEndpoint(address_))
                                 : options_.bind_address;
    const size_t colon = bind.rfind(':');
    const std::string host = bind.substr(0, colon);
    const int port = colon == std::string::npos ? 8080 : std::atoi(bind.c_str() + colon + 1);
    struct sockaddr_in addr {};
    if (uv_ip4_addr(host.c_str(), port, &addr) != 0) return RAFT_NOCONNECTION;
    uv_tcp_init(loop_, &listener_);
    listener_.data = this;
    ++handles_open_;
    listening_ = true;
    const int bound = options_.listen_fd >= 0 ? fcntl(options_.listen_fd, F_DUPFD_CLOEXEC, 0) : -1;
    const int opened =
        options_.listen_fd >= 0
            ? (bound < 0 ? -1 : uv_tcp_open(&listener_, bound))
            : uv_tcp_bind(&listener_, reinterpret_cast<const struct sockaddr*>(&addr), 0);
    if (opened != 0 && bound >= 0) close(bound);
    if (opened != 0 || uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 128, &OnListen) != 0) {
      return RAFT_IOERR;  // the transport's close closes the listener
    }
    return 0;
  }

  // raft_uv_tcp connected `stream` to server `target` and wrote the preamble.
  void StartOutgoing(struct raft_uv_connect* req, uint64_t target, uv_stream_t* stream) {
    auto* h = New(reinterpret_cast<uv_tcp_t*>(stream), /*incoming=*/false);
    h->req = req;
    h->target = target;
    if (closing_) {
      Fail(h, std::nullopt, "");
      return;
    }
    Expect(h, kHelloBytes, Handshake::Stage::kHello);
  }

  // Resolves `host` (IPv4) and then calls `then` with "IP:PORT", or with an empty string
  // when it failed or the transport closed meanwhile. The transport's close waits for it.
  // RAFT_NOCONNECTION at once when kMaxResolutions are in flight (tcp_transport.h).
  int Resolve(const std::string& host, const std::string& port,
              std::function<void(const std::string&)> then) {
    if (resolutions_.size() >= kMaxResolutions) return RAFT_NOCONNECTION;
    auto* r = new (std::nothrow) Resolution{{}, this, port, std::move(then)};
    if (r == nullptr) return RAFT_NOMEM;
    r->req.data = r;
    struct addrinfo hints {};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (uv_getaddrinfo(loop_, &r->req, &OnResolved, host.c_str(), nullptr, &hints) != 0) {
      delete r;
      return RAFT_NOCONNECTION;
    }
    ++handles_open_;
    resolutions_.insert(r);
    return 0;
  }

  bool Closing() const { return closing_; }

  // Any thread (RaftPortShare::Deliver, under its lock: the gate is registered, so alive).
  void Enqueue(RaftPortShare::Handoff handoff) {
    {
      std::lock_guard lock(inbox_mu_);
      inbox_queue_.push_back(std::move(handoff));
    }
    uv_async_send(&inbox_);
  }

  void Close(raft_uv_transport_close_cb cb) {
    closing_ = true;
    close_cb_ = cb;
    if (inbox_open_) {
      inbox_open_ = false;
      options_.share->Remove(group_, this);  // nothing is delivered from here on
      std::vector<RaftPortShare::Handoff> left;
      {
        std::lock_guard lock(inbox_mu_);
        left.swap(inbox_queue_);
      }
      for (const RaftPortShare::Handoff& handoff : left) close(handoff.fd);
      uv_close(reinterpret_cast<uv_handle_t*>(&inbox_),
               [](uv_handle_t* handle) { static_cast<PeerGate*>(handle->data)->HandleClosed(); });
    }
    for (Resolution* r : resolutions_) uv_cancel(reinterpret_cast<uv_req_t*>(&r->req));
    if (listening_) {
      listening_ = false;
      uv_close(reinterpret_cast<uv_handle_t*>(&listener_),
               [](uv_handle_t* handle) { static_cast<PeerGate*>(handle->data)->HandleClosed(); });
    }
    // Copied: Fail erases from the set.
    const std::vector<Handshake*> pending(handshakes_.begin(), handshakes_.end());
    for (Handshake* h : pending) Fail(h, std::nullopt, "");
    t_->tcp_close(&t_->transport, [](struct raft_uv_transport* transport) {
      PeerGate* gate = Of(transport)->gate;
      gate->inner_closed_ = true;
      gate->MaybeFireClose();
    });
  }

 private:
  static constexpr size_t kMaxResolutions = 2;

  struct Resolution {
    uv_getaddrinfo_t req;
    PeerGate* gate;
    std::string port;
    std::function<void(const std::string&)> then;
  };

  static void OnResolved(uv_getaddrinfo_t* req, int status, struct addrinfo* result) {
    auto* r = static_cast<Resolution*>(req->data);
    PeerGate* gate = r->gate;
    std::string address;
    if (status == 0 && !gate->closing_ && result != nullptr && result->ai_family == AF_INET) {
      char ip[INET_ADDRSTRLEN] = "";
      uv_ip4_name(reinterpret_cast<const struct sockaddr_in*>(result->ai_addr), ip, sizeof(ip));
      address = std::string(ip) + ":" + r->port;
    }
    uv_freeaddrinfo(result);
    gate->resolutions_.erase(r);
    r->then(address);
    delete r;
    --gate->handles_open_;
    gate->MaybeFireClose();
  }

  static void OnListen(uv_stream_t* server, int status) {
    auto* gate = static_cast<PeerGate*>(server->data);
    if (status != 0 || gate->closing_) return;
    auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
    if (tcp == nullptr) return;
    uv_tcp_init(gate->loop_, tcp);
    Handshake* h = gate->New(tcp, /*incoming=*/true);
    if (uv_accept(server, reinterpret_cast<uv_stream_t*>(tcp)) != 0) {
      gate->Fail(h, std::nullopt, "");
      return;
    }
    h->peer = PeerName(tcp);
    if (gate->handshakes_.size() > gate->options_.max_pending) {
      gate->Fail(h, PeerRefusal::kTooMany,
                 "more than " + std::to_string(gate->options_.max_pending) +
                     " raft handshakes in progress; connection closed");
      return;
    }
    gate->Expect(h, kRaftPreambleBytes, Handshake::Stage::kPreamble);
  }

  Handshake* New(uv_tcp_t* tcp, bool incoming) {
    auto* h = new Handshake;
    h->gate = this;
    h->incoming = incoming;
    h->tcp = tcp;
    tcp->data = h;
    if (!incoming) h->peer = PeerName(tcp);
    DisableNagle(reinterpret_cast<uv_stream_t*>(tcp));
    uv_timer_init(loop_, &h->timer);
    h->timer.data = h;
    h->handles_open = 2;
    handles_open_ += 2;
    handshakes_.insert(h);
    const auto timeout = static_cast<uint64_t>(options_.handshake_timeout.count());
    uv_timer_start(
        &h->timer,
        [](uv_timer_t* timer) {
          auto* hs = static_cast<Handshake*>(timer->data);
          hs->gate->Fail(hs, PeerRefusal::kTimeout,
                         "no complete handshake within " +
                             std::to_string(hs->gate->options_.handshake_timeout.count()) + " ms");
        },
        timeout, 0);
    return h;
  }

  // Reads exactly `bytes` more (never past them: what follows belongs to raft).
  void Expect(Handshake* h, size_t bytes, Handshake::Stage stage) {
    h->want = bytes;
    h->got = 0;
    h->stage = stage;
    const int rv = uv_read_start(
        reinterpret_cast<uv_stream_t*>(h->tcp),
        [](uv_handle_t* handle, size_t, uv_buf_t* buf) {
          auto* hs = static_cast<Handshake*>(handle->data);
          buf->base = reinterpret_cast<char*>(hs->in + hs->got);
          buf->len = hs->want - hs->got;
        },
        &OnRead);
    if (rv != 0 && rv != UV_EALREADY) Fail(h, PeerRefusal::kMalformed, uv_strerror(rv));
  }

  static void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
    auto* h = static_cast<Handshake*>(stream->data);
    if (h->done || nread == 0) return;
    PeerGate* gate = h->gate;
    if (nread < 0) {
      gate->Fail(h, PeerRefusal::kMalformed,
                 std::string("the connection ended during the handshake (") +
                     uv_strerror(static_cast<int>(nread)) + ")");
      return;
    }
    h->got += static_cast<size_t>(nread);
    if (h->got < h->want) return;
    if (h->incoming) {
      gate->AdvanceIncoming(h);
    } else {
      gate->AdvanceOutgoing(h);
    }
  }

  void AdvanceIncoming(Handshake* h) {
    switch (h->stage) {
      case Handshake::Stage::kPreamble: {
        const std::optional<RaftPreamble> preamble = ParseRaftPreamble(h->in);
        if (!preamble) {
          Fail(h, PeerRefusal::kMalformed,
               "not a raft connection preamble (protocol 1, a server id, an address of at most " +
                   std::to_string(kMaxRaftAddressBytes) + " bytes)");
          return;
        }
        h->connector_id = preamble->connector_id;
        Expect(h, preamble->address_bytes, Handshake::Stage::kAddress);
        return;
      }
      case Handshake::Stage::kAddress: {
        std::optional<std::string> address = ParseRaftAddress(h->in, h->got);
        if (!address) {
          Fail(h, PeerRefusal::kMalformed, "the preamble's address is not a string");
          return;
        }
        h->connector_address = std::move(*address);
        if (options_.share != nullptr) {
          const std::optional<uint32_t> group = RaftAddressGroup(h->connector_address);
          if (!group) {
            Fail(h, PeerRefusal::kMalformed,
                 "the preamble's address " + h->connector_address + " names no raft group");
            return;
          }
          if (*group != group_) {
            PassOn(h, *group);
            return;
          }
        }
        Greet(h);
        return;
      }
      case Handshake::Stage::kProof: {
        uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
        h->verdict =
            JudgeProof(*options_.auth, {h->connector_id, h->connector_address, h->acceptor_nonce},
                       DecodeProof(h->in), options_.is_member);
        h->stage = Handshake::Stage::kWriteFinish;
        h->finished = true;
        EncodeFinish(h->verdict, NextOut(h));
        Send(h, kFinishBytes);
        return;
      }
      default:
        return;
    }
  }

  // An incoming connection of this gate's group, its preamble read: the hello.
  void Greet(Handshake* h) {
    h->acceptor_nonce = PeerAuth::NewNonce();
    EncodeHello({id_, options_.auth->fingerprint(), h->acceptor_nonce}, NextOut(h));
    Expect(h, kProofBytes, Handshake::Stage::kProof);
    Send(h, kHelloBytes);
  }

  // An incoming connection of another group: its socket goes to that group's gate (a
  // duplicate descriptor; ours is closed), which greets it.
  void PassOn(Handshake* h, uint32_t group) {
    uv_os_fd_t fd = -1;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
    const int copy = uv_fileno(reinterpret_cast<uv_handle_t*>(h->tcp), &fd) == 0
                         ? fcntl(fd, F_DUPFD_CLOEXEC, 0)
                         : -1;
    const std::string peer = h->peer;
    RaftPortShare::Handoff handoff{copy, h->connector_id, h->connector_address, peer};
    Fail(h, std::nullopt, "");
    if (copy < 0) {
      options_.auth->Refuse(PeerChannel::kRaftIn, PeerRefusal::kMalformed, peer,
                            "cannot hand the connection to raft group " + std::to_string(group) +
                                ": " + std::strerror(errno));
      return;
    }
    if (!options_.share->Deliver(group, std::move(handoff))) {
      options_.auth->Refuse(PeerChannel::kRaftIn, PeerRefusal::kNotMember, peer,
                            "raft group " + std::to_string(group) +
                                " is not hosted on this server; connection closed");
    }
  }

  static void OnInbox(uv_async_t* async) {
    auto* gate = static_cast<PeerGate*>(async->data);
    std::vector<RaftPortShare::Handoff> arrived;
    {
      std::lock_guard lock(gate->inbox_mu_);
      arrived.swap(gate->inbox_queue_);
    }
    for (RaftPortShare::Handoff& handoff : arrived) gate->Adopt(std::move(handoff));
  }

  // A connection handed over by the listening gate: greeted as if accepted here.
  void Adopt(RaftPortShare::Handoff handoff) {
    if (closing_) {
      close(handoff.fd);
      return;
    }
    auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
    if (tcp == nullptr) {
      close(handoff.fd);
      return;
    }
    uv_tcp_init(loop_, tcp);
    Handshake* h = New(tcp, /*incoming=*/true);
    h->peer = std::move(handoff.peer);
    h->connector_id = handoff.connector_id;
    h->connector_address = std::move(handoff.connector_address);
    const int opened = uv_tcp_open(tcp, handoff.fd);
    if (opened != 0) {
      close(handoff.fd);
      Fail(h, PeerRefusal::kMalformed,
           std::string("cannot take the handed-over connection: ") + uv_strerror(opened));
      return;
    }
    DisableNagle(reinterpret_cast<uv_stream_t*>(tcp));
    if (handshakes_.size() > options_.max_pending) {
      Fail(h, PeerRefusal::kTooMany,
           "more than " + std::to_string(options_.max_pending) +
               " raft handshakes in progress; connection closed");
      return;
    }
    Greet(h);
  }

  void AdvanceOutgoing(Handshake* h) {
    switch (h->stage) {
      case Handshake::Stage::kHello: {
        const std::optional<PeerHello> hello = DecodeHello(h->in);
        h->hello_error = CheckHello(*options_.auth, hello, h->target);
        if (!hello) {
          Fail(
              h, h->hello_error->reason,
              "connecting to server " + std::to_string(h->target) + ": " + h->hello_error->message);
          return;
        }
        // A hello from another cluster or another server is refused after the proof is
        // sent, so that the acceptor, too, learns (and logs) why.
        h->hello = *hello;
        h->connector_nonce = PeerAuth::NewNonce();
        const PeerMac mac = options_.auth->RaftProof(PeerAuth::Side::kConnector, id_, address_,
                                                     h->target, h->hello.nonce, h->connector_nonce);
        EncodeProof({options_.auth->fingerprint(), h->connector_nonce, mac}, NextOut(h));
        Expect(h, kFinishBytes, Handshake::Stage::kFinish);
        Send(h, kProofBytes);
        return;
      }
      case Handshake::Stage::kFinish: {
        uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
        if (auto error = h->hello_error
                             ? h->hello_error
                             : CheckFinish(*options_.auth, DecodeFinish(h->in), address_, h->target,
                                           h->hello.nonce, h->connector_nonce)) {
          Fail(h, error->reason,
               "connecting to server " + std::to_string(h->target) + ": " + error->message);
          return;
        }
        h->finished = true;
        if (h->writes_pending == 0) HandOver(h);
        return;
      }
      default:
        return;
    }
  }

  static uint8_t* NextOut(Handshake* h) { return h->out[h->writes_sent]; }

  // Writes the message encoded at NextOut(h).
  void Send(Handshake* h, size_t bytes) {
    uv_write_t* write = &h->writes[h->writes_sent];
    uv_buf_t buf =
        uv_buf_init(reinterpret_cast<char*>(h->out[h->writes_sent]), static_cast<unsigned>(bytes));
    ++h->writes_sent;
    write->data = h;
    ++h->writes_pending;
    const int rv = uv_write(write, reinterpret_cast<uv_stream_t*>(h->tcp), &buf, 1, &OnWritten);
    if (rv != 0) {
      --h->writes_pending;
      Fail(h, PeerRefusal::kMalformed,
           std::string("writing the handshake failed: ") + uv_strerror(rv));
    }
  }

  // The stream changes hands (or closes) only once every write of ours completed: libuv
  // calls back with our request until then.
  static void OnWritten(uv_write_t* write, int status) {
    auto* h = static_cast<Handshake*>(write->data);
    --h->writes_pending;
    if (h->done) return;
    PeerGate* gate = h->gate;
    if (status != 0) {
      gate->Fail(h, PeerRefusal::kMalformed,
                 std::string("writing the handshake failed: ") + uv_strerror(status));
      return;
    }
    if (!h->finished || h->writes_pending > 0) return;
    if (!h->incoming || h->verdict.code == FinishCode::kAccepted) {
      gate->HandOver(h);
    } else {
      gate->Fail(h, RefusalOf(h->verdict.code), gate->IncomingRefusal(h));
    }
  }

  std::string IncomingRefusal(const Handshake* h) const {
    const std::string who = "server " + std::to_string(h->connector_id) + " (raft address " +
                            h->connector_address + ")";
    switch (h->verdict.code) {
      case FinishCode::kWrongCluster:
        return who + " belongs to another cluster (another cluster_id)";
      case FinishCode::kBadProof:
        return who + " did not prove the cluster secret";
      case FinishCode::kNotMember:
        return who + " proved the secret but is not in this server's raft configuration";
      default:
        return who + " sent a malformed handshake";
    }
  }

  // The handshake passed: the stream is raft's from here on.
  void HandOver(Handshake* h) {
    h->done = true;
    handshakes_.erase(h);
    options_.auth->CountHandshake();
    uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
    auto* stream = reinterpret_cast<uv_stream_t*>(h->tcp);
    stream->data = nullptr;
    h->tcp = nullptr;
    --h->handles_open;  // the stream is no longer ours
    --handles_open_;
    CloseTimer(h);
    if (h->incoming) {
      accept_cb_(&t_->transport, h->connector_id, h->connector_address.c_str(), stream);
    } else {
      struct raft_uv_connect* req = std::exchange(h->req, nullptr);
      req->cb(req, stream, 0);
    }
  }

  // Closes the connection; `reason` set: a refusal, counted and logged. An outgoing
  // request is answered once the stream is closed.
  void Fail(Handshake* h, std::optional<PeerRefusal> reason, const std::string& detail) {
    if (h->done) return;
    h->done = true;
    handshakes_.erase(h);
    if (reason) {
      options_.auth->Refuse(h->incoming ? PeerChannel::kRaftIn : PeerChannel::kRaftOut, *reason,
                            h->peer, detail);
    }
    uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
    uv_close(reinterpret_cast<uv_handle_t*>(h->tcp), [](uv_handle_t* handle) {
      auto* hs = static_cast<Handshake*>(handle->data);
      raft_free(handle);
      hs->tcp = nullptr;
      hs->gate->Released(hs);
    });
    CloseTimer(h);
  }

  void CloseTimer(Handshake* h) {
    uv_timer_stop(&h->timer);
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), [](uv_handle_t* handle) {
      auto* hs = static_cast<Handshake*>(handle->data);
      hs->gate->Released(hs);
    });
  }

  // One of `h`'s handles closed; the last one frees it.
  void Released(Handshake* h) {
    --handles_open_;
    if (--h->handles_open > 0) return;
    if (h->req != nullptr) {  // an outgoing connection that failed: tell raft
      struct raft_uv_connect* req = std::exchange(h->req, nullptr);
      req->cb(req, nullptr, closing_ ? RAFT_CANCELED : RAFT_NOCONNECTION);
    }
    delete h;
    MaybeFireClose();
  }

  void HandleClosed() {
    --handles_open_;
    MaybeFireClose();
  }

  void MaybeFireClose() {
    if (!closing_ || !inner_closed_ || handles_open_ != 0 || close_cb_ == nullptr) return;
    raft_uv_transport_close_cb cb = std::exchange(close_cb_, nullptr);
    cb(&t_->transport);
  }

  TcpTransport* t_;
  uv_loop_t* loop_;
  TcpTransportOptions options_;
  raft_id id_ = 0;
  std::string address_;
  uint32_t group_ = 1;  // the group address_ names
  raft_uv_accept_cb accept_cb_ = nullptr;
  // Connections handed over by the share's listener (with a share only).
  uv_async_t inbox_{};
  bool inbox_open_ = false;
  std::mutex inbox_mu_;
  std::vector<RaftPortShare::Handoff> inbox_queue_;  // guarded by inbox_mu_
  uv_tcp_t listener_{};
  bool listening_ = false;
  bool closing_ = false;
  bool inner_closed_ = false;
  raft_uv_transport_close_cb close_cb_ = nullptr;
  int handles_open_ = 0;
  std::unordered_set<Handshake*> handshakes_;
  std::unordered_set<Resolution*> resolutions_;
};

namespace {

int Init(struct raft_uv_transport* t, raft_id id, const char* address) {
  const int rv = Of(t)->tcp_init(t, id, address);
  if (rv == 0) Of(t)->gate->SetIdentity(id, address);
  return rv;
}

int Listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) { return Of(t)->gate->Listen(cb); }

// raft's connect request, relayed through one of ours: raft_uv_tcp owns `inner` until it
// calls back (connected, failed or cancelled by close), exactly once.
struct ConnectRelay {
  struct raft_uv_connect inner;
  struct raft_uv_connect* outer;
  TcpTransport* transport;
  uint64_t target;
};

void OnConnected(struct raft_uv_connect* inner, struct uv_stream_s* stream, int status) {
  auto* relay = static_cast<ConnectRelay*>(inner->data);
  struct raft_uv_connect* outer = relay->outer;
  TcpTransport* t = relay->transport;
  const uint64_t target = relay->target;
  delete relay;
  if (status != 0) {
    outer->cb(outer, stream, status);
    return;
  }
  t->gate->StartOutgoing(outer, target, stream);
}

int Connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id,
            const char* address, raft_uv_connect_cb cb) {
  req->cb = cb;  // as raft_uv_tcp does: the callback is called through the request
  auto* relay = new (std::nothrow) ConnectRelay{{}, req, Of(t), id};
  if (relay == nullptr) return RAFT_NOMEM;
  relay->inner.data = relay;
  // Another group's address on a shared port: its endpoint is dialled (the preamble carries
  // this server's own address, which names the group).
  const std::string text(RaftAddressEndpoint(address));
  const size_t colon = text.rfind(':');
  const std::string host = text.substr(0, colon);
  struct sockaddr_in numeric {};
  if (colon == std::string::npos || uv_ip4_addr(host.c_str(), 0, &numeric) == 0) {
    const int rv = Of(t)->tcp_connect(t, &relay->inner, id, text.c_str(), &OnConnected);
    if (rv != 0) delete relay;
    return rv;
  }
  // A host name (tcp_transport.h §Host names): connect once it resolved. From here raft's
  // callback is called exactly once, through the relay or directly.
  const int rv =
      Of(t)->gate->Resolve(host, text.substr(colon + 1), [t, relay, id](const std::string& ip) {
        const int status = ip.empty()
                               ? RAFT_NOCONNECTION
                               : Of(t)->tcp_connect(t, &relay->inner, id, ip.c_str(), &OnConnected);
        if (status == 0) return;
        struct raft_uv_connect* outer = relay->outer;
        delete relay;
        outer->cb(outer, nullptr, Of(t)->gate->Closing() ? RAFT_CANCELED : status);
      });
  if (rv != 0) delete relay;
  return rv;
}

void Close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb) { Of(t)->gate->Close(cb); }

}  // namespace

void RaftPortShare::Add(uint32_t group, PeerGate* gate) {
  std::lock_guard lock(mu_);
  gates_[group] = gate;
}

void RaftPortShare::Remove(uint32_t group, PeerGate* gate) {
  std::lock_guard lock(mu_);
  auto it = gates_.find(group);
  if (it != gates_.end() && it->second == gate) gates_.erase(it);
}

bool RaftPortShare::Deliver(uint32_t group, Handoff handoff) {
  std::lock_guard lock(mu_);
  auto it = gates_.find(group);
  if (it == gates_.end()) {
    close(handoff.fd);
    return false;
  }
  it->second->Enqueue(std::move(handoff));
  return true;
}

int TcpTransportInit(TcpTransport* t, uv_loop_t* loop, TcpTransportOptions options) {
  const int rv = raft_uv_tcp_init(&t->transport, loop);
  if (rv != 0) return rv;
  t->gate = new PeerGate(t, loop, std::move(options));
  t->tcp_init = t->transport.init;
  t->tcp_connect = t->transport.connect;
  t->tcp_close = t->transport.close;
  t->transport.init = &Init;
  t->transport.listen = &Listen;
  t->transport.connect = &Connect;
  t->transport.close = &Close;
  return 0;
}

void TcpTransportClose(TcpTransport* t) {
  raft_uv_tcp_close(&t->transport);
  delete t->gate;
  t->gate = nullptr;
}

}  // namespace kvatlas::server
