// The service layer without a protocol: what REST and the binary protocol both answer with,
// driven directly against an in-memory server.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "server/service/cluster_service.h"
#include "server/service/feed_service.h"
#include "server/service/ingest_service.h"
#include "server/service/lease_service.h"
#include "server/service/lookup_service.h"
#include "server/service/readiness.h"
#include "server/service/registration_service.h"
#include "server/service/route_decision.h"
#include "server/service/stats_service.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using namespace std::chrono_literals;
using testing::InMemoryServices;

const ContextKey kContext{"default", "m", "", 2, ""};

// A stored event of `tokens` (whole blocks of kContext) by `holder`.
BlockEvent Stored(const std::string& holder, std::vector<uint32_t> tokens) {
  BlockEvent event;
  event.context = kContext;
  event.holder = HolderKey{holder, 0};
  event.token_ids = std::move(tokens);
  return event;
}

// Converts and applies `events`; returns the revision they were applied at.
Revision Ingest(const Services& services, std::vector<BlockEvent> events) {
  Result<PreparedIngest> prepared = PrepareIngest(services, events, std::nullopt);
  REQUIRE(prepared.has_value());
  Result<Revision> applied = SubmitAndWait(services, std::move(prepared->batch));
  REQUIRE(applied.has_value());
  return *applied;
}

LookupRequest TokenLookup(std::vector<uint32_t> tokens) {
  LookupRequest request;
  request.context = kContext;
  request.token_ids = std::move(tokens);
  return request;
}

TEST_SUITE("Services") {
  TEST_CASE("an ingested prefix is found by a lookup, at the revision it was applied at") {
    InMemoryServices s;
    Result<PreparedIngest> prepared =
        PrepareIngest(s.services, std::vector<BlockEvent>{Stored("a", {1, 2, 3, 4})}, std::nullopt);
    REQUIRE(prepared.has_value());
    CHECK(prepared->answer.events == 1);
    CHECK(prepared->answer.blocks == 2);
    CHECK(prepared->answer.revision == 0);  // the current one, until applied
    const Result<Revision> applied = SubmitAndWait(s.services, std::move(prepared->batch));
    REQUIRE(applied.has_value());

    const LookupAnswer answer = *LookupPrefix(s.services, TokenLookup({1, 2, 3, 4, 5, 6}));
    CHECK(answer.revision == *applied);
    CHECK(answer.blocks_queried == 3);
    CHECK(answer.blocks_found == 2);
    REQUIRE(answer.instances.size() == 1);
    CHECK(answer.instances[0].instance_id == "a");
    CHECK(answer.instances[0].blocks.gpu == 2);
  }

  TEST_CASE("a lookup or a route with block_size 0 is refused, naming the field") {
    InMemoryServices s;
    LookupRequest lookup = TokenLookup({1, 2});
    lookup.context.block_size = 0;
    const Result<LookupAnswer> answer = LookupPrefix(s.services, lookup);
    REQUIRE_FALSE(answer.has_value());
    CHECK(answer.error().code() == StatusCode::kInvalidArgument);
    CHECK(answer.error().message().rfind("block_size:", 0) == 0);
    RoutingRequest route;
    route.lookup = lookup;
    const Result<RoutingAnswer> decided = DecideRoute(s.services, route);
    REQUIRE_FALSE(decided.has_value());
    CHECK(decided.error().message().rfind("lookup.block_size:", 0) == 0);
  }

  TEST_CASE("a lookup hashes at most max_lookup_blocks blocks") {
    InMemoryServices s;
    s.services.options.max_lookup_blocks = 1;
    Ingest(s.services, {Stored("a", {1, 2, 3, 4})});
    const LookupAnswer answer = *LookupPrefix(s.services, TokenLookup({1, 2, 3, 4}));
    CHECK(answer.blocks_queried == 1);
    CHECK(answer.blocks_found == 1);
  }

  TEST_CASE("a writer's batch carries its stream position") {
    InMemoryServices s;
    const Result<PreparedIngest> prepared = PrepareIngest(
        s.services, std::vector<BlockEvent>{Stored("a", {1, 2})}, WriterPosition{"w", 7});
    REQUIRE(prepared.has_value());
    REQUIRE(prepared->batch.position.has_value());
    CHECK(prepared->batch.position->stream == "writer:w");
    CHECK(prepared->batch.position->sequence == 7);
  }

  TEST_CASE("SubmitAsync reports the applied revision and keeps the queue gauge") {
    InMemoryServices s;
    Result<PreparedIngest> prepared =
        PrepareIngest(s.services, std::vector<BlockEvent>{Stored("a", {1, 2})}, std::nullopt);
    REQUIRE(prepared.has_value());
    std::promise<Result<Revision>> done;
    SubmitAsync(s.services, std::move(prepared->batch),
                [&done](Result<Revision> applied) { done.set_value(std::move(applied)); });
    const Result<Revision> applied = done.get_future().get();
    REQUIRE(applied.has_value());
    CHECK(*applied == s.machine.applied_revision());
    CHECK(s.metrics.applier_queue_depth() == 0);
  }

  TEST_CASE("read consistency: a min_revision not applied in time is deadline_exceeded") {
    InMemoryServices s;
    s.services.options.apply_timeout = 20ms;
    LookupRequest request = TokenLookup({1, 2});
    request.min_revision = 0;
    CHECK(AwaitReadConsistency(s.services, request).ok());
    request.min_revision = 5;
    const Status late = AwaitReadConsistency(s.services, request);
    CHECK(late.code() == StatusCode::kDeadlineExceeded);
    CHECK(late.message().find("min_revision 5") != std::string::npos);
  }

  TEST_CASE("a linearizable read commits a barrier first") {
    InMemoryServices s;
    Ingest(s.services, {Stored("a", {1, 2})});
    const Revision before = s.machine.applied_revision();
    LookupRequest request = TokenLookup({1, 2});
    request.linearizable = true;
    CHECK(AwaitReadConsistency(s.services, request).ok());
    CHECK(s.machine.applied_revision() == before + 1);
  }

  TEST_CASE("reads go on while writes are refused for low disk: the barrier is not a write") {
    InMemoryServices s;
    Ingest(s.services, {Stored("a", {1, 2})});
    s.applier.SetWritesRefused("disk space low: 10 bytes free");
    LookupRequest request = TokenLookup({1, 2});
    request.linearizable = true;
    CHECK(AwaitReadConsistency(s.services, request).ok());
    CommandBatch write;
    write.commands.emplace_back(ForgetServerCommand{7});
    const Result<Revision> refused = SubmitAndWait(s.services, std::move(write));
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code() == StatusCode::kResourceExhausted);
  }

  TEST_CASE("the routing decision prefers the candidate that holds the prefix") {
    InMemoryServices s;
    Ingest(s.services, {Stored("b", {1, 2, 3, 4, 5, 6})});
    RoutingRequest request;
    request.lookup = TokenLookup({1, 2, 3, 4, 5, 6, 7, 8});
    request.lookup.instance_id = "ignored";  // the decision looks over every instance
    request.candidates = {RouteCandidate{"a", std::nullopt, 0, 0},
                          RouteCandidate{"b", std::nullopt, 0, 0}};
    const Result<RoutingAnswer> answer = DecideRoute(s.services, request);
    REQUIRE(answer.has_value());
    CHECK(answer->prompt_blocks == 4);
    CHECK(answer->blocks_found == 3);
    REQUIRE(answer->ranked.size() == 2);
    CHECK(answer->ranked[0].candidate.instance_id == "b");
    CHECK(answer->ranked[0].gpu_blocks == 3);
  }

  TEST_CASE("LocateBlock, ListHolders and ListContexts read one revision") {
    InMemoryServices s;
    const Revision at = Ingest(s.services, {Stored("a", {1, 2}), Stored("b", {1, 2})});
    const BlockKey key = s.machine.hasher().SequenceHashes(std::vector<uint32_t>{1, 2}, 2)[0];
    const BlockCopies found = LocateBlock(s.services, key, nullptr);
    CHECK(found.revision == at);
    CHECK(found.copies.size() == 2);
    CHECK(LocateBlock(s.services, key + 1, &kContext).copies.empty());
    const HolderListing holders = ListHolders(s.services);
    CHECK(holders.holders.size() == 2);
    CHECK_FALSE(holders.idle_seconds.has_value());  // leases off
    const ContextListing contexts = ListContexts(s.services);
    REQUIRE(contexts.contexts.size() == 1);
    CHECK(contexts.contexts[0].context == kContext);
    CHECK(contexts.revision == at);
  }

  TEST_CASE("a context snapshot interns holders and is bounded by max_snapshot_copies") {
    InMemoryServices s;
    Ingest(s.services, {Stored("a", {1, 2, 3, 4}), Stored("b", {1, 2})});
    const Result<ContextSnapshot> snapshot = SnapshotContext(s.services, kContext);
    REQUIRE(snapshot.has_value());
    CHECK(snapshot->revision == s.machine.applied_revision());
    CHECK(snapshot->rows.size() == 3);
    CHECK(snapshot->holders.size() == 2);
    s.services.options.max_snapshot_copies = 2;
    const Result<ContextSnapshot> too_large = SnapshotContext(s.services, kContext);
    REQUIRE_FALSE(too_large.has_value());
    CHECK(too_large.error().code() == StatusCode::kPayloadTooLarge);
  }

  TEST_CASE("a watch without a change feed is unavailable; with one it sees new records") {
    InMemoryServices without;
    CHECK(Subscribe(without.services, std::nullopt, {}).error().code() == StatusCode::kUnavailable);

    InMemoryServices s({}, /*with_feed=*/true);
    Result<std::unique_ptr<Watcher>> watcher = Subscribe(s.services, std::nullopt, {});
    REQUIRE(watcher.has_value());
    const Revision at = Ingest(s.services, {Stored("a", {1, 2})});
    const Result<std::vector<FeedRecord>> records = (*watcher)->Next(5s);
    REQUIRE(records.has_value());
    REQUIRE(records->size() == 1);
    CHECK((*records)[0].revision == at);
    CHECK((*records)[0].holder == HolderKey{"a", 0});
  }

  TEST_CASE("registrations: register, list, unregister; an unknown key is not_found") {
    InMemoryServices s;
    const Result<Revision> unknown = UnregisterPublisher(s.services, "x", "default", 0);
    REQUIRE_FALSE(unknown.has_value());
    CHECK(unknown.error().code() == StatusCode::kNotFound);
    CHECK(unknown.error().message().find("x|default|0") != std::string::npos);

    REQUIRE(RegisterPublisher(s.services, testing::PublisherRegistration("e1")).has_value());
    const RegistrationListing listing = ListRegistrations(s.services);
    REQUIRE(listing.registrations.size() == 1);
    CHECK(listing.registrations[0].instance_id == "e1");
    CHECK(listing.revision == s.machine.applied_revision());
    REQUIRE(UnregisterPublisher(s.services, "e1", "default", 0).has_value());
    CHECK(ListRegistrations(s.services).registrations.empty());
    CHECK(ListStreams(s.services).empty());  // no ZMQ ingest here
  }

  TEST_CASE("a heartbeat with leases off changes nothing and says so") {
    InMemoryServices s;
    const std::vector<HolderKey> holders = {{"a", 0}, {"b", 1}};
    const Result<HeartbeatResult> result = Heartbeat(s.services, holders);
    REQUIRE(result.has_value());
    CHECK(result->holders == 2);
    CHECK(result->ttl_seconds == 0);
  }

  TEST_CASE("cluster calls without replication are unavailable; no leader is known") {
    InMemoryServices s;
    CHECK(RequireCluster(s.services).code() == StatusCode::kUnavailable);
    CHECK(ViewCluster(s.services).error().code() == StatusCode::kUnavailable);
    CHECK(AddMember(s.services, 2, "127.0.0.1:7100").code() == StatusCode::kUnavailable);
    CHECK(RemoveMember(s.services, 2).code() == StatusCode::kUnavailable);
    CHECK(TransferLeadership(s.services, 0).error().code() == StatusCode::kUnavailable);
    CHECK(AnnounceMember(s.services, 1, "10.0.0.9", 1, {"127.0.0.1:1", "127.0.0.1:2"}, std::nullopt)
              .error()
              .code() == StatusCode::kUnavailable);
    CHECK(FindLeader(s.services).id == 0);
    CHECK_FALSE(IsMember(s.services, 1));
  }

  TEST_CASE("only a member's own signed call announces its addresses") {
    InMemoryServices s;
    PeerAuth peers(1, "prod", "0123456789abcdef0123456789abcdef");
    s.services.peers = &peers;
    const Status unsigned_call =
        RequireInternalCall(s.services, std::nullopt, "10.0.0.9", "POST /v1/cluster/announce");
    CHECK(unsigned_call.code() == StatusCode::kUnauthenticated);
    CHECK(unsigned_call.message().find("signed with the cluster secret") != std::string::npos);
    CHECK(RequireInternalCall(s.services, 2, "10.0.0.2", "POST /v1/cluster/announce").ok());
    // Without replication there is nothing to announce to (the 403 for another member's
    // addresses is in tests/fault/peer_auth_test.py, on a real cluster).
    const Result<Revision> other =
        AnnounceMember(s.services, 2, "10.0.0.2", 1, {"a:1", "a:2"}, std::nullopt);
    REQUIRE_FALSE(other.has_value());
    CHECK(other.error().code() == StatusCode::kUnavailable);  // no replication here
    const PeerCounters counters = peers.counters();
    CHECK(counters.refused[static_cast<size_t>(PeerChannel::kHttpIn)]
                          [static_cast<size_t>(PeerRefusal::kUnsigned)] == 1);
  }

  TEST_CASE("a server running another group count or replication factor is named, both shown") {
    InMemoryServices s;
    s.services.server_id = 1;
    CHECK(ShapeOf(s.services) == ClusterShape{1, 0});
    CHECK(CheckClusterShape(s.services, 4, {1, 0}).ok());
    for (const ClusterShape other : {ClusterShape{12, 0}, ClusterShape{1, 3}}) {
      const Status refused = CheckClusterShape(s.services, 4, other);
      CHECK(refused.code() == StatusCode::kFailedPrecondition);
      CHECK(refused.message().find("server 4 runs --groups " + std::to_string(other.groups) +
                                   " --replicas " + std::to_string(other.replicas)) !=
            std::string::npos);
      CHECK(refused.message().find("(server 1) runs --groups 1 --replicas 0") != std::string::npos);
    }
    s.services.replicas = 3;
    CHECK(CheckClusterShape(s.services, 4, {1, 3}).ok());
    // The refusal, once the announcer keeps it, makes the server say it is not ready.
    CHECK(Readiness(s.services).ok());
    s.services.shape_mismatch->Set("server 4 runs --groups 1 --replicas 0, but ...");
    const Status readiness = Readiness(s.services);
    CHECK(readiness.code() == StatusCode::kUnavailable);
    CHECK(readiness.message().find("server 4 runs") != std::string::npos);
    s.services.shape_mismatch->Set("");
    CHECK(Readiness(s.services).ok());
  }

  TEST_CASE("the stats document and the metrics text reflect the state") {
    InMemoryServices s;
    Ingest(s.services, {Stored("a", {1, 2, 3, 4})});
    const std::string stats = StatsDocument(s.services);
    CHECK(stats.find("\"entries\":2") != std::string::npos);
    CHECK(stats.find("\"revision\":" + std::to_string(s.machine.applied_revision())) !=
          std::string::npos);
    const StateGauges gauges = ReadGauges(s.services);
    CHECK(gauges.index.entries == 2);
    CHECK_FALSE(gauges.applier_failed);
    CHECK(MetricsText(s.services).find("kvatlas_") != std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::server
