// SequenceTracker: where one publisher stream stands. vLLM and SGLang number their batches
// 0, 1, 2, ... per publisher process (docs/engine-events.md §Ordering): the next batch must
// carry last + 1; a larger number means batches were lost (a gap, to be replayed), a
// smaller one that the engine restarted (live traffic) or a duplicate (replayed traffic).
// A value type; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>

namespace kvatlas::server {

enum class SequenceVerdict {
  kNext,    // the expected sequence
  kAhead,   // past it: the batches in between were lost
  kBehind,  // at or before the last one handed on
};

class SequenceTracker {
 public:
  // `last`: the last sequence already applied (from the persisted stream position), or
  // nullopt for a stream never seen, whose first expected sequence is 0.
  explicit SequenceTracker(std::optional<uint64_t> last = std::nullopt) : last_(last) {}

  SequenceVerdict Observe(uint64_t sequence) const {
    const uint64_t expected = Expected();
    if (sequence == expected) return SequenceVerdict::kNext;
    return sequence > expected ? SequenceVerdict::kAhead : SequenceVerdict::kBehind;
  }

  // The sequence the next batch should carry.
  uint64_t Expected() const { return last_ ? *last_ + 1 : 0; }
  std::optional<uint64_t> last() const { return last_; }

  // Records that `sequence` was handed on (applied or deliberately skipped).
  void Advance(uint64_t sequence) { last_ = sequence; }
  // The publisher restarted: expect 0 next.
  void Reset() { last_.reset(); }

 private:
  std::optional<uint64_t> last_;
};

}  // namespace kvatlas::server
