// What each engine and report mode means for the index (docs/engine-events.md §Report
// modes), end to end from decoded engine events: the EngineEventMapper's commands applied
// by a real (in-memory) StateMachine, as a stream's batches are.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "server/ingest/engine_event_mapper.h"
#include "server/state/state_machine.h"
#include "server/zmq/stream_stats.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

const ContextKey kContext{"default", "m", "", 2, ""};
const HolderKey kHolder{"e1", 0};
constexpr char kStream[] = "e1|default|0";

// A stream applying engine batches the way the ZMQ ingest does: mapped, positioned, applied.
class Stream {
 public:
  Stream(EngineType engine, ReportMode mode)
      : machine_(StateMachineOptions{}, nullptr),
        mapper_(&machine_.hasher()),
        identity_{kContext, kHolder, engine, mode} {
    REQUIRE(machine_.Recover().ok());
    Registration r = testing::PublisherRegistration("e1");
    r.type = engine;
    r.report_mode = mode;
    CommandBatch reg;
    reg.commands.emplace_back(RegisterCommand{r});
    testing::ApplyOne(machine_, reg);
  }

  void Publish(std::vector<EngineEvent> events) {
    EngineBatch batch;
    batch.events = std::move(events);
    MappedBatch mapped = mapper_.Map(batch, identity_, &state_);
    mapped.batch.position = StreamPosition{kStream, sequence_++, false};
    testing::ApplyOne(machine_, mapped.batch);
  }

  // Entries (block × holder × tier) the index holds.
  uint64_t Entries() const {
    return machine_.Read([](const Index& index, Revision) { return index.Stats().entries; });
  }
  StreamTally Tally() const { return machine_.TallyOf(kStream); }

 private:
  StateMachine machine_;
  EngineEventMapper mapper_;
  StreamIdentity identity_;
  StreamMapState state_;
  uint64_t sequence_ = 0;
};

// BlockStored of blocks 900, 901 (tokens 1..4, two 2-token blocks) from token 0 or, with
// `parent`, continuing it.
EngineEvent Stored(std::vector<uint64_t> hashes, std::vector<uint32_t> tokens,
                   std::optional<uint64_t> parent = std::nullopt) {
  EngineEvent e;
  e.kind = EngineEventKind::kStored;
  e.block_hashes = std::move(hashes);
  e.token_ids = std::move(tokens);
  e.block_size = 2;
  e.parent_hash = parent;
  e.medium = "GPU";
  return e;
}
EngineEvent Prefix() { return Stored({900, 901}, {1, 2, 3, 4}); }

EngineEvent Removed(uint64_t hash) {
  EngineEvent e;
  e.kind = EngineEventKind::kRemoved;
  e.block_hashes = {hash};
  e.medium = "GPU";
  return e;
}

TEST_SUITE("report modes") {
  TEST_CASE("vLLM full: a re-reported prefix removed once is gone") {
    // The engine caches blocks 900, 901; a later request hits them and, in full report
    // mode, they are re-sent; at eviction each gets one BlockRemoved.
    Stream s(EngineType::kVllm, ReportMode::kFull);
    s.Publish({Prefix()});
    s.Publish({Prefix()});
    CHECK(s.Entries() == 2);
    s.Publish({Removed(900), Removed(901)});
    CHECK(s.Entries() == 0);
    const StreamTally t = s.Tally();
    CHECK(t.stored_blocks == 4);
    CHECK(t.held_stores == 2);
    CHECK(t.removed_blocks == 2);
    CHECK(t.unheld_removes == 0);
  }

  TEST_CASE("vLLM full: a store that continues a parent is a new copy") {
    // A duplicate of block 902 cached after a hit on 900, 901: two physical copies.
    Stream s(EngineType::kVllm, ReportMode::kFull);
    s.Publish({Prefix()});
    s.Publish({Stored({902}, {5, 6}, 901)});
    s.Publish({Stored({902}, {5, 6}, 901)});
    s.Publish({Removed(902)});
    CHECK(s.Entries() == 3);  // 900, 901 and the second copy of 902
    s.Publish({Removed(902)});
    CHECK(s.Entries() == 2);
  }

  TEST_CASE("vLLM incremental: a block stored twice needs two removes") {
    // vLLM does not de-duplicate physical blocks: two copies, each evicted on its own.
    Stream s(EngineType::kVllm, ReportMode::kIncremental);
    s.Publish({Prefix()});
    s.Publish({Prefix()});
    s.Publish({Removed(900), Removed(901)});
    CHECK(s.Entries() == 2);
    s.Publish({Removed(900), Removed(901)});
    CHECK(s.Entries() == 0);
    CHECK(s.Tally().held_stores == 2);
  }

  TEST_CASE("vLLM: the event's origin decides over the mode") {
    Stream incremental(EngineType::kVllm, ReportMode::kIncremental);
    EngineEvent reused = Prefix();
    reused.origin = BlockOrigin::kReused;
    incremental.Publish({Prefix()});
    incremental.Publish({reused});
    incremental.Publish({Removed(900), Removed(901)});
    CHECK(incremental.Entries() == 0);

    Stream full(EngineType::kVllm, ReportMode::kFull);
    EngineEvent fresh = Prefix();
    fresh.origin = BlockOrigin::kNew;
    full.Publish({Prefix()});
    full.Publish({fresh});  // a true duplicate from token 0, marked as such
    full.Publish({Removed(900), Removed(901)});
    CHECK(full.Entries() == 2);
  }

  TEST_CASE("vLLM full: a reused report of a block not held makes it held once") {
    // The index missed the original store (kvatlas started after the engine): the
    // re-report brings the block in, and its one eviction takes it out.
    Stream s(EngineType::kVllm, ReportMode::kFull);
    s.Publish({Prefix()});
    CHECK(s.Entries() == 2);
    s.Publish({Removed(900), Removed(901)});
    CHECK(s.Entries() == 0);
  }

  TEST_CASE("vLLM offload copies stay copies in full mode") {
    Stream s(EngineType::kVllm, ReportMode::kFull);
    s.Publish({Prefix()});
    EngineEvent offload;
    offload.kind = EngineEventKind::kStored;
    offload.block_hashes = {900};
    offload.medium = "CPU";
    s.Publish({offload});
    s.Publish({offload});
    EngineEvent evicted = Removed(900);
    evicted.medium = "CPU";
    s.Publish({evicted});
    CHECK(s.Entries() == 3);  // GPU 900, 901 and one CPU copy of 900 left
  }

  TEST_CASE("SGLang: a page re-stored and removed once is gone") {
    // SGLang's radix cache publishes a page once per tier until it removes it: a repeat
    // re-reports it, whether it continues a parent or not.
    Stream s(EngineType::kSglang, ReportMode::kIncremental);
    s.Publish({Stored({900}, {1, 2})});
    s.Publish({Stored({901}, {3, 4}, 900)});
    s.Publish({Stored({900}, {1, 2})});
    s.Publish({Stored({901}, {3, 4}, 900)});
    s.Publish({Removed(901), Removed(900)});
    CHECK(s.Entries() == 0);
  }

  TEST_CASE("a remove of a block not held is counted once, whatever contexts it is tried in") {
    Stream s(EngineType::kVllm, ReportMode::kIncremental);
    EngineEvent lora = Prefix();
    lora.lora_name = "adapter";
    s.Publish({Prefix(), lora});  // two unsalted contexts: removes are tried in both
    s.Publish({Removed(900), Removed(77)});
    const StreamTally t = s.Tally();
    CHECK(t.removed_blocks == 2);
    CHECK(t.unheld_removes == 1);  // 77; 900 was held (in one of the two contexts)
  }

  TEST_CASE("ReportModeMismatch: says when the counts contradict the registered mode") {
    // A full-mode engine registered incremental: most stores re-report held blocks.
    StreamTally rereports{2000, 1200, 500, 0};
    CHECK(ReportModeMismatch(EngineType::kVllm, ReportMode::kIncremental, rereports)
              .find("report_mode \"full\"") != std::string::npos);
    CHECK(ReportModeMismatch(EngineType::kVllm, ReportMode::kFull, rereports).empty());
    // Duplicates counted once: removes of blocks no longer held.
    StreamTally unheld{2000, 100, 2000, 600};
    CHECK(ReportModeMismatch(EngineType::kVllm, ReportMode::kFull, unheld)
              .find("report_mode \"incremental\"") != std::string::npos);
    CHECK(ReportModeMismatch(EngineType::kVllm, ReportMode::kIncremental, unheld).empty());
    // Too few blocks to judge, and engines with one meaning, say nothing.
    CHECK(
        ReportModeMismatch(EngineType::kVllm, ReportMode::kIncremental, {900, 900, 0, 0}).empty());
    CHECK(ReportModeMismatch(EngineType::kSglang, ReportMode::kIncremental, rereports).empty());
  }
}

}  // namespace
}  // namespace kvatlas::server
