// PredictionRecorder on a follower (docs/routing.md §Approximate mode): a round is forwarded
// to the leader in calls bounded by kMaxForwardedPredictions / kMaxForwardedPredictionKeys;
// what is not forwarded (no forward, a failed call and the rest of its round) is recorded
// in this server's own table, and each outcome is counted.
#include "server/state/prediction_recorder.h"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

namespace kvatlas::server {
namespace {

struct Follower {
  StateMachine machine{{}, nullptr};
  PredictionRecorder recorder{{}, &machine, nullptr, [] { return false; }};
  std::vector<CommandBatch> calls;  // what the forward was given

  // Queues `n` distinct keys for holder `holder` in one context.
  void Enqueue(const std::string& holder, size_t n, uint64_t first = 1) {
    ContextKey context;
    context.model = "m";
    context.block_size = 4;
    std::vector<BlockKey> keys(n);
    std::iota(keys.begin(), keys.end(), first);
    REQUIRE(recorder.Enqueue(context, HolderKey{holder, 0}, std::move(keys)));
  }
};

size_t Keys(const CommandBatch& batch) {
  size_t n = 0;
  for (const Command& c : batch.commands) n += std::get<PredictCommand>(c).hashes.size();
  return n;
}

TEST_SUITE("PredictionRecorder") {
  TEST_CASE("PredictionRecorder: a follower forwards its round in bounded calls") {
    Follower f;
    f.recorder.SetForward([&f](const CommandBatch& batch) {
      f.calls.push_back(batch);
      return Status::Ok();
    });
    f.Enqueue("a", kMaxForwardedPredictionKeys + 5);
    f.Enqueue("b", 3);
    f.recorder.Flush();
    REQUIRE(f.calls.size() == 2);
    CHECK(Keys(f.calls[0]) == kMaxForwardedPredictionKeys);
    CHECK(Keys(f.calls[1]) == 8);  // a's last 5 keys, then b's 3
    CHECK(f.calls[1].commands.size() == 2);
    const PredictionRecorderStats s = f.recorder.stats();
    CHECK(s.forwarded == 2);
    CHECK(s.forward_failed == 0);
    CHECK(s.local == 0);
    CHECK(f.machine.predicted().stats().entries == 0);  // the leader's log brings them

    // At most kMaxForwardedPredictions commands per call.
    for (size_t i = 0; i <= kMaxForwardedPredictions; ++i) f.Enqueue("h" + std::to_string(i), 1);
    f.calls.clear();
    f.recorder.Flush();
    REQUIRE(f.calls.size() == 2);
    CHECK(f.calls[0].commands.size() == kMaxForwardedPredictions);
    CHECK(f.calls[1].commands.size() == 1);
  }

  TEST_CASE("PredictionRecorder: a failed forward records the round locally") {
    Follower f;
    f.recorder.SetForward([&f](const CommandBatch& batch) {
      f.calls.push_back(batch);
      return Status::Unavailable("no leader is known");
    });
    f.Enqueue("a", kMaxForwardedPredictionKeys + 5);
    f.recorder.Flush();
    CHECK(f.calls.size() == 1);  // the rest of the round is not tried
    PredictionRecorderStats s = f.recorder.stats();
    CHECK(s.forwarded == 0);
    CHECK(s.forward_failed == 1);
    CHECK(s.local == 2);  // both parts of a's command
    CHECK(f.machine.predicted().stats().entries == kMaxForwardedPredictionKeys + 5);

    // Tried again next round.
    f.Enqueue("b", 2);
    f.recorder.Flush();
    CHECK(f.calls.size() == 2);
    s = f.recorder.stats();
    CHECK(s.forward_failed == 2);
    CHECK(s.local == 3);
  }

  TEST_CASE("PredictionRecorder: without a forward a follower records locally") {
    Follower f;
    f.Enqueue("a", 3);
    f.Enqueue("a", 2, 2);  // keys 2, 3 again: deduplicated
    f.recorder.Flush();
    CHECK(f.recorder.stats().local == 1);
    CHECK(f.machine.predicted().stats().entries == 3);
    CommandBatch batch;
    batch.commands.emplace_back(PredictCommand{});
    CHECK(f.recorder.SubmitForwarded(std::move(batch)).code() == StatusCode::kNotLeader);
    CHECK(f.recorder.stats().received == 0);
  }
}

}  // namespace
}  // namespace kvatlas::server
