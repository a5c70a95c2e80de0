// A LocalIndex's predictions (LocalIndexOptions::predictions, docs/feed.md §LocalIndex):
// what the change feed's predicted records say, kept in a PredictedTable (the server's own,
// common/internal/predicted_table.h) so that a lookup over the replica credits them as the
// server's route does. The server publishes only what its table recorded (the live-stream
// rule and its cap applied there), so a replica records every predicted record it gets,
// each until its expires_at_ms on this process's clock, and drops a holder's predictions on
// that holder's stored, removed and cleared records, as the server does on its events.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "common/internal/predicted_table.h"
#include "kvatlas/common/feed.h"
#include "kvatlas/common/lookup.h"

namespace kvatlas::client_internal {

// Applies `record`'s effect on predictions to `table` at `now`: a predicted record is
// recorded (until its expires_at_ms); a stored, removed or cleared record drops its
// holder's predictions; others change nothing.
void ApplyToPredictions(const FeedRecord& record, PredictedTable* table,
                        PredictedTable::Clock::time_point now);

// The predicted prefixes of `keys` in `context` at `now` (LookupAnswer::predicted): one per
// holder with blocks > 0, by holder; only `instance_id`'s when it is not empty.
[[nodiscard]] std::vector<PredictedPrefix> PredictedPrefixes(const PredictedTable& table,
                                                             const ContextKey& context,
                                                             std::span<const BlockKey> keys,
                                                             std::string_view instance_id,
                                                             PredictedTable::Clock::time_point now);

}  // namespace kvatlas::client_internal
