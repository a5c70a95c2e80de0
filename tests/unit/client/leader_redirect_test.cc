// kvatlas::Client following binary-protocol not_leader answers (docs/protocol.md §Not
// leader) between FakeServers, and the hint's encoding (kvatlas/common/not_leader.h).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/common/not_leader.h"
#include "tests/unit/client/fake_server.h"

namespace kvatlas {
namespace {

using protocol::Frame;
using protocol::MessageType;
using testing::FakeServer;

BlockEvent Event() {
  BlockEvent event;
  event.context.model = "llama";
  event.context.block_size = 4;
  event.holder.id = "e";
  event.seq_hashes = {1};
  return event;
}

Frame NotLeader(const Frame& request, const protocol::NotLeaderHint& hint) {
  const std::string message =
      protocol::AppendNotLeaderHint("not the leader; the leader is server 2", hint);
  return FakeServer::Answer(request,
                            protocol::EncodeErrorPayload(Status(StatusCode::kNotLeader, message)),
                            StatusCode::kNotLeader);
}

// A leader's answer to an ingest: accepted at revision `revision`.
FakeServer::Action Acked(const Frame& request, uint64_t revision) {
  IngestAnswer answer;
  answer.revision = revision;
  answer.events = 1;
  answer.blocks = 1;
  return FakeServer::Action{
      {FakeServer::Answer(request, protocol::EncodeIngestAnswerBinary(answer))}};
}

// A follower: answers ingests not_leader naming `leader`, counting them, and anything else
// with an empty answer.
FakeServer::Handler Redirecting(std::atomic<int>* ingests, std::function<std::string()> leader) {
  return [ingests, leader = std::move(leader)](Frame request) {
    if (request.header.type != MessageType::kIngest) {
      return FakeServer::Action{{FakeServer::Answer(request, "")}};
    }
    ++*ingests;
    return FakeServer::Action{{NotLeader(request, {2, leader()})}};
  };
}

// Without routing by the directory: these scripts count every frame a server receives,
// and the kDirectory call at Connect would be one more.
std::unique_ptr<Client> ConnectTo(const std::string& endpoint) {
  ClientOptions options;
  options.endpoints = {endpoint};
  options.route_by_directory = false;
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
  return std::move(client).value();
}

TEST_SUITE("LeaderRedirect") {
  TEST_CASE("NotLeaderHint: appended lines parse back, messages without them do not") {
    const std::string full = protocol::AppendNotLeaderHint("m", {7, "10.0.0.2:7071"});
    CHECK(full == "m\nleader_id=7\nleader_rpc_address=10.0.0.2:7071");
    const auto parsed = protocol::ParseNotLeaderHint(full);
    REQUIRE(parsed.has_value());
    CHECK(parsed->leader_id == 7);
    CHECK(parsed->leader_rpc_address == "10.0.0.2:7071");
    const auto unknown = protocol::ParseNotLeaderHint(protocol::AppendNotLeaderHint("m", {}));
    REQUIRE(unknown.has_value());
    CHECK(unknown->leader_id == 0);
    CHECK(unknown->leader_rpc_address.empty());
    CHECK_FALSE(protocol::ParseNotLeaderHint("not the leader; the leader is server 2"));
    CHECK_FALSE(protocol::ParseNotLeaderHint("m\nleader_id=x"));
  }

  TEST_CASE("Client: an ingest answered not_leader is resent to the named leader") {
    std::atomic<int> leader_ingests{0};
    FakeServer leader([&](Frame request) {
      if (request.header.type == MessageType::kIngest) ++leader_ingests;
      return Acked(request, 42);
    });
    std::atomic<int> follower_ingests{0};
    FakeServer follower(Redirecting(&follower_ingests, [&] { return leader.endpoint(); }));
    auto client = ConnectTo(follower.endpoint());
    for (int i = 0; i < 3; ++i) {
      Result<IngestAnswer> answer = client->Ingest({Event()});
      REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
      CHECK(answer->revision == 42);
    }
    // Only the first went through the follower: the client remembers the leader.
    CHECK(follower_ingests == 1);
    CHECK(leader_ingests == 3);
    // One connection to the leader, reused.
    CHECK(leader.connections_accepted() == 1);
  }

  TEST_CASE(
      "Client: a remembered leader that steps down is followed; one that is gone is "
      "forgotten") {
    std::atomic<bool> first_leads{true};
    std::atomic<int> first_ingests{0}, second_ingests{0}, follower_ingests{0};
    auto second = std::make_unique<FakeServer>([&](Frame request) {
      ++second_ingests;
      return Acked(request, 7);
    });
    const std::string second_endpoint = second->endpoint();
    FakeServer first([&](Frame request) {
      ++first_ingests;
      if (first_leads) return Acked(request, 7);
      return FakeServer::Action{{NotLeader(request, {3, second_endpoint})}};
    });
    FakeServer follower(Redirecting(&follower_ingests, [&] { return first.endpoint(); }));
    auto client = ConnectTo(follower.endpoint());
    auto ingest_ok = [&] {
      Result<IngestAnswer> answer = client->Ingest({Event()});
      REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    };
    ingest_ok();  // follower -> first, remembered
    ingest_ok();  // first directly
    CHECK(follower_ingests == 1);
    CHECK(first_ingests == 2);

    first_leads = false;
    ingest_ok();  // first (not_leader) -> second, remembered
    ingest_ok();  // second directly
    CHECK(first_ingests == 3);
    CHECK(second_ingests == 2);
    CHECK(follower_ingests == 1);

    // The remembered leader goes away: that call fails (it is not resent: it may have been
    // applied), and the next one starts from the configured endpoints again.
    second.reset();
    Result<IngestAnswer> lost = client->Ingest({Event()}, std::chrono::milliseconds(2000));
    REQUIRE_FALSE(lost.has_value());
    CHECK(lost.error().code() == StatusCode::kUnavailable);
    first_leads = true;
    ingest_ok();  // follower -> first
    CHECK(follower_ingests == 2);
    CHECK(first_ingests == 4);
  }

  TEST_CASE("Client: not_leader redirects are bounded and errors without a hint pass") {
    // A chain of servers, each naming the next as the leader (FakeServer serves one
    // connection at a time, so no server is visited twice).
    constexpr int kServers = 5;
    std::atomic<int> requests[kServers] = {};
    std::vector<std::unique_ptr<FakeServer>> chain(kServers);
    std::string next_endpoint[kServers];
    for (int i = kServers - 1; i >= 0; --i) {
      chain[i] = std::make_unique<FakeServer>([&requests, &next_endpoint, i](Frame request) {
        ++requests[i];
        return FakeServer::Action{
            {NotLeader(request, {static_cast<uint64_t>(i + 2), next_endpoint[i]})}};
      });
      if (i + 1 < kServers) next_endpoint[i] = chain[i + 1]->endpoint();
    }
    next_endpoint[kServers - 1] = chain[0]->endpoint();
    auto client = ConnectTo(chain[0]->endpoint());
    Result<IngestAnswer> answer = client->Ingest({Event()});
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kNotLeader);
    // The call and 3 hops; the fifth server is never asked.
    for (int i = 0; i < 4; ++i) CHECK(requests[i] == 1);
    CHECK(requests[4] == 0);

    // A not_leader without the hint lines (not from a kvatlas server) passes at once.
    std::atomic<int> plain_requests{0};
    FakeServer plain([&](Frame request) {
      ++plain_requests;
      return FakeServer::Action{{FakeServer::Answer(
          request, protocol::EncodeErrorPayload(Status(StatusCode::kNotLeader, "not the leader")),
          StatusCode::kNotLeader)}};
    });
    auto lost = ConnectTo(plain.endpoint());
    answer = lost->Ingest({Event()});
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kNotLeader);
    CHECK(plain_requests == 1);
  }

  TEST_CASE("Client: a not_leader naming no leader address is retried until the deadline") {
    // An election: the follower knows no leader, then no address, then names the leader.
    std::atomic<int> leader_ingests{0};
    FakeServer leader([&](Frame request) {
      if (request.header.type == MessageType::kIngest) ++leader_ingests;
      return Acked(request, 9);
    });
    std::atomic<int> follower_ingests{0};
    FakeServer follower([&](Frame request) {
      const int n = ++follower_ingests;
      if (n <= 4) return FakeServer::Action{{NotLeader(request, {0, ""})}};
      if (n <= 8) return FakeServer::Action{{NotLeader(request, {2, ""})}};
      return FakeServer::Action{{NotLeader(request, {2, leader.endpoint()})}};
    });
    auto client = ConnectTo(follower.endpoint());
    Result<IngestAnswer> answer = client->Ingest({Event()}, std::chrono::milliseconds(5000));
    REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
    CHECK(answer->revision == 9);
    CHECK(follower_ingests == 9);
    CHECK(leader_ingests == 1);

    // No leader ever: retried (not at once, not spinning), then not_leader at the deadline.
    std::atomic<int> unknown_requests{0};
    FakeServer unknown([&](Frame request) {
      ++unknown_requests;
      return FakeServer::Action{{NotLeader(request, {0, ""})}};
    });
    auto lost = ConnectTo(unknown.endpoint());
    const auto start = std::chrono::steady_clock::now();
    answer = lost->Ingest({Event()}, std::chrono::milliseconds(500));
    const auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kNotLeader);
    CHECK(unknown_requests > 3);
    CHECK(unknown_requests <= 500 / 25 + 1);  // kNoLeaderRetryDelay 25 ms
    CHECK(took >= std::chrono::milliseconds(400));
    CHECK(took < std::chrono::milliseconds(1500));
  }

  TEST_CASE("Client: a resent call that outlives the deadline after not_leader fails not_leader") {
    // The first answer names no leader; the resent call's answer comes after the deadline.
    std::atomic<int> requests{0};
    FakeServer slow([&](Frame request) {
      if (++requests >= 2) std::this_thread::sleep_for(std::chrono::milliseconds(400));
      return FakeServer::Action{{NotLeader(request, {0, ""})}};
    });
    auto client = ConnectTo(slow.endpoint());
    const Result<IngestAnswer> answer = client->Ingest({Event()}, std::chrono::milliseconds(200));
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kNotLeader);
    CHECK(answer.error().message().find("no leader was known") != std::string::npos);
    CHECK(requests >= 2);
  }

  TEST_CASE("Client: an unreachable leader fails the call within its deadline") {
    FakeServer follower([&](Frame request) {
      // A port nothing listens on (the FakeServer's own port once it is gone is racy).
      return FakeServer::Action{{NotLeader(request, {2, "127.0.0.1:1"})}};
    });
    auto client = ConnectTo(follower.endpoint());
    const auto start = std::chrono::steady_clock::now();
    Result<IngestAnswer> answer = client->Ingest({Event()}, std::chrono::milliseconds(2000));
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() != StatusCode::kOk);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  }
}

}  // namespace
}  // namespace kvatlas
