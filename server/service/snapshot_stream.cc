#include "server/service/snapshot_stream.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "kvatlas/common/protocol.h"
#include "server/service/replica_audit_service.h"
#include "server/storage/context_scan.h"

namespace kvatlas::server {
namespace {

// Pages the scanning thread keeps ready ahead of the consumer.
constexpr size_t kQueuedPages = 2;
// About a copy's encoded bytes besides its location (docs/protocol.md §kSnapshot: key,
// holder, tier, depth, refcount, engine hash), for the page byte bound: a full page of
// copies without locations is 65,536 copies, 2 MiB.
constexpr size_t kRowBytes = 32;

// Adds a row to `page`, interning its holder in the page's table.
void AddRow(ContextSnapshot* page, std::unordered_map<HolderKey, uint32_t, HolderKeyHash>* index,
            SnapshotRow row, const HolderKey& holder) {
  const auto [it, added] = index->try_emplace(holder, static_cast<uint32_t>(page->holders.size()));
  if (added) page->holders.push_back(holder);
  row.holder = it->second;
  page->rows.push_back(std::move(row));
}

}  // namespace

// Fills pages from the scan and hands them to the stream's queue, waiting for room.
class SnapshotStream::Scanner final : public ContextScanVisitor {
 public:
  explicit Scanner(SnapshotStream* stream) : stream_(stream) { Reset(); }

  Status OnRevision(Revision revision) override {
    stream_->revision_ = revision;  // read by the consumer after the first page (mu_)
    page_.copies.revision = revision;
    return Status::Ok();
  }

  Status OnCopy(BlockKey key, const HolderKey& holder, Tier tier, uint32_t depth, uint32_t refcount,
                uint64_t engine_hash, std::string_view location) override {
    AddRow(&page_.copies, &holders_,
           SnapshotRow{key, 0, tier, depth, refcount, engine_hash, std::string(location)}, holder);
    bytes_ += kRowBytes + location.size();
    if (page_.copies.rows.size() >= stream_->page_copies_ || bytes_ >= kSnapshotPageBytes) {
      return Flush(/*last=*/false);
    }
    return Status::Ok();
  }

  bool Cancelled() const override { return stream_->cancelled_.load(); }

  // Hands the page over (waiting for room in the queue); kCancelled once the stream stops.
  Status Flush(bool last) {
    page_.last = last;
    {
      std::unique_lock lock(stream_->mu_);
      stream_->cv_.wait(
          lock, [this] { return stream_->stopping_ || stream_->ready_.size() < kQueuedPages; });
      if (stream_->stopping_) return Status(StatusCode::kCancelled, "the snapshot was abandoned");
      stream_->ready_.push_back(std::move(page_));
    }
    stream_->cv_.notify_all();
    if (stream_->notify_) stream_->notify_();
    const Revision revision = page_.copies.revision;
    Reset();
    page_.copies.revision = revision;
    return Status::Ok();
  }

 private:
  void Reset() {
    page_ = SnapshotPage{};
    page_.copies.context = stream_->context_;
    holders_.clear();
    bytes_ = 0;
  }

  SnapshotStream* stream_;
  SnapshotPage page_;
  std::unordered_map<HolderKey, uint32_t, HolderKeyHash> holders_;
  size_t bytes_ = 0;
};

SnapshotStream::SnapshotStream(const Services& services, ContextKey context,
                               std::function<void()> notify, std::shared_ptr<void> slot)
    : context_(std::move(context)),
      page_copies_(std::clamp<size_t>(services.options.snapshot_page_copies, 1,
                                      protocol::kMaxSnapshotPartCopies)),
      notify_(std::move(notify)),
      slot_(std::move(slot)) {}

Result<std::shared_ptr<void>> TakeSnapshotStreamSlot(const Services& services) {
  const std::shared_ptr<std::atomic<size_t>>& open = services.snapshot_streams;
  const size_t limit = services.options.max_snapshot_streams;
  if (open->fetch_add(1) >= limit) {
    open->fetch_sub(1);
    return Status::ResourceExhausted(
        "too many snapshot streams open on this server (the limit, "
        "max_snapshot_streams, is " +
        std::to_string(limit) + "); retry when one has finished");
  }
  return std::shared_ptr<void>(nullptr, [open](void*) { open->fetch_sub(1); });
}

Result<std::unique_ptr<SnapshotStream>> SnapshotStream::Open(const Services& all,
                                                             const ContextKey& context,
                                                             std::function<void()> notify) {
  const Services& services = ServicesFor(all, context);  // the context's group
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  KVATLAS_ASSIGN_OR_RETURN(std::shared_ptr<void> slot, TakeSnapshotStreamSlot(services));
  std::unique_ptr<SnapshotStream> stream(
      new SnapshotStream(services, context, std::move(notify), std::move(slot)));
  if (services.storage == nullptr) {
    KVATLAS_ASSIGN_OR_RETURN(ContextSnapshot copy, SnapshotContext(services, context));
    stream->revision_ = copy.revision;
    stream->copy_ = std::move(copy);
    return stream;
  }
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage::Capture> capture,
                           services.storage->CaptureAll());
  stream->thread_ =
      std::thread([s = stream.get(), c = std::move(capture)]() mutable { s->Scan(std::move(c)); });
  return stream;
}

SnapshotStream::~SnapshotStream() {
  cancelled_ = true;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SnapshotStream::Scan(std::unique_ptr<Storage::Capture> capture) {
  Scanner scanner(this);
  Status status = ScanContext(*capture, context_, &scanner);
  if (status.ok()) status = scanner.Flush(/*last=*/true);
  if (status.ok() || status.code() == StatusCode::kCancelled) return;
  {
    std::lock_guard lock(mu_);
    failed_ = std::move(status);
  }
  cv_.notify_all();
  if (notify_) notify_();
}

SnapshotPage SnapshotStream::SliceCopy() {
  SnapshotPage page;
  ContextSnapshot& from = *copy_;
  page.copies.revision = from.revision;
  page.copies.context = from.context;
  std::unordered_map<HolderKey, uint32_t, HolderKeyHash> holders;
  size_t bytes = 0;
  while (copy_next_ < from.rows.size() && page.copies.rows.size() < page_copies_ &&
         bytes < kSnapshotPageBytes) {
    SnapshotRow& row = from.rows[copy_next_++];
    bytes += kRowBytes + row.location.size();
    const HolderKey& holder = from.holders[row.holder];
    AddRow(&page.copies, &holders, std::move(row), holder);
  }
  page.last = copy_next_ == from.rows.size();
  return page;
}

Result<std::optional<SnapshotPage>> SnapshotStream::TryNext() {
  if (finished_) return Status::FailedPrecondition("the snapshot stream has ended");
  if (copy_) {
    SnapshotPage page = SliceCopy();
    finished_ = page.last;
    return std::optional<SnapshotPage>(std::move(page));
  }
  std::optional<SnapshotPage> page;
  {
    std::lock_guard lock(mu_);
    if (!ready_.empty()) {
      page = std::move(ready_.front());
      ready_.pop_front();
    } else if (failed_) {
      finished_ = true;
      return *failed_;
    }
  }
  if (page) {
    cv_.notify_all();  // room for the scanner
    finished_ = page->last;
  }
  return page;
}

Result<SnapshotPage> SnapshotStream::Next() {
  for (;;) {
    KVATLAS_ASSIGN_OR_RETURN(std::optional<SnapshotPage> page, TryNext());
    if (page) return std::move(*page);
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return !ready_.empty() || failed_.has_value(); });
  }
}

}  // namespace kvatlas::server
