// kvatlas::LocalIndex against a real server: under random concurrent ingest (stores,
// removes, clears over several holders and tiers) a replica started before the load and
// one started in the middle of it both answer, on thousands of random chains, exactly what
// the server answers (Client::Lookup); token lookups hash with the server's seed; a server
// restart (its feed window starts over) makes the replica reload its snapshot and converge
// again.
#include "kvatlas/client/local_index.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

#include "kvatlas/client/client.h"
#include "kvatlas/common/json_codec.h"
#include "tests/integration/auth_helpers.h"
#include "tests/integration/client_connect.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using namespace std::chrono_literals;

const ContextKey kContext{"default", "llama", "", 16, ""};
const ContextKey kOther{"default", "other", "", 16, ""};
constexpr uint32_t kDocs = 200;
constexpr uint32_t kBlocks = 48;

BlockKey KeyOf(uint32_t doc, uint32_t block) { return uint64_t{doc} * 1000 + block + 1; }

// One random event: mostly stores of a document's prefix (or a piece of its middle), some
// removes, rare clears; one in five goes to a context the replica does not follow.
BlockEvent RandomEvent(std::mt19937& rng) {
  auto pick = [&rng](uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng); };
  BlockEvent e;
  e.context = pick(5) == 0 ? kOther : kContext;
  e.holder = HolderKey{"engine-" + std::to_string(pick(5)), pick(2)};
  e.tier = static_cast<Tier>(pick(kNumTiers));
  e.medium_known = true;
  const uint32_t kind = pick(30);
  if (kind == 0) {
    e.type = EventType::kCleared;
    return e;
  }
  const uint32_t doc = pick(kDocs);
  const uint32_t begin = pick(4) == 0 ? pick(kBlocks) : 0;
  const uint32_t end = std::min(kBlocks, begin + pick(kBlocks) + 1);
  for (uint32_t b = begin; b < end; ++b) e.seq_hashes.push_back(KeyOf(doc, b));
  e.type = kind < 9 ? EventType::kRemoved : EventType::kStored;
  if (e.type == EventType::kStored && begin > 0) e.parent_hash = KeyOf(doc, begin - 1);
  return e;
}

std::unique_ptr<LocalIndex> StartReplica(const ServerProcess& server,
                                         std::function<void(LocalIndexOptions*)> adjust = {}) {
  LocalIndexOptions options;
  options.client.endpoints = {server.host() + ":" + std::to_string(server.rpc_port())};
  options.contexts = {kContext};
  options.retry_backoff_min = 20ms;
  options.retry_backoff_max = 200ms;
  if (adjust) adjust(&options);
  Result<std::unique_ptr<LocalIndex>> local = LocalIndex::Start(options);
  REQUIRE_MESSAGE(local.has_value(), local.status().ToString());
  return std::move(local).value();
}

// Ingests `batches` random batches from two threads; returns the last acknowledged revision.
Revision IngestRandom(Client& client, uint32_t seed, int batches) {
  std::atomic<Revision> last{0};
  auto run = [&](uint32_t s) {
    std::mt19937 rng(s);
    for (int i = 0; i < batches / 2; ++i) {
      std::vector<BlockEvent> batch;
      for (int j = 0; j < 8; ++j) batch.push_back(RandomEvent(rng));
      Result<IngestAnswer> ack = client.Ingest(std::move(batch));
      REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());
      Revision seen = last.load();
      while (ack->revision > seen && !last.compare_exchange_weak(seen, ack->revision)) {
      }
    }
  };
  std::thread a(run, seed), b(run, seed + 1000);
  a.join();
  b.join();
  return last.load();
}

// Compares `n` random chains (prefixes, diverging chains, single instances) between the
// replica and the server; the answers' revisions aside, they must be equal.
void CheckConverged(Client& client, const LocalIndex& local, Revision at, uint32_t seed, int n) {
  REQUIRE_MESSAGE(local.WaitForRevision(at, 20s).ok(), "replica at " << local.revision());
  std::mt19937 rng(seed);
  auto pick = [&rng](uint32_t k) { return std::uniform_int_distribution<uint32_t>(0, k - 1)(rng); };
  int nonempty = 0;
  for (int i = 0; i < n; ++i) {
    LookupRequest request;
    request.context = kContext;
    request.by_hash = true;
    const uint32_t doc = pick(kDocs), length = pick(kBlocks) + 1, fork = pick(length + 1);
    for (uint32_t b = 0; b < length; ++b) {
      request.seq_hashes.push_back(KeyOf(b < fork ? doc : (doc + 1) % kDocs, b));
    }
    if (pick(6) == 0) request.instance_id = "engine-" + std::to_string(pick(5));
    Result<LookupAnswer> mine = local.Lookup(request);
    Result<LookupAnswer> theirs = client.Lookup(request);
    REQUIRE(mine.has_value());
    REQUIRE(theirs.has_value());
    REQUIRE_MESSAGE(theirs->revision == at, "the server moved on: the comparison is void");
    CHECK(mine->revision == at);
    mine->revision = theirs->revision = 0;
    if (!(*mine == *theirs)) {
      FAIL("chain " << i << " differs:\n local:  " << EncodeLookupAnswer(*mine)
                    << "\n server: " << EncodeLookupAnswer(*theirs));
    }
    nonempty += theirs->blocks_found > 0;
  }
  CHECK(nonempty > n / 4);  // the comparison saw real matches, not only misses
}

// Every document's chain held by a storage backend with 1.5 KB locations: a snapshot of
// ~15 MB, more than the connection holds in flight, so that records pushed during its
// load arrive between its parts, as they do with a large context.
void IngestLargeCopies(Client& client) {
  for (uint32_t doc = 0; doc < kDocs; doc += 2) {
    std::vector<BlockEvent> batch(2);
    for (uint32_t i = 0; i < 2; ++i) {
      BlockEvent& e = batch[i];
      e.type = EventType::kStored;
      e.context = kContext;
      e.holder = HolderKey{"store-0", 0};
      e.medium = "SHARED";
      e.tier = Tier::kShared;
      for (uint32_t b = 0; b < kBlocks; ++b) {
        e.seq_hashes.push_back(KeyOf(doc + i, b));
        e.locations.push_back(std::string(1500, static_cast<char>('a' + b % 26)));
      }
    }
    Result<IngestAnswer> ack = client.Ingest(std::move(batch));
    REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());
  }
}
std::unique_ptr<LocalIndex> StartSlowReplica(const ServerProcess& server,
                                             std::function<void(LocalIndexOptions*)> adjust) {
  return StartReplica(server, [&](LocalIndexOptions* options) {
    options->on_snapshot_progress = [](const ContextKey&, uint64_t) {
      std::this_thread::sleep_for(3ms);
    };
    if (adjust) adjust(options);
  });
}
// Waits until `local` is ten pages into its snapshot, then ingests `batches` batches (far
// more than the window); returns the last acknowledged revision. The load must still be
// going on at the end.
Revision IngestDuringLoad(Client& client, const LocalIndex& local, int batches) {
  LocalIndexContextStatus s = local.ContextStatus()[0];
  for (int i = 0; i < 2000 && s.snapshot_copies < 160; ++i) {
    std::this_thread::sleep_for(5ms);
    s = local.ContextStatus()[0];
  }
  REQUIRE(s.state == LocalIndexState::kLoadingSnapshot);
  CHECK_MESSAGE(s.buffered_through > 0, "the feed is not watched while the snapshot loads");
  const Revision at = IngestRandom(client, 53, batches);
  s = local.ContextStatus()[0];
  REQUIRE_MESSAGE(s.state != LocalIndexState::kSynced,
                  "the snapshot loaded before the ingest ended: the test proves nothing");
  return at;
}

// A server whose feed window (600 block keys) is far smaller than what is ingested while
// a replica loads its snapshot (IngestLargeCopies) in pages of 16 copies, slowly (3 ms per
// page: StartSlowReplica).
struct TinyWindowServer {
  TinyWindowServer()
      : server(dir.path() / "data", {"--snapshot-page-copies", "16", "--feed-window-keys", "600"}),
        client(ConnectClient(server)) {
    IngestLargeCopies(*client);
  }
  TempDir dir;
  ServerProcess server;
  std::unique_ptr<Client> client;
};

TEST_SUITE("Integration.LocalIndex") {
  TEST_CASE("LocalIndex converges to the server's answers under random concurrent ingest") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<Client> client = ConnectClient(server);
    std::unique_ptr<LocalIndex> early = StartReplica(server);
    REQUIRE(early->WaitSynced(20s).ok());

    IngestRandom(*client, 1, 400);
    std::unique_ptr<LocalIndex> late = StartReplica(server);  // snapshot mid-stream
    const Revision at = IngestRandom(*client, 7, 400);
    CheckConverged(*client, *early, at, 11, 3000);
    CheckConverged(*client, *late, at, 12, 3000);

    const LocalIndexStats stats = early->Stats();
    CHECK(stats.synced);
    CHECK(stats.staleness == 0ms);
    CHECK(stats.snapshots_loaded == 1);
    CHECK(stats.records_applied > 0);
    CHECK(stats.copies > 0);

    // Tokens are hashed with the server's seed.
    LookupRequest by_tokens;
    by_tokens.context = kContext;
    by_tokens.token_ids = Tokens(5, 4 * kContext.block_size);
    BlockEvent stored;
    stored.type = EventType::kStored;
    stored.context = kContext;
    stored.holder = HolderKey{"engine-t", 0};
    stored.token_ids = by_tokens.token_ids;
    Result<IngestAnswer> ack = client->Ingest({stored});
    REQUIRE(ack.has_value());
    REQUIRE(early->WaitForRevision(ack->revision, 20s).ok());
    Result<LookupAnswer> hit = early->Lookup(by_tokens);
    REQUIRE(hit.has_value());
    CHECK(hit->blocks_found == 4);

    // Errors: a context not followed, a linearizable read, a revision not reached.
    CHECK(early->Lookup(kOther, std::vector<BlockKey>{1}).status().code() == StatusCode::kNotFound);
    by_tokens.linearizable = true;
    CHECK(early->Lookup(by_tokens).status().code() == StatusCode::kInvalidArgument);
    by_tokens.linearizable = false;
    by_tokens.min_revision = ack->revision + 1000;
    CHECK(early->Lookup(by_tokens).status().code() == StatusCode::kUnavailable);
  }

  TEST_CASE(
      "LocalIndex: a server that hangs with its connection open is noticed, and the "
      "replica recovers when it answers again") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    std::unique_ptr<LocalIndex> local = StartReplica(server);
    REQUIRE(local->WaitSynced(20s).ok());
    CHECK(local->Stats().staleness == 0ms);

    server.Pause();  // no records, no answers, and no FIN: only a ping can tell
    bool noticed = false;
    for (int i = 0; i < 100 && !noticed; ++i) {  // the check runs after 1 s quiet, 1 s deadline
      std::this_thread::sleep_for(50ms);
      noticed = !local->Stats().synced;
    }
    CHECK(noticed);
    std::this_thread::sleep_for(300ms);
    CHECK(local->Stats().staleness >= 200ms);
    server.Resume();

    std::unique_ptr<Client> client = ConnectClient(server);
    CheckConverged(*client, *local, IngestRandom(*client, 31, 40), 32, 300);
    CHECK(local->WaitSynced(20s).ok());
    CHECK(local->Stats().watch_resumes >= 1);
  }

  TEST_CASE("LocalIndex follows a context streamed in many snapshot pages while writes go on") {
    TempDir dir;
    ServerProcess server(dir.path() / "data", {"--snapshot-page-copies", "64"});
    std::unique_ptr<Client> client = ConnectClient(server);
    IngestRandom(*client, 41, 600);
    std::unique_ptr<LocalIndex> local = StartReplica(server);  // lists while ingest goes on
    const Revision at = IngestRandom(*client, 43, 600);
    CheckConverged(*client, *local, at, 44, 3000);
    REQUIRE(local->WaitSynced(20s).ok());
    const std::vector<LocalIndexContextStatus> status = local->ContextStatus();
    REQUIRE(status.size() == 1);
    CHECK(status[0].state == LocalIndexState::kSynced);
    CHECK(status[0].last_error.ok());
    CHECK(status[0].snapshot_revision > 0);
    CHECK_MESSAGE(status[0].snapshot_copies > 10 * 64, status[0].snapshot_copies);
    CHECK(local->Stats().state == LocalIndexState::kSynced);
    // The assembled snapshot (Client::Snapshot) is the same list.
    Result<ContextSnapshot> whole = client->Snapshot(kContext);
    REQUIRE(whole.has_value());
    CHECK(whole->copies.size() == local->Stats().copies);
  }

  TEST_CASE(
      "LocalIndex buffers the feed from the snapshot's revision while a slow snapshot loads: "
      "ingest past the feed window does not make it list again") {
    TinyWindowServer setup;
    Client& client = *setup.client;
    std::unique_ptr<LocalIndex> local = StartSlowReplica(setup.server, {});
    const Revision at = IngestDuringLoad(client, *local, 60);  // ~50 keys per event
    CheckConverged(client, *local, at, 54, 2000);
    REQUIRE(local->WaitSynced(20s).ok());
    const LocalIndexContextStatus status = local->ContextStatus()[0];
    CHECK(status.failures == 0);
    CHECK(status.last_error.ok());
    CHECK(status.buffered_records == 0);  // applied
    const LocalIndexStats stats = local->Stats();
    CHECK(stats.snapshots_loaded == 1);  // the first snapshot, not a relisting
    CHECK(stats.records_applied > 0);
    Result<ContextSnapshot> whole = client.Snapshot(kContext);
    REQUIRE(whole.has_value());
    CHECK(whole->copies.size() == stats.copies);
  }

  TEST_CASE(
      "LocalIndex: a feed buffered past max_buffered_feed_bytes abandons the snapshot with a "
      "visible error and lists again") {
    TinyWindowServer setup;
    ServerProcess& server = setup.server;
    Client* client = setup.client.get();
    std::atomic<int> reported{0};
    std::unique_ptr<LocalIndex> local = StartSlowReplica(server, [&](LocalIndexOptions* options) {
      options->max_buffered_feed_bytes = 4096;
      options->retry_backoff_min = 2s;  // the retrying state stays visible
      options->retry_backoff_max = 2s;
      options->on_error = [&](const ContextKey&, const Status& error) {
        if (error.code() == StatusCode::kResourceExhausted) reported.fetch_add(1);
      };
    });
    const Revision at = IngestDuringLoad(*client, *local, 60);
    LocalIndexContextStatus status = local->ContextStatus()[0];
    for (int i = 0; i < 200 && status.state != LocalIndexState::kRetrying; ++i) {
      std::this_thread::sleep_for(10ms);
      status = local->ContextStatus()[0];
    }
    REQUIRE(status.state == LocalIndexState::kRetrying);
    CHECK(status.failures == 1);
    CHECK(status.last_error.code() == StatusCode::kResourceExhausted);
    CHECK_MESSAGE(status.last_error.message().find("max_buffered_feed_bytes") != std::string::npos,
                  status.last_error.message());
    CHECK(status.buffered_records == 0);  // dropped
    CHECK(local->Stats().state == LocalIndexState::kRetrying);
    CHECK(reported.load() == 1);
    // The ingest is over: the second listing syncs.
    CheckConverged(*client, *local, at, 55, 1000);
    REQUIRE(local->WaitSynced(20s).ok());
    CHECK(local->Stats().snapshots_loaded == 1);
  }

  TEST_CASE(
      "LocalIndex reports a refused token and a server that is down instead of retrying "
      "silently") {
    TempDir dir;
    WriteTokenFile(dir.path() / "tokens", {kReader});
    auto server = std::make_unique<ServerProcess>(
        dir.path() / "data",
        std::vector<std::string>{"--token-file", (dir.path() / "tokens").string()});
    std::atomic<int> reported{0};
    const auto wrong_token = [&](LocalIndexOptions* options) {
      options->client.token = "kvt_wrong";
      options->on_error = [&](const ContextKey& context, const Status& error) {
        if (context == kContext && error.code() == StatusCode::kUnauthenticated) {
          reported.fetch_add(1);
        }
      };
    };
    std::unique_ptr<LocalIndex> local = StartReplica(*server, wrong_token);
    const Status waited = local->WaitSynced(1s);
    CHECK(waited.code() == StatusCode::kDeadlineExceeded);
    CHECK_MESSAGE(waited.message().find("retrying") != std::string::npos, waited.message());
    CHECK_MESSAGE(waited.message().find("unauthenticated") != std::string::npos, waited.message());
    LocalIndexStats stats = local->Stats();
    CHECK(stats.state == LocalIndexState::kRetrying);
    CHECK(stats.last_error.code() == StatusCode::kUnauthenticated);
    CHECK(local->ContextStatus()[0].failures >= 2);  // it retries, with a backoff
    CHECK(reported.load() >= 2);
    local.reset();

    // The right token: synced; then the server goes away.
    local = StartReplica(*server,
                         [](LocalIndexOptions* options) { options->client.token = kReader.token; });
    REQUIRE(local->WaitSynced(20s).ok());
    server->Kill();
    for (int i = 0; i < 200 && local->Stats().state != LocalIndexState::kRetrying; ++i) {
      std::this_thread::sleep_for(50ms);
    }
    stats = local->Stats();
    CHECK(stats.state == LocalIndexState::kRetrying);
    CHECK_MESSAGE(!stats.last_error.ok(), stats.last_error.ToString());
    CHECK(!stats.synced);
  }

  TEST_CASE("LocalIndex: invalid options are refused naming the field") {
    LocalIndexOptions options;
    CHECK(LocalIndex::Start(options).status().message().find("endpoints") != std::string::npos);
    options.client.endpoints = {"127.0.0.1:1"};
    CHECK(LocalIndex::Start(options).status().message().find("contexts") != std::string::npos);
    options.contexts = {ContextKey{"", "", "", 16, ""}};
    CHECK(LocalIndex::Start(options).status().message().find("contexts[0].model") !=
          std::string::npos);
    options.contexts = {kContext, kContext};
    CHECK(LocalIndex::Start(options).status().message().find("duplicates") != std::string::npos);
  }

  TEST_CASE(
      "LocalIndex resumes after a server restart, and lists a server with another "
      "history again") {
    TempDir dir;
    auto server = std::make_unique<ServerProcess>(dir.path() / "data");
    const std::string endpoint = server->host() + ":" + std::to_string(server->rpc_port());
    std::unique_ptr<Client> client = ConnectClient(*server);
    std::unique_ptr<LocalIndex> local = StartReplica(*server);
    REQUIRE(local->WaitSynced(20s).ok());
    CheckConverged(*client, *local, IngestRandom(*client, 21, 200), 22, 500);

    // A crash and a restart on the same data (and port): the replica has every record up
    // to the server's recovered revision, so it resumes its watch there without listing.
    client.reset();
    server->Kill();
    server.reset();
    server = std::make_unique<ServerProcess>(dir.path() / "data",
                                             std::vector<std::string>{"--rpc-listen", endpoint});
    client = ConnectClient(*server);
    CheckConverged(*client, *local, IngestRandom(*client, 23, 200), 24, 1000);
    CHECK(local->Stats().watch_resumes >= 1);
    CHECK(local->Stats().snapshots_loaded == 1);

    // A server with an empty state on that address: its revisions are behind the
    // replica's, so the replica lists it again and follows it from there.
    client.reset();
    server->Kill();
    server.reset();
    server = std::make_unique<ServerProcess>(dir.path() / "fresh",
                                             std::vector<std::string>{"--rpc-listen", endpoint});
    client = ConnectClient(*server);
    const Revision at = IngestRandom(*client, 25, 40);
    for (int i = 0; i < 300 && local->Stats().snapshots_loaded < 2; ++i) {
      std::this_thread::sleep_for(50ms);
    }
    REQUIRE(local->Stats().snapshots_loaded == 2);
    CheckConverged(*client, *local, at, 26, 1000);
  }
}

}  // namespace
}  // namespace kvatlas::testing
