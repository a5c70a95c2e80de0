// kvatlas::Client against FakeServer: answer matching by id, out-of-order answers, error
// frames, deadlines with late answers, connection loss and reconnection, flow control.
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "kvatlas/client/client.h"
#include "tests/unit/client/fake_server.h"

namespace kvatlas {
namespace {

using namespace std::chrono_literals;
using protocol::Frame;
using protocol::MessageType;
using testing::FakeServer;

// Without routing by the directory: these scripts count, hold and answer every frame as a
// lookup, and the kDirectory call at Connect would be one more (group_router_test.cc).
std::unique_ptr<Client> MustConnect(const FakeServer& server, ClientOptions options = {}) {
  options.endpoints = {server.endpoint()};
  options.route_by_directory = false;
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
  return std::move(client).value();
}

// Answers a lookup with its own context, so that a caller can tell whose answer it got.
Frame EchoLookup(const Frame& request) {
  Result<LookupRequest> lookup = protocol::DecodeLookupRequestBinary(request.payload);
  REQUIRE(lookup.has_value());
  LookupAnswer answer;
  answer.context = lookup->context;
  answer.revision = request.header.request_id;
  answer.blocks_queried = static_cast<uint32_t>(lookup->seq_hashes.size());
  return FakeServer::Answer(request, protocol::EncodeLookupAnswerBinary(answer));
}

FakeServer::Action Immediate(Frame request) {
  if (request.header.type == MessageType::kLookup) return {{EchoLookup(request)}};
  return {{FakeServer::Answer(request, "")}};
}

LookupRequest LookupFor(const std::string& model) {
  LookupRequest request;
  request.context.model = model;
  request.context.block_size = 4;
  request.by_hash = true;
  request.seq_hashes = {1, 2, 3};
  return request;
}

TEST_SUITE("Client") {
  TEST_CASE("Client: ping and lookup round trips on one connection") {
    FakeServer server(Immediate);
    auto client = MustConnect(server);
    CHECK(client->OpenConnections() == 1);
    CHECK(client->Ping().ok());
    Result<LookupAnswer> answer = client->Lookup(LookupFor("llama"));
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    CHECK(answer->context.model == "llama");
    CHECK(answer->blocks_queried == 3);
    CHECK(server.connections_accepted() == 1);
  }

  TEST_CASE("Client: answers that come back in reverse order reach their callers") {
    constexpr size_t kCalls = 16;
    std::vector<Frame> held;
    FakeServer server([&held](Frame request) {
      held.push_back(std::move(request));
      FakeServer::Action action;
      if (held.size() == kCalls) {
        for (auto it = held.rbegin(); it != held.rend(); ++it)
          action.send.push_back(EchoLookup(*it));
      }
      return action;
    });
    auto client = MustConnect(server);
    std::vector<std::future<Result<LookupAnswer>>> futures;
    for (size_t i = 0; i < kCalls; ++i) {
      futures.push_back(client->LookupAsync(LookupFor("m" + std::to_string(i))));
    }
    for (size_t i = 0; i < kCalls; ++i) {
      Result<LookupAnswer> answer = futures[i].get();
      REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
      CHECK(answer->context.model == "m" + std::to_string(i));
    }
  }

  TEST_CASE("Client: an error frame becomes the Status it carries") {
    FakeServer server([](Frame request) {
      return FakeServer::Action{{FakeServer::Answer(
          request, protocol::EncodeErrorPayload(Status::InvalidArgument("seq_hashes: bad")),
          StatusCode::kInvalidArgument)}};
    });
    auto client = MustConnect(server);
    Result<LookupAnswer> answer = client->Lookup(LookupFor("llama"));
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kInvalidArgument);
    CHECK(answer.error().message().find("seq_hashes: bad") != std::string::npos);
    // The connection survives an error answer.
    CHECK(client->OpenConnections() == 1);
  }

  TEST_CASE("Client: an undecodable answer is kCorruption") {
    FakeServer server([](Frame request) {
      return FakeServer::Action{{FakeServer::Answer(request, "\x01garbage")}};
    });
    auto client = MustConnect(server);
    Result<LookupAnswer> answer = client->Lookup(LookupFor("llama"));
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kCorruption);
  }

  TEST_CASE("Client: a deadline fails the call and its late answer is dropped") {
    // Holds the first request; answers it (late) together with the second.
    std::vector<Frame> held;
    FakeServer server([&held](Frame request) {
      held.push_back(std::move(request));
      FakeServer::Action action;
      if (held.size() == 2) {
        for (const Frame& f : held) action.send.push_back(EchoLookup(f));
      }
      return action;
    });
    auto client = MustConnect(server);
    const auto start = std::chrono::steady_clock::now();
    Result<LookupAnswer> first = client->Lookup(LookupFor("first"), 30ms);
    REQUIRE_FALSE(first.has_value());
    CHECK(first.error().code() == StatusCode::kDeadlineExceeded);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    Result<LookupAnswer> second = client->Lookup(LookupFor("second"));
    REQUIRE_MESSAGE(second.has_value(), second.status().ToString());
    CHECK(second->context.model == "second");
    CHECK(client->Ping(10ms).code() == StatusCode::kDeadlineExceeded);  // held, never answered
  }

  TEST_CASE("Client: a deadline already past fails without a round trip") {
    FakeServer server(Immediate);
    auto client = MustConnect(server);
    Status s = client->Ping(std::chrono::microseconds(1));
    CHECK(s.code() == StatusCode::kDeadlineExceeded);
    CHECK(client->Ping().ok());
  }

  TEST_CASE("Client: a lost connection fails in-flight calls, the next call reconnects") {
    std::atomic<int> requests{0};
    FakeServer server([&requests](Frame request) {
      if (requests++ == 0) return FakeServer::Action{{}, /*close=*/true};
      return Immediate(std::move(request));
    });
    auto client = MustConnect(server);
    Status lost = client->Ping(5s);
    CHECK(lost.code() == StatusCode::kUnavailable);
    CHECK(client->Ping(5s).ok());
    CHECK(server.connections_accepted() == 2);
  }

  TEST_CASE("Client: calls over max_in_flight wait for a slot and all complete") {
    std::vector<Frame> held;
    std::mutex mu;
    size_t most_held = 0;
    // Answers in pairs: with max_in_flight 2 the client never has a third call out.
    FakeServer server([&](Frame request) {
      std::lock_guard lock(mu);
      held.push_back(std::move(request));
      most_held = std::max(most_held, held.size());
      FakeServer::Action action;
      if (held.size() == 2) {
        for (const Frame& f : held) action.send.push_back(EchoLookup(f));
        held.clear();
      }
      return action;
    });
    ClientOptions options;
    options.max_in_flight = 2;
    auto client = MustConnect(server, options);
    std::vector<std::future<Result<LookupAnswer>>> futures;
    for (int i = 0; i < 10; ++i)
      futures.push_back(client->LookupAsync(LookupFor("m" + std::to_string(i))));
    for (int i = 0; i < 10; ++i) {
      Result<LookupAnswer> answer = futures[i].get();
      REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
      CHECK(answer->context.model == "m" + std::to_string(i));
    }
    std::lock_guard lock(mu);
    CHECK(most_held == 2);
  }

  TEST_CASE("Client: a request over max_request_bytes is refused locally") {
    FakeServer server(Immediate);
    ClientOptions options;
    options.max_request_bytes = 64;
    auto client = MustConnect(server, options);
    LookupRequest big = LookupFor("llama");
    big.seq_hashes.assign(100, 7);
    CHECK(client->Lookup(big).status().code() == StatusCode::kPayloadTooLarge);
    CHECK(client->Ping().ok());
  }

  TEST_CASE("Client: an invalid event is refused before sending") {
    FakeServer server(Immediate);
    auto client = MustConnect(server);
    BlockEvent event;
    event.context.model = "llama";
    event.context.block_size = 0;
    event.holder.id = "e";
    event.seq_hashes = {1};
    Result<IngestAnswer> r = client->Ingest({event});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kInvalidArgument);
    CHECK(r.error().message().find("events[0].block_size") != std::string::npos);
  }

  TEST_CASE("Client: bad options are kInvalidArgument") {
    ClientOptions options;
    CHECK(Client::Connect(options).status().code() == StatusCode::kInvalidArgument);
    options.endpoints = {"nohost"};
    CHECK(Client::Connect(options).status().code() == StatusCode::kInvalidArgument);
    options.endpoints = {"127.0.0.1:1"};
    options.connections = 0;
    CHECK(Client::Connect(options).status().code() == StatusCode::kInvalidArgument);
  }

  TEST_CASE("Client: an unreachable server is kUnavailable quickly") {
    int port = 0;
    {
      FakeServer gone(Immediate);
      port = gone.port();
    }  // closed: connecting to it is refused
    ClientOptions options;
    options.endpoints = {"127.0.0.1:" + std::to_string(port)};
    const auto start = std::chrono::steady_clock::now();
    Result<std::unique_ptr<Client>> client = Client::Connect(options);
    REQUIRE_FALSE(client.has_value());
    CHECK(client.error().code() == StatusCode::kUnavailable);
    CHECK(std::chrono::steady_clock::now() - start < 1s);
  }

  TEST_CASE("Client: the second endpoint is used when the first refuses") {
    int dead_port = 0;
    {
      FakeServer gone(Immediate);
      dead_port = gone.port();
    }
    FakeServer server(Immediate);
    ClientOptions options;
    options.endpoints = {"127.0.0.1:" + std::to_string(dead_port), server.endpoint()};
    Result<std::unique_ptr<Client>> client = Client::Connect(options);
    REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
    CHECK((*client)->Ping().ok());
  }

  TEST_CASE("Client: a call refused unauthenticated closes its connection; the next opens one") {
    // A server with access control closes the connection after such an answer; this one
    // leaves it open, so only the client's own close makes the next call reconnect.
    FakeServer server([](Frame request) {
      return FakeServer::Action{{FakeServer::Answer(
          request, protocol::EncodeErrorPayload(Status::Unauthenticated("a token is needed")),
          StatusCode::kUnauthenticated)}};
    });
    auto client = MustConnect(server);
    CHECK(client->Ping().code() == StatusCode::kUnauthenticated);
    CHECK(client->Ping().code() == StatusCode::kUnauthenticated);
    CHECK(server.connections_accepted() == 2);
  }

  TEST_CASE("Client: destroying the client fails pending calls with kUnavailable") {
    FakeServer server([](Frame) { return FakeServer::Action{}; });  // never answers
    auto client = MustConnect(server);
    std::future<Status> pending = client->PingAsync(10s);
    client.reset();
    CHECK(pending.get().code() == StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace kvatlas
