// SendPeerHttp against a raw TCP listener of the test's own: what goes out (method, target
// as given, Host, headers, body), what comes back (status, headers by name without case),
// and which failures leave the request unsent (so that a held forward may try again); and
// PostInternalCall keeping a refusal's code only when the member signed it.
#include "server/api/peer_http_client.h"

#include <doctest/doctest.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/api/forwarding.h"

namespace kvatlas::server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using std::chrono::milliseconds;

// Accepts one connection on a free loopback port and runs `serve` on it.
class OneShotListener {
 public:
  explicit OneShotListener(std::function<void(tcp::socket&)> serve)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this, serve = std::move(serve)] {
      boost::system::error_code ec;
      tcp::socket socket(io_);
      acceptor_.accept(socket, ec);
      if (!ec) serve(socket);
    });
  }
  ~OneShotListener() { thread_.join(); }
  HostPort address() const { return HostPort{"127.0.0.1", port_}; }

 private:
  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
};

constexpr PeerHttpTimeouts kTimeouts{milliseconds(5'000), milliseconds(10'000)};

// Accepts connections on a free loopback port, each served on a thread of its own, and
// answers each request on a connection with 200 and the connection's number, keeping the
// connection open for the next request; `answers_per_connection` answered, it closes the
// connection without saying so (as a member whose idle timeout passed does).
class KeepAliveListener {
 public:
  explicit KeepAliveListener(int answers_per_connection)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this, answers_per_connection] {
      for (;;) {
        auto socket = std::make_shared<tcp::socket>(io_);
        boost::system::error_code ec;
        acceptor_.accept(*socket, ec);
        if (ec || stopping_) return;
        std::lock_guard lock(mu_);
        sockets_.push_back(socket);
        serving_.emplace_back([this, socket, n = ++accepted_, answers_per_connection] {
          Serve(*socket, n, answers_per_connection);
        });
      }
    });
  }
  ~KeepAliveListener() {
    stopping_ = true;
    boost::system::error_code ec;
    tcp::socket wake(io_);
    wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    thread_.join();
    std::lock_guard lock(mu_);
    // Connections the client keeps stay open: unblock their reads.
    for (const auto& socket : sockets_) ::shutdown(socket->native_handle(), SHUT_RDWR);
    for (std::thread& t : serving_) t.join();
  }
  HostPort address() const { return HostPort{"127.0.0.1", port_}; }
  int accepted() const { return accepted_; }
  bool close_asked() const { return close_asked_; }

 private:
  void Serve(tcp::socket& socket, int connection, int answers) {
    boost::system::error_code ec;
    asio::streambuf in;
    for (int n = 0; n < answers; ++n) {
      asio::read_until(socket, in, "\r\n\r\n", ec);
      if (ec) return;
      const std::string head(asio::buffers_begin(in.data()), asio::buffers_end(in.data()));
      in.consume(head.find("\r\n\r\n") + 4);  // requests here carry no body
      if (head.find("Connection: close") != std::string::npos) close_asked_ = true;
      const std::string body = std::to_string(connection);
      asio::write(socket,
                  asio::buffer("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                               "\r\n\r\n" + body),
                  ec);
    }
    socket.close(ec);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::atomic<bool> close_asked_{false};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;  // guarded by mu_
  std::vector<std::thread> serving_;                   // guarded by mu_
  std::thread thread_;
};

// A read of `to` (PeerHttpRequest::idempotent): its answer's body.
std::string Read(const HostPort& to) {
  PeerHttpRequest read{"GET", "/v1/lookup", {}, "", /*idempotent=*/true};
  const Result<PeerHttpAnswer> answer = SendPeerHttp(PeerHttpOptions{}, to, read, kTimeouts);
  REQUIRE(answer.has_value());
  CHECK(answer->status == 200);
  return answer->body;
}

TEST_CASE("SendPeerHttp: sends the target as given, with Host and headers; reads the answer") {
  std::promise<std::string> received;
  OneShotListener listener([&](tcp::socket& socket) {
    asio::streambuf in;
    boost::system::error_code ec;
    asio::read_until(socket, in, "\r\n\r\n{}", ec);
    received.set_value(std::string(asio::buffers_begin(in.data()), asio::buffers_end(in.data())));
    const std::string answer =
        "HTTP/1.1 201 Created\r\nX-Test: value\r\nContent-Type: application/json\r\n"
        "Content-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";
    asio::write(socket, asio::buffer(answer), ec);
  });
  PeerHttpRequest request{"POST", "/v1/x%2Fy?a=b+c", {{"X-Kvatlas-Forwarded", "7"}}, "{}"};
  bool nothing_sent = true;
  const Result<PeerHttpAnswer> answer =
      SendPeerHttp(PeerHttpOptions{}, listener.address(), request, kTimeouts, &nothing_sent);
  REQUIRE(answer.has_value());
  CHECK_FALSE(nothing_sent);
  CHECK(answer->status == 201);
  CHECK(answer->body == "{\"ok\":true}");
  REQUIRE(answer->headers.contains("x-test"));
  CHECK(answer->headers.find("X-TEST")->second == "value");
  const std::string sent = received.get_future().get();
  CHECK(sent.starts_with("POST /v1/x%2Fy?a=b+c HTTP/1.1\r\n"));
  CHECK(sent.find("Host: " + listener.address().ToString() + "\r\n") != std::string::npos);
  CHECK(sent.find("X-Kvatlas-Forwarded: 7\r\n") != std::string::npos);
  CHECK(sent.find("Content-Length: 2\r\n") != std::string::npos);
  CHECK(sent.ends_with("\r\n\r\n{}"));
}

TEST_CASE("SendPeerHttp: a refused connection sent nothing") {
  uint16_t port = 0;
  {
    asio::io_context io;
    tcp::acceptor closed(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = closed.local_endpoint().port();
  }  // nothing listens there any more
  bool nothing_sent = false;
  const Result<PeerHttpAnswer> answer =
      SendPeerHttp(PeerHttpOptions{}, HostPort{"127.0.0.1", port}, {"GET", "/healthz", {}, ""},
                   kTimeouts, &nothing_sent);
  REQUIRE_FALSE(answer.has_value());
  CHECK(nothing_sent);
  CHECK(answer.error().code() == StatusCode::kUnavailable);
  CHECK(answer.error().message().find("connect") != std::string::npos);
}

TEST_CASE("SendPeerHttp: a member that never answers times out, and the request was sent") {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  OneShotListener listener([&](tcp::socket&) { finished.wait(); });  // holds, says nothing
  bool nothing_sent = true;
  const Result<PeerHttpAnswer> answer =
      SendPeerHttp(PeerHttpOptions{}, listener.address(), {"POST", "/v1/events", {}, "{}"},
                   {milliseconds(5'000), milliseconds(200)}, &nothing_sent);
  done.set_value();
  REQUIRE_FALSE(answer.has_value());
  CHECK_FALSE(nothing_sent);  // it may have been applied: never resent as new
  CHECK(answer.error().message().find("no whole answer within 200 ms") != std::string::npos);
}

TEST_CASE("SendPeerHttp: an answer that is not HTTP, or an unknown method, is an error") {
  OneShotListener listener([](tcp::socket& socket) {
    asio::streambuf in;
    boost::system::error_code ec;
    asio::read_until(socket, in, "\r\n\r\n", ec);
    asio::write(socket, asio::buffer(std::string("SSH-2.0-OpenSSH_9.2\r\n")), ec);
  });
  const Result<PeerHttpAnswer> answer =
      SendPeerHttp(PeerHttpOptions{}, listener.address(), {"GET", "/", {}, ""}, kTimeouts);
  REQUIRE_FALSE(answer.has_value());
  CHECK(answer.error().message().find("reading the answer") != std::string::npos);
  const Result<PeerHttpAnswer> bad_method =
      SendPeerHttp(PeerHttpOptions{}, HostPort{"127.0.0.1", 1}, {"FETCH", "/", {}, ""}, kTimeouts);
  REQUIRE_FALSE(bad_method.has_value());
  CHECK(bad_method.error().message().find("unknown method \"FETCH\"") != std::string::npos);
}

TEST_CASE("SendPeerHttp: reads reuse the connection the last read left open; writes do not") {
  KeepAliveListener member(/*answers_per_connection=*/100);
  const uint64_t opened = PeerHttpConnectionsOpened();
  CHECK(Read(member.address()) == "1");
  CHECK(Read(member.address()) == "1");
  CHECK(Read(member.address()) == "1");
  CHECK(PeerHttpConnectionsOpened() - opened == 1);
  CHECK_FALSE(member.close_asked());
  // A write goes on a connection of its own, closed after the answer.
  const Result<PeerHttpAnswer> write = SendPeerHttp(
      PeerHttpOptions{}, member.address(), {"POST", "/v1/cluster/apply", {}, ""}, kTimeouts);
  REQUIRE(write.has_value());
  CHECK(write->body == "2");
  CHECK(member.close_asked());
  CHECK(Read(member.address()) == "1");  // the read's connection is still kept
  CHECK(member.accepted() == 2);
  // Another thread keeps connections of its own.
  std::thread([&] { CHECK(Read(member.address()) == "3"); }).join();
}

TEST_CASE("SendPeerHttp: a read whose kept connection the member closed is sent again") {
  KeepAliveListener member(/*answers_per_connection=*/1);
  CHECK(Read(member.address()) == "1");
  // The member closed that connection after answering; the read finds out, and goes on a
  // new connection, as it changes nothing.
  CHECK(Read(member.address()) == "2");
  CHECK(Read(member.address()) == "3");
  CHECK(member.accepted() == 3);
}

TEST_CASE("SendPeerHttp: a connection idle for kPeerKeptIdle is not used again") {
  KeepAliveListener member(/*answers_per_connection=*/100);
  CHECK(Read(member.address()) == "1");
  std::this_thread::sleep_for(kPeerKeptIdle + milliseconds(100));
  CHECK(Read(member.address()) == "2");
  CHECK(Read(member.address()) == "2");
}

// Reads the request's head from `socket`; what was read.
std::string ReadHead(tcp::socket& socket) {
  boost::system::error_code ec;
  asio::streambuf in;
  asio::read_until(socket, in, "\r\n\r\n", ec);
  return std::string(asio::buffers_begin(in.data()), asio::buffers_end(in.data()));
}

TEST_CASE("OpenPeerHttpStream: the head at once, then the chunks as they come, then the end") {
  std::promise<void> first_read;
  auto first_read_done = first_read.get_future();
  OneShotListener member([&](tcp::socket& socket) {
    const std::string head = ReadHead(socket);
    CHECK(head.find("GET /v1/watch?from=now HTTP/1.1") == 0);
    CHECK(head.find("Connection: close") != std::string::npos);
    boost::system::error_code ec;
    asio::write(socket,
                asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                         "Transfer-Encoding: chunked\r\n\r\n6\r\nid: 7\n\r\n")),
                ec);
    first_read_done.wait();  // the second chunk only after the first was read
    asio::write(socket, asio::buffer(std::string("2\r\nab\r\n0\r\n\r\n")), ec);
  });
  Result<std::unique_ptr<PeerHttpStream>> opened = OpenPeerHttpStream(
      PeerHttpOptions{}, member.address(), {"GET", "/v1/watch?from=now", {}, ""}, kTimeouts);
  REQUIRE(opened.has_value());
  PeerHttpStream& stream = **opened;
  CHECK(stream.status() == 200);
  CHECK(stream.headers().find("content-type")->second == "text/event-stream");
  std::string body;
  while (body.size() < 6) {
    Result<std::string> piece = stream.Next(milliseconds(5'000));
    REQUIRE(piece.has_value());
    body += *piece;
  }
  CHECK(body == "id: 7\n");
  CHECK_FALSE(stream.done());
  first_read.set_value();
  while (!stream.done()) {
    Result<std::string> piece = stream.Next(milliseconds(5'000));
    REQUIRE(piece.has_value());
    body += *piece;
  }
  CHECK(body == "id: 7\nab");
  const Result<std::string> after = stream.Next(milliseconds(5'000));
  REQUIRE(after.has_value());
  CHECK(after->empty());
}

TEST_CASE("OpenPeerHttpStream: a silent member times a read out; a closed one fails it") {
  std::promise<void> release;
  auto released = release.get_future();
  OneShotListener silent([&](tcp::socket& socket) {
    ReadHead(socket);
    boost::system::error_code ec;
    asio::write(socket,
                asio::buffer(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: "
                                         "chunked\r\n\r\n")),
                ec);
    released.wait();
  });
  Result<std::unique_ptr<PeerHttpStream>> opened = OpenPeerHttpStream(
      PeerHttpOptions{}, silent.address(), {"GET", "/v1/watch", {}, ""}, kTimeouts);
  REQUIRE(opened.has_value());
  const Result<std::string> piece = (*opened)->Next(milliseconds(200));
  REQUIRE_FALSE(piece.has_value());
  CHECK(piece.error().message().find("nothing of the answer arrived within 200 ms") !=
        std::string::npos);
  release.set_value();

  OneShotListener closing([](tcp::socket& socket) {
    ReadHead(socket);
    boost::system::error_code ec;
    asio::write(socket,
                asio::buffer(std::string(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")),
                ec);
    socket.close(ec);  // mid-stream, no last chunk
  });
  opened =
      OpenPeerHttpStream(PeerHttpOptions{}, closing.address(), {"GET", "/", {}, ""}, kTimeouts);
  REQUIRE(opened.has_value());
  std::string body;
  Result<std::string> next = (*opened)->Next(milliseconds(5'000));
  while (next.has_value() && !(*opened)->done()) {
    body += *next;
    next = (*opened)->Next(milliseconds(5'000));
  }
  REQUIRE_FALSE(next.has_value());
  CHECK(body == "abc");
  CHECK(next.error().message().find("reading the answer") != std::string::npos);
  // Nothing listening: not opened, and nothing sent.
  bool nothing_sent = false;
  const Result<std::unique_ptr<PeerHttpStream>> refused = OpenPeerHttpStream(
      PeerHttpOptions{}, HostPort{"127.0.0.1", 1}, {"GET", "/", {}, ""}, kTimeouts, &nothing_sent);
  REQUIRE_FALSE(refused.has_value());
  CHECK(nothing_sent);
}

// Answers one internal call with `status` and `body`, signed as server 1 when `sign`.
void AnswerInternalCall(tcp::socket& socket, PeerAuth& leader, int status, const std::string& body,
                        bool sign) {
  asio::streambuf in;
  boost::system::error_code ec;
  asio::read_until(socket, in, "\r\n\r\n{}", ec);
  const std::string request(asio::buffers_begin(in.data()), asio::buffers_end(in.data()));
  const std::string marker = std::string(kPeerAuthHeader) + ": ";
  const size_t at = request.find(marker) + marker.size();
  const std::string header = request.substr(at, request.find("\r\n", at) - at);
  std::string signature;
  if (sign) {
    Result<PeerCall> call = leader.VerifyRequest(
        header, "POST", "/v1/cluster/announce", "{}", [](uint64_t) { return true; }, "test");
    REQUIRE(call.has_value());
    signature =
        std::string(kPeerReplyHeader) + ": " + leader.SignReply(*call, status, body) + "\r\n";
  }
  const std::string answer = "HTTP/1.1 " + std::to_string(status) + " Refused\r\n" + signature +
                             "Content-Length: " + std::to_string(body.size()) +
                             "\r\nConnection: close\r\n\r\n" + body;
  asio::write(socket, asio::buffer(answer), ec);
}

TEST_CASE("PostInternalCall: a refusal keeps its code only when the member signed it") {
  PeerAuth leader(1, "test", "0123456789abcdef0123456789abcdef");
  PeerAuth member(4, "test", "0123456789abcdef0123456789abcdef");
  const std::string refusal = R"({"code":"failed_precondition","message":"runs another shape"})";
  for (const bool sign : {true, false}) {
    CAPTURE(sign);
    OneShotListener listener(
        [&](tcp::socket& socket) { AnswerInternalCall(socket, leader, 412, refusal, sign); });
    const Result<std::string> answer =
        PostInternalCall(PeerHttpOptions{}, &member, 1, listener.address().ToString(),
                         "/v1/cluster/announce", "{}", kTimeouts);
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() ==
          (sign ? StatusCode::kFailedPrecondition : StatusCode::kUnavailable));
    CHECK(answer.error().message().find("412 " + refusal) != std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::server
