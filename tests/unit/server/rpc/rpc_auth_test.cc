// Access control of the binary protocol (RpcHandler::Admit), without sockets.
#include <doctest/doctest.h>

#include <string>

#include "server/rpc/rpc_handler.h"
#include "server/rpc/rpc_server.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/raw_rpc_connection.h"

namespace kvatlas::server {
namespace {

using protocol::Frame;
using protocol::MessageType;
using Admission = RpcHandler::Admission;

Frame Request(MessageType type, uint64_t id, std::string payload = {}) {
  Frame frame;
  frame.header.type = type;
  frame.header.request_id = id;
  frame.payload = std::move(payload);
  return frame;
}

Frame Auth(uint64_t id, const std::string& token) {
  return Request(MessageType::kAuth, id, protocol::EncodeAuthRequest({token}));
}

// The last answer frame in `bytes`.
Frame LastAnswer(const std::string& bytes) {
  protocol::FrameDecoder decoder;
  decoder.Feed(bytes);
  std::optional<Frame> last;
  for (;;) {
    Result<std::optional<Frame>> next = decoder.Next();
    REQUIRE(next.has_value());
    if (!next->has_value()) break;
    last = std::move(**next);
  }
  REQUIRE(last.has_value());
  return std::move(*last);
}

// A session authenticated with `token` (which must be accepted).
RpcSession Authenticated(const RpcHandler& handler, const std::string& token) {
  RpcSession session;
  std::string out;
  REQUIRE(handler.Admit(Auth(0, token), &session, &out) == Admission::kAnswered);
  REQUIRE(session.principal.has_value());
  return session;
}

struct AuthServer {
  AuthServer()
      : auth(true, {{"reader", Role::kRead, DigestOfToken("r")},
                    {"writer", Role::kWrite, DigestOfToken("w")}}),
        audit(&s.metrics) {
    s.services.auth = &auth;
    s.services.audit = &audit;
  }
  testing::InMemoryServices s;
  Authenticator auth;
  AuditLog audit;
  const RpcHandler handler{&s.services};
};

TEST_SUITE("RpcAuth") {
  TEST_CASE("RpcAuth: with access control on, the first frame must be kAuth") {
    AuthServer server;
    const RpcHandler& handler = server.handler;
    RpcSession session{"10.0.0.1:5000", std::nullopt};
    CHECK(handler.AwaitingAuth(session));
    std::string out;
    CHECK(handler.Admit(Request(MessageType::kPing, 3), &session, &out) == Admission::kClose);
    const Frame refused = LastAnswer(out);
    CHECK(refused.header.type == MessageType::kPing);
    CHECK(refused.header.request_id == 3);
    CHECK(refused.header.status == StatusCode::kUnauthenticated);
  }

  TEST_CASE("RpcAuth: a wrong token closes, a good one is answered with its name and role") {
    AuthServer server;
    const RpcHandler& handler = server.handler;
    RpcSession session;
    std::string out;
    CHECK(handler.Admit(Auth(0, "nope"), &session, &out) == Admission::kClose);
    CHECK(LastAnswer(out).header.status == StatusCode::kUnauthenticated);
    CHECK(handler.Admit(Request(MessageType::kAuth, 0, "\x05"), &session, &out) ==
          Admission::kClose);
    CHECK(LastAnswer(out).header.status == StatusCode::kUnauthenticated);

    out.clear();
    CHECK(handler.Admit(Auth(0, "r"), &session, &out) == Admission::kAnswered);
    const Frame answer = LastAnswer(out);
    REQUIRE(answer.header.status == StatusCode::kOk);
    CHECK(answer.header.type == MessageType::kAuth);
    CHECK(protocol::DecodeAuthAnswer(answer.payload).value() ==
          protocol::AuthAnswer{Role::kRead, "reader"});
    CHECK_FALSE(handler.AwaitingAuth(session));
    // One token per connection.
    CHECK(handler.Admit(Auth(1, "w"), &session, &out) == Admission::kAnswered);
    CHECK(LastAnswer(out).header.status == StatusCode::kFailedPrecondition);
  }

  TEST_CASE("RpcAuth: each request type needs its role") {
    AuthServer server;
    const RpcHandler& handler = server.handler;
    RpcSession reader = Authenticated(handler, "r"), writer = Authenticated(handler, "w");
    std::string out;
    for (const MessageType read :
         {MessageType::kPing, MessageType::kStats, MessageType::kLookup, MessageType::kLocate,
          MessageType::kRoute, MessageType::kWatch, MessageType::kSnapshot}) {
      CAPTURE(static_cast<int>(read));
      CHECK(handler.Admit(Request(read, 5), &reader, &out) == Admission::kServe);
    }
    for (const MessageType write : {MessageType::kIngest, MessageType::kHeartbeat}) {
      CAPTURE(static_cast<int>(write));
      out.clear();
      CHECK(handler.Admit(Request(write, 6), &reader, &out) == Admission::kAnswered);
      const Frame denied = LastAnswer(out);
      CHECK(denied.header.status == StatusCode::kPermissionDenied);
      CHECK(denied.header.request_id == 6);
      CHECK(handler.Admit(Request(write, 7), &writer, &out) == Admission::kServe);
    }
    CHECK(server.s.metrics.Render({}).find("kvatlas_auth_failures_total{reason=\"forbidden\"} 2") !=
          std::string::npos);
  }

  TEST_CASE("RpcAuth: a removed token ends the connection at its next request") {
    AuthServer server;
    const RpcHandler& handler = server.handler;
    RpcSession reader = Authenticated(handler, "r"), writer = Authenticated(handler, "w");
    std::string out;
    server.auth.Replace({{"reader", Role::kRead, DigestOfToken("r")}});
    CHECK(handler.Recheck(&reader).ok());
    CHECK(handler.Admit(Request(MessageType::kPing, 8), &reader, &out) == Admission::kServe);
    out.clear();
    CHECK(handler.Admit(Request(MessageType::kPing, 9), &writer, &out) == Admission::kClose);
    CHECK(LastAnswer(out).header.status == StatusCode::kUnauthenticated);
    CHECK(handler.Recheck(&writer).code() == StatusCode::kUnauthenticated);
  }

  TEST_CASE("RpcAuth: over a socket, requests pipeline behind kAuth, and stragglers are cut") {
    AuthServer server;
    RpcServerOptions options;
    options.port = 0;
    options.threads = 1;
    options.connection.auth_timeout = std::chrono::milliseconds(300);
    RpcServer rpc(options, &server.s.services);
    REQUIRE(rpc.Start().ok());
    {
      // kAuth and a ping in one write: both answered, in order.
      testing::RawRpcConnection c(rpc.port());
      std::string bytes;
      testing::RawRpcConnection::Append(MessageType::kAuth, 0, protocol::EncodeAuthRequest({"r"}),
                                        &bytes);
      testing::RawRpcConnection::Append(MessageType::kPing, 1, "", &bytes);
      c.SendRaw(bytes);
      CHECK(c.MustRead().header.type == MessageType::kAuth);
      const Frame pong = c.MustRead();
      CHECK(pong.header.type == MessageType::kPing);
      CHECK(pong.header.status == StatusCode::kOk);
      // A reload that removes the token closes the connection with an id-0 error.
      server.auth.Replace({{"writer", Role::kWrite, DigestOfToken("w")}});
      rpc.RecheckCredentials();
      const Frame ended = c.MustRead();
      CHECK(ended.header.type == MessageType::kError);
      CHECK(ended.header.request_id == 0);
      CHECK(ended.header.status == StatusCode::kUnauthenticated);
      CHECK_FALSE(c.Read().has_value());
    }
    {
      // No kAuth within auth_timeout: cut.
      testing::RawRpcConnection c(rpc.port());
      const Frame cut = c.MustRead();
      CHECK(cut.header.status == StatusCode::kUnauthenticated);
      CHECK_FALSE(c.Read().has_value());
    }
    {
      // A large frame before kAuth gets no share of the buffer budget.
      testing::RawRpcConnection c(rpc.port());
      std::string bytes;
      testing::RawRpcConnection::Append(MessageType::kIngest, 9, std::string(100 << 10, 'x'),
                                        &bytes);
      c.SendSome(bytes, std::chrono::milliseconds(500));
      const Frame refused = c.MustRead();
      CHECK(refused.header.status == StatusCode::kUnauthenticated);
      CHECK_FALSE(c.Read().has_value());
    }
    rpc.Stop();
  }

  TEST_CASE("RpcAuth: with access control off nothing is asked, and kAuth is answered") {
    testing::InMemoryServices s;
    const RpcHandler handler(&s.services);
    RpcSession session;
    std::string out;
    CHECK_FALSE(handler.AwaitingAuth(session));
    CHECK(handler.Admit(Request(MessageType::kIngest, 1), &session, &out) == Admission::kServe);
    CHECK(out.empty());
    CHECK(handler.Admit(Auth(0, "anything"), &session, &out) == Admission::kAnswered);
    CHECK(protocol::DecodeAuthAnswer(LastAnswer(out).payload).value() ==
          protocol::AuthAnswer{Role::kAdmin, "anonymous"});
  }
}

}  // namespace
}  // namespace kvatlas::server
