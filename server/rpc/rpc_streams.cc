#include "server/rpc/rpc_streams.h"

#include <algorithm>
#include <exception>
#include <utility>

namespace kvatlas::server {
namespace {

using protocol::MessageType;

// Marker, through and a record count: a WatchBatch's bytes before its records.
constexpr size_t kBatchHeaderBytes = 1 + 8 + 10;

// keys[begin, begin + n) of `r` (and their locations) as a record of their own: the same
// operation on a shorter run of keys, so a consumer applies the pieces as it would the
// whole.
FeedRecord Piece(const FeedRecord& r, size_t begin, size_t n) {
  FeedRecord piece{r.revision, r.op, r.context, r.holder, r.tier, {}, {}, r.expires_at_ms};
  piece.keys.assign(r.keys.begin() + static_cast<ptrdiff_t>(begin),
                    r.keys.begin() + static_cast<ptrdiff_t>(begin + n));
  if (!r.locations.empty()) {
    piece.locations.assign(r.locations.begin() + static_cast<ptrdiff_t>(begin),
                           r.locations.begin() + static_cast<ptrdiff_t>(begin + n));
  }
  return piece;
}

}  // namespace

RpcStreams::RpcStreams(const Services* services, size_t max_watches)
    : services_(services), max_watches_(max_watches) {}

RpcStreams::~RpcStreams() = default;

RpcStreams::Handled RpcStreams::Handle(const protocol::Frame& request, std::string* out) {
  // Exceptions (allocation failure, a bug below) stop here, as in RpcHandler::Handle.
  try {
    if (request.header.type == MessageType::kWatch) return HandleWatch(request, out);
    return HandleSnapshot(request, out);
  } catch (const std::exception& e) {
    AppendError(request.header.type, request.header.request_id,
                Status::Internal(std::string("request failed: ") + e.what()), out);
    return Handled::kAnswered;
  }
}

RpcStreams::Handled RpcStreams::HandleWatch(const protocol::Frame& request, std::string* out) {
  const uint64_t id = request.header.request_id;
  Result<protocol::WatchRequest> decoded = protocol::DecodeWatchRequest(request.payload);
  if (!decoded.has_value()) {
    AppendError(MessageType::kWatch, id, decoded.error(), out);
    return Handled::kAnswered;
  }
  const auto open = watches_.find(id);
  if (decoded->cancel) {
    // The watch may have ended already (a cut crossing the cancel): its final frame was
    // sent, and a second one would be a frame of a finished request.
    if (open == watches_.end()) return Handled::kIgnored;
    const Revision through = open->second.watcher->ResumeFrom();
    watches_.erase(open);
    AppendOk(MessageType::kWatch, id, protocol::EncodeWatchBatch({true, through, {}}), out);
    Count(MessageType::kWatch, StatusCode::kOk);
    return Handled::kAnswered;
  }
  if (open != watches_.end()) {
    // One id, one stream: the open watch ends, with this error as its final frame.
    const Revision through = open->second.watcher->ResumeFrom();
    watches_.erase(open);
    AppendEnd(id,
              Status::InvalidArgument("request id " + std::to_string(id) +
                                      " already names an open watch on this connection"),
              {through, std::nullopt, std::nullopt}, out);
    return Handled::kAnswered;
  }
  if (Status started = StartWatch(id, *decoded, out); !started.ok()) {
    protocol::WatchEndHint hint;
    if (started.code() == StatusCode::kCompacted && services_->feed != nullptr) {
      const FeedStats stats = services_->feed->Stats();
      hint.oldest_revision = stats.compacted_through;
      hint.current_revision = stats.revision;
    }
    AppendEnd(id, started, hint, out);
  }
  return Handled::kAnswered;
}

Status RpcStreams::StartWatch(uint64_t request_id, const protocol::WatchRequest& request,
                              std::string* out) {
  if (watches_.size() >= max_watches_) {
    return Status::ResourceExhausted("too many watches on this connection (" +
                                     std::to_string(watches_.size()) + "); the limit is " +
                                     std::to_string(max_watches_));
  }
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Watcher> watcher,
                           Subscribe(*services_, request.from, request.filter));
  // The answer: the revision the watch starts after (the current one for "from now").
  AppendOk(MessageType::kWatch, request_id,
           protocol::EncodeWatchBatch({false, watcher->ResumeFrom(), {}}), out);
  Count(MessageType::kWatch, StatusCode::kOk);
  Watch& watch = watches_[request_id];
  watch.serial = next_serial_++;
  watch.watcher = std::move(watcher);
  // Runs on the applying thread (or here, at once, for a backlog): only wake the strand.
  watch.watcher->SetNotify([wake = wake_, request_id, serial = watch.serial] {
    if (wake) wake(request_id, serial);
  });
  return Status::Ok();
}

RpcStreams::Handled RpcStreams::HandleSnapshot(const protocol::Frame& request, std::string* out) {
  const uint64_t id = request.header.request_id;
  Result<protocol::SnapshotRequest> decoded = protocol::DecodeSnapshotRequest(request.payload);
  if (!decoded.has_value()) {
    AppendError(MessageType::kSnapshot, id, decoded.error(), out);
    return Handled::kAnswered;
  }
  // Streamed (snapshot_stream.h): pages are read as the client drains them; the stream's
  // thread wakes the strand when one is ready.
  auto ready = std::make_shared<std::atomic<bool>>(false);
  const uint64_t serial = next_serial_++;
  Result<std::unique_ptr<SnapshotStream>> stream =
      SnapshotStream::Open(*services_, decoded->context, [wake = wake_, ready, id, serial] {
        ready->store(true);
        if (wake) wake(id, serial);
      });
  if (!stream.has_value()) {
    AppendError(MessageType::kSnapshot, id, stream.error(), out);
    return Handled::kAnswered;
  }
  ready->store(true);  // an in-memory copy is ready at once; a scan's first try costs nothing
  Snapshot snapshot;
  snapshot.request_id = id;
  snapshot.stream = std::move(stream).value();
  snapshot.ready = std::move(ready);
  snapshots_.push_back(std::move(snapshot));
  return Handled::kPending;
}

void RpcStreams::OnReady(uint64_t request_id, uint64_t serial) {
  const auto it = watches_.find(request_id);
  if (it != watches_.end() && it->second.serial == serial) it->second.ready = true;
}

bool RpcStreams::pending() const {
  if (std::any_of(snapshots_.begin(), snapshots_.end(),
                  [](const Snapshot& s) { return s.ready->load(); })) {
    return true;
  }
  return std::any_of(watches_.begin(), watches_.end(),
                     [](const auto& entry) { return entry.second.ready; });
}

size_t RpcStreams::Produce(size_t budget, std::string* out) {
  size_t finished = 0;
  bool progress = true;
  while (progress && out->size() < budget) {
    progress = false;
    // One step of every ready watch, starting after the one served last, so that a busy
    // watch cannot starve the others of the budget.
    auto it = watches_.upper_bound(resume_after_);
    for (size_t n = watches_.size(); n > 0 && out->size() < budget; --n) {
      if (it == watches_.end()) it = watches_.begin();
      if (it == watches_.end()) break;
      const auto next = std::next(it);
      if (it->second.ready) {
        resume_after_ = it->first;
        ProduceWatch(it, out);
        progress = true;
      }
      it = next;
    }
    // One part of every snapshot with one ready.
    for (auto s = snapshots_.begin(); s != snapshots_.end() && out->size() < budget;) {
      bool produced = false;
      const bool ended = ProducePart(*s, &produced, out);
      progress = progress || produced;
      if (ended) {
        s = snapshots_.erase(s);
        ++finished;
      } else {
        ++s;
      }
    }
  }
  return finished;
}

void RpcStreams::ProduceWatch(std::map<uint64_t, Watch>::iterator it, std::string* out) {
  const uint64_t id = it->first;
  Watcher& watcher = *it->second.watcher;
  const Revision before = watcher.ResumeFrom();
  Result<Watcher::Take> take = watcher.TryTake(kTakeKeys);
  if (!take.has_value()) {
    // Cut (it fell behind: what was queued before has been sent) or the feed shut down.
    AppendEnd(id, take.error(), {watcher.ResumeFrom(), std::nullopt, std::nullopt}, out);
    watches_.erase(it);
    return;
  }
  it->second.ready = take->more;
  if (take->records.empty() && take->through == before) return;
  AppendRecords(id, std::move(*take), out);
}

void RpcStreams::AppendRecords(uint64_t request_id, Watcher::Take take, std::string* out) {
  protocol::WatchBatch batch;
  size_t bytes = kBatchHeaderBytes;
  const auto add = [&](FeedRecord piece) {
    const size_t piece_bytes = protocol::WatchRecordBytes(piece);
    if (!batch.records.empty() && bytes + piece_bytes > kWatchFrameBytes) {
      // Every revision before this piece's is complete (the take holds whole revisions,
      // after everything sent before); the piece's own may continue in the next frame.
      batch.through = piece.revision - 1;
      AppendOk(protocol::MessageType::kWatch, request_id, protocol::EncodeWatchBatch(batch), out);
      batch.records.clear();
      bytes = kBatchHeaderBytes;
    }
    bytes += piece_bytes;
    batch.records.push_back(std::move(piece));
  };
  for (FeedRecord& record : take.records) {
    if (record.keys.size() <= kMaxRecordKeys &&
        protocol::WatchRecordBytes(record) <= kWatchFrameBytes) {
      add(std::move(record));
      continue;
    }
    // Pieces of at most kMaxRecordKeys keys and about kWatchFrameBytes (long locations).
    for (size_t begin = 0; begin < record.keys.size();) {
      size_t n = 0;
      size_t piece_bytes = 0;
      while (begin + n < record.keys.size() && n < kMaxRecordKeys) {
        const size_t key_bytes =
            8 + (record.locations.empty() ? 0 : 10 + record.locations[begin + n].size());
        if (n > 0 && piece_bytes + key_bytes > kWatchFrameBytes) break;
        piece_bytes += key_bytes;
        ++n;
      }
      add(Piece(record, begin, n));
      begin += n;
    }
  }
  batch.through = take.through;
  AppendOk(protocol::MessageType::kWatch, request_id, protocol::EncodeWatchBatch(batch), out);
}

bool RpcStreams::ProducePart(Snapshot& snapshot, bool* produced, std::string* out) {
  *produced = false;
  if (!snapshot.ready->exchange(false)) return false;
  Result<std::optional<SnapshotPage>> next = snapshot.stream->TryNext();
  if (!next.has_value()) {
    // The scan failed (the parts sent so far are abandoned: the client's call fails).
    AppendError(MessageType::kSnapshot, snapshot.request_id, next.error(), out);
    return true;
  }
  if (!next->has_value()) return false;  // not ready yet: the stream wakes us
  snapshot.ready->store(true);           // maybe more queued: the next step tries again
  *produced = true;
  SnapshotPage& page = **next;
  protocol::SnapshotPart part;
  part.revision = page.copies.revision;
  part.part = snapshot.part++;
  part.context = page.copies.context;
  part.copies.reserve(page.copies.rows.size());
  for (SnapshotRow& row : page.copies.rows) {
    protocol::SnapshotCopy& c = part.copies.emplace_back();
    c.key = row.key;
    c.copy.context = ContextKey{"", "", "", 0, ""};  // the part's, not sent per copy
    c.copy.holder = page.copies.holders[row.holder];
    c.copy.tier = row.tier;
    c.copy.depth = row.depth;
    c.copy.refcount = row.refcount;
    c.copy.engine_hash = row.engine_hash;
    c.copy.location = std::move(row.location);
  }
  part.last = page.last;
  AppendOk(MessageType::kSnapshot, snapshot.request_id, protocol::EncodeSnapshotPart(part), out);
  if (part.last) Count(MessageType::kSnapshot, StatusCode::kOk);
  return part.last;
}

void RpcStreams::EndWatches(const Status& status, std::string* out) {
  for (const auto& [id, watch] : watches_) {
    AppendEnd(id, status, {watch.watcher->ResumeFrom(), std::nullopt, std::nullopt}, out);
  }
  watches_.clear();
}

void RpcStreams::KeepAlive(std::string* out) {
  for (const auto& [id, watch] : watches_) {
    AppendOk(MessageType::kWatch, id,
             protocol::EncodeWatchBatch({false, watch.watcher->ResumeFrom(), {}}), out);
  }
}

void RpcStreams::Clear() {
  watches_.clear();
  snapshots_.clear();
}

void RpcStreams::AppendOk(MessageType type, uint64_t request_id, std::string_view payload,
                          std::string* out) const {
  protocol::FrameHeader header;
  header.type = type;
  header.flags = protocol::kFlagResponse;
  header.request_id = request_id;
  protocol::AppendFrame(header, payload, out);
}

void RpcStreams::AppendEnd(uint64_t request_id, const Status& status,
                           const protocol::WatchEndHint& hint, std::string* out) const {
  protocol::FrameHeader header;
  header.type = MessageType::kWatch;
  header.flags = protocol::kFlagResponse;
  header.status = status.code();
  header.request_id = request_id;
  protocol::AppendFrame(header, protocol::EncodeWatchEnd(status, hint), out);
  // A watch that started was counted then; its end (a cut, shutdown) is not a second answer.
  if (!hint.resume_from) Count(MessageType::kWatch, status.code());
}

void RpcStreams::AppendError(MessageType type, uint64_t request_id, const Status& status,
                             std::string* out) const {
  protocol::FrameHeader header;
  header.type = type;
  header.flags = protocol::kFlagResponse;
  header.status = status.code();
  header.request_id = request_id;
  protocol::AppendFrame(header, protocol::EncodeErrorPayload(status), out);
  Count(type, status.code());
}

void RpcStreams::Count(MessageType type, StatusCode code) const {
  if (services_->metrics != nullptr)
    services_->metrics->RecordRpcRequest(static_cast<uint8_t>(type), code);
}

}  // namespace kvatlas::server
