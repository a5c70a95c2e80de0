// Routing by the directory (client/src/group_router.h) against scripted peers: a context's
// reads go to a member of its group named by the kDirectory answer, everything else to the
// endpoints; a member's wrong_group answer makes the client fetch the directory again and
// send the read, once, to the member it names now; a member that cannot be reached costs
// the second hop through the endpoints, never the answer.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "kvatlas/client/client.h"
#include "kvatlas/common/placement.h"
#include "tests/unit/client/fake_server.h"

namespace kvatlas {
namespace {

using protocol::Frame;
using protocol::MessageType;
using testing::FakeServer;

constexpr uint32_t kGroups = 2;

// A context of group `group` of kGroups (its home: nothing is placed).
ContextKey ContextOf(GroupId group) {
  for (int m = 0;; ++m) {
    ContextKey context{"default", "model-" + std::to_string(m), "", 16, ""};
    if (HomeGroup(context, kGroups) == group) return context;
  }
}

// Answers a lookup with `tag` as its revision (so that a test can tell who answered), or
// wrong_group while `refusing`; anything else with an empty answer.
FakeServer::Action Answer(const Frame& request, Revision tag, bool refusing) {
  if (request.header.type == MessageType::kWatch) {
    // A watch that starts and stays open (a batch that is not final, nothing in it).
    return {{FakeServer::Answer(request, protocol::EncodeWatchBatch({false, tag, {}}))}};
  }
  if (request.header.type != MessageType::kLookup) return {{FakeServer::Answer(request, "")}};
  if (refusing) return {{FakeServer::Answer(request, "not here", StatusCode::kWrongGroup)}};
  LookupAnswer answer;
  answer.revision = tag;
  return {{FakeServer::Answer(request, protocol::EncodeLookupAnswerBinary(answer))}};
}

struct Peer {
  explicit Peer(Revision answered_as)
      : tag(answered_as), server([this](Frame request) {
          if (request.header.type == MessageType::kPing) ++pings;
          return Answer(request, this->tag, refusing);
        }) {}
  const Revision tag;
  std::atomic<bool> refusing{false};
  std::atomic<int> pings{0};
  FakeServer server;  // last: its thread starts once the fields above are set
};

// The endpoint a client connects to: answers lookups with tag 1, and kDirectory with group
// 2 on server `member` (server 2 at `second`, 3 at `third`).
struct Origin {
  Origin(std::string second, std::string third)
      : server([this, second = std::move(second), third = std::move(third)](Frame request) {
          if (request.header.type == MessageType::kPing) ++pings;
          if (request.header.type != MessageType::kDirectory) return Answer(request, 1, false);
          ++directory_calls;
          protocol::DirectoryAnswer answer;
          answer.groups = kGroups;
          REQUIRE(answer.directory.AddGroup({2, {std::to_string(member.load())}, true}).ok());
          answer.servers = {{2, second}, {3, third}};
          return FakeServer::Action{
              {FakeServer::Answer(request, protocol::EncodeDirectoryAnswer(answer))}};
        }) {}
  std::atomic<uint64_t> member{2};
  std::atomic<int> directory_calls{0};
  std::atomic<int> pings{0};
  FakeServer server;  // last
};

std::unique_ptr<Client> ConnectTo(const FakeServer& server, bool route = true) {
  ClientOptions options;
  options.endpoints = {server.endpoint()};
  options.route_by_directory = route;
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
  return std::move(client).value();
}

// Who answered a lookup of `context` (its tag), or 0 when it failed.
Revision AnsweredBy(Client& client, const ContextKey& context, bool linearizable = false) {
  LookupRequest request;
  request.context = context;
  request.by_hash = true;
  request.seq_hashes = {1, 2};
  request.linearizable = linearizable;
  Result<LookupAnswer> answer = client.Lookup(request);
  return answer.has_value() ? answer->revision : 0;
}

TEST_SUITE("GroupRouter") {
  TEST_CASE("a context's reads go to its group's member; the rest to the endpoints") {
    Peer second(200), third(300);
    Origin origin(second.server.endpoint(), third.server.endpoint());
    auto client = ConnectTo(origin.server);
    CHECK(origin.directory_calls == 1);  // fetched at Connect
    CHECK(AnsweredBy(*client, ContextOf(2)) == 200);
    CHECK(AnsweredBy(*client, ContextOf(1)) == 1);  // no members recorded: every server
    CHECK(AnsweredBy(*client, ContextOf(2), /*linearizable=*/true) == 1);
    CHECK(second.server.connections_accepted() == 1);
    CHECK(third.server.connections_accepted() == 0);  // named, but no group routes to it
    client.reset();  // a FakeServer serves one connection at a time

    auto plain = ConnectTo(origin.server, /*route=*/false);
    CHECK(AnsweredBy(*plain, ContextOf(2)) == 1);
    CHECK(origin.directory_calls == 1);
  }

  TEST_CASE("a routed watch reads from the member, and its ping goes there too") {
    Peer second(200), third(300);
    Origin origin(second.server.endpoint(), third.server.endpoint());
    auto client = ConnectTo(origin.server);
    WatchOptions options;
    options.filter = FeedFilter::ForContext(ContextOf(2));
    Result<std::unique_ptr<WatchStream>> stream = client->Watch(options);
    REQUIRE_MESSAGE(stream.has_value(), stream.status().ToString());
    CHECK((*stream)->ResumeFrom() == 200);  // the member's start
    CHECK((*stream)->Ping(std::chrono::milliseconds(2'000)).ok());
    CHECK(second.pings == 1);
    CHECK(origin.pings == 0);
    (*stream)->Cancel();
    CHECK((*stream)->Ping(std::chrono::milliseconds(2'000)).code() == StatusCode::kUnavailable);
  }

  TEST_CASE("a wrong_group answer fetches the directory again and resends to the new member") {
    Peer second(200), third(300);
    Origin origin(second.server.endpoint(), third.server.endpoint());
    auto client = ConnectTo(origin.server);
    CHECK(AnsweredBy(*client, ContextOf(2)) == 200);
    // Group 2 moved to server 3; server 2 no longer holds it.
    origin.member = 3;
    second.refusing = true;
    CHECK(AnsweredBy(*client, ContextOf(2)) == 300);
    CHECK(origin.directory_calls >= 2);  // the answer's hook and the resend may ask twice
    CHECK(AnsweredBy(*client, ContextOf(2)) == 300);  // routed by the new copy at once
    // Refused again after the fetch: the error, not a loop.
    third.refusing = true;
    LookupRequest request;
    request.context = ContextOf(2);
    request.by_hash = true;
    request.seq_hashes = {1};
    CHECK(client->Lookup(request).status().code() == StatusCode::kWrongGroup);
  }

  TEST_CASE("a member that cannot be reached costs the second hop, not the answer") {
    int gone_port = 0;
    {
      Peer gone(200);
      gone_port = gone.server.port();
    }  // closed: connecting to it is refused
    Peer third(300);
    Origin origin("127.0.0.1:" + std::to_string(gone_port), third.server.endpoint());
    auto client = ConnectTo(origin.server);
    CHECK(AnsweredBy(*client, ContextOf(2)) == 1);
  }

  TEST_CASE("a server that does not know kDirectory routes nothing") {
    Peer old(1);  // answers kDirectory with an empty payload, which does not decode
    auto client = ConnectTo(old.server);
    CHECK(AnsweredBy(*client, ContextOf(2)) == 1);
  }
}

}  // namespace
}  // namespace kvatlas
