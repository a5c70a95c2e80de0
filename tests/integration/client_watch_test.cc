// The change feed over the binary protocol against the real server binary, through
// kvatlas::Client (docs/feed.md §Binary watch): snapshot + watch reproduce the server's
// copies after concurrent ingest; resuming from a revision repeats and misses nothing;
// compacted and future revisions; a stream whose application stops calling Next is cut
// while a watcher on another connection gets everything; watches and lookups interleaved
// on one connection; malformed kWatch / kSnapshot frames from a raw socket.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "kvatlas/client/block_hasher.h"
#include "kvatlas/client/client.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/raw_rpc_connection.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBlockSize = 4;
const ContextKey kLlama{"default", "llama", "", kBlockSize, ""};

BlockEvent Event(EventType type, const std::string& backend, std::vector<uint32_t> tokens,
                 const std::string& model = "llama", Tier tier = Tier::kGpu) {
  BlockEvent e;
  e.type = type;
  e.context.model = model;
  e.context.block_size = kBlockSize;
  e.holder.id = backend;
  e.tier = tier;
  if (type == EventType::kStored) e.token_ids = std::move(tokens);
  if (type == EventType::kRemoved) e.seq_hashes = BlockHasher().SequenceHashes(tokens, kBlockSize);
  return e;
}

Revision MustIngest(Client& client, std::vector<BlockEvent> events) {
  Result<IngestAnswer> ack = client.Ingest(std::move(events));
  REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());
  return ack->revision;
}

std::unique_ptr<WatchStream> MustWatch(Client& client, std::optional<Revision> from,
                                       FeedFilter filter = {}, size_t max_queued_keys = 1 << 20) {
  WatchOptions options;
  options.from = from;
  options.filter = std::move(filter);
  options.max_queued_keys = max_queued_keys;
  Result<std::unique_ptr<WatchStream>> stream = client.Watch(options);
  REQUIRE_MESSAGE(stream.has_value(), stream.status().ToString());
  return std::move(stream).value();
}

// Reads `stream` until ResumeFrom() reaches `revision` (fails the test after 20 s).
std::vector<FeedRecord> ReadUntil(WatchStream& stream, Revision revision) {
  std::vector<FeedRecord> out;
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (stream.ResumeFrom() < revision) {
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    Result<std::vector<FeedRecord>> next = stream.Next(100ms);
    REQUIRE_MESSAGE(next.has_value(), next.status().ToString());
    out.insert(out.end(), next->begin(), next->end());
  }
  return out;
}

WatchOptions From(Revision from) {
  WatchOptions options;
  options.from = from;
  return options;
}

// The feed's open watchers, from GET /metrics.
std::string FeedWatchers(const ServerProcess& server) {
  httplib::Client rest = server.Client();
  const std::string metrics = Get(rest, "/metrics").raw;
  const std::string name = "\nkvatlas_feed_watchers ";
  const size_t at = metrics.find(name);
  if (at == std::string::npos) return "?";
  return metrics.substr(at + name.size(), metrics.find('\n', at + 1) - at - name.size());
}

// Waits up to 10 s for the server to have `n` watchers.
bool WaitForWatchers(const ServerProcess& server, int n) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (FeedWatchers(server) != std::to_string(n)) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// A copy as the feed names it.
using CopyId = std::tuple<std::string, uint32_t, Tier, BlockKey>;

std::set<CopyId> CopiesOf(const ContextSnapshot& snapshot) {
  std::set<CopyId> out;
  for (const SnapshotCopy& c : snapshot.copies) {
    out.emplace(c.copy.holder.id, c.copy.holder.dp_rank, c.copy.tier, c.key);
  }
  return out;
}

void Apply(const FeedRecord& r, std::set<CopyId>* state) {
  for (BlockKey key : r.keys) {
    const CopyId id{r.holder.id, r.holder.dp_rank, r.tier, key};
    if (r.op == FeedOp::kStored) {
      state->insert(id);
    } else {
      state->erase(id);
    }
  }
}

TEST_SUITE("Integration.ClientWatch") {
  TEST_CASE("ClientWatch: snapshot then watch reproduces the copies after concurrent ingest") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    MustIngest(*client, {Event(EventType::kStored, "e0", Tokens(1, 16)),
                         Event(EventType::kStored, "e1", Tokens(1, 8), "llama", Tier::kCpu)});
    Result<ContextSnapshot> first = client->Snapshot(kLlama);
    REQUIRE_MESSAGE(first.has_value(), first.status().ToString());
    CHECK(first->context == kLlama);
    std::set<CopyId> state = CopiesOf(*first);
    CHECK(state.size() == 6);
    std::unique_ptr<WatchStream> stream =
        MustWatch(*client, first->revision, FeedFilter::ForContext(kLlama));

    // Two writers on their own connections: stores (some repeated: refcounts), removes,
    // clears, and a model the filter excludes.
    std::atomic<bool> writers_failed{false};
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w) {
      writers.emplace_back([&server, &writers_failed, w] {
        std::unique_ptr<Client> writer = ConnectClient(server);
        std::mt19937 rng(static_cast<uint32_t>(w) * 7919 + 1);
        for (int i = 0; i < 60; ++i) {
          const std::string backend = "e" + std::to_string(rng() % 3);
          const std::vector<uint32_t> tokens =
              Tokens(1 + (rng() % 4) * kBlockSize, (1 + rng() % 3) * kBlockSize);
          const Tier tier = rng() % 2 == 0 ? Tier::kGpu : Tier::kCpu;
          std::vector<BlockEvent> events;
          switch (rng() % 5) {
            case 0:
              events.push_back(Event(EventType::kRemoved, backend, tokens, "llama", tier));
              break;
            case 1:
              events.push_back(Event(EventType::kCleared, backend, {}));
              break;
            case 2:
              events.push_back(Event(EventType::kStored, backend, tokens, "other", tier));
              break;
            default:
              events.push_back(Event(EventType::kStored, backend, tokens, "llama", tier));
              break;
          }
          if (!writer->Ingest(std::move(events)).has_value()) writers_failed = true;
        }
      });
    }
    std::vector<FeedRecord> records;
    while (!writers.empty()) {
      Result<std::vector<FeedRecord>> next = stream->Next(50ms);
      REQUIRE_MESSAGE(next.has_value(), next.status().ToString());
      records.insert(records.end(), next->begin(), next->end());
      if (next->empty()) {
        for (std::thread& t : writers) t.join();
        writers.clear();
      }
    }
    REQUIRE_FALSE(writers_failed.load());
    Result<ContextSnapshot> last = client->Snapshot(kLlama);
    REQUIRE(last.has_value());
    const std::vector<FeedRecord> rest = ReadUntil(*stream, last->revision);
    records.insert(records.end(), rest.begin(), rest.end());
    Revision previous = first->revision;
    for (const FeedRecord& r : records) {
      CHECK(r.context == kLlama);
      CHECK(r.revision > first->revision);
      CHECK(r.revision >= previous);  // in order
      previous = r.revision;
      if (r.revision <= last->revision) Apply(r, &state);
    }
    CHECK(state == CopiesOf(*last));
    CHECK_FALSE(records.empty());
  }

  TEST_CASE("ClientWatch: watching again from ResumeFrom() misses and repeats nothing") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    const Revision start = MustIngest(*client, {Event(EventType::kStored, "x", Tokens(900, 4))});
    std::unique_ptr<WatchStream> reference = MustWatch(*client, start);
    std::vector<Revision> revisions;
    for (uint32_t i = 0; i < 5; ++i) {
      revisions.push_back(
          MustIngest(*client, {Event(EventType::kStored, "a", Tokens(10 * i + 1, 4))}));
    }
    std::unique_ptr<WatchStream> first = MustWatch(*client, start);
    std::vector<FeedRecord> got = ReadUntil(*first, revisions.back());
    const Revision resume = first->ResumeFrom();
    CHECK(resume == revisions.back());
    first->Cancel();
    CHECK(first->Next(10ms).status().code() == StatusCode::kCancelled);
    for (uint32_t i = 5; i < 10; ++i) {
      revisions.push_back(
          MustIngest(*client, {Event(EventType::kStored, "a", Tokens(10 * i + 1, 4))}));
    }
    std::unique_ptr<WatchStream> second = MustWatch(*client, resume);
    const std::vector<FeedRecord> more = ReadUntil(*second, revisions.back());
    got.insert(got.end(), more.begin(), more.end());
    const std::vector<FeedRecord> all = ReadUntil(*reference, revisions.back());
    CHECK(got == all);
    REQUIRE(got.size() == 10);
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i].revision == revisions[i]);
  }

  TEST_CASE("ClientWatch: compacted and future revisions; a lost server ends the stream") {
    TempDir dir;
    std::optional<ServerProcess> server(std::in_place, dir.path() / "data");
    Revision at = 0;
    {
      std::unique_ptr<Client> client = ConnectClient(*server);
      at = MustIngest(*client, {Event(EventType::kStored, "a", Tokens(1, 8))});
      Result<std::unique_ptr<WatchStream>> future = client->Watch(From(at + 1000));
      REQUIRE_FALSE(future.has_value());
      CHECK(future.status().code() == StatusCode::kInvalidArgument);
      std::unique_ptr<WatchStream> open = MustWatch(*client, std::nullopt);
      REQUIRE(server->Terminate() == 0);
      Result<std::vector<FeedRecord>> lost = open->Next(10s);
      REQUIRE_FALSE(lost.has_value());
      CHECK(lost.status().code() == StatusCode::kUnavailable);
    }
    // A restarted server's window starts at the revision it recovered.
    server.emplace(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(*server);
    Result<std::unique_ptr<WatchStream>> old = client->Watch(From(at - 1));
    REQUIRE_FALSE(old.has_value());
    CHECK(old.status().code() == StatusCode::kCompacted);
    CHECK(old.status().message().find("is compacted; the oldest revision to watch from is") !=
          std::string::npos);
    CHECK(old.status().message().find("oldest_revision=") == std::string::npos);  // hint lines
    // The remedy: list, then watch from the snapshot's revision.
    Result<ContextSnapshot> snapshot = client->Snapshot(kLlama);
    REQUIRE(snapshot.has_value());
    CHECK(snapshot->copies.size() == 2);
    MustWatch(*client, snapshot->revision);
    CHECK(client->Snapshot(ContextKey{"default", "", "", 4, ""}).status().code() ==
          StatusCode::kInvalidArgument);
  }

  TEST_CASE("ClientWatch: a stream not read is cut; a watcher on another connection is not") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> writer = ConnectClient(server);
    std::unique_ptr<Client> lazy_client = ConnectClient(server);
    std::unique_ptr<Client> busy_client = ConnectClient(server);
    std::unique_ptr<WatchStream> lazy = MustWatch(*lazy_client, std::nullopt, {}, 64);
    std::unique_ptr<WatchStream> busy = MustWatch(*busy_client, std::nullopt);
    const Revision start = busy->ResumeFrom();
    constexpr uint32_t kBatches = 40;
    Revision last = 0;
    for (uint32_t i = 0; i < kBatches; ++i) {  // 4 keys each: 160 in all, over 64
      last = MustIngest(*writer, {Event(EventType::kStored, "a", Tokens(100 * i + 1, 16))});
    }
    const std::vector<FeedRecord> everything = ReadUntil(*busy, last);
    CHECK(everything.size() == kBatches);
    // The lazy stream overflowed and cancelled its server watch: only busy's is left.
    REQUIRE(WaitForWatchers(server, 1));

    std::vector<FeedRecord> lazy_records;
    Status ended;
    for (;;) {
      Result<std::vector<FeedRecord>> next = lazy->Next(5s);
      if (!next.has_value()) {
        ended = next.status();
        break;
      }
      REQUIRE_FALSE(next->empty());  // the cut is there already: no waiting
      lazy_records.insert(lazy_records.end(), next->begin(), next->end());
    }
    CHECK(ended.code() == StatusCode::kWatchCut);
    REQUIRE_FALSE(lazy_records.empty());
    CHECK(lazy_records.size() < kBatches);
    // What it got is a gapless prefix, and ResumeFrom() is right after it.
    for (size_t i = 0; i < lazy_records.size(); ++i) CHECK(lazy_records[i] == everything[i]);
    CHECK(lazy->ResumeFrom() == lazy_records.back().revision);
    CHECK(lazy->ResumeFrom() > start);
    // Resuming there delivers the rest.
    std::unique_ptr<WatchStream> resumed = MustWatch(*lazy_client, lazy->ResumeFrom());
    const std::vector<FeedRecord> rest = ReadUntil(*resumed, last);
    CHECK(lazy_records.size() + rest.size() == kBatches);
    CHECK(FeedWatchers(server) == "2");  // busy and resumed
  }

  TEST_CASE("ClientWatch: two watches and lookups interleave on one connection") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);  // one connection
    REQUIRE(client->OpenConnections() == 1);
    FeedFilter e1;
    e1.holder_id = "e1";
    FeedFilter e2;
    e2.holder_id = "e2";
    std::unique_ptr<WatchStream> w1 = MustWatch(*client, std::nullopt, e1);
    std::unique_ptr<WatchStream> w2 = MustWatch(*client, std::nullopt, e2);
    Revision last = 0;
    for (uint32_t i = 0; i < 20; ++i) {
      const std::vector<uint32_t> tokens = Tokens(1000 * i + 1, 8);
      last = MustIngest(*client, {Event(EventType::kStored, i % 2 == 0 ? "e1" : "e2", tokens)});
      LookupRequest lookup;
      lookup.context = kLlama;
      lookup.token_ids = tokens;
      std::future<Result<LookupAnswer>> pending = client->LookupAsync(lookup);
      Result<LookupAnswer> answer = pending.get();
      REQUIRE_MESSAGE(answer.has_value(), answer.status().ToString());
      CHECK(answer->blocks_found == 2);
    }
    const std::vector<FeedRecord> got1 = ReadUntil(*w1, last);
    const std::vector<FeedRecord> got2 = ReadUntil(*w2, last);
    REQUIRE(got1.size() == 10);
    REQUIRE(got2.size() == 10);
    for (const FeedRecord& r : got1) CHECK(r.holder.id == "e1");
    for (const FeedRecord& r : got2) CHECK(r.holder.id == "e2");
    w1->Cancel();
    CHECK(client->Ping().ok());
    const Revision after = MustIngest(*client, {Event(EventType::kStored, "e2", Tokens(7, 4))});
    CHECK(ReadUntil(*w2, after).size() == 1);
    CHECK(client->OpenConnections() == 1);
  }

  TEST_CASE("ClientWatch: Next returns as soon as revisions without matching records passed") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    FeedFilter only_e1;
    only_e1.holder_id = "e1";
    std::unique_ptr<WatchStream> stream = MustWatch(*client, std::nullopt, only_e1);
    const Revision other = MustIngest(*client, {Event(EventType::kStored, "e2", Tokens(1, 4))});
    const auto asked = std::chrono::steady_clock::now();
    Result<std::vector<FeedRecord>> next = stream->Next(60s);
    REQUIRE(next.has_value());
    CHECK(next->empty());
    CHECK(std::chrono::steady_clock::now() - asked < 30s);  // not the timeout
    CHECK(stream->ResumeFrom() == other);
    // Revisions without any record (a remove of blocks nobody holds) count the same.
    const Revision nothing =
        MustIngest(*client, {Event(EventType::kRemoved, "nobody", Tokens(50, 4))});
    CHECK(ReadUntil(*stream, nothing).empty());
  }

  TEST_CASE(
      "ClientWatch: malformed kWatch and kSnapshot frames get errors; the connection goes on") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    RawRpcConnection raw(server.rpc_port());
    const auto expect_error = [&raw](protocol::MessageType type, uint64_t id,
                                     std::string_view payload, std::string_view message) {
      raw.Send(type, id, payload);
      const protocol::Frame answer = raw.MustRead();
      CHECK(answer.header.type == type);
      CHECK(answer.header.request_id == id);
      CHECK(answer.header.status == StatusCode::kInvalidArgument);
      CHECK(answer.payload == message);
    };
    expect_error(protocol::MessageType::kWatch, 1, "\x09",
                 "action: 9 is neither 0 (start) nor 1 (cancel)");
    expect_error(protocol::MessageType::kWatch, 2, std::string("\x00\x03", 2),
                 "from: truncated or malformed");
    expect_error(protocol::MessageType::kSnapshot, 3, std::string("\x01m", 2),
                 "model_name: truncated or malformed");
    expect_error(protocol::MessageType::kSnapshot, 4,
                 protocol::EncodeSnapshotRequest({kLlama}) + "x", "payload: 1 trailing bytes");
    raw.Send(protocol::MessageType::kWatch, 5, protocol::EncodeWatchRequest({true, {}, {}}));
    raw.Send(protocol::MessageType::kPing, 6, "");
    const protocol::Frame pong = raw.MustRead();  // the cancel of no watch has no answer
    CHECK(pong.header.type == protocol::MessageType::kPing);
    CHECK(pong.header.request_id == 6);
    CHECK(pong.header.status == StatusCode::kOk);
    raw.Send(protocol::MessageType::kSnapshot, 7, protocol::EncodeSnapshotRequest({kLlama}));
    Result<protocol::SnapshotPart> part = protocol::DecodeSnapshotPart(raw.MustRead().payload);
    REQUIRE(part.has_value());
    CHECK(part->last);
    CHECK(part->copies.empty());
  }
}

}  // namespace
}  // namespace kvatlas::testing
