// SnapshotStream: one context's copies at one revision, produced page by page as the
// consumer takes them (GET /v1/snapshot, the binary kSnapshot; docs/feed.md §Snapshots).
//
// With storage, the stream pins a RocksDB snapshot (Storage::CaptureAll: the state after
// exactly one applied revision, which is the stream's revision) and a thread of its own
// scans it (server/storage/context_scan.h) into a queue of at most two pages; it waits
// while the queue is full, so a stream holds at most ~3 pages of memory however large the
// context, and no lock of the state at all. An in-memory server (tests) copies the context
// under the state's read lock instead, bounded by max_snapshot_copies.
//
// At most options.max_snapshot_streams streams are open per server (they share
// Services::snapshot_streams, TakeSnapshotStreamSlot): Open answers kResourceExhausted past
// it.
//
// Thread-safety: one consumer thread at a time; `notify` is called from the scanning thread
// (keep it short: it must not call back into the stream).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "kvatlas/common/result.h"
#include "kvatlas/common/types.h"
#include "server/service/feed_service.h"
#include "server/service/services.h"

namespace kvatlas::server {

// One page: at most options.snapshot_page_copies rows (and about kSnapshotPageBytes of
// locations), its holders interned per page.
struct SnapshotPage {
  ContextSnapshot copies;  // revision and context: the stream's
  bool last = false;
};

// One of this server's max_snapshot_streams slots (a local snapshot stream's, or a relayed
// one's: forwarding.h StreamFromMember), freed when the last copy of the handle goes;
// kResourceExhausted when every slot is taken.
[[nodiscard]] Result<std::shared_ptr<void>> TakeSnapshotStreamSlot(const Services& services);

class SnapshotStream {
 public:
  // Byte bound of one page's rows (locations can be long), besides the copy count.
  static constexpr size_t kSnapshotPageBytes = 2u << 20;

  // Starts listing `context`. `notify` (may be empty) is called whenever a page becomes
  // ready or the scan ends, from the scanning thread.
  [[nodiscard]] static Result<std::unique_ptr<SnapshotStream>> Open(const Services& services,
                                                                    const ContextKey& context,
                                                                    std::function<void()> notify);
  // Stops the scan (waiting for its thread) and frees the stream's slot.
  ~SnapshotStream();
  SnapshotStream(const SnapshotStream&) = delete;
  SnapshotStream& operator=(const SnapshotStream&) = delete;

  // The next page if one is ready; nullopt when none is yet (notify will be called). The
  // scan's error (kCorruption, kIOError) once the pages before it were taken. Not after the
  // last page.
  [[nodiscard]] Result<std::optional<SnapshotPage>> TryNext();
  // The next page, waiting for it.
  [[nodiscard]] Result<SnapshotPage> Next();

  // The stream's revision, known once its first page is ready.
  Revision revision() const { return revision_.load(); }

 private:
  class Scanner;
  SnapshotStream(const Services& services, ContextKey context, std::function<void()> notify,
                 std::shared_ptr<void> slot);
  void Scan(std::unique_ptr<Storage::Capture> capture);
  // Page slicing of an in-memory copy.
  SnapshotPage SliceCopy();

  const ContextKey context_;
  const size_t page_copies_;
  std::function<void()> notify_;
  std::atomic<Revision> revision_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SnapshotPage> ready_;      // guarded by mu_; at most kQueuedPages
  std::optional<Status> failed_;        // guarded by mu_: the scan's error
  bool stopping_ = false;               // guarded by mu_
  std::atomic<bool> cancelled_{false};  // stopping_, read by the scan without mu_
  bool finished_ = false;               // the last page was taken

  // In-memory servers: the whole copy, sliced on demand.
  std::optional<ContextSnapshot> copy_;
  size_t copy_next_ = 0;

  std::thread thread_;
  // Released after the destructor's body has joined the scan.
  std::shared_ptr<void> slot_;
};

}  // namespace kvatlas::server
