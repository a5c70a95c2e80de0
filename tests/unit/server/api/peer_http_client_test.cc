// SendPeerHttp against a raw TCP listener of the test's own: what goes out (method, target
// as given, Host, headers, body), what comes back (status, headers by name without case),
// and which failures leave the request unsent (so that a held forward may try again).
#include "server/api/peer_http_client.h"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace kvatlas::server
