#include "server/replication/fsm_adapter.h"

extern "C" {
#include <raft.h>
}

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/chunked_bytes.h"
#include "common/internal/log.h"

namespace kvatlas::server {

FsmAdapter::FsmAdapter(LogStateMachine* machine, bool async_snapshots, size_t apply_queue)
    : machine_(machine), async_(async_snapshots), fsm_(std::make_unique<struct raft_fsm>()) {
  if (apply_queue > 0) apply_thread_ = std::make_unique<ApplyThread>(machine, apply_queue);
  std::memset(fsm_.get(), 0, sizeof(struct raft_fsm));
  fsm_->version = async_ ? 3 : 2;
  fsm_->data = this;
  fsm_->apply = &FsmAdapter::Apply;
  fsm_->snapshot = &FsmAdapter::Snapshot;
  fsm_->snapshot_finalize = &FsmAdapter::SnapshotFinalize;
  if (async_) fsm_->snapshot_async = &FsmAdapter::SnapshotAsync;
  fsm_->restore = &FsmAdapter::Restore;
}

FsmAdapter::~FsmAdapter() = default;

bool FsmAdapter::failed() const {
  return failed_.load(std::memory_order_acquire) || (apply_thread_ && apply_thread_->failed());
}

void FsmAdapter::WhenApplied(uint64_t index, std::function<void(Status)> done) {
  if (apply_thread_) {
    apply_thread_->WhenApplied(index, std::move(done));
  } else if (failed()) {
    done(NotAppliedHere(index, /*failed=*/true));
  } else {
    done(Status::Ok());
  }
}

uint64_t FsmAdapter::applied_index() const {
  const uint64_t handed_over = raft_last_applied(raft_);
  return apply_thread_ ? apply_thread_->AppliedIndexOr(handed_over) : handed_over;
}

void FsmAdapter::StopApplying() {
  if (apply_thread_) apply_thread_->Stop();
}

uint64_t FsmAdapter::TakeLongestApplyMs() {
  return apply_thread_ ? apply_thread_->TakeLongestApplyMs() : std::exchange(longest_apply_ms_, 0);
}

int FsmAdapter::Apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
  auto* self = static_cast<FsmAdapter*>(fsm->data);
  *result = nullptr;
  // Inside apply, the entry's index is the last applied one plus one (barrier and
  // configuration entries advance last_applied without reaching the FSM); the fixture
  // tests check it against raft_apply's req->index.
  const uint64_t index = raft_last_applied(self->raft_) + 1;
  if (self->failed()) return 0;
  if (self->apply_thread_) {
    self->apply_thread_->Enqueue(index, std::string(static_cast<const char*>(buf->base), buf->len));
    return 0;
  }
  uint64_t took = 0;
  const Status s =
      ApplyCommittedEntry(self->machine_, index,
                          std::string_view(static_cast<const char*>(buf->base), buf->len), &took);
  self->longest_apply_ms_ = std::max(self->longest_apply_ms_, took);
  // Returning an error into 0.15's apply loop has no defined recovery: mark the adapter
  // failed instead.
  if (!s.ok()) self->failed_.store(true, std::memory_order_release);
  return 0;
}

int FsmAdapter::Snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n) {
  auto* self = static_cast<FsmAdapter*>(fsm->data);
  *bufs = nullptr;
  *n = 0;
  // 0.15 takes the snapshot at its last applied index: the state must be there.
  if (self->apply_thread_) self->apply_thread_->Drain();
  if (self->failed()) return RAFT_IOERR;
  self->snapshot_started_ = std::chrono::steady_clock::now();
  Result<std::unique_ptr<LogStateMachine::Capture>> capture = self->machine_->CaptureState();
  if (!capture.has_value()) {
    LogWarning("snapshot: " + capture.error().ToString());
    return RAFT_IOERR;
  }
  self->capture_ = std::move(*capture);
  if (self->on_snapshot_taken_) self->on_snapshot_taken_();
  return self->async_ ? 0 : self->Serialize(bufs, n);
}

int FsmAdapter::SnapshotAsync(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n) {
  return static_cast<FsmAdapter*>(fsm->data)->Serialize(bufs, n);
}

int FsmAdapter::Serialize(struct raft_buffer* bufs[], unsigned* n) {
  if (!capture_) return RAFT_IOERR;
  // libraft writes a taken snapshot from any number of buffers (and reads one back whole),
  // so the serialisation goes straight into raft_malloc'd chunks: the state is in memory
  // once, not once as a string and again as libraft's copy of it.
  ChunkedBytes chunks(kSnapshotChunkBytes, &raft_malloc, &raft_free);
  const Status s = capture_->SerializeInto(&chunks);
  if (!s.ok()) {
    LogWarning("snapshot: " + s.ToString());
    return s.code() == StatusCode::kResourceExhausted ? RAFT_NOMEM : RAFT_IOERR;
  }
  // Never empty: the encoding starts with a header. Allocated before the chunks are taken,
  // so that a failure here still frees them.
  auto* array = static_cast<struct raft_buffer*>(
      raft_malloc(chunks.chunks().size() * sizeof(struct raft_buffer)));
  if (array == nullptr) return RAFT_NOMEM;
  last_snapshot_bytes_.store(chunks.size(), std::memory_order_relaxed);
  const std::vector<ChunkedBytes::Chunk> taken = chunks.Take();
  for (size_t i = 0; i < taken.size(); ++i) {
    array[i].base = taken[i].data;
    array[i].len = taken[i].size;
  }
  *bufs = array;
  *n = static_cast<unsigned>(taken.size());
  return 0;
}

int FsmAdapter::SnapshotFinalize(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n) {
  auto* self = static_cast<FsmAdapter*>(fsm->data);
  if (*bufs != nullptr) {
    for (unsigned i = 0; i < *n; ++i) raft_free((*bufs)[i].base);
    raft_free(*bufs);
  }
  *bufs = nullptr;
  *n = 0;
  if (self->capture_) {
    self->capture_.reset();
    self->NoteSnapshotOutcome();
    self->snapshots_taken_.fetch_add(1, std::memory_order_relaxed);
    self->snapshot_duration_.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - self->snapshot_started_)
            .count());
  }
  return 0;
}

void FsmAdapter::NoteSnapshotOutcome() {
  if (raft_ == nullptr) return;
  // libraft calls finalize from the snapshot's completion, after it moved the log's
  // snapshot index to the one taken -- or did not, on a failed write (0.15 only traces
  // that: a 2 GiB snapshot, a full disk, an I/O error, a failed serialisation).
  // A snapshot that raft_close cancelled (the server stops while it is being written) is
  // not a failure: the next start takes another.
  if (raft_->state == RAFT_UNAVAILABLE) return;
  const uint64_t index = raft_->snapshot.pending.index;
  if (raft_->log.snapshot.last_index >= index) {
    failed_snapshot_index_.store(0, std::memory_order_relaxed);
    return;
  }
  snapshot_failures_.fetch_add(1, std::memory_order_relaxed);
  failed_snapshot_index_.store(index, std::memory_order_relaxed);
  LogWarning("raft snapshot at index " + std::to_string(index) +
             " was not written (the log's snapshot is still at index " +
             std::to_string(raft_->log.snapshot.last_index) +
             "): the log is not compacted and keeps growing until a snapshot succeeds "
             "(docs/replication.md §Known limits)");
}

void FsmAdapter::ReadSnapshotMetrics(LogMetrics* out) const {
  out->snapshot_failures = snapshot_failures_.load(std::memory_order_relaxed);
  out->failed_snapshot_index = failed_snapshot_index_.load(std::memory_order_relaxed);
  out->snapshots_taken = snapshots_taken_.load(std::memory_order_relaxed);
  out->snapshot_duration = snapshot_duration_.Read();
  out->last_snapshot_bytes = last_snapshot_bytes_.load(std::memory_order_relaxed);
  out->snapshots_restored = snapshots_restored_.load(std::memory_order_relaxed);
  out->restore_duration = restore_duration_.Read();
}

int FsmAdapter::Restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
  auto* self = static_cast<FsmAdapter*>(fsm->data);
  if (self->apply_thread_) self->apply_thread_->Drain();
  const auto started = std::chrono::steady_clock::now();
  // The snapshot libraft loads as it starts (or a leader installs) counts as the last one
  // here until this server takes its own: a restarted server's SnapshotGuard must not see 0.
  self->last_snapshot_bytes_.store(buf->len, std::memory_order_relaxed);
  Status s =
      self->machine_->Restore(std::string_view(static_cast<const char*>(buf->base), buf->len));
  raft_free(buf->base);
  if (!s.ok()) {
    LogError("restoring a snapshot: " + s.ToString());
    self->failed_.store(true, std::memory_order_release);
    return RAFT_IOERR;
  }
  self->snapshots_restored_.fetch_add(1, std::memory_order_relaxed);
  self->restore_duration_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

}  // namespace kvatlas::server
