// The change feed over the binary protocol, client side (docs/feed.md §Binary watch):
// Client::Snapshot assembles a context's snapshot from its parts; Client::Watch starts a
// watch whose pushed frames WatchStream::State queues (bounded) for Next. Both are stream
// calls of Client::Impl: their frames arrive in order on the I/O thread.
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/src/client_impl.h"
#include "kvatlas/client/client.h"

namespace kvatlas {

using protocol::MessageType;

// What a WatchStream and its call's frame callback share. The callback runs on the client's
// I/O thread; Next/ResumeFrom/Cancel on the application's threads.
class KVATLAS_NO_EXPORT WatchStream::State {
 public:
  State(Client::Impl* impl, uint64_t id, size_t max_queued_keys)
      : impl_(impl), id_(id), max_queued_keys_(max_queued_keys) {}

  // The watch's first frame (or its failure): what Client::Watch returns.
  std::future<Status> Started() { return started_.get_future(); }

  // Every frame of the call, and its failure (the I/O thread).
  void OnFrame(Result<protocol::Frame> frame) {
    // Decoded before locking: Next is not held up by it.
    Result<protocol::WatchBatch> batch = Status::Internal("not a batch");
    if (frame.has_value() && frame->header.status == StatusCode::kOk) {
      batch = protocol::DecodeWatchBatch(frame->payload);
    }
    std::lock_guard lock(mu_);
    if (!frame.has_value()) {
      transport_done_ = true;
      End(frame.error());
      return;
    }
    if (protocol::IsFinalStreamFrame(frame->header.status, frame->payload)) {
      transport_done_ = true;
    }
    if (frame->header.status != StatusCode::kOk) {
      // The hint's resume_from is the server's view of ResumeFrom(); ours is exact already.
      End(protocol::DecodeWatchEnd(frame->header.status, frame->payload).status);
      return;
    }
    if (!batch.has_value()) {
      Fail("malformed watch frame from the server: " + batch.error().message());
      return;
    }
    if (batch->final) {
      End(Status(StatusCode::kCancelled, "the watch was cancelled"));
      return;
    }
    if (!started_set_) {
      // The answer: the revision the watch starts after.
      started_set_ = true;
      through_ = delivered_ = batch->through;
      started_.set_value(Status::Ok());
      return;
    }
    if (end_) return;  // cut or cancelled here: the server's frames until its end are moot
    Add(std::move(*batch));
  }

  Result<std::vector<FeedRecord>> Next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    // Also returns (empty) once revisions without matching records were passed, so that a
    // caller tracking ResumeFrom() sees them at once.
    cv_.wait_for(lock, timeout,
                 [this] { return !queue_.empty() || end_.has_value() || through_ > delivered_; });
    if (!queue_.empty()) {
      std::vector<FeedRecord> out = std::exchange(queue_, {});
      for (const FeedRecord& r : out) queued_keys_ -= r.keys.size();
      delivered_ = through_;
      return out;
    }
    if (end_) return *end_;
    delivered_ = through_;
    return std::vector<FeedRecord>();
  }

  Revision ResumeFrom() const {
    std::lock_guard lock(mu_);
    // Revisions completed without records count as delivered once nothing is queued.
    return queue_.empty() ? through_ : delivered_;
  }

  void Cancel() {
    std::lock_guard lock(mu_);
    if (!end_ || end_->code() != StatusCode::kCancelled) {
      end_ = Status(StatusCode::kCancelled, "the watch was cancelled (WatchStream::Cancel)");
    }
    queue_.clear();
    partial_.clear();
    queued_keys_ = 0;
    cv_.notify_all();
    CancelServer();
  }

  // Pings the server the watch reads from (its Impl), while the watch's call is registered.
  std::future<Status> Ping(Client::Timeout timeout) {
    auto promise = std::make_shared<std::promise<Status>>();
    std::future<Status> answered = promise->get_future();
    std::lock_guard lock(mu_);
    if (transport_done_ || end_) {
      promise->set_value(Status::Unavailable("the watch has ended"));
      return answered;
    }
    impl_->Call(MessageType::kPing, {}, timeout,
                [promise](Result<protocol::Frame> frame) { promise->set_value(frame.status()); });
    return answered;
  }

 private:
  // Queues a batch's records; those of revisions up to its `through` become available.
  // REQUIRES: mu_ held, started.
  void Add(protocol::WatchBatch batch) {
    if (batch.through < through_ ||
        (!batch.records.empty() && batch.records.front().revision <= through_) ||
        (!batch.records.empty() && !partial_.empty() &&
         batch.records.front().revision < partial_.back().revision)) {
      Fail("the server sent a watch frame out of order (through " + std::to_string(batch.through) +
           " after " + std::to_string(through_) + ")");
      return;
    }
    size_t keys = 0;
    for (const FeedRecord& r : batch.records) keys += r.keys.size();
    if (queued_keys_ + keys > max_queued_keys_) {
      // The application is not keeping up: end here (what is queued is still delivered)
      // rather than buffer without bound, and stop the server's watch.
      partial_.clear();
      End(Status(StatusCode::kWatchCut,
                 "the application fell behind (more than " + std::to_string(max_queued_keys_) +
                     " block keys queued for WatchStream::Next) and the watch was cut; watch "
                     "again from revision " +
                     std::to_string(through_)));
      return;
    }
    queued_keys_ += keys;
    for (FeedRecord& r : batch.records) partial_.push_back(std::move(r));
    // partial_ is in revision order: its complete revisions are a prefix.
    size_t complete = 0;
    while (complete < partial_.size() && partial_[complete].revision <= batch.through) ++complete;
    for (size_t i = 0; i < complete; ++i) queue_.push_back(std::move(partial_[i]));
    partial_.erase(partial_.begin(), partial_.begin() + static_cast<ptrdiff_t>(complete));
    const bool advanced = batch.through > through_;
    through_ = batch.through;
    if (complete > 0 || advanced) cv_.notify_all();
  }

  // The stream's terminal status (the first one wins). REQUIRES: mu_ held.
  void End(Status status) {
    if (!started_set_) {
      started_set_ = true;
      started_.set_value(std::move(status));
      end_ = Status(StatusCode::kCancelled, "the watch did not start");
      return;
    }
    if (end_) return;
    for (const FeedRecord& r : partial_) queued_keys_ -= r.keys.size();
    partial_.clear();  // an incomplete revision is never handed out
    end_ = std::move(status);
    cv_.notify_all();
    CancelServer();
  }

  void Fail(std::string message) {
    End(Status::Corruption(std::move(message)));
    CancelServer();
  }

  // Stops the server's watch unless the call is over. REQUIRES: mu_ held. impl_ is used
  // only while the call is registered: the Impl completes every call before it goes.
  void CancelServer() {
    if (transport_done_ || cancel_requested_) return;
    cancel_requested_ = true;
    impl_->CancelStream(id_);
  }

  Client::Impl* const impl_;
  const uint64_t id_;
  const size_t max_queued_keys_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::promise<Status> started_;
  bool started_set_ = false;
  bool transport_done_ = false;  // the call completed: impl_ must not be used
  bool cancel_requested_ = false;
  std::vector<FeedRecord> queue_;    // complete revisions, for Next
  std::vector<FeedRecord> partial_;  // records of a revision above through_ (more to come)
  size_t queued_keys_ = 0;           // keys in queue_ and partial_
  Revision through_ = 0;             // every revision up to it is in queue_ or delivered
  Revision delivered_ = 0;           // through_ when Next last returned records
  std::optional<Status> end_;
};

WatchStream::WatchStream(std::shared_ptr<State> state) : state_(std::move(state)) {}
WatchStream::~WatchStream() { state_->Cancel(); }

Result<std::vector<FeedRecord>> WatchStream::Next(std::chrono::milliseconds timeout) {
  return state_->Next(timeout);
}

Revision WatchStream::ResumeFrom() const { return state_->ResumeFrom(); }

Status WatchStream::Ping(std::chrono::milliseconds timeout) {
  return state_->Ping(std::chrono::duration_cast<Client::Timeout>(timeout)).get();
}

void WatchStream::Cancel() { state_->Cancel(); }

Result<std::unique_ptr<WatchStream>> Client::Watch(const WatchOptions& options, Timeout timeout) {
  if (options.max_queued_keys == 0) {
    return Status::InvalidArgument("WatchOptions.max_queued_keys: must be at least 1");
  }
  FeedFilter filter = options.filter;
  filter.predicted = filter.predicted || options.predicted;
  // To a server of the group whose feed the watch follows, when routing by the directory.
  const std::optional<ContextKey> group_context = filter.GroupContext();
  Impl& impl = group_context ? impl_->ForContext(*group_context) : *impl_;
  const uint64_t id = impl.NewRequestId();
  auto state = std::make_shared<WatchStream::State>(&impl, id, options.max_queued_keys);
  std::future<Status> started = state->Started();
  impl.CallStream(id, MessageType::kWatch,
                  protocol::EncodeWatchRequest({false, options.from, filter}), timeout,
                  /*open_ended=*/true, protocol::EncodeWatchRequest({true, {}, {}}),
                  [state](Result<protocol::Frame> frame) { state->OnFrame(std::move(frame)); });
  // Always made ready: by the first frame, an error answer, or the call's deadline.
  KVATLAS_RETURN_IF_ERROR(started.get());
  return std::unique_ptr<WatchStream>(new WatchStream(std::move(state)));
}

namespace {

// Checks a snapshot's parts (in order, one revision and context) and hands their copies on;
// the call's frame callback (the I/O thread).
struct SnapshotReceiver {
  Client::SnapshotPartFn on_part;
  std::function<void(Result<Revision>)> finish;  // called once, with the revision or error
  Revision revision = 0;
  ContextKey context;
  uint32_t next_part = 0;
  bool done = false;

  void Finish(Result<Revision> result) {
    done = true;
    finish(std::move(result));
  }

  void OnFrame(Result<protocol::Frame> frame) {
    if (done) return;  // failed on an earlier part: the rest only completes the call
    if (!frame.has_value()) return Finish(frame.error());
    if (frame->header.status != StatusCode::kOk) {
      return Finish(protocol::DecodeErrorPayload(frame->header.status, frame->payload));
    }
    Result<protocol::SnapshotPart> part = protocol::DecodeSnapshotPart(frame->payload);
    if (!part.has_value()) {
      return Finish(
          Status::Corruption("malformed snapshot part from the server: " + part.error().message()));
    }
    if (part->part != next_part ||
        (next_part > 0 && (part->revision != revision || part->context != context))) {
      return Finish(Status::Corruption(
          "the server sent snapshot part " + std::to_string(part->part) + " where part " +
          std::to_string(next_part) + " of revision " + std::to_string(revision) + " was due"));
    }
    if (next_part++ == 0) {
      revision = part->revision;
      context = std::move(part->context);
    }
    if (Status taken = on_part(revision, std::move(part->copies)); !taken.ok()) {
      return Finish(taken);
    }
    if (part->last) Finish(revision);
  }
};

// Starts a kSnapshot call handled by `receiver` (its finish is called once, at once for a
// context the server would refuse).
void StartSnapshot(Client::Impl* impl, ContextKey context,
                   std::shared_ptr<SnapshotReceiver> receiver, Client::Timeout timeout) {
  if (context.model.empty() || context.block_size == 0) {
    receiver->Finish(Status::InvalidArgument(
        "snapshot: the context needs a model name and a positive block_size"));
    return;
  }
  impl->CallStream(impl->NewRequestId(), MessageType::kSnapshot,
                   protocol::EncodeSnapshotRequest({std::move(context)}), timeout,
                   /*open_ended=*/false, /*cancel=*/{}, [receiver](Result<protocol::Frame> frame) {
                     receiver->OnFrame(std::move(frame));
                   });
}

}  // namespace

std::future<Result<Revision>> Client::StreamSnapshotAsync(ContextKey context,
                                                          SnapshotPartFn on_part, Timeout timeout) {
  auto promise = std::make_shared<std::promise<Result<Revision>>>();
  std::future<Result<Revision>> future = promise->get_future();
  auto receiver = std::make_shared<SnapshotReceiver>();
  receiver->on_part = std::move(on_part);
  receiver->finish = [promise](Result<Revision> result) { promise->set_value(std::move(result)); };
  Impl* impl = &impl_->ForContext(context);  // before `context` is moved from
  StartSnapshot(impl, std::move(context), std::move(receiver), timeout);
  return future;
}

std::future<Result<ContextSnapshot>> Client::SnapshotAsync(ContextKey context, Timeout timeout) {
  auto promise = std::make_shared<std::promise<Result<ContextSnapshot>>>();
  std::future<Result<ContextSnapshot>> future = promise->get_future();
  auto snapshot = std::make_shared<ContextSnapshot>();
  snapshot->context = context;
  auto receiver = std::make_shared<SnapshotReceiver>();
  receiver->on_part = [snapshot](Revision, std::vector<SnapshotCopy>&& copies) {
    snapshot->copies.insert(snapshot->copies.end(), std::make_move_iterator(copies.begin()),
                            std::make_move_iterator(copies.end()));
    return Status::Ok();
  };
  receiver->finish = [promise, snapshot](Result<Revision> revision) {
    if (!revision.has_value()) return promise->set_value(revision.error());
    snapshot->revision = *revision;
    promise->set_value(std::move(*snapshot));
  };
  Impl* impl = &impl_->ForContext(context);  // before `context` is moved from
  StartSnapshot(impl, std::move(context), std::move(receiver), timeout);
  return future;
}

Result<ContextSnapshot> Client::Snapshot(ContextKey context, Timeout timeout) {
  return SnapshotAsync(std::move(context), timeout).get();
}

}  // namespace kvatlas
