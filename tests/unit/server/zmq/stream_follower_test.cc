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
  void CancelReplay() override { log.push_back("cancel"); }
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
  // Grants the waiting replay; returns the sequence it replays from.
  uint64_t Begin(milliseconds at = {}) {
    const Follower::Ticket ticket = follower.BeginReplay(At(at));
    replay_id = ticket.id;
    return ticket.from;
  }
  // An answer of the replay begun last, or of replay `id`.
  void Replayed(uint64_t sequence, milliseconds at = {}) { ReplayedBy(replay_id, sequence, at); }
  void ReplayedBy(uint64_t id, uint64_t sequence, milliseconds at = {}) {
    follower.OnReplayMessage(id, At(at));
    follower.OnReplayBatch(id, sequence, "r" + std::to_string(sequence), actions);
  }
  void End(milliseconds at = {}) { follower.OnReplayEnd(replay_id, At(at), actions); }
  // The log since the last call.
  std::vector<std::string> Take() { return std::exchange(actions.log, {}); }

  StreamCounters counters;
  Recorder actions;
  Follower follower;
  uint64_t replay_id = 0;
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

  CHECK(s.Begin() == 10);
  CHECK(s.follower.replay() == Follower::Replay::kRunning);
  s.Replayed(10);
  s.Replayed(11);
  CHECK(s.Take() == Log{"10:r10", "11:r11"});
  s.End();
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
  CHECK(s.Begin() == 10);
  s.Replayed(8);  // the publisher answers from before the gap: already applied
  s.Replayed(9);
  for (uint64_t q = 10; q <= 13; ++q) s.Replayed(q);
  s.End();
  // 12 and 13 came both ways: the replayed copies win, the buffered ones are duplicates.
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:r12", "13:r13"});
  CHECK_FALSE(s.Live(14));
  CHECK(s.Take() == Log{"14:b14"});
  CHECK(Counts(s.counters) == "received=9 gaps=1 duplicates=4 replays=1 replayed=6 last=14");
}

TEST_CASE("zmq follower: a replay that jumps counts what the publisher no longer has") {
  Stream s(9);
  CHECK(s.Live(14));
  s.Begin();
  s.Replayed(10);
  s.Replayed(12);  // 11 is gone from the publisher's buffer
  s.End();
  CHECK(s.Take() == Log{"10:r10", "12:r12", "14:b14"});
  // Replayed something, so not a failure; 11 and 13 are lost.
  CHECK(Counts(s.counters) == "received=3 gaps=3 lost=2 replays=1 replayed=2 last=14");
}

TEST_CASE("zmq follower: a replay that never answers is abandoned, then cooldown") {
  Stream s(9);
  CHECK(s.Live(12, milliseconds(0)));
  CHECK(s.Begin(milliseconds(0)) == 10);
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
  CHECK(s.Begin(milliseconds(32'001)) == 17);
}

TEST_CASE("zmq follower: any replay message, even a malformed one, keeps it alive") {
  Stream s(9);
  CHECK(s.Live(12));
  s.Begin();
  s.follower.OnReplayMessage(s.replay_id, Stream::At(milliseconds(1'500)));
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(milliseconds(3'500))));
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(3'501))));
}

TEST_CASE("zmq follower: a replay past its total timeout is abandoned though it answers") {
  Stream s(9);
  CHECK(s.Live(20));
  s.Begin();
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
  s.Begin();
  s.End();  // the publisher's buffer expired
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
    CHECK(s.Begin() == 0);
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

TEST_CASE("zmq follower: a restart during a replay is recognised at once and cancels it") {
  // The new engine's 0 is at or below the previous live batch (13, buffered): the replay is
  // cancelled before the clear, the old engine's buffered 12 and 13 are dropped (lost), and
  // 0 is applied as the first batch of a new stream.
  Stream s(9);
  CHECK(s.Live(12, milliseconds(0)));
  CHECK(s.Begin(milliseconds(0)) == 10);
  const uint64_t old_replay = s.replay_id;
  s.Replayed(10, milliseconds(50));
  CHECK_FALSE(s.Live(13, milliseconds(60)));
  CHECK(s.Take() == Log{"10:r10"});
  CHECK_FALSE(s.Live(0, milliseconds(100)));  // the engine restarted
  CHECK(s.Take() == Log{"cancel", "clear", "0:b0"});
  CHECK(s.follower.replay() == Follower::Replay::kNone);
  CHECK(s.follower.buffered() == 0);
  CHECK(Counts(s.counters) == "received=4 gaps=1 lost=2 replays=1 replayed=1 restarts=1 last=0");
  // The old engine's answers, fed anyway, are ignored: nothing applied, nothing counted.
  s.ReplayedBy(old_replay, 11, milliseconds(150));
  s.follower.OnReplayEnd(old_replay, Stream::At(milliseconds(150)), s.actions);
  CHECK(s.Take().empty());
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(seconds(100))));
  // Not a failure: no cooldown, so the new engine's next gap is replayed.
  CHECK_FALSE(s.Live(1, milliseconds(200)));
  CHECK(s.Live(3, milliseconds(300)));
  CHECK(s.Begin(milliseconds(300)) == 2);
  CHECK(s.Take() == Log{"1:b1"});
  CHECK(Counts(s.counters) ==
        "received=6 gaps=2 lost=2 replays=2 replayed=1 restarts=1 replaying=1 last=1");
}

TEST_CASE("zmq follower: a restart while waiting for a replay slot drops the wait") {
  Stream s(9);
  CHECK(s.Live(12));
  CHECK_FALSE(s.Live(13));
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK(s.Live(13));  // the same sequence again: a restart (the wait held no socket)
  CHECK(s.Take() == Log{"clear"});
  // 13 is the new engine's first batch seen: a gap from 0, which waits for a replay anew.
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK(s.follower.buffered() == 1);
  CHECK(s.Begin() == 0);
  for (uint64_t q = 0; q <= 13; ++q) s.Replayed(q);
  s.End();
  CHECK(s.Take().size() == 14);
  CHECK(Counts(s.counters) ==
        "received=17 gaps=2 lost=2 duplicates=1 replays=1 replayed=14 restarts=1 last=13");
}

TEST_CASE("zmq follower: a restart to a later sequence mid-replay replays the new engine") {
  // The new engine's 0 and 1 were lost on the way: 2 (below the buffered 12) is a restart
  // and a gap from 0. The old replay's answers that come during the new replay are ignored.
  Stream s(9);
  CHECK(s.Live(12));
  s.Begin();
  const uint64_t old_replay = s.replay_id;
  CHECK(s.Live(2));
  CHECK(s.Take() == Log{"cancel", "clear"});
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK(s.Begin() == 0);
  CHECK(s.replay_id != old_replay);
  s.ReplayedBy(old_replay, 0);  // the old engine's 0: never applied
  s.Replayed(0);
  s.ReplayedBy(old_replay, 1);
  s.Replayed(1);
  s.follower.OnReplayEnd(old_replay, Stream::At({}), s.actions);  // ignored: still replaying
  CHECK(s.follower.replay() == Follower::Replay::kRunning);
  s.End();
  CHECK(s.Take() == Log{"0:r0", "1:r1", "2:b2"});
  CHECK(Counts(s.counters) == "received=4 gaps=2 lost=1 replays=2 replayed=2 restarts=1 last=2");
}

TEST_CASE("zmq follower: a live batch a replay already handed on is a duplicate") {
  // The replay ran ahead of the live socket (the publisher answered with 13 and 14 before
  // they arrived live): 13 and 14 are past the previous live batch (12), so not a restart.
  Stream s(9);
  CHECK(s.Live(12));
  s.Begin();
  for (uint64_t q = 10; q <= 14; ++q) s.Replayed(q);
  s.End();
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:r12", "13:r13", "14:r14"});
  CHECK_FALSE(s.Live(13));
  CHECK_FALSE(s.Live(14));
  CHECK_FALSE(s.Live(15));
  CHECK(s.Take() == Log{"15:b15"});
  CHECK(Counts(s.counters) == "received=9 gaps=1 duplicates=3 replays=1 replayed=5 last=15");
  // Live traffic going back below its own previous batch still is a restart.
  CHECK_FALSE(s.Live(0));
  CHECK(s.Take() == Log{"clear", "0:b0"});
}

TEST_CASE("zmq follower: a gap among the live batches buffered during a replay is replayed") {
  // 14 and 15 were lost on the way while the first replay ran: once it has filled the gap
  // in front of the buffer, the jump from 13 to 16 waits for a second replay.
  Stream s(9);
  CHECK(s.Live(12));
  CHECK_FALSE(s.Live(13));
  CHECK_FALSE(s.Live(16));
  CHECK(s.Begin() == 10);
  const uint64_t first = s.replay_id;
  s.Replayed(10);
  s.Replayed(11);
  s.End();
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:b12", "13:b13"});
  CHECK(s.follower.replay() == Follower::Replay::kWaiting);
  CHECK(s.follower.buffered() == 1);
  CHECK_FALSE(s.Live(17));  // buffered behind 16
  CHECK(s.Begin() == 14);
  s.ReplayedBy(first, 14);  // a late answer of the first replay: ignored
  CHECK(s.Take().empty());
  s.Replayed(14);
  s.Replayed(15);
  s.End();
  CHECK(s.Take() == Log{"14:r14", "15:r15", "16:b16", "17:b17"});
  CHECK(Counts(s.counters) == "received=8 gaps=2 replays=2 replayed=4 last=17");
}

TEST_CASE("zmq follower: a gap in front of the buffer that the replay did not fill is lost") {
  // Not replayed again: the publisher no longer holds it (the replay stopped before it).
  Stream s(9);
  CHECK(s.Live(12));
  CHECK_FALSE(s.Live(13));
  s.Begin();
  s.Replayed(10);
  s.End();
  CHECK(s.Take() == Log{"10:r10", "12:b12", "13:b13"});
  CHECK(s.follower.replay() == Follower::Replay::kNone);
  CHECK(Counts(s.counters) == "received=3 gaps=2 lost=1 replays=1 replayed=1 last=13");
}

TEST_CASE("zmq follower: past the buffer bound the newest live batches are dropped as lost") {
  Stream s(9, Replayable(/*max_buffered=*/2));
  CHECK(s.Live(12));
  CHECK_FALSE(s.Live(13));
  CHECK_FALSE(s.Live(14));  // dropped
  CHECK_FALSE(s.Live(15));  // dropped
  CHECK(s.follower.buffered() == 2);
  CHECK(Counts(s.counters) == "received=4 gaps=1 lost=2 replaying=1 last=-1");
  s.Begin();
  s.Replayed(10);
  s.Replayed(11);
  s.End();
  CHECK(s.Take() == Log{"10:r10", "11:r11", "12:b12", "13:b13"});
  // The next live batch shows the dropped ones as a gap and replays them (the replay went
  // well, so no cooldown): they were counted lost when dropped all the same.
  CHECK(s.Live(16));
  CHECK(s.Begin() == 14);
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
  CHECK(s.Begin(seconds(100)) == 10);
  CHECK_FALSE(s.follower.ReplayTimedOut(Stream::At(seconds(102))));
  CHECK(s.follower.ReplayTimedOut(Stream::At(milliseconds(102'001))));
}

TEST_CASE("zmq follower: a replay whose request cannot be sent fails at once") {
  Stream s(9);
  CHECK(s.Live(12));
  s.Begin();
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
