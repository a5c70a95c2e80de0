// Exactly-once writes (docs/api.md §Idempotent writes) against the real server: a batch
// resent with the same (writer_id, sequence) over the binary protocol or REST is applied
// once — before and after a restart — and kvatlas::Writer resends across a server outage.
#include "kvatlas/client/writer.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "kvatlas/client/block_hasher.h"
#include "kvatlas/client/client.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBlockSize = 16;

BlockEvent Stored(const std::vector<uint32_t>& tokens) {
  BlockEvent event;
  event.type = EventType::kStored;
  event.context.model = "llama";
  event.context.block_size = kBlockSize;
  event.holder.id = "engine-a";
  event.token_ids = tokens;
  return event;
}

// The refcount of engine-a's GPU copy of the prompt's first block (0 when absent).
uint32_t Refcount(Client& client, const std::vector<uint32_t>& tokens) {
  const uint64_t key = BlockHasher().SequenceHashes(tokens, kBlockSize).at(0);
  Result<LocateAnswer> located = client.Locate(LocateRequest{key, {}});
  REQUIRE_MESSAGE(located.has_value(), located.status().ToString());
  return located->copies.empty() ? 0 : located->copies[0].refcount;
}

TEST_SUITE("Integration.Writer") {
  TEST_CASE("Writer: a resent (writer, sequence) is applied once, also after a restart") {
    TempDir dir;
    const std::vector<uint32_t> prompt = Tokens(900, 2 * kBlockSize);
    {
      ServerProcess server(dir.path() / "data");
      std::unique_ptr<Client> client = ConnectClient(server);
      Writer writer(client.get(), "sched-1");
      Result<IngestAnswer> first = writer.Write({Stored(prompt)});
      REQUIRE_MESSAGE(first.has_value(), first.status().ToString());
      CHECK(writer.next_sequence() == 2);
      CHECK_FALSE(writer.has_pending());
      CHECK(Refcount(*client, prompt) == 1);

      // The same batch again, as a retry after a lost answer would send it.
      Result<IngestAnswer> again = client->Ingest({Stored(prompt)}, WriterPosition{"sched-1", 1});
      REQUIRE_MESSAGE(again.has_value(), again.status().ToString());
      CHECK(Refcount(*client, prompt) == 1);
      // Without a writer a duplicate store counts (reference-counted copies).
      REQUIRE(client->Ingest({Stored(prompt)}).has_value());
      CHECK(Refcount(*client, prompt) == 2);

      // Over REST, the same rule with the same writer's sequence space.
      httplib::Client rest = server.Client();
      json event = {{"event_type", "stored"},
                    {"model_name", "llama"},
                    {"block_size", kBlockSize},
                    {"backend_id", "engine-a"},
                    {"token_ids", prompt}};
      json body = {{"events", {event}}, {"writer_id", "sched-1"}, {"writer_sequence", 2}};
      CHECK(Post(rest, "/v1/events", body).status == 200);
      CHECK(Post(rest, "/v1/events", body).status == 200);
      CHECK(Refcount(*client, prompt) == 3);
      body["writer_sequence"] = 0;
      Answer bad = Post(rest, "/v1/events", body);
      CHECK(bad.status == 400);
      CHECK(bad.body["message"].get<std::string>().find("writer_sequence") != std::string::npos);
      body.erase("writer_sequence");
      CHECK(Post(rest, "/v1/events", body).status == 400);
      REQUIRE(server.Terminate() == 0);
    }
    // The writer's position is part of the persisted state.
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    REQUIRE(client->Ingest({Stored(prompt)}, WriterPosition{"sched-1", 2}).has_value());
    CHECK(Refcount(*client, prompt) == 3);
    Writer writer(client.get(), "sched-1", 3);
    REQUIRE(writer.Write({Stored(prompt)}).has_value());
    CHECK(Refcount(*client, prompt) == 4);
  }

  TEST_CASE("Writer: a batch whose send failed stays pending and is settled first") {
    TempDir dir;
    const std::vector<uint32_t> prompt = Tokens(2000, kBlockSize);
    auto server = std::make_unique<ServerProcess>(dir.path() / "data");
    const std::string port = std::to_string(server->rpc_port());
    std::unique_ptr<Client> client = ConnectClient(*server);
    WriterOptions options;
    options.retry_for = 300ms;
    Writer writer(client.get(), "sched-2", 1, options);
    REQUIRE(server->Terminate() == 0);
    server.reset();

    Result<IngestAnswer> down = writer.Write({Stored(prompt)});
    CHECK(down.error().code() == StatusCode::kUnavailable);
    CHECK(writer.has_pending());
    CHECK(writer.next_sequence() == 1);

    ServerProcess again(dir.path() / "data", {"--rpc-listen", "127.0.0.1:" + port});
    // The next Write first delivers the pending batch (sequence 1), then its own (2).
    Status settled = Status::Unavailable("not tried");
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline && !settled.ok()) {
      settled = writer.Settle();
      if (!settled.ok()) std::this_thread::sleep_for(50ms);
    }
    REQUIRE_MESSAGE(settled.ok(), settled.ToString());
    CHECK(writer.next_sequence() == 2);
    REQUIRE(writer.Write({Stored(prompt)}).has_value());
    CHECK(writer.next_sequence() == 3);
    CHECK(Refcount(*client, prompt) == 2);
  }
}

}  // namespace
}  // namespace kvatlas::testing
