// The snapshot guard (server/runtime/snapshot_guard.h) and the Applier's refusal of new
// contexts it drives: a group whose last snapshot reached snapshot_stop_bytes takes no new
// contexts, the ones it holds go on, and it takes them again below 3/4 of the bound.
#include "server/runtime/snapshot_guard.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "server/service/group_service.h"
#include "server/service/ingest_service.h"
#include "server/service/readiness.h"
#include "tests/support/in_memory_services.h"

namespace kvatlas::server {
namespace {

using namespace std::chrono_literals;
using testing::InMemoryServices;

// A replicated log that reports the size of its last snapshot only.
class SnapshotSizeLog : public ReplicatedLog {
 public:
  Status Propose(std::string*, std::function<void(Result<uint64_t>)>) override {
    return Status::Unavailable("not used");
  }
  ClusterStatus GetStatus() const override { return {}; }
  LogMetrics GetMetrics() const override {
    LogMetrics m;
    m.last_snapshot_bytes = bytes.load();
    return m;
  }
  void AddServer(uint64_t, std::string, Done done) override { done(Status::Unavailable("")); }
  void RemoveServer(uint64_t, Done done) override { done(Status::Unavailable("")); }
  void TransferLeadership(uint64_t, Done done) override { done(Status::Unavailable("")); }

  std::atomic<uint64_t> bytes{0};
};

ContextKey Context(const std::string& model) {
  ContextKey context;
  context.model = model;
  context.block_size = 16;
  return context;
}

StoreCommand Store(const std::string& model, uint64_t key) {
  StoreCommand store;
  store.context = Context(model);
  store.holder = HolderKey{"engine-0", 0};
  store.hashes = {key};
  return store;
}

CommandBatch Batch(std::initializer_list<Command> commands) {
  CommandBatch batch;
  batch.commands = commands;
  return batch;
}

// Waits (bounded) until the applier's refusal is `refusing` (non-empty or empty).
bool AwaitRefusing(const Applier& applier, bool refusing) {
  for (int i = 0; i < 500; ++i) {
    if (applier.new_contexts_refused().empty() != refusing) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST_SUITE("Runtime.SnapshotGuard") {
  TEST_CASE("a refusing applier takes writes into the contexts it holds, not new ones") {
    InMemoryServices s;
    REQUIRE(SubmitAndWait(s.services, Batch({Store("held", 1)})).has_value());
    s.applier.SetNewContextsRefused("its last raft snapshot is 2000 bytes");

    Result<Revision> refused =
        SubmitAndWait(s.services, Batch({Store("held", 2), Store("new", 3)}));
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.status().code() == StatusCode::kResourceExhausted);
    CHECK(refused.status().message().find("new and this server's group takes no new contexts: "
                                          "its last raft snapshot is 2000 bytes") !=
          std::string::npos);
    CHECK(refused.status().message().find("new") != std::string::npos);
    CHECK(SubmitAndWait(s.services, Batch({Store("held", 2)})).has_value());
    // Removals name no new context to create: they go on (and change nothing).
    RemoveCommand remove;
    remove.context = Context("new");
    remove.holder = HolderKey{"engine-0", 0};
    remove.hashes = {3};
    CHECK(SubmitAndWait(s.services, Batch({remove})).has_value());

    // A stream's batch loses only its stores into new contexts.
    CommandBatch mixed = Batch({Store("held", 4), Store("new", 5), Store("other", 6)});
    CHECK(s.applier.DropNewContextStores(&mixed) == 2);
    REQUIRE(mixed.commands.size() == 1);
    CHECK(std::get<StoreCommand>(mixed.commands[0]).context == Context("held"));

    s.applier.SetNewContextsRefused("");
    CommandBatch again = Batch({Store("new", 5)});
    CHECK(s.applier.DropNewContextStores(&again) == 0);
    CHECK(SubmitAndWait(s.services, std::move(again)).has_value());
    CHECK(s.machine.Read([](const Index& index, Revision) {
      return index.HasContext(Context("new")) && !index.HasContext(Context("other"));
    }));
  }

  TEST_CASE("the guard stops at the bound and resumes below three quarters of it") {
    InMemoryServices s;
    SnapshotSizeLog log;
    s.services.log = nullptr;  // readiness warnings read the applier, not the log
    log.bytes = 999;
    SnapshotGuard guard(1000, kSnapshotResumeFraction, &s.applier, &log);
    guard.Start();
    std::this_thread::sleep_for(50ms);  // the first round sees 999: below the bound
    CHECK(s.applier.new_contexts_refused().empty());
    log.bytes = 1000;
    REQUIRE(AwaitRefusing(s.applier, true));
    const std::string reason = s.applier.new_contexts_refused();
    CHECK(reason.find("1000 bytes, at or past snapshot_stop_bytes 1000") != std::string::npos);
    const std::vector<std::string> warnings = ReadinessWarnings(s.services);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0] == "the group takes no new contexts: " + reason);
    // Between 3/4 of the bound and the bound it keeps refusing: no flapping.
    log.bytes = 750;
    std::this_thread::sleep_for(2'500ms);  // two rounds
    CHECK_FALSE(s.applier.new_contexts_refused().empty());
    log.bytes = 749;
    REQUIRE(AwaitRefusing(s.applier, false));
    CHECK(ReadinessWarnings(s.services).empty());
    guard.Stop();
  }

  TEST_CASE("GET /v1/groups and the metrics show whether the group takes new contexts") {
    GroupsView view;
    view.groups.emplace_back();
    nlohmann::json doc = GroupsViewJson(view);
    CHECK(doc["groups"][0]["accepting"] == true);
    CHECK(doc["groups"][0]["refusing_new_contexts"].is_null());
    CHECK(RenderGroupMetrics(view).find("kvatlas_group_accepting{group=\"1\"} 1") !=
          std::string::npos);
    view.groups[0].refusing_new_contexts = "its last raft snapshot is 2000 bytes";
    doc = GroupsViewJson(view);
    CHECK(doc["groups"][0]["accepting"] == false);
    CHECK(doc["groups"][0]["refusing_new_contexts"] == "its last raft snapshot is 2000 bytes");
    CHECK(RenderGroupMetrics(view).find("kvatlas_group_accepting{group=\"1\"} 0") !=
          std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::server
