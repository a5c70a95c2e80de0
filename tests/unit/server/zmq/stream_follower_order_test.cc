// StreamFollower's ordering guarantee, checked on what its batches do to a holder: a model
// set of blocks that applies each batch's events ("store A", "remove A") and is emptied by
// ClearHolder. Engines publish scripted histories; the tests interleave their live
// batches, replay answers (also late ones, and ones from before a restart) and replay ends,
// and check that every sequence is applied at most once per engine run and that a block
// whose last applied event is its removal is not held — so a replayed Stored(A) older than
// an applied Removed(A) never brings A back.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "server/zmq/stream_follower.h"

namespace kvatlas::server {
namespace {

using Follower = StreamFollower<std::string>;

// The holder's blocks, reference-counted like the index's (a store applied twice needs two
// removes), built from the batches the follower hands on.
class Holder final : public FollowerActions<std::string> {
 public:
  void Apply(uint64_t sequence, std::string payload) override {
    CHECK_MESSAGE(applied_.insert(sequence).second,
                  "sequence " << sequence << " applied twice since the last clear");
    std::istringstream events(payload);
    std::string event;
    while (std::getline(events, event, ';')) {
      const size_t space = event.find(' ');
      REQUIRE(space != std::string::npos);
      const std::string verb = event.substr(0, space), block = event.substr(space + 1);
      last_event_[block] = verb;
      if (verb == "store") {
        ++blocks_[block];
      } else if (verb == "remove" && blocks_.contains(block) && --blocks_[block] == 0) {
        blocks_.erase(block);
      }
    }
  }
  void ClearHolder() override {
    blocks_.clear();
    applied_.clear();
    last_event_.clear();
    ++clears;
  }
  void CancelReplay() override { ++cancels; }

  // The blocks held, each once.
  std::set<std::string> Blocks() const {
    std::set<std::string> out;
    for (const auto& [block, count] : blocks_) out.insert(block);
    return out;
  }
  // No block whose last applied event (since the last clear) is its removal is held.
  void CheckRemovalsHold() const {
    for (const auto& [block, verb] : last_event_) {
      if (verb == "remove") CHECK_MESSAGE(!blocks_.contains(block), block << " came back");
    }
  }

  int clears = 0;
  int cancels = 0;

 private:
  std::map<std::string, int> blocks_;
  std::set<uint64_t> applied_;
  std::map<std::string, std::string> last_event_;
};

// One engine run: batch i is published with sequence i.
using Engine = std::vector<std::string>;

struct Stream {
  Stream() : follower("s", std::nullopt, Options(), &counters) {}

  static StreamFollowerOptions Options() {
    StreamFollowerOptions o;
    o.replayable = true;
    return o;
  }
  static FollowerClock::time_point Now() {
    return FollowerClock::time_point{} + std::chrono::hours(1);
  }

  // Live batch `seq` of `engine` arrives (true: the stream waits for a replay).
  bool Live(const Engine& engine, uint64_t seq) {
    return follower.OnLive(seq, engine.at(seq), Now(), holder);
  }
  // The waiting replay is granted; returns its id.
  uint64_t Begin(uint64_t expected_from) {
    const Follower::Ticket ticket = follower.BeginReplay(Now());
    CHECK(ticket.from == expected_from);
    return ticket.id;
  }
  // Replay `id` answers with `engine`'s batches `seqs`, then (if `end`) its end marker.
  void Answer(uint64_t id, const Engine& engine, std::vector<uint64_t> seqs, bool end) {
    for (uint64_t seq : seqs) {
      follower.OnReplayMessage(id, Now());
      follower.OnReplayBatch(id, seq, engine.at(seq), holder);
    }
    if (end) follower.OnReplayEnd(id, Now(), holder);
  }

  StreamCounters counters;
  Holder holder;
  Follower follower;
};

using Blocks = std::set<std::string>;

TEST_CASE("zmq follower order: a replay overlapping live traffic applies each batch once") {
  const Engine engine = {"store A",  "store B", "remove A", "store C",
                         "remove B", "store A", "remove A"};
  Stream s;
  CHECK_FALSE(s.Live(engine, 0));
  // 1 is lost on the way; 2 is a gap.
  CHECK(s.Live(engine, 2));
  const uint64_t replay = s.Begin(1);
  CHECK_FALSE(s.Live(engine, 3));  // buffered
  // The publisher answers from before the gap (0, applied), with what is buffered (2, 3)
  // and with what has not arrived live yet (4, 5).
  s.Answer(replay, engine, {0, 1, 2}, /*end=*/false);
  CHECK_FALSE(s.Live(engine, 4));  // buffered, and answered too
  s.Answer(replay, engine, {3, 4, 5}, /*end=*/true);
  CHECK(s.holder.Blocks() == Blocks{"A", "C"});
  // 5 arrives live after the replay handed it on: a duplicate, not a restart.
  CHECK_FALSE(s.Live(engine, 5));
  CHECK_FALSE(s.Live(engine, 6));
  CHECK(s.holder.Blocks() == Blocks{"C"});
  s.holder.CheckRemovalsHold();
  CHECK(s.holder.clears == 0);
  CHECK(s.counters.restarts.load() == 0);
}

TEST_CASE("zmq follower order: a replay after a remove does not bring the block back") {
  const Engine engine = {"store A", "remove A", "store B", "store C", "store D"};
  Stream s;
  CHECK_FALSE(s.Live(engine, 0));
  CHECK_FALSE(s.Live(engine, 1));
  CHECK(s.holder.Blocks().empty());
  // 2 is lost; the replay's answers start from before it: Stored(A) is older than the
  // applied Removed(A).
  CHECK(s.Live(engine, 3));
  const uint64_t replay = s.Begin(2);
  s.Answer(replay, engine, {0, 1, 2, 3}, /*end=*/true);
  CHECK(s.holder.Blocks() == Blocks{"B", "C"});
  // Late answers of the ended replay, older and newer than what is applied: ignored.
  s.Answer(replay, engine, {0, 4}, /*end=*/true);
  CHECK(s.holder.Blocks() == Blocks{"B", "C"});
  CHECK_FALSE(s.Live(engine, 4));
  CHECK(s.holder.Blocks() == Blocks{"B", "C", "D"});
  s.holder.CheckRemovalsHold();
  CHECK(s.counters.duplicates.load() == 3);  // answers 0 and 1, buffered 3
}

TEST_CASE("zmq follower order: two replays back to back") {
  // 1 is lost before the first replay, 4 while it runs (between the buffered 3 and 5).
  const Engine engine = {"store A",  "store B", "remove A", "store A",
                         "remove A", "store D", "remove B"};
  Stream s;
  CHECK_FALSE(s.Live(engine, 0));
  CHECK(s.Live(engine, 2));
  const uint64_t first = s.Begin(1);
  CHECK_FALSE(s.Live(engine, 3));
  CHECK_FALSE(s.Live(engine, 5));
  s.Answer(first, engine, {1, 2}, /*end=*/true);
  // The first replay's buffer drains to 3 (A stored again) and stops at the jump to 5:
  // Removed(A) at 4 is replayed, not skipped.
  CHECK(s.holder.Blocks() == Blocks{"A", "B"});
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  const uint64_t second = s.Begin(4);
  // The first replay's late answers (its end again, too) while the second runs: ignored.
  s.Answer(first, engine, {3, 4}, /*end=*/true);
  CHECK(s.follower.replay() == Follower::Replay::kRunning);
  s.Answer(second, engine, {4, 5}, /*end=*/true);
  CHECK(s.holder.Blocks() == Blocks{"B", "D"});
  // And after both ended.
  s.Answer(first, engine, {6}, /*end=*/true);
  s.Answer(second, engine, {6}, /*end=*/true);
  CHECK(s.holder.Blocks() == Blocks{"B", "D"});
  CHECK_FALSE(s.Live(engine, 6));
  CHECK(s.holder.Blocks() == Blocks{"D"});
  s.holder.CheckRemovalsHold();
  CHECK(s.counters.lost_batches.load() == 0);
}

TEST_CASE("zmq follower order: an engine restart mid-replay") {
  const Engine old_engine = {"store A", "store B", "store C", "remove B"};
  Stream s;
  CHECK_FALSE(s.Live(old_engine, 0));
  CHECK(s.Live(old_engine, 2));  // 1 lost
  const uint64_t old_replay = s.Begin(1);
  CHECK_FALSE(s.Live(old_engine, 3));

  SUBCASE("back to 0") {
    const Engine engine = {"store E", "store F", "remove E"};
    CHECK_FALSE(s.Live(engine, 0));  // at once: cancel, clear, apply
    CHECK(s.holder.cancels == 1);
    CHECK(s.holder.clears == 1);
    CHECK(s.holder.Blocks() == Blocks{"E"});
    // The old engine's replay answers arrive after the restart: never applied.
    s.Answer(old_replay, old_engine, {1, 2, 3}, /*end=*/true);
    CHECK(s.holder.Blocks() == Blocks{"E"});
    CHECK_FALSE(s.Live(engine, 1));
    CHECK_FALSE(s.Live(engine, 2));
    CHECK(s.holder.Blocks() == Blocks{"F"});
    s.holder.CheckRemovalsHold();
  }
  SUBCASE("to a later sequence: the new engine is replayed from 0") {
    const Engine engine = {"store E", "store A", "remove E", "remove A"};
    CHECK(s.Live(engine, 2));  // 0 and 1 lost on the way
    CHECK(s.holder.cancels == 1);
    CHECK(s.holder.clears == 1);
    CHECK(s.holder.Blocks().empty());
    const uint64_t replay = s.Begin(0);
    // Old and new answers interleave: only the new replay's are applied.
    s.Answer(old_replay, old_engine, {1}, /*end=*/false);
    s.Answer(replay, engine, {0}, /*end=*/false);
    s.Answer(old_replay, old_engine, {1, 2, 3}, /*end=*/true);
    CHECK(s.follower.replay() == Follower::Replay::kRunning);
    s.Answer(replay, engine, {1, 2}, /*end=*/true);
    CHECK(s.holder.Blocks() == Blocks{"A"});
    CHECK_FALSE(s.Live(engine, 3));
    CHECK(s.holder.Blocks().empty());
    s.holder.CheckRemovalsHold();
  }
  CHECK(s.counters.restarts.load() == 1);
  CHECK(s.holder.clears == 1);
}

}  // namespace
}  // namespace kvatlas::server
