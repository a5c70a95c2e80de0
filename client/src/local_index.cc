#include "kvatlas/client/local_index.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <thread>
#include <utility>

#include "client/src/local_predictions.h"
#include "client/src/local_table.h"
#include "common/internal/prefix_match.h"
#include "kvatlas/common/block_hasher.h"

namespace kvatlas {

using client_internal::LocalCopy;
using client_internal::LocalTable;
using Clock = std::chrono::steady_clock;

namespace {

// How long one Next() waits: also how quickly a stopping LocalIndex notices.
constexpr std::chrono::milliseconds kPoll{100};
// Watches refused for a revision the server has not reached before the replica lists that
// server again (with the backoff, ~5 s at the default settings).
constexpr int kFutureRetries = 8;
// How long a watch may stay quiet before the server is pinged (and the ping's deadline).
constexpr std::chrono::milliseconds kLivenessCheck{1000};

int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// About what `record` occupies in memory (for LocalIndexOptions::max_buffered_feed_bytes).
uint64_t RecordBytes(const FeedRecord& record) {
  uint64_t bytes = sizeof(FeedRecord) + record.keys.size() * sizeof(BlockKey) +
                   record.context.tenant.size() + record.context.model.size() +
                   record.context.lora_name.size() + record.context.salt.size() +
                   record.holder.id.size();
  for (const std::string& location : record.locations) bytes += sizeof(location) + location.size();
  return bytes;
}

}  // namespace

// One replicated context: its table (swapped whole on a snapshot load) and sync state.
struct ContextReplica {
  ContextKey context;
  mutable std::shared_mutex mu;
  std::unique_ptr<LocalTable> table;  // guarded by mu; null until the first snapshot
  // LocalIndexOptions::predictions: the context's predictions (null when off). Has its own
  // lock; written by the sync thread as records apply, across snapshot reloads (soft state
  // that no snapshot lists).
  std::unique_ptr<PredictedTable> predicted;
  std::atomic<Revision> revision{0};
  std::atomic<bool> synced{false};
  std::atomic<int64_t> last_synced_ns{0};  // when `synced` was last true (steady clock)
  std::atomic<LocalIndexState> state{LocalIndexState::kConnecting};
  std::atomic<Revision> snapshot_revision{0};
  std::atomic<uint64_t> snapshot_copies{0};
  std::atomic<uint64_t> buffered_records{0};
  std::atomic<uint64_t> buffered_bytes{0};
  std::atomic<Revision> buffered_through{0};
  mutable std::mutex status_mu;
  Status last_error;      // guarded by status_mu
  uint64_t failures = 0;  // guarded by status_mu
  std::thread thread;

  LocalIndexContextStatus Describe() const {
    LocalIndexContextStatus s;
    s.context = context;
    s.state = state.load();
    s.snapshot_revision = snapshot_revision.load();
    s.snapshot_copies = snapshot_copies.load();
    s.buffered_records = buffered_records.load();
    s.buffered_bytes = buffered_bytes.load();
    s.buffered_through = buffered_through.load();
    std::lock_guard lock(status_mu);
    s.last_error = last_error;
    s.failures = failures;
    return s;
  }
};

class KVATLAS_NO_EXPORT LocalIndex::Impl {
 public:
  explicit Impl(LocalIndexOptions options) : options_(std::move(options)) {
    start_ns_ = Nanos(Clock::now());
    for (const ContextKey& c : options_.contexts) {
      auto replica = std::make_unique<ContextReplica>();
      replica->context = c;
      replica->last_synced_ns = start_ns_;
      if (options_.predictions) {
        replica->predicted = std::make_unique<PredictedTable>(options_.max_predicted_entries);
      }
      replicas_.push_back(std::move(replica));
    }
  }

  ~Impl() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    for (auto& r : replicas_) {
      if (r->thread.joinable()) r->thread.join();
    }
  }

  void StartThreads() {
    for (auto& r : replicas_) r->thread = std::thread([this, p = r.get()] { Follow(*p); });
  }

  const ContextReplica* Find(const ContextKey& context) const {
    for (const auto& r : replicas_) {
      if (r->context == context) return r.get();
    }
    return nullptr;
  }

  Result<LookupAnswer> Lookup(const ContextKey& context, std::span<const BlockKey> keys,
                              std::string_view instance_id, bool include_locations) const {
    const ContextReplica* r = Find(context);
    if (r == nullptr) {
      return Status::NotFound("context " + context.ToString() + " is not replicated here");
    }
    std::shared_lock lock(r->mu);
    if (!r->table) {
      return Status::Unavailable("context " + context.ToString() + " has no snapshot yet");
    }
    // As the server's lookup: walk every holder, keep `instance_id` when shaping the answer
    // (blocks_found counts every holder's blocks).
    const LookupResult result = r->table->Lookup(context, keys, /*instance_id=*/{},
                                                 include_locations, options_.max_lookup_blocks);
    LookupAnswer answer = BuildLookupAnswer(result, context, instance_id, r->revision.load());
    if (r->predicted) {
      // Over the keys the lookup walked, as the server's route predicts over its lookup's.
      answer.predicted = client_internal::PredictedPrefixes(
          *r->predicted, context,
          keys.first(std::min<size_t>(keys.size(), options_.max_lookup_blocks)), instance_id,
          PredictedTable::Clock::now());
    }
    return answer;
  }

  Result<LookupAnswer> Lookup(const LookupRequest& request) const {
    if (request.linearizable) {
      return Status::InvalidArgument("consistency: a LocalIndex cannot answer linearizable reads");
    }
    if (request.min_revision && ReplicaRevision(request.context) < *request.min_revision) {
      return Status::Unavailable("min_revision " + std::to_string(*request.min_revision) +
                                 " not reached by the local replica (at " +
                                 std::to_string(ReplicaRevision(request.context)) + ")");
    }
    if (request.by_hash) {
      return Lookup(request.context, request.seq_hashes, request.instance_id,
                    request.include_locations);
    }
    if (request.context.block_size == 0) {
      return Status::InvalidArgument("block_size: must be a positive integer, got 0");
    }
    const uint64_t seed = hash_seed_.load();
    if (!seed_known_.load()) return Status::Unavailable("the server's hash seed is not known yet");
    std::span<const uint32_t> tokens = request.token_ids;
    tokens = tokens.first(std::min<size_t>(
        tokens.size(), size_t{options_.max_lookup_blocks} * request.context.block_size));
    const std::vector<BlockKey> keys =
        BlockHasher(seed).SequenceHashes(tokens, request.context.block_size);
    return Lookup(request.context, keys, request.instance_id, request.include_locations);
  }

  Revision ReplicaRevision(const ContextKey& context) const {
    const ContextReplica* r = Find(context);
    return r == nullptr ? 0 : r->revision.load();
  }

  Revision MinRevision() const {
    Revision min = UINT64_MAX;
    for (const auto& r : replicas_) min = std::min(min, r->revision.load());
    return min;
  }

  bool AllSynced() const {
    return std::all_of(replicas_.begin(), replicas_.end(),
                       [](const auto& r) { return r->synced.load(); });
  }

  std::vector<LocalIndexContextStatus> ContextStatus() const {
    std::vector<LocalIndexContextStatus> out;
    for (const auto& r : replicas_) out.push_back(r->Describe());
    return out;
  }

  // Each context not synced: its state, snapshot progress and last error.
  std::string DescribeUnsynced() const {
    std::string out;
    for (const auto& r : replicas_) {
      const LocalIndexContextStatus s = r->Describe();
      if (s.state == LocalIndexState::kSynced) continue;
      out += "; " + s.context.ToString() + ": " + std::string(LocalIndexStateName(s.state));
      if (s.state == LocalIndexState::kLoadingSnapshot) {
        out += " (" + std::to_string(s.snapshot_copies) + " copies received, " +
               std::to_string(s.buffered_records) + " feed records buffered)";
      }
      if (!s.last_error.ok()) {
        out += ", " + std::to_string(s.failures) +
               " failed attempts, the last: " + s.last_error.ToString();
      }
    }
    return out;
  }

  Status WaitUntil(std::chrono::milliseconds timeout, const std::function<bool()>& done,
                   const std::string& what) const {
    const auto deadline = Clock::now() + timeout;
    while (!done()) {
      if (Clock::now() >= deadline) {
        return Status(StatusCode::kDeadlineExceeded, what + " not reached within " +
                                                         std::to_string(timeout.count()) + " ms" +
                                                         DescribeUnsynced());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::Ok();
  }

  LocalIndexStats Stats() const {
    LocalIndexStats s;
    s.revision = MinRevision();
    s.synced = AllSynced();
    const int64_t now = Nanos(Clock::now());
    int64_t oldest_sync = now;
    for (const auto& r : replicas_) {
      if (!r->synced.load()) oldest_sync = std::min(oldest_sync, r->last_synced_ns.load());
      if (r->predicted) {
        const PredictedStats predicted = r->predicted->stats();
        s.predicted_entries += predicted.entries;
        s.predicted_dropped += predicted.dropped;
      }
      std::shared_lock lock(r->mu);
      if (!r->table) continue;
      s.blocks += r->table->blocks();
      s.copies += r->table->copies();
      s.memory_bytes += r->table->memory_bytes();
    }
    s.staleness = std::chrono::milliseconds((now - oldest_sync) / 1'000'000);
    s.state = LocalIndexState::kSynced;
    for (const auto& r : replicas_) {
      const LocalIndexContextStatus status = r->Describe();
      if (static_cast<int>(status.state) < static_cast<int>(s.state) ||
          status.state == LocalIndexState::kRetrying) {
        if (s.state != LocalIndexState::kRetrying) s.state = status.state;
      }
      if (!status.last_error.ok()) s.last_error = status.last_error;
    }
    s.records_applied = records_applied_.load();
    s.snapshots_loaded = snapshots_loaded_.load();
    s.watch_resumes = watch_resumes_.load();
    return s;
  }

 private:
  // Sleeps `*backoff` (or until stopping) and doubles it. False once stopping.
  bool Backoff(std::chrono::milliseconds* backoff) {
    std::unique_lock lock(mu_);
    stop_cv_.wait_for(lock, *backoff, [this] { return stopping_; });
    *backoff = std::min(*backoff * 2, options_.retry_backoff_max);
    return !stopping_;
  }
  bool Stopping() {
    std::lock_guard lock(mu_);
    return stopping_;
  }

  // The shared client, connected on first use; the error while no server answers (or
  // one refuses us). Also learns the server's hash seed, which token lookups need.
  Result<Client*> EnsureClient() {
    std::lock_guard lock(client_mu_);
    if (client_) return client_.get();
    KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options_.client));
    KVATLAS_ASSIGN_OR_RETURN(StatsAnswer stats, client->Stats());
    const nlohmann::json doc = nlohmann::json::parse(stats.json, nullptr, false);
    if (doc.is_object() && doc.contains("hash_seed") && doc["hash_seed"].is_number_unsigned()) {
      hash_seed_ = doc["hash_seed"].get<uint64_t>();
      seed_known_ = true;
    }
    client_ = std::move(client);
    return client_.get();
  }

  // Records a failed attempt of `r` (visible in its status, given to on_error).
  void Failed(ContextReplica& r, const Status& error) {
    {
      std::lock_guard lock(r.status_mu);
      r.last_error = error;
      ++r.failures;
    }
    r.state = LocalIndexState::kRetrying;
    if (options_.on_error) options_.on_error(r.context, error);
  }

  void MarkUnsynced(ContextReplica& r) {
    if (r.synced.exchange(false)) r.last_synced_ns = Nanos(Clock::now());
  }

  // What a snapshot load leaves to the sync loop: the revision to follow from, and the
  // watch that buffered the feed during the load while it is still live (else null).
  struct Loaded {
    Revision resume = 0;
    std::unique_ptr<WatchStream> stream;
  };

  // The feed buffered while a snapshot loads (the sync thread's only).
  struct FeedBuffer {
    std::vector<FeedRecord> records;
    uint64_t bytes = 0;
    Revision through = 0;  // every record up to it is in `records`
  };

  void ShowBuffer(ContextReplica& r, const FeedBuffer& buffer) {
    r.buffered_records = buffer.records.size();
    r.buffered_bytes = buffer.bytes;
    r.buffered_through = buffer.through;
  }

  // Moves the records `stream` has ready into `buffer`. Not OK when the buffer passed
  // max_buffered_feed_bytes; `stream` is reset when it ended (the buffer is complete
  // through its ResumeFrom()).
  Status BufferFeed(ContextReplica& r, std::unique_ptr<WatchStream>& stream, FeedBuffer& buffer) {
    Result<std::vector<FeedRecord>> next = stream->Next(kPoll);
    buffer.through = stream->ResumeFrom();
    if (!next.has_value()) {
      stream.reset();  // resumed from buffer.through after the load
      return Status::Ok();
    }
    for (FeedRecord& record : *next) {
      buffer.bytes += RecordBytes(record);
      buffer.records.push_back(std::move(record));
    }
    ShowBuffer(r, buffer);
    if (buffer.bytes <= options_.max_buffered_feed_bytes) return Status::Ok();
    return Status::ResourceExhausted(
        "the feed buffered while the snapshot of revision " +
        std::to_string(r.snapshot_revision.load()) + " loaded (" +
        std::to_string(r.snapshot_copies.load()) + " copies received) passed " +
        "max_buffered_feed_bytes (" + std::to_string(buffer.records.size()) + " records, ~" +
        std::to_string(buffer.bytes) + " > " + std::to_string(options_.max_buffered_feed_bytes) +
        " bytes): the snapshot is abandoned and listed again");
  }

  // Loads `r`'s snapshot part by part into a fresh table (the parts are added on the
  // client's I/O thread as they arrive: nothing holds the whole list), then swaps it in.
  // The feed is watched from the revision current just before the snapshot is asked for
  // (at or below the snapshot's) and buffered here while it loads (bounded by
  // max_buffered_feed_bytes): a load that takes longer than the server's feed window lasts
  // under ingest would otherwise find its revision compacted and list again, forever. The
  // buffer is applied after the last part, its records at or below the snapshot's
  // revision skipped (the snapshot has them).
  Result<Loaded> LoadSnapshot(Client& client, ContextReplica& r) {
    r.state = LocalIndexState::kLoadingSnapshot;
    r.snapshot_copies = 0;
    r.snapshot_revision = 0;
    FeedBuffer buffer;
    ShowBuffer(r, buffer);
    // Shared with the call, which may outlive this function (when the LocalIndex stops or
    // the load is abandoned: the call then drops its remaining parts).
    struct Shared {
      std::unique_ptr<LocalTable> table = std::make_unique<LocalTable>();
      std::atomic<bool> abandoned{false};
    };
    auto shared = std::make_shared<Shared>();
    shared->table->Track(r.context);
    // A watch that does not start leaves the load as it was: the watch from the snapshot's
    // revision is tried after it.
    std::unique_ptr<WatchStream> stream;
    WatchOptions watch;  // from the current revision
    watch.filter = FeedFilter::ForContext(r.context);
    watch.predicted = options_.predictions;
    if (Result<std::unique_ptr<WatchStream>> started = client.Watch(watch); started.has_value()) {
      stream = std::move(*started);
      buffer.through = stream->ResumeFrom();
      ShowBuffer(r, buffer);
    }
    const Revision watched_from = buffer.through;
    std::future<Result<Revision>> pending = client.StreamSnapshotAsync(
        r.context,
        [this, shared, &r](Revision revision, std::vector<SnapshotCopy>&& part) -> Status {
          if (Stopping() || shared->abandoned) return Status(StatusCode::kCancelled, "stopping");
          r.snapshot_revision = revision;
          std::vector<LocalCopy> copies;
          copies.reserve(part.size());
          for (SnapshotCopy& c : part) {
            copies.push_back(LocalCopy{c.key, std::move(c.copy.holder), c.copy.tier,
                                       std::move(c.copy.location)});
          }
          shared->table->Append(r.context, copies);
          const uint64_t received = r.snapshot_copies.fetch_add(copies.size()) + copies.size();
          if (options_.on_snapshot_progress) options_.on_snapshot_progress(r.context, received);
          return Status::Ok();
        },
        options_.snapshot_timeout);
    const bool watched = stream != nullptr;
    // Waited for in slices, so that a LocalIndex being destroyed does not wait for a large
    // snapshot (the abandoned call ends with the client).
    while (pending.wait_for(stream ? std::chrono::milliseconds(0) : kPoll) !=
           std::future_status::ready) {
      if (Stopping()) {
        shared->abandoned = true;
        return Status(StatusCode::kCancelled, "stopping");
      }
      if (stream) {
        if (Status buffered = BufferFeed(r, stream, buffer); !buffered.ok()) {
          shared->abandoned = true;
          ShowBuffer(r, FeedBuffer{});
          return buffered;
        }
      }
    }
    KVATLAS_ASSIGN_OR_RETURN(Revision revision, pending.get());
    {
      // The call has finished: nothing else touches the table.
      std::unique_lock lock(r.mu);
      r.table = std::move(shared->table);
      r.revision = revision;
    }
    if (!watched || watched_from > revision || (!stream && buffer.through < revision)) {
      // No watch; one from after the snapshot's revision (another server, behind the first,
      // answered the snapshot: the records between would be missing); or one that ended at
      // or before it: follow from the snapshot itself. (A live watch still behind it has
      // the records after it to come.)
      stream.reset();
      buffer = FeedBuffer{};
      buffer.through = revision;
    }
    ApplyInSlices(r, buffer.records, buffer.through);
    records_applied_.fetch_add(buffer.records.size());
    ShowBuffer(r, FeedBuffer{});
    snapshots_loaded_.fetch_add(1);
    return Loaded{std::max(buffer.through, revision), std::move(stream)};
  }

  // The sync loop of one context: snapshot (with the feed buffered meanwhile), then the
  // watch that buffered it (or one from the snapshot's revision); resume after a cut or a
  // lost connection, reload after compaction or a reset.
  void Follow(ContextReplica& r) {
    std::chrono::milliseconds backoff = options_.retry_backoff_min;
    std::optional<Revision> resume;  // nullopt: the snapshot must be (re)loaded
    int future_attempts = 0;         // consecutive watches refused for a future revision
    while (!Stopping()) {
      if (r.state != LocalIndexState::kRetrying) r.state = LocalIndexState::kConnecting;
      Result<Client*> connected = EnsureClient();
      if (!connected.has_value()) {
        Failed(r, connected.error());
        if (!Backoff(&backoff)) return;
        continue;
      }
      Client* client = *connected;
      std::unique_ptr<WatchStream> buffered;  // the watch that followed the load, if live
      if (!resume) {
        Result<Loaded> loaded = LoadSnapshot(*client, r);
        if (!loaded.has_value()) {
          if (Stopping()) return;
          Failed(r, loaded.error());
          if (!Backoff(&backoff)) return;
          continue;
        }
        resume = loaded->resume;
        buffered = std::move(loaded->stream);
      }
      WatchOptions watch;
      watch.from = *resume;
      watch.filter = FeedFilter::ForContext(r.context);
      watch.predicted = options_.predictions;
      Result<std::unique_ptr<WatchStream>> stream =
          buffered ? Result<std::unique_ptr<WatchStream>>(std::move(buffered))
                   : client->Watch(watch);
      if (!stream.has_value()) {
        // Compacted: this server no longer has the records after `resume` (it restarted,
        // or we were away too long). A revision in the future: the server is behind us (a
        // follower catching up: wait for it) or has another history (its state was
        // replaced: after kFutureRetries attempts, list it again). Anything else (no
        // connection): retry later, possibly on another server.
        const StatusCode code = stream.error().code();
        future_attempts = code == StatusCode::kInvalidArgument ? future_attempts + 1 : 0;
        if (code == StatusCode::kCompacted || future_attempts > kFutureRetries) {
          resume.reset();
          future_attempts = 0;
          continue;
        }
        Failed(r, stream.error());
        if (!Backoff(&backoff)) return;
        continue;
      }
      future_attempts = 0;
      {
        std::lock_guard lock(r.status_mu);
        r.last_error = Status::Ok();
        r.failures = 0;
      }
      r.state = LocalIndexState::kSynced;
      r.synced = true;
      backoff = options_.retry_backoff_min;
      const Status ended = Drain(r, **stream);
      MarkUnsynced(r);
      resume = (*stream)->ResumeFrom();
      if (ended.code() == StatusCode::kCompacted) {
        resume.reset();
      } else if (ended.code() == StatusCode::kWatchCut) {
        watch_resumes_.fetch_add(1);  // at once: the server is there, we were slow
      } else if (!Stopping()) {
        watch_resumes_.fetch_add(1);
        Failed(r, ended);
        if (!Backoff(&backoff)) return;
      }
    }
  }

  // Applies the stream's records until it ends (its terminal status) or we stop (ok).
  Status Drain(ContextReplica& r, WatchStream& stream) {
    auto heard = Clock::now();  // the server last showed it is there: records or a ping
    while (!Stopping()) {
      Result<std::vector<FeedRecord>> next = stream.Next(kPoll);
      if (!next.has_value()) return next.error();
      const Revision reached = stream.ResumeFrom();
      if (next->empty() && reached == r.revision.load()) {
        // A quiet feed says nothing of the server: a connection can die without a word
        // (a partition, a host lost). Ping the server the watch reads from (a member of the
        // group when routing), so that the replica counts as synced only while that server
        // answers, and moves to another one within ~kLivenessCheck.
        if (Clock::now() - heard < kLivenessCheck) continue;
        if (Status alive = stream.Ping(kLivenessCheck); !alive.ok()) {
          stream.Cancel();
          return Status::Unavailable("the server did not answer a ping: " + alive.ToString());
        }
        heard = Clock::now();
        continue;
      }
      heard = Clock::now();
      ApplyInSlices(r, *next, reached);
      records_applied_.fetch_add(next->size());
    }
    return Status::Ok();
  }

  // Applies `records` (in revision order), then moves the replica to `reached`. A backlog
  // can be tens of thousands of records: the write lock is taken per slice of about
  // kSliceKeys block keys, released between slices so that lookups are not held up by the
  // whole backlog. Slices end only between revisions, so readers always see whole server
  // batches, and the revision a lookup reports never runs ahead of what it sees.
  void ApplyInSlices(ContextReplica& r, const std::vector<FeedRecord>& records, Revision reached) {
    constexpr size_t kSliceKeys = 4096;
    // Records the replica has already (a watch opened before the snapshot it loaded) are
    // skipped: applied again they would show lookups states older than the replica's.
    size_t i = 0;
    const Revision had = r.revision.load();
    while (i < records.size() && records[i].revision <= had) ++i;
    while (i < records.size()) {
      size_t end = i;
      size_t keys = 0;
      size_t stored = 0;  // an upper bound of the blocks the slice adds
      do {
        keys += records[end].keys.size();
        if (records[end].op == FeedOp::kStored) stored += records[end].keys.size();
        ++end;
      } while (end < records.size() &&
               (keys < kSliceKeys || records[end].revision == records[end - 1].revision));
      // A table the slice would fill is grown first, beside the lookups: this thread is its
      // only writer, so nothing changes it before the adopt below.
      client_internal::LocalTable::PreparedGrowth growth;
      if (stored > 0) {
        std::shared_lock read_lock(r.mu);
        growth = r.table->PrepareGrowth(r.context, stored);
      }
      std::unique_lock lock(r.mu);
      if (growth) (void)r.table->AdoptGrowth(std::move(growth));
      const auto now = PredictedTable::Clock::now();
      for (; i < end; ++i) {
        if (r.predicted) client_internal::ApplyToPredictions(records[i], r.predicted.get(), now);
        if (records[i].op != FeedOp::kPredicted) r.table->Apply(records[i]);
      }
      // Every record of revision records[i - 1].revision is applied (the next, if any, is
      // of a later one).
      const Revision whole = i < records.size() ? records[i - 1].revision : reached;
      if (whole > r.revision.load()) r.revision = whole;
    }
    if (reached > r.revision.load()) {
      std::unique_lock lock(r.mu);
      r.revision = reached;
    }
  }

  const LocalIndexOptions options_;
  std::vector<std::unique_ptr<ContextReplica>> replicas_;
  int64_t start_ns_ = 0;

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;

  std::mutex client_mu_;
  std::unique_ptr<Client> client_;
  std::atomic<uint64_t> hash_seed_{kDefaultHashSeed};
  std::atomic<bool> seed_known_{false};

  std::atomic<uint64_t> records_applied_{0};
  std::atomic<uint64_t> snapshots_loaded_{0};
  std::atomic<uint64_t> watch_resumes_{0};
};

Result<std::unique_ptr<LocalIndex>> LocalIndex::Start(LocalIndexOptions options) {
  if (options.client.endpoints.empty()) {
    return Status::InvalidArgument("client.endpoints: at least one server is required");
  }
  if (options.contexts.empty()) {
    return Status::InvalidArgument("contexts: at least one context is required");
  }
  for (size_t i = 0; i < options.contexts.size(); ++i) {
    ContextKey& c = options.contexts[i];
    const std::string field = "contexts[" + std::to_string(i) + "]";
    if (c.tenant.empty()) c.tenant = "default";
    if (c.model.empty()) return Status::InvalidArgument(field + ".model: is required");
    if (c.block_size == 0) {
      return Status::InvalidArgument(field + ".block_size: must be a positive integer");
    }
    for (size_t j = 0; j < i; ++j) {
      if (options.contexts[j] == c) {
        return Status::InvalidArgument(field + ": duplicates contexts[" + std::to_string(j) + "]");
      }
    }
  }
  if (options.retry_backoff_min.count() <= 0 ||
      options.retry_backoff_max < options.retry_backoff_min) {
    return Status::InvalidArgument("retry_backoff_min/max: must be positive, min <= max");
  }
  if (options.max_lookup_blocks == 0) {
    return Status::InvalidArgument("max_lookup_blocks: must be positive");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->StartThreads();
  return std::unique_ptr<LocalIndex>(new LocalIndex(std::move(impl)));
}

LocalIndex::LocalIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalIndex::~LocalIndex() = default;

Status LocalIndex::WaitSynced(std::chrono::milliseconds timeout) const {
  return impl_->WaitUntil(
      timeout, [this] { return impl_->AllSynced(); }, "sync");
}

Status LocalIndex::WaitForRevision(Revision revision, std::chrono::milliseconds timeout) const {
  return impl_->WaitUntil(
      timeout, [this, revision] { return impl_->MinRevision() >= revision; },
      "revision " + std::to_string(revision));
}

Result<LookupAnswer> LocalIndex::Lookup(const LookupRequest& request) const {
  return impl_->Lookup(request);
}

Result<LookupAnswer> LocalIndex::Lookup(const ContextKey& context, std::span<const BlockKey> keys,
                                        std::string_view instance_id) const {
  return impl_->Lookup(context, keys, instance_id, /*include_locations=*/true);
}

Revision LocalIndex::revision() const { return impl_->MinRevision(); }

std::vector<LocalIndexContextStatus> LocalIndex::ContextStatus() const {
  return impl_->ContextStatus();
}

std::string_view LocalIndexStateName(LocalIndexState state) {
  switch (state) {
    case LocalIndexState::kConnecting:
      return "connecting";
    case LocalIndexState::kLoadingSnapshot:
      return "loading_snapshot";
    case LocalIndexState::kSynced:
      return "synced";
    case LocalIndexState::kRetrying:
      return "retrying";
  }
  return "unknown";
}

LocalIndexStats LocalIndex::Stats() const { return impl_->Stats(); }

}  // namespace kvatlas
