// HttpGroupForwarder (server/api/group_forwarder.h) and SubmitPart without a cluster: the
// queue's bound, a group whose leader is unknown, a part that finds this server elected,
// and Stop. The network path (a signed call to another server's leader) is tested with real
// servers (tests/fault/groups_test.py).
#include "server/api/group_forwarder.h"

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>

#include "server/service/ingest_service.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/status_only_log.h"

namespace kvatlas::server {
namespace {

using testing::InMemoryServices;
using testing::StatusOnlyLog;

CommandBatch OneStore(uint64_t key) {
  StoreCommand store;
  store.context.model = "m";
  store.context.block_size = 16;
  store.holder = HolderKey{"engine-0", 0};
  store.hashes = {key};
  CommandBatch batch;
  batch.commands.push_back(std::move(store));
  return batch;
}

// The services of group 2 on a server that does not lead it (as far as `log` says).
struct Group {
  Group() {
    s.services.log = &log;
    s.services.group = 2;
    s.services.options.apply_timeout = std::chrono::milliseconds(60);
    log.status.state = "follower";
  }
  InMemoryServices s;
  StatusOnlyLog log;
};

Result<Revision> Forward(HttpGroupForwarder* forwarder, const Services& group, CommandBatch batch) {
  std::promise<Result<Revision>> done;
  std::future<Result<Revision>> result = done.get_future();
  const Status queued = forwarder->TryForward(
      group, &batch, [&done](Result<Revision> applied) { done.set_value(std::move(applied)); });
  if (!queued.ok()) return queued;
  return result.get();
}

TEST_SUITE("Api.GroupForwarder") {
  TEST_CASE("a full queue refuses a part and leaves it as it was") {
    Group group;
    HttpGroupForwarder forwarder({.threads = 1, .max_queue = 0});
    CommandBatch batch = OneStore(7);
    bool called = false;
    const Status refused =
        forwarder.TryForward(group.s.services, &batch, [&](Result<Revision>) { called = true; });
    CHECK(refused.code() == StatusCode::kResourceExhausted);
    CHECK(refused.message().find("queue of requests to other groups' servers is full") !=
          std::string::npos);
    CHECK(batch.commands.size() == 1);  // the caller may retry it
    CHECK_FALSE(called);
  }

  TEST_CASE("a group whose leader is unknown answers unavailable after apply_timeout") {
    Group group;
    HttpGroupForwarder forwarder;
    const auto start = std::chrono::steady_clock::now();
    const Result<Revision> applied = Forward(&forwarder, group.s.services, OneStore(7));
    REQUIRE_FALSE(applied.has_value());
    CHECK(applied.error().code() == StatusCode::kUnavailable);
    CHECK(applied.error().message().find("group 2: no leader") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(55));
    CHECK(group.s.machine.applied_revision() == 0);  // nothing applied here
  }

  TEST_CASE("a part that finds this server leading the group goes to its own applier") {
    Group group;
    group.log.status.state = "leader";
    HttpGroupForwarder forwarder;
    const Result<Revision> applied = Forward(&forwarder, group.s.services, OneStore(7));
    REQUIRE_MESSAGE(applied.has_value(), applied.error().ToString());
    CHECK(*applied == group.s.machine.applied_revision());
    CHECK(*applied > 0);
  }

  TEST_CASE("SubmitPart forwards only where the group is led elsewhere") {
    Group group;
    HttpGroupForwarder forwarder;
    group.s.services.group_forwarder = &forwarder;
    auto submit = [&] {
      std::promise<Result<Revision>> done;
      std::future<Result<Revision>> result = done.get_future();
      SubmitPart(group.s.services, OneStore(9),
                 [&done](Result<Revision> applied) { done.set_value(std::move(applied)); });
      return result.get();
    };
    const Result<Revision> held = submit();  // not leading, no leader known: forwarded, held
    REQUIRE_FALSE(held.has_value());
    CHECK(held.error().message().find("no leader") != std::string::npos);
    group.log.status.state = "leader";
    const Result<Revision> local = submit();
    REQUIRE_MESSAGE(local.has_value(), local.error().ToString());
    CHECK(*local == group.s.machine.applied_revision());
  }

  TEST_CASE("Stop answers the parts still held") {
    Group group;
    group.s.services.options.apply_timeout = std::chrono::seconds(30);
    HttpGroupForwarder forwarder({.threads = 1, .max_queue = 8});
    std::promise<Result<Revision>> done;
    std::future<Result<Revision>> result = done.get_future();
    CommandBatch batch = OneStore(7);
    REQUIRE(
        forwarder
            .TryForward(group.s.services, &batch,
                        [&done](Result<Revision> applied) { done.set_value(std::move(applied)); })
            .ok());
    const auto start = std::chrono::steady_clock::now();
    forwarder.Stop();
    const Result<Revision> stopped = result.get();
    REQUIRE_FALSE(stopped.has_value());
    CHECK(stopped.error().code() == StatusCode::kUnavailable);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    CommandBatch after = OneStore(8);
    CHECK(forwarder.TryForward(group.s.services, &after, [](Result<Revision>) {}).code() ==
          StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace kvatlas::server
