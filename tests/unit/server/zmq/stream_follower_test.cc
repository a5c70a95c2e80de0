// Scripted event sequences for StreamFollower: what it hands on (sequence and payload, in
// order), what it asks for (replays, holder clears) and what it counts. Payloads are strings
// naming where the batch came from: "b<seq>" live, "r<seq>" replayed.
#include "server/zmq/stream_follower.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvatlas::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Follower = StreamFollower<std::string>;

class Recorder final : public FollowerActions<std::string> {
 public:
  void Apply(uint64_t sequence, std::string payload) override {
    log.push_back(std::to_string(sequence) + ":" + payload);
  }
  void ClearHolder() override { log.push_back("clear"); }
  std::vector<std::string> log;
};

// The counters the follower owns, the non-zero ones only, so a check is exact.
std::string Counts(const StreamCounters& c) {
  std::string out;
  auto add = [&out](const char* name, int64_t value) {
    if (value != 0) out += std::string(out.empty() ? "" : " ") + name + "=" + std::to_string(value);
  };
  add("received", static_cast<int64_t>(c.batches_received.load()));
  add("gaps", static_cast<int64_t>(c.gaps.load()));
  add("lost", static_cast<int64_t>(c.lost_batches.load()));
  add("duplicates", static_cast<int64_t>(c.duplicates.load()));
  add("replays", static_cast<int64_t>(c.replays.load()));
  add("replay_failures", static_cast<int64_t>(c.replay_failures.load()));
  add("replayed", static_cast<int64_t>(c.replayed_batches.load()));
  add("restarts", static_cast<int64_t>(c.restarts.load()));
  add("replaying", c.replaying.load() ? 1 : 0);
  out += " last=" + std::to_string(c.last_sequence.load());
  return out;
}

StreamFollowerOptions Replayable(size_t max_buffered = 10'000) {
  StreamFollowerOptions o;
  o.replayable = true;
  o.max_buffered_batches = max_buffered;
  o.replay_idle_timeout = seconds(2);
  o.replay_total_timeout = seconds(5);
  o.replay_cooldown = seconds(30);
  return o;
}

struct Stream {
  explicit Stream(std::optional<uint64_t> last, StreamFollowerOptions options = Replayable())
      : follower("s", last, options, &counters) {}

  // Times are offsets from an arbitrary start, well past the clock's epoch.
  static FollowerClock::time_point At(milliseconds offset) {
    return FollowerClock::time_point{} + std::chrono::hours(1) + offset;
  }
  bool Live(uint64_t sequence, milliseconds at = {}) {
    return follower.OnLive(sequence, "b" + std::to_string(sequence), At(at), actions);
  }
  void Replayed(uint64_t sequence, milliseconds at = {}) {
    follower.OnReplayMessage(At(at));
    follower.OnReplayBatch(sequence, "r" + std::to_string(sequence), actions);
  }
  // The log since the last call.
  std::vector<std::string> Take() { return std::exchange(actions.log, {}); }

  StreamCounters counters;
  Recorder actions;
  Follower follower;
};

using Log = std::vector<std::string>;

TEST_CASE("zmq follower: in-order live batches are handed on as they come") {
  Stream s(std::nullopt);
  CHECK_FALSE(s.Live(0));
  CHECK_FALSE(s.Live(1));
  CHECK_FALSE(s.Live(2));
  CHECK(s.Take() == Log{"0:b0", "1:b1", "2:b2"});
  CHECK(Counts(s.counters) == "received=3 last=2");
  CHECK(s.follower.Expected() == 3);

  // A persisted position: the stream resumes after it.
  Stream resumed(41);
  CHECK_FALSE(resumed.Live(42));
  CHECK(resumed.Take() == Log{"42:b42"});
}

TEST_CASE("zmq follower: a gap is replayed, then the buffered live batches, then live") {
  Stream s(9);
  CHECK(s.Live(12));  // gap: wants a replay
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK_FALSE(s.Live(13));  // buffered; only the gap asks for a slot
  CHECK(s.Take().empty());
  CHECK(s.follower.buffered() == 2);
  CHECK(Counts(s.counters) == "received=2 gaps=1 replaying=1 last=-1");

  CHECK(s.follower.BeginReplay(Stream::At({})) == 10);
  CHECK(s.follower.replay() == Follower::Replay::kRunning);
  s.Replayed(10);
  s.Replayed(11);
  CHECK(s.Take() == Log{"10:r10", "11:r11"});
  s.follower.OnReplayEnd(Stream::At({}), s.actions);
  CHECK(s.Take() == Log{"12:b12", "13:b13"});
  CHECK(s.follower.replay() == Follower::Replay::kNone);
  CHECK_FALSE(s.Live(14));
  CHECK(s.Take() == Log{"14:b14"});
  CHECK(Counts(s.counters) == "received=5 gaps=1 replays=1 replayed=2 last=14");
}

TEST_CASE("zmq follower: a replay overlapping buffered live batches applies each once") {
  Stream s(9);
  CHECK(s.Live(12));
  CHECK_FALSE(s.Live(13));
  CHECK(s.follower.BeginReplay(Stream::At({})) == 10);
  s.Replayed(8);  // the publisher answers from before the gap: already applied
  s.Replayed(9);
  for (uint64_t q = 10; q <= 13; ++q) s.Replayed(q);
  s.follower.OnReplayEnd(Stream::At({}), s.actions);
  // 12 and 13 came both ways: the replayed copies win, the buffered ones are duplicates.
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:r12", "13:r13"});
  CHECK_FALSE(s.Live(14));
  CHECK(s.Take() == Log{"14:b14"});
  CHECK(Counts(s.counters) == "received=9 gaps=1 duplicates=4 replays=1 replayed=6 last=14");
}

TEST_CASE("zmq follower: a replay that jumps counts what the publisher no longer has") {
  Stream s(9);
  CHECK(s.Live(14));
  s.follower.BeginReplay(Stream::At({}));
  s.Replayed(10);
  s.Replayed(12);  // 11 is gone from the publisher's buffer
  s.follower.OnReplayEnd(Stream::At({}), s.actions);
  CHECK(s.Take() == Log{"10:r10", "12:r12", "14:b14"});
  // Replayed something, so not a failure; 11 and 13 are lost.
  CHECK(Counts(s.counters) == "received=3 gaps=3 lost=2 replays=1 replayed=2 last=14");
}

TEST_CASE("zmq follower: a replay that never answers is abandoned, then cooldown") {
  Stream s(9);
  CHECK(s.Live(12, milliseconds(0)));
  CHECK(s.follower.BeginReplay(Stream::At(milliseconds(0))) == 10);
  CHECK_FALSE(s.Live(13, milliseconds(1'000)));  // live traffic does not keep a replay alive
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(milliseconds(2'000))));
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(2'001))));

  s.follower.AbandonReplay(Stream::At(milliseconds(2'001)), s.actions);
  // The buffered live batches go on; 10 and 11 are lost.
  CHECK(s.Take() == Log{"12:b12", "13:b13"});
  CHECK(s.follower.replay() == Follower::Replay::kNone);
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(seconds(100))));
  CHECK(Counts(s.counters) == "received=2 gaps=2 lost=2 replays=1 replay_failures=1 last=13");

  // Cooldown until 2.001 s + 30 s: a gap before then is counted, not replayed.
  CHECK_FALSE(s.Live(16, milliseconds(32'000)));
  CHECK(s.Take() == Log{"16:b16"});
  CHECK(Counts(s.counters) == "received=3 gaps=3 lost=4 replays=1 replay_failures=1 last=16");
  // From the end of the cooldown, gaps are replayed again.
  CHECK(s.Live(18, milliseconds(32'001)));
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK(s.follower.BeginReplay(Stream::At(milliseconds(32'001))) == 17);
}

TEST_CASE("zmq follower: any replay message, even a malformed one, keeps it alive") {
  Stream s(9);
  CHECK(s.Live(12));
  s.follower.BeginReplay(Stream::At({}));
  s.follower.OnReplayMessage(Stream::At(milliseconds(1'500)));
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(milliseconds(3'500))));
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(3'501))));
}

TEST_CASE("zmq follower: a replay past its total timeout is abandoned though it answers") {
  Stream s(9);
  CHECK(s.Live(20));
  s.follower.BeginReplay(Stream::At({}));
  for (uint64_t q = 10; q <= 14; ++q) s.Replayed(q, seconds(q - 9));  // one a second
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(milliseconds(5'000))));
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(5'001))));
  s.follower.AbandonReplay(Stream::At(milliseconds(5'001)), s.actions);
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:r12", "13:r13", "14:r14", "20:b20"});
  CHECK(Counts(s.counters) ==
        "received=6 gaps=2 lost=5 replays=1 replay_failures=1 replayed=5 last=20");
  CHECK_FALSE(s.Live(22, seconds(6)));  // in the cooldown
  CHECK(s.follower.replay() == Follower::Replay::kNone);
}

TEST_CASE("zmq follower: a replay that returns nothing although batches are missing fails") {
  Stream s(9);
  CHECK(s.Live(12));
  s.follower.BeginReplay(Stream::At({}));
  s.follower.OnReplayEnd(Stream::At({}), s.actions);  // the publisher's buffer expired
  CHECK(s.Take() == Log{"12:b12"});
  CHECK(Counts(s.counters) == "received=1 gaps=2 lost=2 replays=1 replay_failures=1 last=12");
  CHECK_FALSE(s.Live(15, seconds(1)));  // cooldown
}

TEST_CASE("zmq follower: without a replay endpoint a gap is counted and applied") {
  StreamFollowerOptions options = Replayable();
  options.replayable = false;
  Stream s(9, options);
  CHECK_FALSE(s.Live(12));
  CHECK(s.follower.replay() == Follower::Replay::kNone);
  CHECK(s.Take() == Log{"12:b12"});
  // A new stream whose first batch is not 0 has a gap from 0.
  Stream fresh(std::nullopt, options);
  CHECK_FALSE(fresh.Live(5));
  CHECK(fresh.Take() == Log{"5:b5"});
  CHECK(Counts(s.counters) == "received=1 gaps=1 lost=2 last=12");
  CHECK(Counts(fresh.counters) == "received=1 gaps=1 lost=5 last=5");
}

TEST_CASE("zmq follower: a live sequence at or below the last one is an engine restart") {
  SUBCASE("back to 0: clear the holder, apply 0") {
    Stream s(9);
    CHECK_FALSE(s.Live(0));
    CHECK(s.Take() == Log{"clear", "0:b0"});
    CHECK(Counts(s.counters) == "received=1 restarts=1 last=0");
    CHECK_FALSE(s.Live(1));
    CHECK(s.Take() == Log{"1:b1"});
  }
  SUBCASE("back to 3: clear, then a gap from 0, replayed") {
    Stream s(9);
    CHECK(s.Live(3));
    CHECK(s.Take() == Log{"clear"});
    CHECK(s.follower.BeginReplay(Stream::At({})) == 0);
    CHECK(Counts(s.counters) == "received=1 gaps=1 replays=1 restarts=1 replaying=1 last=-1");
  }
  SUBCASE("the same sequence again: live traffic never repeats, so also a restart") {
    Stream s(9);
    CHECK_FALSE(s.Live(10));
    CHECK(s.Live(10));
    CHECK(s.Take() == Log{"10:b10", "clear"});
    CHECK(s.follower.Expected() == 0);
    CHECK(Counts(s.counters) == "received=2 gaps=1 restarts=1 replaying=1 last=10");
  }
}

TEST_CASE("zmq follower: sequences wrap at 2^64 as the next batch, not a restart") {
  // Arithmetic is modulo 2^64: after 2^64 - 1 the next expected sequence is 0, so 0 is
  // applied as the next batch (no clear). The stats show 2^64 - 1 as -1 ("none"); no engine
  // gets there, and 2^64 - 1 is the replay end marker (the ingest loop treats it so).
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  Stream s(kMax - 1);
  CHECK_FALSE(s.Live(kMax));
  CHECK(s.follower.Expected() == 0);
  CHECK(Counts(s.counters) == "received=1 last=-1");
  CHECK_FALSE(s.Live(0));
  CHECK(s.Take() == Log{std::to_string(kMax) + ":b" + std::to_string(kMax), "0:b0"});
  CHECK(Counts(s.counters) == "received=2 last=0");
}

TEST_CASE("zmq follower: a restart during a replay is seen only after it") {
  // Live batches are buffered unexamined while replaying, so the new engine's 0 and 1 are
  // handed on after the buffered 12 and dropped as duplicates; the restart is detected at
  // the next live batch (2 after 12), whose holder clear comes after the lost 0 and 1.
  Stream s(9);
  CHECK(s.Live(12, milliseconds(0)));
  s.follower.BeginReplay(Stream::At(milliseconds(0)));
  CHECK_FALSE(s.Live(0, milliseconds(100)));  // the engine restarted
  CHECK_FALSE(s.Live(1, milliseconds(200)));
  CHECK(s.Take().empty());
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(2'001))));
  s.follower.AbandonReplay(Stream::At(milliseconds(2'001)), s.actions);
  CHECK(s.Take() == Log{"12:b12"});
  CHECK(Counts(s.counters) ==
        "received=3 gaps=2 lost=2 duplicates=2 replays=1 replay_failures=1 last=12");
  // In the cooldown, so the gap from 0 to 2 is counted, not replayed.
  CHECK_FALSE(s.Live(2, milliseconds(3'000)));
  CHECK(s.Take() == Log{"clear", "2:b2"});
  CHECK(Counts(s.counters) ==
        "received=4 gaps=3 lost=4 duplicates=2 replays=1 replay_failures=1 restarts=1 last=2");
}

TEST_CASE("zmq follower: past the buffer bound the newest live batches are dropped as lost") {
  Stream s(9, Replayable(/*max_buffered=*/2));
  CHECK(s.Live(12));
  CHECK_FALSE(s.Live(13));
  CHECK_FALSE(s.Live(14));  // dropped
  CHECK_FALSE(s.Live(15));  // dropped
  CHECK(s.follower.buffered() == 2);
  CHECK(Counts(s.counters) == "received=4 gaps=1 lost=2 replaying=1 last=-1");
  s.follower.BeginReplay(Stream::At({}));
  s.Replayed(10);
  s.Replayed(11);
  s.follower.OnReplayEnd(Stream::At({}), s.actions);
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:b12", "13:b13"});
  // The next live batch shows the dropped ones as a gap and replays them (the replay went
  // well, so no cooldown): they were counted lost when dropped all the same.
  CHECK(s.Live(16));
  CHECK(s.follower.BeginReplay(Stream::At({})) == 14);
  CHECK(Counts(s.counters) == "received=7 gaps=2 lost=2 replays=2 replayed=2 replaying=1 last=13");
}

TEST_CASE("zmq follower: a replay waiting for a slot buffers and does not time out") {
  // The ingest loop grants at most max_concurrent_replays slots; the follower only says it
  // waits (OnLive returned true, replay() is kWaiting) and starts when BeginReplay is called.
  Stream s(9);
  CHECK(s.Live(12, seconds(0)));
  CHECK_FALSE(s.Live(13, seconds(50)));
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(seconds(100))));
  CHECK(Counts(s.counters) == "received=2 gaps=1 replaying=1 last=-1");
  // The timeouts run from the grant.
  CHECK(s.follower.BeginReplay(Stream::At(seconds(100))) == 10);
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(seconds(102))));
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(102'001))));
}

TEST_CASE("zmq follower: a replay whose request cannot be sent fails at once") {
  Stream s(9);
  CHECK(s.Live(12));
  s.follower.BeginReplay(Stream::At({}));
  s.follower.AbandonReplay(Stream::At({}), s.actions);
  CHECK(s.Take() == Log{"12:b12"});
  CHECK(Counts(s.counters) == "received=1 gaps=2 lost=2 replays=1 replay_failures=1 last=12");
}

TEST_CASE("zmq follower: an applier refusing for a full queue is retried, not lost") {
  CHECK(AfterRefusal(StatusCode::kResourceExhausted, /*stopping=*/false) == SubmitRetry::kRetry);
  CHECK(AfterRefusal(StatusCode::kResourceExhausted, /*stopping=*/true) == SubmitRetry::kGiveUp);
  CHECK(AfterRefusal(StatusCode::kNotLeader, /*stopping=*/false) == SubmitRetry::kGiveUp);
  CHECK(AfterRefusal(StatusCode::kInternal, /*stopping=*/false) == SubmitRetry::kGiveUp);
}

}  // namespace
}  // namespace kvatlas::server
