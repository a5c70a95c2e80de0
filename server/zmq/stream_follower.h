// StreamFollower: the decisions of following one publisher stream (docs/engine-events.md
// §Ordering), without sockets, threads or the Applier. The ingest loop feeds it the
// stream's events in order — a live batch, a replay answer, the replay's end or failure,
// the time — and it says what to do: hand a batch on (FollowerActions::Apply, in stream
// order, each sequence at most once), clear the holder because the engine restarted
// (FollowerActions::ClearHolder), or start a replay from a sequence (the loop opens the
// socket when a replay slot is free). It holds the sequence, the replay/cooldown state and
// the bounded buffer of live batches that wait while the stream replays, and counts what it
// decides in the stream's counters (gaps, lost batches, duplicates, restarts, replays...).
//
// Sequences. vLLM and SGLang number their batches 0, 1, 2, ... per publisher process: the
// next live batch must carry last + 1 and a larger number is a gap. Live traffic never
// repeats itself, so a live batch at or below the previous live batch (before the first
// one: at or below the persisted position) means the engine restarted — also while the
// stream replays, when the previous live batch is the newest buffered one: the replay is
// cancelled (FollowerActions::CancelReplay) and the old engine's buffered batches dropped.
// A live batch above the previous live one but at or below `last` is one a replay already
// handed on: a duplicate. Arithmetic is modulo 2^64: after 2^64 - 1 the expected sequence
// is 0, so a wrap reads as the next batch, not a restart (no engine gets there).
//
// Replays. Each BeginReplay gets a new id, which the caller passes back with every answer
// of that replay; answers of any other replay (one that ended, timed out or was cancelled)
// are ignored, so an old engine's batches can never be applied after its restart.
//
// Time is a parameter (`now`, steady clock) so that tests drive the timeouts. A value of
// the ingest thread; not thread-safe. `Payload` is whatever the caller hands on with a batch
// (movable); the follower never looks into it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "common/internal/log.h"
#include "kvatlas/common/status.h"
#include "server/zmq/stream_stats.h"

namespace kvatlas::server {

using FollowerClock = std::chrono::steady_clock;

enum class SequenceVerdict {
  kNext,    // the expected sequence
  kAhead,   // past it: the batches in between were lost
  kBehind,  // at or before the last one handed on
};

// What a follower asks its caller to do, synchronously and in order.
template <typename Payload>
class FollowerActions {
 public:
  virtual ~FollowerActions() = default;
  // Submit `payload` at stream position `sequence` (restart = false). The follower has
  // already recorded `sequence` as handed on.
  virtual void Apply(uint64_t sequence, Payload payload) = 0;
  // The engine restarted: submit a clear of the stream's holder at position 0 with
  // restart = true, and forget the stream's mapping state.
  virtual void ClearHolder() = 0;
  // The engine restarted while the replay begun by BeginReplay ran: its answers are the old
  // engine's. Close its socket (discarding what is queued in it) and free its slot, so that
  // none of them is delivered. Called before ClearHolder; not for a replay still waiting
  // for a slot (it holds none).
  virtual void CancelReplay() = 0;
};

struct StreamFollowerOptions {
  bool replayable = false;  // the stream has a replay endpoint
  size_t max_buffered_batches = 10'000;
  std::chrono::milliseconds replay_idle_timeout{2'000};
  std::chrono::milliseconds replay_total_timeout{30'000};
  std::chrono::milliseconds replay_cooldown{30'000};
};

template <typename Payload>
class StreamFollower {
 public:
  enum class Replay {
    kNone,
    kWaiting,  // a gap wants a replay; waits for a slot (the caller's BeginReplay)
    kRunning,
  };
  using Actions = FollowerActions<Payload>;

  // A replay granted by BeginReplay: its id (to pass with its answers) and the sequence to
  // request from.
  struct Ticket {
    uint64_t id;
    uint64_t from;
  };

  // `last`: the last sequence already applied (the persisted stream position), or nullopt
  // for a stream never seen, whose first expected sequence is 0. `key` names the stream in
  // log lines. `counters` must outlive the follower.
  StreamFollower(std::string key, std::optional<uint64_t> last, StreamFollowerOptions options,
                 StreamCounters* counters)
      : key_(std::move(key)), options_(options), counters_(counters), last_(last) {}

  Replay replay() const { return replay_; }
  // The sequence the next batch should carry.
  uint64_t Expected() const { return last_ ? *last_ + 1 : 0; }
  std::optional<uint64_t> last() const { return last_; }
  size_t buffered() const { return buffered_.size(); }

  // A live batch. Returns true when the stream now waits for a replay: the caller should
  // launch waiting replays (BeginReplay) as slots allow.
  [[nodiscard]] bool OnLive(uint64_t sequence, Payload payload, FollowerClock::time_point now,
                            Actions& actions) {
    counters_->batches_received.fetch_add(1, std::memory_order_relaxed);
    if (IsRestart(sequence)) return OnRestart(sequence, std::move(payload), now, actions);
    previous_live_ = sequence;
    if (replay_ != Replay::kNone) {
      Buffer(sequence, std::move(payload));
      return false;
    }
    switch (Observe(sequence)) {
      case SequenceVerdict::kNext:
        Apply(sequence, std::move(payload), actions);
        return false;
      case SequenceVerdict::kAhead:
        return OnGap(sequence, std::move(payload), now, actions);
      case SequenceVerdict::kBehind:
        // Past the previous live batch, so not a restart: a replay that ran ahead of the
        // live socket already handed it on.
        counters_->duplicates.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    return false;
  }

  // A replay slot was granted to a waiting stream: returns the replay's id and the
  // sequence to replay from. The replay runs (and its timeouts count) from `now`. If the
  // request cannot be sent, the caller calls AbandonReplay.
  Ticket BeginReplay(FollowerClock::time_point now) {
    counters_->replays.fetch_add(1, std::memory_order_relaxed);
    replay_received_ = 0;
    replay_started_ = replay_last_ = now;
    replay_ = Replay::kRunning;
    return Ticket{++replay_id_, replay_from_};
  }

  // Any message on replay `id`'s socket, well-formed or not: the replay is alive.
  void OnReplayMessage(uint64_t id, FollowerClock::time_point now) {
    if (IsRunning(id)) replay_last_ = now;
  }

  // A batch of replay `id` (not the end marker). Ignored unless that replay is running.
  void OnReplayBatch(uint64_t id, uint64_t sequence, Payload payload, Actions& actions) {
    if (!IsRunning(id)) return;
    ++replay_received_;
    counters_->replayed_batches.fetch_add(1, std::memory_order_relaxed);
    counters_->batches_received.fetch_add(1, std::memory_order_relaxed);
    Deliver(sequence, std::move(payload), actions);
  }

  // Whether the running replay received nothing for the idle timeout or has run past the
  // total timeout; the caller then abandons it. A waiting replay never times out.
  bool ReplayTimedOut(FollowerClock::time_point now) const {
    return replay_ == Replay::kRunning && (now - replay_last_ > options_.replay_idle_timeout ||
                                           now - replay_started_ > options_.replay_total_timeout);
  }

  // Replay `id` sent its end marker (ignored unless that replay is running). If it
  // replayed nothing although the buffer starts past the expected sequence (the
  // publisher's buffer expired), it counts as failed. Then the buffered live batches are
  // handed on; a gap among them (live batches lost on the way while the replay ran) makes
  // the stream wait for another replay, unless cooling down.
  void OnReplayEnd(uint64_t id, FollowerClock::time_point now, Actions& actions) {
    if (IsRunning(id)) FinishReplay(/*completed=*/true, now, actions);
  }

  // The running replay timed out or its request could not be sent: a failure, then a
  // cooldown.
  void AbandonReplay(FollowerClock::time_point now, Actions& actions) {
    FinishReplay(/*completed=*/false, now, actions);
  }

 private:
  struct Buffered {
    uint64_t sequence;
    Payload payload;
  };

  bool IsRunning(uint64_t id) const { return replay_ == Replay::kRunning && id == replay_id_; }

  // At or below the previous live batch, or before the first one at or below the persisted
  // position; a wrap from 2^64 - 1 to 0 is the next batch.
  bool IsRestart(uint64_t sequence) const {
    const std::optional<uint64_t> previous = previous_live_ ? previous_live_ : last_;
    if (!previous) return false;
    if (sequence == 0 && *previous == std::numeric_limits<uint64_t>::max()) return false;
    return sequence <= *previous;
  }

  // The publisher started counting again: whatever was underway for the old engine (a
  // replay, the live batches buffered for it) is dropped, its holder cleared, and
  // `sequence` is the first batch of a new stream.
  bool OnRestart(uint64_t sequence, Payload payload, FollowerClock::time_point now,
                 Actions& actions) {
    counters_->restarts.fetch_add(1, std::memory_order_relaxed);
    const uint64_t previous = previous_live_ ? *previous_live_ : *last_;
    LogInfo("zmq: " + key_ + " restarted (sequence " + std::to_string(sequence) + " after " +
            std::to_string(previous) + "); clearing its blocks" +
            (replay_ == Replay::kNone ? "" : ", cancelling its replay"));
    if (replay_ != Replay::kNone) {
      const bool running = replay_ == Replay::kRunning;
      replay_ = Replay::kNone;
      ++replay_id_;  // the old engine's answers, if fed anyway, are ignored
      // Never applied, and the clear below removes whatever they would have stored.
      counters_->lost_batches.fetch_add(buffered_.size(), std::memory_order_relaxed);
      buffered_.clear();
      counters_->replaying.store(false, std::memory_order_relaxed);
      if (running) actions.CancelReplay();
    }
    actions.ClearHolder();
    last_.reset();
    previous_live_ = sequence;
    if (sequence == 0) {
      Apply(sequence, std::move(payload), actions);
      return false;
    }
    return OnGap(sequence, std::move(payload), now, actions);
  }

  SequenceVerdict Observe(uint64_t sequence) const {
    const uint64_t expected = Expected();
    if (sequence == expected) return SequenceVerdict::kNext;
    return sequence > expected ? SequenceVerdict::kAhead : SequenceVerdict::kBehind;
  }

  bool OnGap(uint64_t sequence, Payload payload, FollowerClock::time_point now, Actions& actions) {
    counters_->gaps.fetch_add(1, std::memory_order_relaxed);
    const uint64_t from = Expected();
    if (options_.replayable && now >= cooldown_until_) {
      replay_ = Replay::kWaiting;
      replay_from_ = from;
      counters_->replaying.store(true, std::memory_order_relaxed);
      Buffer(sequence, std::move(payload));
      return true;
    }
    counters_->lost_batches.fetch_add(sequence - from, std::memory_order_relaxed);
    Apply(sequence, std::move(payload), actions);
    return false;
  }

  // Past the bound the newest batch is dropped and counted lost.
  void Buffer(uint64_t sequence, Payload payload) {
    if (buffered_.size() >= options_.max_buffered_batches) {
      counters_->lost_batches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    buffered_.push_back(Buffered{sequence, std::move(payload)});
  }

  // A batch from a replay or the buffer: applied if it is next, dropped if already seen;
  // if it is further ahead, what is missing is lost (the publisher's buffer no longer has
  // it, or this is after a failed replay).
  void Deliver(uint64_t sequence, Payload payload, Actions& actions) {
    switch (Observe(sequence)) {
      case SequenceVerdict::kNext:
        break;
      case SequenceVerdict::kBehind:
        counters_->duplicates.fetch_add(1, std::memory_order_relaxed);
        return;
      case SequenceVerdict::kAhead:
        counters_->gaps.fetch_add(1, std::memory_order_relaxed);
        counters_->lost_batches.fetch_add(sequence - Expected(), std::memory_order_relaxed);
        break;
    }
    Apply(sequence, std::move(payload), actions);
  }

  void FinishReplay(bool completed, FollowerClock::time_point now, Actions& actions) {
    replay_ = Replay::kNone;
    // "Replayed nothing though batches were missing" is how an expired publisher buffer
    // (or a publisher without replay) shows itself.
    if (!completed ||
        (replay_received_ == 0 && !buffered_.empty() && buffered_.front().sequence > Expected())) {
      counters_->replay_failures.fetch_add(1, std::memory_order_relaxed);
      cooldown_until_ = now + options_.replay_cooldown;
      LogWarning("zmq: " + key_ + ": replay from " + std::to_string(replay_from_) +
                 (completed ? " returned nothing" : " failed") + "; continuing without it");
    }
    // A jump at the front of the buffer is what the replay could not fill: lost (Deliver).
    // One further in is live batches lost on the way while the replay ran, which the
    // publisher still holds: replayed in turn, the rest staying buffered.
    for (bool front = true; !buffered_.empty(); front = false) {
      if (!front && Observe(buffered_.front().sequence) == SequenceVerdict::kAhead &&
          options_.replayable && now >= cooldown_until_) {
        counters_->gaps.fetch_add(1, std::memory_order_relaxed);
        replay_ = Replay::kWaiting;
        replay_from_ = Expected();
        return;
      }
      Buffered b = std::move(buffered_.front());
      buffered_.pop_front();
      Deliver(b.sequence, std::move(b.payload), actions);
    }
    counters_->replaying.store(false, std::memory_order_relaxed);
  }

  void Apply(uint64_t sequence, Payload payload, Actions& actions) {
    last_ = sequence;
    counters_->last_sequence.store(static_cast<int64_t>(sequence), std::memory_order_relaxed);
    actions.Apply(sequence, std::move(payload));
  }

  std::string key_;
  StreamFollowerOptions options_;
  StreamCounters* counters_;
  std::optional<uint64_t> last_;  // the last sequence handed on (applied or skipped)
  // The previous live batch's sequence (buffered or not); none before the first one.
  std::optional<uint64_t> previous_live_;
  Replay replay_ = Replay::kNone;
  uint64_t replay_id_ = 0;  // the running replay's, or the last one's
  uint64_t replay_from_ = 0;
  uint64_t replay_received_ = 0;
  FollowerClock::time_point replay_started_;
  FollowerClock::time_point replay_last_;
  FollowerClock::time_point cooldown_until_;
  std::deque<Buffered> buffered_;
};

// After the applier refused a batch (TrySubmitAsync): a full queue is backpressure, so the
// batch is retried (the caller waits a little first) unless the server is stopping; any
// other refusal is final and counts as an apply failure.
enum class SubmitRetry { kRetry, kGiveUp };
inline SubmitRetry AfterRefusal(StatusCode code, bool stopping) {
  return code == StatusCode::kResourceExhausted && !stopping ? SubmitRetry::kRetry
                                                             : SubmitRetry::kGiveUp;
}

}  // namespace kvatlas::server
