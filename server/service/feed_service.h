// The change feed as clients follow it (docs/feed.md): a watch of the records after a
// revision, and a context's copies at one revision, so that a client can list, then watch
// from that revision, and miss nothing. Serves GET /v1/watch and /v1/snapshot and the binary
// kWatch and kSnapshot. Safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvatlas/common/feed.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"
#include "server/feed/change_feed.h"
#include "server/service/services.h"

namespace kvatlas::server {

// A watcher of the records after `from` (nullopt = from now) that pass `filter`.
// kUnavailable without a change feed; the feed's errors otherwise (kCompacted when `from`
// is older than what it keeps).
[[nodiscard]] Result<std::unique_ptr<Watcher>> Subscribe(const Services& services,
                                                         std::optional<Revision> from,
                                                         FeedFilter filter);

// One copy of a context snapshot: its holder interned (a context has few holders and up to
// millions of copies), no per-copy context.
struct SnapshotRow {
  BlockKey key = 0;
  uint32_t holder = 0;  // index into ContextSnapshot::holders
  Tier tier = Tier::kGpu;
  uint32_t depth = 0;
  uint32_t refcount = 0;
  uint64_t engine_hash = 0;
  std::string location;
};

struct ContextSnapshot {
  Revision revision = 0;
  ContextKey context;
  std::vector<HolderKey> holders;
  std::vector<SnapshotRow> rows;  // blocks in creation order, each block's copies together
};

// Every copy in `context` at one revision, copied under the read lock (callers encode after
// it: the applying thread waits only for the copy). kPayloadTooLarge past
// options.max_snapshot_copies.
[[nodiscard]] Result<ContextSnapshot> SnapshotContext(const Services& services,
                                                      const ContextKey& context);

}  // namespace kvatlas::server
