#include "server/zmq/zmq_ingest.h"

#include <algorithm>
#include <array>
#include <bit>
#include <iterator>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"
#include "server/ingest/engine_event_decoder.h"
#include "server/zmq/publisher_socket.h"
#include "server/zmq/stream_follower.h"

namespace kvatlas::server {
namespace {

using Clock = std::chrono::steady_clock;

// vLLM's end-of-replay sequence: -1 as a big-endian int64.
constexpr uint64_t kEndSequence = ~uint64_t{0};
// The poll timeout bounds how late timers (replay timeouts, socket recreation) and registry
// changes are seen.
constexpr std::chrono::milliseconds kPollInterval{50};
// ZMQ sockets per registered stream (SUB, its monitor's two PAIR ends), and beyond the
// registrations (listeners, replay DEALERs, headroom): the context's socket limit.
constexpr int kSocketsPerStream = 3;
constexpr int kSpareSockets = 256;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<uint64_t> ReadSequence(const zmq::message_t& frame) {
  if (frame.size() != 8) return std::nullopt;
  const auto* p = static_cast<const uint8_t*>(frame.data());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

std::span<const uint8_t> Bytes(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

// A batch as its stream's follower holds it.
struct ZmqBatch {
  zmq::message_t payload;
  // Listener streams decode before the stream is known (the dp rank is in the payload);
  // the others decode when the batch is applied.
  std::optional<Result<EngineBatch>> decoded;
};

// What one submitted batch counts once applied.
struct Tally {
  uint64_t stored = 0;
  uint64_t removed = 0;
  uint64_t cleared = 0;
  uint64_t blocks = 0;
};

}  // namespace

// One publisher stream: a registered publisher (owning its SUB socket) or one topic/rank
// on a listener's socket.
struct ZmqStream {
  std::string key;
  StreamIdentity identity;
  ZmqTarget target;  // the group its batches go to (ZmqIngestOptions::target_of)
  std::string replay_endpoint;
  std::shared_ptr<StreamView> view;
  Registration registration;                         // registered streams only
  std::unique_ptr<PublisherSocket> socket;           // registered streams only
  std::optional<StreamFollower<ZmqBatch>> follower;  // set once `view` is
  StreamMapState map_state;
  // While a replay runs: its socket, new for every replay so that nothing queued for an
  // earlier one (a cancelled replay of a restarted engine) is ever read, and its id.
  std::unique_ptr<zmq::socket_t> dealer;
  uint64_t replay_id = 0;
};

// Streams by key: a listener's, and the registered ones.
using StreamMap = std::map<std::string, std::unique_ptr<ZmqStream>, std::less<>>;

struct ZmqListener {
  ZmqListenerConfig config;
  std::unique_ptr<zmq::socket_t> sub;
  StreamMap streams;
};

class ZmqIngest::Loop {
 public:
  using Follower = StreamFollower<ZmqBatch>;

  explicit Loop(ZmqIngest* owner)
      : owner_(owner), mapper_(&owner->machine_->hasher(), owner->options_.mapper) {
    // libzmq's default (1,023 sockets) would run out long before max_registrations streams.
    const ZmqIngestOptions& o = owner->options_;
    context_.set(zmq::ctxopt::max_sockets,
                 static_cast<int>(std::min<size_t>(o.max_registrations * kSocketsPerStream +
                                                       o.listeners.size() +
                                                       o.max_concurrent_replays + kSpareSockets,
                                                   1'000'000)));
  }

  ~Loop() {
    // Sockets first (linger 0), then the context: zmq_ctx_term waits for open sockets.
    streams_.clear();
    listeners_.clear();
  }

  Status BindListeners() {
    for (const ZmqListenerConfig& config : owner_->options_.listeners) {
      auto listener = std::make_unique<ZmqListener>();
      listener->config = config;
      try {
        listener->sub = MakeSubSocket(context_, config.topic, SubOptions());
        listener->sub->bind(config.bind);
      } catch (const zmq::error_t& e) {
        return Status::Unavailable("cannot bind ZMQ listener " + config.bind + ": " + e.what());
      }
      LogInfo("zmq: listening for KV events on " + config.bind +
              (config.topic.empty() ? "" : " (topic prefix \"" + config.topic + "\")"));
      listeners_.push_back(std::move(listener));
    }
    return Status::Ok();
  }

  void Run() {
    while (!owner_->stopping_.load(std::memory_order_acquire)) {
      const uint64_t led =
          owner_->options_.led_groups ? owner_->options_.led_groups() : ~uint64_t{0};
      if (led != led_) OnLeadershipChanged(led);
      if (owner_->registry_dirty_.exchange(false, std::memory_order_acq_rel)) SyncRegistrations();
      PollOnce();
      const Clock::time_point now = Clock::now();
      for (auto& [key, stream] : streams_) stream->socket->Tick(now);
      CheckReplayTimeouts();
      LaunchWaitingReplays();
      CheckReportModes(now);
    }
  }

 private:
  SubSocketOptions SubOptions() const {
    const ZmqIngestOptions& o = owner_->options_;
    return SubSocketOptions{o.receive_hwm, o.reconnect_interval, o.reconnect_interval_max};
  }

  // Once a second: copies each stream's tally (stream_tally.h, the state machine's) into
  // its counters, and warns once per stream when the tally says its report mode is wrong.
  void CheckReportModes(Clock::time_point now) {
    if (now < next_report_mode_check_) return;
    next_report_mode_check_ = now + std::chrono::seconds(1);
    auto check = [](ZmqStream& stream) {
      const StreamTally t = stream.target.machine->TallyOf(stream.key);
      StreamCounters& c = stream.view->counters;
      c.stored_blocks.store(t.stored_blocks, std::memory_order_relaxed);
      c.repeated_stores.store(t.held_stores, std::memory_order_relaxed);
      c.removed_blocks.store(t.removed_blocks, std::memory_order_relaxed);
      c.unheld_removes.store(t.unheld_removes, std::memory_order_relaxed);
      if (!stream.view->report_mode_warning().empty()) return;
      std::string warning =
          ReportModeMismatch(stream.identity.engine, stream.identity.report_mode, t);
      if (warning.empty()) return;
      LogWarning("zmq: " + stream.key + ": " + warning);
      stream.view->SetReportModeWarning(std::move(warning));
    };
    for (auto& [key, stream] : streams_) check(*stream);
    for (auto& listener : listeners_) {
      for (auto& [key, stream] : listener->streams) check(*stream);
    }
  }

  StreamFollowerOptions FollowerOptions(const std::string& replay_endpoint) const {
    const ZmqIngestOptions& o = owner_->options_;
    return StreamFollowerOptions{!replay_endpoint.empty(), o.max_buffered_batches,
                                 o.replay_idle_timeout, o.replay_total_timeout, o.replay_cooldown};
  }

  // --- registrations --------------------------------------------------------------------

  // A stream is followed only by the leader of its group.
  bool Leads(const ZmqTarget& target) const {
    return target.group >= 1 && target.group <= 64 && ((led_ >> (target.group - 1)) & 1) != 0;
  }

  // Drops a stream (its sockets close), giving back its replay slot if it held one.
  StreamMap::iterator Forget(StreamMap* streams, StreamMap::iterator it) {
    if (it->second->follower && it->second->follower->replay() == Follower::Replay::kRunning) {
      --running_replays_;
    }
    return streams->erase(it);
  }

  // This server began or stopped leading some groups: it closes the streams of the groups
  // it no longer leads (a listener's socket stays bound, and their messages are ignored
  // until it leads them again), and re-reads the registry to follow the publishers of
  // the groups it now leads.
  void OnLeadershipChanged(uint64_t led) {
    if (led == 0) {
      LogInfo("zmq: this server does not lead: publishers are left to the leader");
    } else if (!owner_->options_.target_of) {
      LogInfo("zmq: this server leads: following publishers");
    } else {
      LogInfo("zmq: this server leads " + std::to_string(std::popcount(led)) +
              " group(s): following their publishers (the others' are left to their leaders)");
    }
    led_ = led;
    auto drop = [this](StreamMap* streams) {
      for (auto it = streams->begin(); it != streams->end();) {
        it = Leads(it->second->target) ? std::next(it) : Forget(streams, it);
      }
    };
    drop(&streams_);
    for (auto& listener : listeners_) drop(&listener->streams);
    PublishViews();
    owner_->registry_dirty_.store(true, std::memory_order_release);
  }

  void SyncRegistrations() {
    if (led_ == 0) return;
    auto registrations =
        owner_->machine_->ReadRegistry([](const Registry& r, Revision) { return r.registrations; });
    bool changed = false;
    for (auto it = streams_.begin(); it != streams_.end();) {
      auto reg = registrations.find(it->first);
      if (reg != registrations.end() && reg->second == it->second->registration &&
          HeldByGroup(it->second->target, reg->second)) {
        ++it;
        continue;
      }
      LogInfo("zmq: stopped following " + it->second->registration.endpoint + " (" + it->first +
              ")");
      it = Forget(&streams_, it);
      changed = true;
    }
    for (auto& [key, registration] : registrations) {
      // An instance without events has no stream (docs/routing.md §Approximate mode).
      if (!registration.PublishesEvents() || streams_.contains(key)) continue;
      const ZmqTarget target = owner_->TargetOf(ContextOf(registration));
      if (!Leads(target) || !HeldByGroup(target, registration)) continue;
      streams_.emplace(key, MakeRegisteredStream(registration));
      changed = true;
    }
    if (changed) PublishViews();
  }

  std::unique_ptr<ZmqStream> MakeRegisteredStream(const Registration& r) {
    auto stream = std::make_unique<ZmqStream>();
    stream->key = r.Key();
    stream->registration = r;
    stream->identity.context = ContextOf(r);
    stream->target = owner_->TargetOf(stream->identity.context);
    const std::optional<uint64_t> position = PersistedPosition(*stream);
    stream->identity.holder = r.Holder();
    stream->identity.engine = r.type;
    stream->identity.report_mode = r.report_mode;
    stream->replay_endpoint = r.replay_endpoint;
    stream->view = std::make_shared<StreamView>();
    StreamView& v = *stream->view;
    v.key = stream->key;
    v.mode = "connect";
    v.endpoint = r.endpoint;
    v.replay_endpoint = r.replay_endpoint;
    v.type = std::string(EngineTypeName(r.type));
    v.report_mode = std::string(ReportModeName(r.report_mode));
    v.instance_id = r.instance_id;
    v.tenant_id = r.tenant_id;
    v.model = r.model;
    v.dp_rank = r.dp_rank;
    v.topic = r.topic;
    if (position) v.counters.last_sequence.store(static_cast<int64_t>(*position));
    stream->follower.emplace(stream->key, position, FollowerOptions(stream->replay_endpoint),
                             &v.counters);
    stream->socket =
        std::make_unique<PublisherSocket>(&context_, r.endpoint, r.topic, SubOptions(), &v);
    stream->socket->Open(Clock::now());
    if (stream->socket->sub()) {
      LogInfo("zmq: following " + r.endpoint + " (" + stream->key + ", " + v.type + ")");
    }
    return stream;
  }

  // Whether the stream's group holds `registration` too (a registration is every group's,
  // each applying it in its own time): until it does, the group would drop the stream's
  // batches as an unregistered stream's, so the stream is not followed yet.
  bool HeldByGroup(const ZmqTarget& target, const Registration& registration) const {
    if (target.machine == owner_->machine_) return true;  // read from it just now
    return target.machine->ReadRegistry([&registration](const Registry& r, Revision) {
      auto it = r.registrations.find(registration.Key());
      return it != r.registrations.end() && it->second == registration;
    });
  }

  static ContextKey ContextOf(const Registration& r) {
    return ContextKey{r.tenant_id, r.model, r.lora_name, r.block_size, r.additional_salt};
  }

  // The stream of (topic, rank) on `listener`, made on its first message; null when its
  // group is led by another server (its messages are that server's to ingest).
  ZmqStream* ListenerStream(ZmqListener& listener, std::string_view topic, uint32_t dp_rank) {
    // SGLang appends "\0sgl-kv-epoch=<n>" to its topic in snapshot mode: the publisher is
    // the same across epochs (a new epoch restarts its sequence, which is a restart).
    topic = topic.substr(0, topic.find('\0'));
    std::string key = std::string(kListenerStreamPrefix) + listener.config.bind + "|" +
                      std::string(topic) + "|" + std::to_string(dp_rank);
    auto it = listener.streams.find(key);
    if (it != listener.streams.end()) return it->second.get();
    const ZmqListenerConfig& c = listener.config;
    // llm-d's topic "kv@<pod>@<model>" names the holder and the model.
    std::string holder(topic), model = c.model;
    const size_t first = topic.find('@');
    const size_t second = first == std::string_view::npos ? first : topic.find('@', first + 1);
    if (second != std::string_view::npos && topic.find('@', second + 1) == std::string_view::npos) {
      holder = std::string(topic.substr(first + 1, second - first - 1));
      model = std::string(topic.substr(second + 1));
    }
    if (holder.empty()) holder = c.bind;
    const ContextKey context{c.tenant_id, model, c.lora_name, c.block_size, c.additional_salt};
    ZmqTarget target = owner_->TargetOf(context);
    if (!Leads(target)) return nullptr;
    auto stream = std::make_unique<ZmqStream>();
    stream->key = key;
    stream->identity.context = context;
    stream->identity.holder = HolderKey{holder, dp_rank};
    stream->identity.engine = c.type;
    stream->identity.report_mode = c.report_mode;
    stream->target = std::move(target);
    const std::optional<uint64_t> persisted = PersistedPosition(*stream);
    stream->view = std::make_shared<StreamView>();
    StreamView& v = *stream->view;
    v.key = key;
    v.mode = "bind";
    v.endpoint = c.bind;
    v.type = std::string(EngineTypeName(c.type));
    v.report_mode = std::string(ReportModeName(c.report_mode));
    v.instance_id = holder;
    v.tenant_id = c.tenant_id;
    v.model = model;
    v.dp_rank = dp_rank;
    v.topic = std::string(topic);
    stream->follower.emplace(key, persisted, FollowerOptions(stream->replay_endpoint), &v.counters);
    LogInfo("zmq: new stream " + key + " on listener " + c.bind);
    ZmqStream* made = stream.get();
    listener.streams.emplace(std::move(key), std::move(stream));
    PublishViews();
    return made;
  }

  void PublishViews() {
    std::vector<std::shared_ptr<StreamView>> views;
    for (auto& [key, stream] : streams_) views.push_back(stream->view);
    for (auto& listener : listeners_) {
      for (auto& [key, stream] : listener->streams) views.push_back(stream->view);
    }
    std::lock_guard lock(owner_->views_mu_);
    owner_->views_ = std::move(views);
  }

  // --- receiving ------------------------------------------------------------------------

  void PollOnce() {
    // Items are rebuilt every round: streams come and go between rounds.
    items_.clear();
    targets_.clear();
    for (auto& [key, stream] : streams_) {
      if (zmq::socket_t* sub = stream->socket->sub()) {
        AddItem(*sub, Target{stream.get(), nullptr, Target::kLive});
        AddItem(*stream->socket->monitor(), Target{stream.get(), nullptr, Target::kMonitor});
      }
      if (stream->dealer) AddItem(*stream->dealer, Target{stream.get(), nullptr, Target::kReplay});
    }
    for (auto& listener : listeners_) {
      AddItem(*listener->sub, Target{nullptr, listener.get(), Target::kLive});
    }
    try {
      zmq::poll(items_, kPollInterval);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) LogWarning(std::string("zmq: poll failed: ") + e.what());
      return;
    }
    for (size_t i = 0; i < items_.size(); ++i) {
      if ((items_[i].revents & ZMQ_POLLIN) == 0) continue;
      const Target& t = targets_[i];
      if (t.listener) {
        DrainListener(*t.listener);
      } else if (t.kind == Target::kReplay) {
        DrainReplay(*t.stream);
      } else if (t.kind == Target::kMonitor) {
        t.stream->socket->DrainMonitor(Clock::now());
      } else {
        DrainLive(*t.stream);
      }
    }
  }

  struct Target {
    enum Kind { kLive, kReplay, kMonitor };
    ZmqStream* stream;
    ZmqListener* listener;
    Kind kind;
  };

  void AddItem(zmq::socket_t& socket, Target target) {
    items_.push_back(zmq::pollitem_t{socket.handle(), 0, ZMQ_POLLIN, 0});
    targets_.push_back(target);
  }

  // Receives one multipart message without blocking; false when none is waiting.
  bool Receive(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
    frames->clear();
    try {
      return zmq::recv_multipart(socket, std::back_inserter(*frames), zmq::recv_flags::dontwait)
          .has_value();
    } catch (const zmq::error_t& e) {
      LogWarning(std::string("zmq: receive failed: ") + e.what());
      return false;
    }
  }

  void DrainLive(ZmqStream& stream) {
    std::vector<zmq::message_t> frames;
    for (size_t n = 0; n < owner_->options_.max_messages_per_round; ++n) {
      zmq::socket_t* sub = stream.socket->sub();
      if (!sub || !Receive(*sub, &frames)) return;
      StreamCounters& c = stream.view->counters;
      std::optional<uint64_t> sequence;
      if (frames.size() == 3) sequence = ReadSequence(frames[1]);
      if (!sequence) {
        c.malformed_messages.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      stream.socket->OnMessage();
      OnLive(stream, *sequence, ZmqBatch{std::move(frames[2]), std::nullopt});
    }
  }

  void DrainListener(ZmqListener& listener) {
    std::vector<zmq::message_t> frames;
    for (size_t n = 0; n < owner_->options_.max_messages_per_round; ++n) {
      if (!Receive(*listener.sub, &frames)) return;
      if (led_ == 0) continue;  // a leader ingests; a follower only keeps its socket drained
      std::optional<uint64_t> sequence;
      if (frames.size() == 3) sequence = ReadSequence(frames[1]);
      if (!sequence) {
        ++listener_malformed_;
        continue;
      }
      // The stream is (topic, dp rank), and the rank is inside the payload.
      Result<EngineBatch> decoded = DecodeEngineBatch(Bytes(frames[2]));
      uint32_t rank = 0;
      if (decoded.has_value() && decoded->dp_rank && *decoded->dp_rank > 0) {
        rank = static_cast<uint32_t>(std::min<int64_t>(*decoded->dp_rank, UINT32_MAX));
      }
      ZmqStream* stream = ListenerStream(listener, frames[0].to_string_view(), rank);
      if (stream == nullptr) continue;  // another server leads its group
      OnLive(*stream, *sequence, ZmqBatch{std::move(frames[2]), std::move(decoded)});
    }
  }

  // A live batch: the follower decides, this does what it says.
  void OnLive(ZmqStream& stream, uint64_t sequence, ZmqBatch batch) {
    stream.view->counters.last_event_unix_ms.store(NowUnixMs(), std::memory_order_relaxed);
    StreamActions actions(this, &stream);
    if (stream.follower->OnLive(sequence, std::move(batch), Clock::now(), actions)) {
      LaunchWaitingReplays();
    }
  }

  // --- replay ---------------------------------------------------------------------------

  void LaunchWaitingReplays() {
    for (auto& [key, stream] : streams_) {
      if (running_replays_ >= owner_->options_.max_concurrent_replays) return;
      if (stream->follower->replay() == Follower::Replay::kWaiting) StartReplay(*stream);
    }
  }

  void StartReplay(ZmqStream& stream) {
    const Follower::Ticket ticket = stream.follower->BeginReplay(Clock::now());
    const uint64_t from = ticket.from;
    stream.replay_id = ticket.id;
    try {
      stream.dealer = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      stream.dealer->set(zmq::sockopt::linger, 0);
      // A ROUTER drops replies silently when the reader's pipe is full: never let it be.
      stream.dealer->set(zmq::sockopt::rcvhwm, 0);
      stream.dealer->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
      stream.dealer->connect(stream.replay_endpoint);
      std::string request(8, '\0');
      for (int i = 0; i < 8; ++i) request[i] = static_cast<char>((from >> (56 - 8 * i)) & 0xff);
      std::array<zmq::const_buffer, 2> parts{zmq::const_buffer(nullptr, 0), zmq::buffer(request)};
      if (!zmq::send_multipart(*stream.dealer, parts, zmq::send_flags::dontwait)) {
        throw zmq::error_t();
      }
    } catch (const zmq::error_t& e) {
      LogWarning("zmq: replay request to " + stream.replay_endpoint + " failed: " + e.what());
      stream.dealer.reset();
      StreamActions actions(this, &stream);
      stream.follower->AbandonReplay(Clock::now(), actions);  // it held no slot yet
      return;
    }
    ++running_replays_;
    LogInfo("zmq: " + stream.key + ": replaying from sequence " + std::to_string(from) + " (" +
            stream.replay_endpoint + ")");
  }

  void DrainReplay(ZmqStream& stream) {
    std::vector<zmq::message_t> frames;
    StreamCounters& c = stream.view->counters;
    for (size_t n = 0; n < owner_->options_.max_messages_per_round; ++n) {
      if (!stream.dealer || !Receive(*stream.dealer, &frames)) return;
      stream.follower->OnReplayMessage(stream.replay_id, Clock::now());
      // Replies are [empty, seq, payload] (vLLM < 0.26) or [empty, topic, seq, payload].
      size_t first = !frames.empty() && frames[0].size() == 0 ? 1 : 0;
      const size_t parts = frames.size() - first;
      if (parts != 2 && parts != 3) {
        c.malformed_messages.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const zmq::message_t& seq_frame = frames[first + parts - 2];
      zmq::message_t& payload = frames[first + parts - 1];
      const std::optional<uint64_t> sequence = ReadSequence(seq_frame);
      if (!sequence) {
        c.malformed_messages.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (*sequence == kEndSequence || payload.size() == 0) {
        EndReplay(stream, /*completed=*/true);
        return;
      }
      StreamActions actions(this, &stream);
      stream.follower->OnReplayBatch(stream.replay_id, *sequence,
                                     ZmqBatch{std::move(payload), std::nullopt}, actions);
    }
  }

  // Closes the replay socket and frees its slot, then lets the follower hand on what it
  // buffered.
  void EndReplay(ZmqStream& stream, bool completed) {
    if (stream.follower->replay() == Follower::Replay::kRunning) --running_replays_;
    stream.dealer.reset();
    StreamActions actions(this, &stream);
    if (completed) {
      stream.follower->OnReplayEnd(stream.replay_id, Clock::now(), actions);
    } else {
      stream.follower->AbandonReplay(Clock::now(), actions);
    }
  }

  // The engine restarted during the replay (the follower asks, before clearing the holder):
  // closing the socket discards every answer of the old engine's replay still queued in it,
  // and a later replay connects a new socket, whose identity the old answers do not name.
  void CancelReplay(ZmqStream& stream) {
    --running_replays_;
    stream.dealer.reset();
    LogInfo("zmq: " + stream.key + ": replay cancelled (the engine restarted)");
  }

  void CheckReplayTimeouts() {
    const Clock::time_point now = Clock::now();
    for (auto& [key, stream] : streams_) {
      if (stream->follower->ReplayTimedOut(now)) EndReplay(*stream, /*completed=*/false);
    }
  }

  // --- applying -------------------------------------------------------------------------

  // What a stream's follower decides, done on the stream.
  class StreamActions final : public FollowerActions<ZmqBatch> {
   public:
    StreamActions(Loop* loop, ZmqStream* stream) : loop_(loop), stream_(stream) {}
    void Apply(uint64_t sequence, ZmqBatch batch) override {
      loop_->Apply(*stream_, sequence, std::move(batch));
    }
    void ClearHolder() override { loop_->SubmitRestart(*stream_); }
    void CancelReplay() override { loop_->CancelReplay(*stream_); }

   private:
    Loop* loop_;
    ZmqStream* stream_;
  };

  void Apply(ZmqStream& stream, uint64_t sequence, ZmqBatch zmq_batch) {
    StreamCounters& c = stream.view->counters;
    if (!zmq_batch.decoded) zmq_batch.decoded.emplace(DecodeEngineBatch(Bytes(zmq_batch.payload)));
    Result<EngineBatch>& batch = *zmq_batch.decoded;
    if (!batch.has_value()) {
      c.decode_failures.fetch_add(1, std::memory_order_relaxed);
      LogWarning("zmq: " + stream.key + ": batch " + std::to_string(sequence) +
                 " does not decode: " + batch.error().ToString());
      return;
    }
    c.skipped_events.fetch_add(batch->skipped_events, std::memory_order_relaxed);
    c.unknown_fields.fetch_add(batch->unknown_fields, std::memory_order_relaxed);
    c.skipped_namespace_events.fetch_add(batch->skipped_namespace_events,
                                         std::memory_order_relaxed);
    MappedBatch mapped = mapper_.Map(*batch, stream.identity, &stream.map_state);
    c.skipped_events.fetch_add(mapped.skipped_not_whole_blocks + mapped.skipped_sliding_or_mamba +
                                   mapped.skipped_too_large + mapped.skipped_empty,
                               std::memory_order_relaxed);
    mapped.batch.position = StreamPosition{stream.key, sequence, false};
    Submit(stream, std::move(mapped.batch),
           Tally{mapped.stored, mapped.removed, mapped.cleared, mapped.blocks});
  }

  void SubmitRestart(ZmqStream& stream) {
    CommandBatch batch;
    batch.commands.emplace_back(ClearCommand{stream.identity.holder, std::nullopt, std::nullopt});
    batch.position = StreamPosition{stream.key, 0, /*restart=*/true};
    stream.map_state = StreamMapState{};
    Submit(stream, std::move(batch), Tally{});
  }

  // The last sequence of `stream` its group applied, if any.
  static std::optional<uint64_t> PersistedPosition(const ZmqStream& stream) {
    return stream.target.machine->ReadRegistry(
        [&key = stream.key](const Registry& r, Revision) -> std::optional<uint64_t> {
          auto p = r.positions.find(key);
          return p == r.positions.end() ? std::nullopt : std::optional<uint64_t>(p->second);
        });
  }

  // Hands a batch to the applier, waiting while its queue is full: backpressure goes to
  // the publishers' send buffers, whose overflow shows up as gaps that are replayed.
  void Submit(ZmqStream& stream, CommandBatch batch, Tally tally) {
    std::shared_ptr<StreamView> view = stream.view;
    auto done = [view, tally](Result<Revision> r) {
      StreamCounters& c = view->counters;
      if (!r.has_value()) {
        c.apply_failures.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      c.batches_applied.fetch_add(1, std::memory_order_relaxed);
      c.stored_events.fetch_add(tally.stored, std::memory_order_relaxed);
      c.removed_events.fetch_add(tally.removed, std::memory_order_relaxed);
      c.cleared_events.fetch_add(tally.cleared, std::memory_order_relaxed);
      c.block_events.fetch_add(tally.blocks, std::memory_order_relaxed);
    };
    while (true) {
      // A stream goes on past stores into new contexts that its group does not take now (a
      // refusal would be retried for as long as the group refuses, stalling it); checked
      // on every attempt, since the group may begin refusing between two.
      if (const size_t dropped = stream.target.drop_new_context_stores
                                     ? stream.target.drop_new_context_stores(&batch)
                                     : stream.target.applier->DropNewContextStores(&batch);
          dropped > 0) {
        view->counters.refused_new_context_stores.fetch_add(dropped, std::memory_order_relaxed);
      }
      Status s = stream.target.try_submit ? stream.target.try_submit(&batch, done)
                                          : stream.target.applier->TrySubmitAsync(&batch, done);
      if (s.ok()) return;
      if (AfterRefusal(s.code(), owner_->stopping_.load(std::memory_order_acquire)) ==
          SubmitRetry::kGiveUp) {
        view->counters.apply_failures.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  ZmqIngest* owner_;
  EngineEventMapper mapper_;
  zmq::context_t context_{1};
  StreamMap streams_;
  std::vector<std::unique_ptr<ZmqListener>> listeners_;
  size_t running_replays_ = 0;
  uint64_t led_ = 0;  // the groups this server leads, as last read (bit g - 1: group g)
  Clock::time_point next_report_mode_check_;
  uint64_t listener_malformed_ = 0;
  std::vector<zmq::pollitem_t> items_;
  std::vector<Target> targets_;
};

ZmqIngest::ZmqIngest(StateMachine* machine, Applier* applier, ZmqIngestOptions options)
    : machine_(machine), applier_(applier), options_(std::move(options)) {}

ZmqIngest::~ZmqIngest() { Stop(); }

Status ZmqIngest::Start() {
  loop_ = std::make_unique<Loop>(this);
  Status s = loop_->BindListeners();
  if (!s.ok()) {
    loop_.reset();
    return s;
  }
  thread_ = std::thread([this] {
    SetCurrentThreadName("zmq-ingest");
    loop_->Run();
  });
  return Status::Ok();
}

void ZmqIngest::Stop() {
  stopping_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

std::vector<std::shared_ptr<const StreamView>> ZmqIngest::Streams() const {
  std::lock_guard lock(views_mu_);
  return {views_.begin(), views_.end()};
}

}  // namespace kvatlas::server
