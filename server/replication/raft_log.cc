#include "server/replication/raft_log.h"

// libraft's headers have no extern "C" (docs/toolchain: pitfall 3).
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string_view>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"
#include "server/replication/append_below_snapshot.h"
#include "server/replication/fsm_adapter.h"
#include "server/replication/raft_heap.h"
#include "server/replication/raft_log_held.h"
#include "server/replication/raft_members.h"
#include "server/replication/tcp_transport.h"

namespace kvatlas::server {
namespace {

constexpr uint64_t kStatusRefreshMs = 50;

}  // namespace

// Everything that lives on the loop thread. The C structs are members, so the Loop's
// address is stable for the callbacks (each C struct's `data` points back here).
class RaftLog::Loop {
 public:
  explicit Loop(RaftLog* owner)
      : owner_(owner),
        fsm_(owner->machine_, /*async_snapshots=*/true, owner->options_.apply_queue) {
    closed_raft_.data = this;  // RecvIo finds the Loop through it after OnRaftClosed
  }

  // Runs on the loop thread: sets everything up, reports the outcome through `started`,
  // then runs the loop until Stop closes every handle.
  void Main(std::promise<Status>* started) {
    const int rv = uv_loop_init(&loop_);
    if (rv != 0) {
      closing_ = true;
      started->set_value(Status::Internal(std::string("uv_loop_init: ") + uv_strerror(rv)));
      return;
    }
    Status s = Init();
    if (!s.ok()) {
      closing_ = true;
      started->set_value(s);
      // Run the close callbacks of whatever was initialised, then close the loop.
      RunUntilClosed();
      return;
    }
    started->set_value(Status::Ok());
    RunUntilClosed();
  }

  // Runs the loop until every handle is closed, then frees the raft io and transport: only
  // then has libraft made its last call into them (see OnRaftClosed).
  void RunUntilClosed() {
    uv_run(&loop_, UV_RUN_DEFAULT);
    if (io_initialised_) {
      raft_uv_close(&io_);
      TcpTransportClose(&transport_);
      io_initialised_ = false;
    }
    uv_loop_close(&loop_);
  }

  // Called (through the op queue) on the loop thread.
  void Close() {
    if (closing_) return;
    closing_ = true;
    close_started_ = uv_now(&loop_);
    // 0.15 can leave a closed segment with a torn batch when it is closed while appends are
    // still being written (the restart then fails to load it): let the disk writes of what
    // was proposed finish first, polling every 5 ms for at most 2 s.
    uv_timer_stop(&timer_);
    uv_timer_start(
        &timer_,
        [](uv_timer_t* t) {
          Loop* self = static_cast<Loop*>(t->data);
          const bool drained = self->raft_.last_stored >= raft_last_index(&self->raft_);
          if (drained || uv_now(&self->loop_) - self->close_started_ > 2000) {
            uv_timer_stop(&self->timer_);
            self->CloseRaft();
          }
        },
        0, 5);
  }

  void CloseRaft() {
    raft_close(&raft_, [](struct raft* r) { static_cast<Loop*>(r->data)->OnRaftClosed(); });
  }

  // raft_close's callback. libraft 0.15 can call it before its io is done: closing a log
  // segment takes it off the queue its close check watches and then closes the segment's
  // writer asynchronously (uv_append.c), and that writer's close callback runs the check --
  // and the close callback, with the same io -- again. Freeing the io here (as the upstream
  // example does) made that late callback read freed memory: SIGTERM crashed whenever a
  // segment was being finalised, which on tmpfs (no async I/O) was most stops under load.
  // So the io is freed only once the loop has run dry (RunUntilClosed), and a repeated
  // callback finds a zeroed raft whose close frees nothing and calls nothing.
  void OnRaftClosed() {
    io_.data = &closed_raft_;
    uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  }

  void Wake() { uv_async_send(&wake_); }

  // Any thread.
  void ReadSnapshotMetrics(LogMetrics* out) const {
    fsm_.ReadSnapshotMetrics(out);
    out->log_memory_entries = log_memory_entries_.load(std::memory_order_relaxed);
    out->log_memory_bytes = log_memory_bytes_.load(std::memory_order_relaxed);
  }

  // --- operations (loop thread) ---------------------------------------------------------

  void Propose(std::string entry, std::function<void(Result<uint64_t>)> done) {
    if (Status s = CheckLeading(); !s.ok()) {
      done(std::move(s));
      return;
    }
    struct raft_buffer buf;
    // raft_uv 0.15 writes entry data padded to 8 bytes but reads back batches assuming the
    // recorded lengths are already multiples of 8: an unpadded entry makes the segment
    // unreadable after a restart. Pad with zeros; the entry format tolerates them
    // (command_codec.h DecodeLogEntry).
    buf.len = (entry.size() + 7) / 8 * 8;
    if (buf.len == 0) buf.len = 8;
    buf.base = raft_malloc(buf.len);
    if (buf.base == nullptr) {
      done(Status::ResourceExhausted("out of memory for a log entry"));
      return;
    }
    std::memset(buf.base, 0, buf.len);
    std::memcpy(buf.base, entry.data(), entry.size());
    auto* request = new ApplyRequest{{}, this, std::move(done)};
    request->req.data = request;
    const int rv =
        raft_apply(&raft_, &request->req, &buf, 1, [](struct raft_apply* req, int status, void*) {
          auto* r = static_cast<ApplyRequest*>(req->data);
          if (status == 0) {
            // Committed and handed to the state machine; acknowledged once applied there.
            const auto index = static_cast<uint64_t>(req->index);
            r->loop->fsm_.WhenApplied(index, [index, done = std::move(r->done)](Status s) {
              if (s.ok()) {
                done(index);
              } else {
                done(std::move(s));
              }
            });
          } else {
            // Leadership lost, shutdown: the entry may still be committed by a later leader.
            r->done(Status::Unavailable("the write was not committed here (" + RaftError(status) +
                                        "); it may or may not be applied: retry idempotently"));
          }
          delete r;
        });
    if (rv != 0) {
      raft_free(buf.base);
      std::function<void(Result<uint64_t>)> failed = std::move(request->done);
      delete request;
      failed(rv == RAFT_NOTLEADER ? NotLeader()
                                  : Status::Unavailable("raft_apply: " + RaftError(rv)));
    }
  }

  // kAdd makes `id` a spare and then promotes it (kPromoteAdded, a second change queued
  // from the first's callback). If that promotion fails and the server never answered since
  // the add began (`since_ms`), the spare is removed again, so a failed add leaves the
  // configuration as it was; one that answered stays a spare still catching up, and adding
  // it again at the same address promotes it.
  void ChangeMembership(int kind, uint64_t id, std::string address, Done done,
                        uint64_t since_ms = 0) {
    if (Status s = CheckLeading(); !s.ok()) {
      if (kind == kPromoteAdded) {
        s = s.WithContext("server " + std::to_string(id) +
                          " was added as a spare but not "
                          "promoted to voter");
      }
      done(std::move(s));
      return;
    }
    if (kind == kAdd) {
      since_ms = uv_now(&loop_);
      const struct raft_server* known = FindServer(raft_, id);
      if (known != nullptr && known->role != RAFT_VOTER && known->address != nullptr &&
          address == known->address) {
        kind = kPromote;
      }
    }
    const std::string address_of_change = address;
    auto* request =
        new ChangeRequest{{}, this, kind, id, std::move(address), since_ms, std::move(done)};
    request->req.data = request;
    int rv = 0;
    auto cb = [](struct raft_change* req, int status) {
      std::unique_ptr<ChangeRequest> r(static_cast<ChangeRequest*>(req->data));
      Loop* self = r->loop;
      // What follows a change (a promotion, a removal) must not be issued from this
      // callback: it is queued.
      if (status == 0 && r->kind == kAdd) {
        self->owner_->Post(
            [id = r->id, a = std::move(r->address), since = r->since_ms,
             then = std::move(r->done)](Loop& loop) mutable {
              loop.ChangeMembership(kPromoteAdded, id, std::move(a), std::move(then), since);
            },
            /*is_proposal=*/false);
        return;
      }
      if (status != 0 && r->kind == kPromoteAdded) {
        self->owner_->Post(
            [add = FailedAdd{r->id, std::move(r->address), RaftError(status)}, since = r->since_ms,
             then = std::move(r->done)](Loop& loop) mutable {
              loop.FailPromotion(std::move(add), since, std::move(then));
            },
            /*is_proposal=*/false);
        return;
      }
      self->PublishStatus();
      r->done(status == 0 ? Status::Ok()
                          : Status::Unavailable("membership change failed: " + RaftError(status)));
    };
    switch (kind) {
      case kAdd:
        rv = raft_add(&raft_, &request->req, id, request->address.c_str(), cb);
        break;
      case kPromote:
      case kPromoteAdded:
        rv = raft_assign(&raft_, &request->req, id, RAFT_VOTER, cb);
        break;
      default:
        rv = raft_remove(&raft_, &request->req, id, cb);
    }
    if (rv == 0) return;
    std::unique_ptr<ChangeRequest> failed(request);
    if (kind == kPromoteAdded && rv != RAFT_NOTLEADER) {
      FailPromotion(FailedAdd{id, address_of_change, RefusalOf(rv, id, address_of_change)},
                    since_ms, std::move(failed->done));
      return;
    }
    failed->done(rv == RAFT_NOTLEADER
                     ? NotLeader()
                     : Status::FailedPrecondition("membership change refused: " +
                                                  RefusalOf(rv, id, address_of_change)));
  }

  // The promotion of a server just added failed (ChangeMembership): remove it again unless
  // it answered since the add began.
  void FailPromotion(FailedAdd add, uint64_t since_ms, Done done) {
    const std::optional<uint64_t> heard = contacts_.LastHeard(add.id);
    if (heard && *heard >= since_ms) {
      done(Status::Unavailable(AnsweredLeftSpare(add)));
      return;
    }
    LogWarning("raft: server " + std::to_string(add.id) + " at " + add.address +
               " did not answer; removing the spare just added (" + add.why + ")");
    ChangeMembership(kRemove, add.id, "", [add, done = std::move(done)](Status removed) {
      done(Status::Unavailable(removed.ok() ? NotAnsweredRemoved(add)
                                            : NotAnsweredLeftSpare(add, removed.message())));
    });
  }

  void Transfer(uint64_t id, Done done) {
    if (Status s = CheckLeading(); !s.ok()) {
      done(std::move(s));
      return;
    }
    auto* request = new TransferRequest{{}, this, id, std::move(done)};
    request->req.data = request;
    const int rv = raft_transfer(&raft_, &request->req, id, [](struct raft_transfer* req) {
      // Fires when the target led, or after an election timeout: ask who leads now (a
      // read-only query, not a re-entry).
      auto* r = static_cast<TransferRequest*>(req->data);
      raft_id leader = 0;
      const char* address = nullptr;
      raft_leader(&r->loop->raft_, &leader, &address);
      Done finished = std::move(r->done);
      r->loop->RetireTransfer(r);
      if (r->target == 0 ? leader != r->loop->raft_.id : leader == r->target) {
        finished(Status::Ok());
      } else {
        finished(Status::Unavailable("leadership did not move" +
                                     (r->target ? " to server " + std::to_string(r->target) : "") +
                                     " (leader now: " + std::to_string(leader) + ")"));
      }
    });
    if (rv != 0) {
      Done failed = std::move(request->done);
      RetireTransfer(request);
      failed(Status::FailedPrecondition("leadership transfer refused: " + RefusalOf(rv, id, "")));
    }
  }

  static constexpr int kAdd = 0;
  static constexpr int kPromote = 1;       // a server already in the configuration
  static constexpr int kPromoteAdded = 2;  // the second step of kAdd
  static constexpr int kRemove = 3;

 private:
  struct ApplyRequest {
    struct raft_apply req;
    Loop* loop;
    std::function<void(Result<uint64_t>)> done;
  };
  struct ChangeRequest {
    struct raft_change req;
    Loop* loop;
    int kind;
    uint64_t id;
    std::string address;
    uint64_t since_ms;  // kPromoteAdded: when the add began (loop clock)
    Done done;
  };
  struct TransferRequest {
    struct raft_transfer req;
    Loop* loop;
    uint64_t target;
    Done done;
  };
  // libraft 0.15 sends a transfer's TimeoutNow through the raft_io_send in raft_transfer,
  // and may still queue it for an unreachable target after the transfer ended
  // (canonical/raft#396): freed then, a later eviction from that queue calls through freed
  // memory. So a transfer's memory lives until raft is closed (transfers are rare).
  void RetireTransfer(TransferRequest* request) {
    retired_transfers_.push_back(std::unique_ptr<TransferRequest>(request));
  }

  // Ok when this server may act as leader now: not stopping, and leading.
  Status CheckLeading() {
    if (closing_) return Status::Unavailable("the replicated log is stopping");
    if (raft_state(&raft_) != RAFT_LEADER) return NotLeader();
    return Status::Ok();
  }

  Status NotLeader() {
    raft_id id = 0;
    const char* address = nullptr;
    raft_leader(&raft_, &id, &address);
    if (id == 0) return Status(StatusCode::kNotLeader, "not the leader; no leader is known yet");
    return Status(StatusCode::kNotLeader, "not the leader; the leader is server " +
                                              std::to_string(id) + " (raft " +
                                              std::string(address ? address : "?") + ")");
  }

  Status Init() {
    const RaftOptions& o = owner_->options_;
    std::error_code ec;
    std::filesystem::create_directories(o.dir, ec);
    if (ec) return Status::IOError("cannot create raft directory " + o.dir + ": " + ec.message());
    int rv = 0;
    uv_async_init(&loop_, &wake_, [](uv_async_t* handle) {
      Loop* self = static_cast<Loop*>(handle->data);
      self->owner_->DrainOps(*self);
    });
    wake_.data = this;
    uv_timer_init(&loop_, &timer_);
    timer_.data = this;
    auto fail = [this](Status s) {
      uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
      uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
      return s;
    };
    TcpTransportOptions transport_options;
    transport_options.auth = o.peer_auth;
    transport_options.handshake_timeout = std::chrono::milliseconds(o.handshake_timeout_ms);
    transport_options.bind_address = o.bind_address;
    transport_options.listen_fd = o.listen_fd;
    transport_options.share = o.port_share;
    transport_options.listen = o.listen;
    // A server with an empty configuration has not been added yet: any proven peer may be
    // the leader adding it.
    transport_options.is_member = [this](uint64_t id) {
      return raft_.configuration.n == 0 || FindServer(raft_, id) != nullptr;
    };
    if ((rv = TcpTransportInit(&transport_, &loop_, std::move(transport_options))) != 0) {
      return fail(Status::Internal("raft_uv_tcp_init: " + RaftError(rv)));
    }
    if ((rv = raft_uv_init(&io_, &loop_, o.dir.c_str(), &transport_.transport)) != 0) {
      TcpTransportClose(&transport_);
      return fail(Status::IOError("raft_uv_init " + o.dir + ": " + RaftError(rv)));
    }
    // Every message raft receives is noted in contacts_ first (StartIo).
    uv_start_ = io_.start;
    io_.start = &Loop::StartIo;
    // 0.15.0 implements async work but reports version 1, which makes raft_init refuse an
    // FSM with async snapshots (fixed upstream in v0.17.1).
    io_.version = 2;
    raft_uv_set_segment_size(&io_, o.segment_bytes);
    // LZ4 would compress a snapshot into a second buffer as large as the snapshot, for
    // records that are mostly hashes: written as they are.
    raft_uv_set_snapshot_compression(&io_, false);
    if ((rv = raft_init(&raft_, &io_, fsm_.fsm(), o.id, o.address.c_str())) != 0) {
      const std::string message = raft_errmsg(&raft_);
      raft_uv_close(&io_);
      TcpTransportClose(&transport_);
      return fail(Status::Internal("raft_init: " + message));
    }
    io_initialised_ = true;
    raft_.data = this;
    fsm_.set_raft(&raft_);
    // The threshold CompactIfLogIsLarge lowered to 1 goes back as soon as the snapshot it
    // asked for is taken: waiting for the 50 ms check let the next applied entry bring a
    // second full snapshot once the first was written. (The trailing it set stays until
    // then: libraft reads it when the snapshot is written, to truncate the log.)
    fsm_.SetOnSnapshotTaken([this] {
      if (compacting_for_bytes_) {
        raft_set_snapshot_threshold(&raft_, owner_->options_.snapshot_threshold);
      }
    });
    raft_set_election_timeout(&raft_, o.election_timeout_ms);
    raft_set_heartbeat_timeout(&raft_, o.heartbeat_timeout_ms);
    compacting_early_ = o.compact_early;
    raft_set_snapshot_threshold(&raft_, compacting_early_ ? 1 : o.snapshot_threshold);
    raft_set_snapshot_trailing(&raft_, compacting_early_ ? 0 : o.snapshot_trailing);
    raft_set_pre_vote(&raft_, true);
    raft_set_install_snapshot_timeout(&raft_, InstallSnapshotTimeoutMs(0));
    // A dropped replica's directory is never bootstrapped: the group exists elsewhere.
    const bool dropped = std::filesystem::exists(std::filesystem::path(o.dir) / kDroppedMarker, ec);
    if (Status s = Bootstrap(&raft_, dropped ? decltype(o.bootstrap){} : o.bootstrap); !s.ok()) {
      StartClose();
      return s;
    }
    if ((rv = raft_start(&raft_)) != 0) {
      // libraft leaves its message empty when the listen fails (e.g. the port is taken).
      const std::string detail = raft_errmsg(&raft_);
      Status s = Status::Unavailable("raft_start (" + o.address +
                                     "): " + (detail.empty() ? RaftError(rv) : detail) +
                                     " (is raft_listen's port free?)");
      StartClose();
      return s;
    }
    uv_timer_start(
        &timer_, [](uv_timer_t* t) { static_cast<Loop*>(t->data)->RefreshStatus(); }, 0,
        kStatusRefreshMs);
    return Status::Ok();
  }

  // raft_io's start as raft calls it in raft_start, with raft's receive callback wrapped.
  static int StartIo(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick,
                     raft_io_recv_cb recv) {
    Loop* self = OfIo(io);
    self->raft_recv_ = recv;
    return self->uv_start_(io, msecs, tick, &Loop::RecvIo);
  }
  static void RecvIo(struct raft_io* io, struct raft_message* message) {
    Loop* self = OfIo(io);
    self->contacts_.Heard(message->server_id, uv_now(&self->loop_));
    if (RepairAppendBelowSnapshot(*static_cast<struct raft*>(io->data), message)) {
      self->owner_->appends_repaired_.fetch_add(1, std::memory_order_relaxed);
    }
    self->raft_recv_(io, message);
  }
  // raft_init points io->data at the raft, whose data is the Loop (closed_raft_'s too).
  static Loop* OfIo(struct raft_io* io) {
    return static_cast<Loop*>(static_cast<struct raft*>(io->data)->data);
  }

  // RaftOptions::compact_early: once a snapshot is written, back to the configured
  // thresholds (raft_set_* only store them: safe outside raft's callbacks, as here).
  void FinishEarlyCompaction() {
    if (!compacting_early_) return;
    LogMetrics metrics;
    fsm_.ReadSnapshotMetrics(&metrics);
    if (metrics.snapshots_taken == 0) return;
    compacting_early_ = false;
    const RaftOptions& o = owner_->options_;
    raft_set_snapshot_threshold(&raft_, o.snapshot_threshold);
    raft_set_snapshot_trailing(&raft_, o.snapshot_trailing);
    if (o.compacted) o.compacted();
  }

  // After raft_init succeeded: close raft and then the handles (the loop then exits).
  void StartClose() {
    closing_ = true;
    CloseRaft();
  }

  // RaftOptions::snapshot_log_bytes: libraft 0.15 has no "snapshot now" call, so past the
  // budget (LogBudgetBytes) the threshold drops to 1 (a snapshot at the next applied entry)
  // and, once that snapshot is written, returns to snapshot_threshold.
  void CompactIfLogIsLarge() {
    const RaftOptions& o = owner_->options_;
    if (o.snapshot_log_bytes == 0 || compacting_early_ || closing_) return;
    LogMetrics metrics;
    fsm_.ReadSnapshotMetrics(&metrics);
    if (compacting_for_bytes_) {
      if (metrics.snapshots_taken == snapshots_before_compaction_) return;
      compacting_for_bytes_ = false;
      raft_set_snapshot_threshold(&raft_, o.snapshot_threshold);
      raft_set_snapshot_trailing(&raft_, o.snapshot_trailing);
      return;
    }
    const size_t budget = LogBudgetBytes(o.snapshot_log_bytes, metrics.last_snapshot_bytes);
    const LogHeld held = MeasureLogHeld(raft_, o.snapshot_trailing, budget / 4);
    log_memory_entries_.store(held.entries, std::memory_order_relaxed);
    log_memory_bytes_.store(HeldWithOverhead(held), std::memory_order_relaxed);
    if (held.bytes < budget) {
      raft_set_snapshot_threshold(
          &raft_, CountThreshold(held, metrics.last_snapshot_bytes, o.snapshot_threshold));
      return;
    }
    compacting_for_bytes_ = true;
    snapshots_before_compaction_ = metrics.snapshots_taken;
    raft_set_snapshot_threshold(&raft_, 1);
    raft_set_snapshot_trailing(&raft_, held.trailing);
  }

  // Scales the wait for a sent snapshot to the last one (InstallSnapshotTimeoutMs; raft_set_*
  // only stores it), and reports a snapshot taken or restored (snapshot_done).
  void ReportSnapshots() {
    LogMetrics metrics;
    fsm_.ReadSnapshotMetrics(&metrics);
    raft_set_install_snapshot_timeout(&raft_,
                                      InstallSnapshotTimeoutMs(metrics.last_snapshot_bytes));
    if (!owner_->options_.snapshot_done) return;
    const uint64_t seen = metrics.snapshots_taken + metrics.snapshots_restored;
    if (seen == snapshots_seen_) return;
    snapshots_seen_ = seen;
    owner_->options_.snapshot_done();
  }

  void RefreshStatus() {
    WarnIfLoopWasBlocked();
    FinishEarlyCompaction();
    CompactIfLogIsLarge();
    ReportSnapshots();
    const uint64_t leader = PublishStatus();
    if (leader != 0 && leader != last_leader_) {
      if (last_leader_ != 0) owner_->leadership_changes_.fetch_add(1, std::memory_order_relaxed);
      last_leader_ = leader;
    }
    owner_->leader_.store(raft_state(&raft_) == RAFT_LEADER, std::memory_order_release);
    if (raft_state(&raft_) == RAFT_UNAVAILABLE && !closing_ &&
        !owner_->unavailable_.exchange(true, std::memory_order_acq_rel)) {
      // 0.15 turns a server unavailable for good after a failed disk write of its log, and
      // as leader it may have applied entries nobody committed. Stop, and have the next
      // start rebuild the state from the log.
      LogError(std::string("raft became unavailable: ") + raft_errmsg(&raft_) +
               "; stopping (the next start rebuilds the state from the log)");
      std::ofstream(std::filesystem::path(owner_->options_.dir) / kRebuildMarker)
          << raft_errmsg(&raft_) << "\n";
    }
  }

  // Reads raft's status into owner_->status_ (GetStatus) and returns the leader's id. Only
  // reads raft: also called from a membership change's callback, so that the change is
  // seen in GetStatus once its caller is told it is done.
  uint64_t PublishStatus() {
    ClusterStatus s;
    s.id = raft_.id;
    s.raft_address = raft_.address ? raft_.address : "";
    s.state = std::string(StateName(raft_state(&raft_)));
    raft_id leader = 0;
    const char* leader_address = nullptr;
    raft_leader(&raft_, &leader, &leader_address);
    s.leader_id = leader;
    s.leader_raft_address = leader_address ? leader_address : "";
    s.term = raft_.current_term;
    s.commit_index = raft_.commit_index;
    s.applied_index = fsm_.applied_index();
    s.last_index = raft_last_index(&raft_);
    s.configuration_committed =
        raft_state(&raft_) == RAFT_LEADER && raft_.configuration_uncommitted_index == 0;
    s.members = DescribeMembers(raft_, s.last_index, [this](ClusterMember* member) {
      contacts_.Describe(member, uv_now(&loop_), owner_->options_.election_timeout_ms);
    });
    std::lock_guard lock(owner_->mu_);
    owner_->status_ = std::move(s);
    return leader;
  }

  // This runs every kStatusRefreshMs: a longer gap means the loop thread was busy (an
  // apply, a RocksDB write stall, CPU starvation) and sent no heartbeats meanwhile; past
  // the election timeout, followers start an election. Says so, with the longest apply.
  void WarnIfLoopWasBlocked() {
    const uint64_t now = uv_hrtime();
    const uint64_t gap_ms = last_refresh_ns_ == 0 ? 0 : (now - last_refresh_ns_) / 1'000'000;
    last_refresh_ns_ = now;
    const uint64_t longest_apply_ms = fsm_.TakeLongestApplyMs();
    if (gap_ms < owner_->options_.election_timeout_ms / 2) return;
    LogWarning("raft loop blocked for " + std::to_string(gap_ms) + " ms (election timeout " +
               std::to_string(owner_->options_.election_timeout_ms) +
               " ms); longest log entry apply meanwhile " + std::to_string(longest_apply_ms) +
               " ms");
  }

  RaftLog* owner_;
  uv_loop_t loop_;
  uv_async_t wake_;
  uv_timer_t timer_;
  bool compacting_early_ = false;  // RaftOptions::compact_early, until its snapshot
  // RaftOptions::snapshot_log_bytes was exceeded: a snapshot is due, and snapshots_taken
  // was snapshots_before_compaction_ when it was asked for.
  bool compacting_for_bytes_ = false;
  uint64_t snapshots_before_compaction_ = 0;
  uint64_t snapshots_seen_ = 0;  // snapshots taken + restored, for snapshot_done
  // LogMetrics::log_memory_*: written by CompactIfLogIsLarge (loop thread), read by any.
  std::atomic<uint64_t> log_memory_entries_{0};
  std::atomic<uint64_t> log_memory_bytes_{0};
  TcpTransport transport_;
  struct raft_io io_;
  FsmAdapter fsm_;
  struct raft raft_;
  // What a repeated io close callback sees (OnRaftClosed): no address, log, configuration
  // or close callback.
  struct raft closed_raft_ {};
  // raft_init succeeded: the io and the transport are freed after the loop ends.
  bool io_initialised_ = false;
  bool closing_ = false;
  uint64_t close_started_ = 0;
  uint64_t last_refresh_ns_ = 0;
  uint64_t last_leader_ = 0;  // the last known leader, for leadership_changes_
  MemberContacts contacts_;
  std::vector<std::unique_ptr<TransferRequest>> retired_transfers_;  // RetireTransfer
  // raft_uv's start and raft's receive callback, which StartIo and RecvIo wrap.
  int (*uv_start_)(struct raft_io*, unsigned, raft_io_tick_cb, raft_io_recv_cb) = nullptr;
  raft_io_recv_cb raft_recv_ = nullptr;

  friend class RaftLog;
};

RaftLog::RaftLog(RaftOptions options, LogStateMachine* machine)
    : options_(std::move(options)), machine_(machine) {
  if (options_.peer_auth == nullptr) {
    own_peer_auth_ = std::make_unique<PeerAuth>(options_.id, "", "");
    options_.peer_auth = own_peer_auth_.get();
  }
}

Result<std::unique_ptr<RaftLog>> RaftLog::Start(RaftOptions options, LogStateMachine* machine) {
  InstallRaftHeap();
  std::unique_ptr<RaftLog> log(new RaftLog(std::move(options), machine));
  log->loop_ = std::make_unique<Loop>(log.get());
  KVATLAS_RETURN_IF_ERROR(log->Launch());
  return log;
}

Status RaftLog::Launch() {
  std::promise<Status> started;
  std::future<Status> result = started.get_future();
  Loop* loop = loop_.get();
  thread_ = std::thread([loop, &started] {
    SetCurrentThreadName("raft-loop");
    loop->Main(&started);
  });
  Status s = result.get();
  if (!s.ok()) {
    thread_.join();
    loop->fsm_.StopApplying();
  }
  std::lock_guard lock(mu_);
  stopped_ = !s.ok();
  return s;
}

Status RaftLog::Reopen(bool wipe) {
  Stop();
  if (failed()) return Status::FailedPrecondition("the raft log failed: it is not reopened");
  if (wipe) {
    options_.compact_early = false;  // a restored directory's first snapshot: moot now
    KVATLAS_RETURN_IF_ERROR(RemoveDirectoryContents(options_.dir));
    std::ofstream marker(std::filesystem::path(options_.dir) / kDroppedMarker);
    if (!(marker << "this server's replica was dropped: it rejoins only when a leader adds it\n")) {
      return Status::IOError("cannot write " + options_.dir + "/" + kDroppedMarker);
    }
  }
  std::unique_ptr<Loop> fresh = std::make_unique<Loop>(this);
  std::unique_ptr<Loop> old;
  {
    std::lock_guard lock(mu_);
    old = std::move(loop_);
    loop_ = std::move(fresh);
    status_ = ClusterStatus{};
  }
  leader_.store(false, std::memory_order_release);
  old.reset();
  return Launch();
}

RaftLog::~RaftLog() { Stop(); }

bool RaftLog::failed() const {
  if (unavailable_.load(std::memory_order_acquire)) return true;
  std::lock_guard lock(mu_);
  return loop_ && loop_->fsm_.failed();
}

void RaftLog::Stop() {
  Loop* loop = nullptr;
  {
    std::lock_guard lock(mu_);
    loop = loop_.get();
    if (stopped_) {
      if (thread_.joinable()) thread_.join();
      return;
    }
    stopped_ = true;
    ops_.push_back([](Loop& l) { l.Close(); });
    loop->Wake();
  }
  if (thread_.joinable()) thread_.join();
  loop->fsm_.StopApplying();
  // Proposals queued after the close never reach raft: fail them here.
  std::deque<std::function<void(Loop&)>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(ops_);
  }
  for (auto& op : left) op(*loop);
}

bool RaftLog::Post(std::function<void(Loop&)> op, bool is_proposal) {
  // The wake is sent under the lock: Reopen replaces the Loop only once stopped.
  std::lock_guard lock(mu_);
  if (stopped_) return false;
  ops_.push_back(std::move(op));
  if (is_proposal) ++queued_proposals_;
  loop_->Wake();
  return true;
}

void RaftLog::DrainOps(Loop& loop) {
  std::deque<std::function<void(Loop&)>> ops;
  {
    std::lock_guard lock(mu_);
    ops.swap(ops_);
    queued_proposals_ = 0;
  }
  for (auto& op : ops) op(loop);
}

Status RaftLog::Propose(std::string* entry, std::function<void(Result<uint64_t>)> done) {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return Status::Unavailable("the replicated log is stopped");
    if (queued_proposals_ >= options_.max_queue) {
      return Status::ResourceExhausted("replicated log queue is full (" +
                                       std::to_string(options_.max_queue) + " proposals)");
    }
  }
  auto timed = [this, started = std::chrono::steady_clock::now(),
                done = std::move(done)](Result<uint64_t> applied) {
    if (applied.has_value()) {
      commit_latency_.Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    }
    done(std::move(applied));
  };
  const bool posted = Post(
      [e = std::move(*entry), timed](Loop& loop) mutable { loop.Propose(std::move(e), timed); },
      /*is_proposal=*/true);
  if (!posted) return Status::Unavailable("the replicated log is stopped");
  return Status::Ok();
}

ClusterStatus RaftLog::GetStatus() const {
  std::lock_guard lock(mu_);
  return status_;
}

LogMetrics RaftLog::GetMetrics() const {
  LogMetrics m;
  m.leadership_changes = leadership_changes_.load(std::memory_order_relaxed);
  m.appends_repaired = appends_repaired_.load(std::memory_order_relaxed);
  m.commit_latency = commit_latency_.Read();
  std::lock_guard lock(mu_);
  loop_->ReadSnapshotMetrics(&m);
  return m;
}

void RaftLog::AddServer(uint64_t id, std::string raft_address, Done done) {
  auto op = [id, a = std::move(raft_address), done](Loop& loop) mutable {
    loop.ChangeMembership(Loop::kAdd, id, std::move(a), std::move(done));
  };
  if (!Post(std::move(op), false)) done(Status::Unavailable("the replicated log is stopped"));
}

void RaftLog::RemoveServer(uint64_t id, Done done) {
  auto op = [id, done](Loop& loop) mutable {
    loop.ChangeMembership(Loop::kRemove, id, "", std::move(done));
  };
  if (!Post(std::move(op), false)) done(Status::Unavailable("the replicated log is stopped"));
}

void RaftLog::TransferLeadership(uint64_t id, Done done) {
  auto op = [id, done](Loop& loop) mutable { loop.Transfer(id, std::move(done)); };
  if (!Post(std::move(op), false)) done(Status::Unavailable("the replicated log is stopped"));
}

}  // namespace kvatlas::server
