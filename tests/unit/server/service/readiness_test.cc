// Readiness (server/service/readiness.h): ready means a write sent to this server now would
// be taken — not while writes are refused, nor on a follower that could not forward it.
#include "server/service/readiness.h"

#include <doctest/doctest.h>

#include <string>

#include "server/service/ingest_service.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/status_only_log.h"

namespace kvatlas::server {
namespace {

using testing::InMemoryServices;
using testing::StatusOnlyLog;

bool Mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST_SUITE("Services.Readiness") {
  TEST_CASE("an in-memory server is ready until writes are refused for low disk") {
    InMemoryServices s;
    CHECK(Readiness(s.services).ok());
    s.applier.SetWritesRefused("disk space low: 10 bytes free");
    CHECK(s.applier.writes_refused() == "disk space low: 10 bytes free");
    const Status refused = Readiness(s.services);
    CHECK(refused.code() == StatusCode::kUnavailable);
    CHECK(Mentions(refused, "writes are refused: disk space low"));
    s.applier.SetWritesRefused("");
    CHECK(s.applier.writes_refused().empty());
    CHECK(Readiness(s.services).ok());
  }

  TEST_CASE("a failed raft snapshot is a readiness warning until one is written") {
    InMemoryServices s;
    StatusOnlyLog log;
    s.services.log = &log;
    CHECK(ReadinessWarnings(s.services).empty());
    log.metrics.snapshot_failures = 2;
    log.metrics.failed_snapshot_index = 8192;
    const std::vector<std::string> warnings = ReadinessWarnings(s.services);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("log index 8192") != std::string::npos);
    CHECK(warnings[0].find("2 failed since start") != std::string::npos);
    log.metrics.failed_snapshot_index = 0;
    CHECK(ReadinessWarnings(s.services).empty());
  }

  TEST_CASE("with replication: ready once a leader is known and a follower knows its address") {
    InMemoryServices s;
    StatusOnlyLog log;
    s.services.log = &log;
    s.services.server_id = 2;
    log.status.id = 2;

    // Electing: no leader.
    Status ready = Readiness(s.services);
    CHECK(ready.code() == StatusCode::kUnavailable);
    CHECK(Mentions(ready, "no leader known"));

    // Server 1 leads but has not announced its address: a write could not be forwarded.
    log.status.leader_id = 1;
    ready = Readiness(s.services);
    CHECK(ready.code() == StatusCode::kUnavailable);
    CHECK(Mentions(ready, "leader's address is not announced yet"));
    CHECK(Mentions(ready, "server 1"));

    // Its announcement is applied here: a write would be forwarded.
    CommandBatch batch;
    batch.commands.emplace_back(AnnounceCommand{1, "127.0.0.1:7001", "127.0.0.1:7101"});
    REQUIRE(SubmitAndWait(s.services, std::move(batch)).has_value());
    CHECK(Readiness(s.services).ok());

    // This server leads: it needs no address to take a write.
    log.status.leader_id = 2;
    CHECK(Readiness(s.services).ok());

    // Low disk wins over a known leader.
    s.applier.SetWritesRefused("disk space low");
    CHECK(Mentions(Readiness(s.services), "disk space low"));
  }
}

}  // namespace
}  // namespace kvatlas::server
