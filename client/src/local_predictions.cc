#include "client/src/local_predictions.h"

#include <chrono>
#include <utility>

namespace kvatlas::client_internal {

void ApplyToPredictions(const FeedRecord& record, PredictedTable* table,
                        PredictedTable::Clock::time_point now) {
  switch (record.op) {
    case FeedOp::kPredicted: {
      const auto expires =
          PredictedTable::Clock::time_point(std::chrono::milliseconds(record.expires_at_ms));
      // Accepted "now": no holder is ever marked live here (Forget, not NoteEvent), so the
      // server's decision to record it stands.
      (void)table->Record(record.context, record.holder, record.keys, now, expires, now);
      return;
    }
    case FeedOp::kStored:
    case FeedOp::kRemoved:
    case FeedOp::kCleared:
      // The holder's events flow: what it holds is known, the guesses go (the server's
      // PredictedTable::NoteEvent).
      table->Forget(record.holder);
      return;
    case FeedOp::kEvicted:
    case FeedOp::kExpired:
      return;
  }
}

std::vector<PredictedPrefix> PredictedPrefixes(const PredictedTable& table,
                                               const ContextKey& context,
                                               std::span<const BlockKey> keys,
                                               std::string_view instance_id,
                                               PredictedTable::Clock::time_point now) {
  std::vector<PredictedPrefix> out;
  if (keys.empty() || table.stats().entries == 0) return out;
  for (PredictedMatch& m : table.Matches(context, keys, now)) {
    if (!instance_id.empty() && m.holder.id != instance_id) continue;
    out.push_back({std::move(m.holder.id), m.holder.dp_rank, m.blocks});
  }
  return out;
}

}  // namespace kvatlas::client_internal
