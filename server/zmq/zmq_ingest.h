// ZmqIngest: follows engine KV-event publishers over ZMQ (docs/engine-events.md) and turns
// their batches into commands for the Applier.
//
// Two ways to receive: for every registration in the state machine's Registry (POST
// /register, or the config file) kvatlas connects a SUB socket to the publisher's PUB
// endpoint (vLLM's default: the engine binds tcp://*:5557); for every configured listener
// it binds a SUB socket that publishers connect to (centralized mode), and tells streams
// apart by topic and data-parallel rank.
//
// Per stream it tracks the sequence: a gap is replayed from the publisher's replay ROUTER
// over a DEALER socket while live batches wait in a bounded buffer; a live sequence at or
// below the previous live one means the engine restarted — at once, also mid-replay, whose
// socket is then closed with the old engine's answers queued in it — so its holder is
// cleared and its buffer replayed from 0. Every batch carries its stream position into the
// state machine, which applies a sequence at most once (registration.h), so replays and
// retries never double-count.
//
// The decisions per stream — sequence, gaps, replay, restarts, cooldown, the buffer of live
// batches waiting for a replay — are a StreamFollower's (stream_follower.h), which knows no
// sockets; the ingest loop here feeds it the stream's messages and the time, and does what
// it says: submits batches, clears holders, opens and closes replay sockets, and grants
// replay slots (at most max_concurrent_replays across streams). A registered stream's SUB
// socket is a PublisherSocket (publisher_socket.h), which recreates it when libzmq has
// closed its connection for good (a message over 64 MiB).
//
// Threading: one thread owns every ZMQ socket and all stream state (followers included); it
// polls, syncs the Registry, decodes, maps and hands batches to the Applier with
// TrySubmitAsync, waiting (bounded queue: backpressure reaches the publisher's HWM, whose
// drops become gaps that are replayed) when the applier is full. Applier callbacks only bump
// atomic counters. Registry changes reach the thread through an atomic flag
// (NotifyRegistryChanged) read on every poll round.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/common/placement.h"
#include "kvatlas/common/status.h"
#include "server/ingest/engine_event_mapper.h"
#include "server/model/registration.h"
#include "server/state/applier.h"
#include "server/state/state_machine.h"
#include "server/zmq/stream_stats.h"

namespace kvatlas::server {

// A SUB socket kvatlas binds and publishers connect to (centralized mode). Streams on it
// are told apart by topic and dp rank; identity comes from the topic when it has the llm-d
// form "kv@<pod>@<model>" (holder <pod>, model <model>), else the whole topic is the holder
// and `model` the model.
struct ZmqListenerConfig {
  std::string bind;   // e.g. "tcp://*:5557"
  std::string topic;  // subscription prefix; empty = every topic
  EngineType type = EngineType::kVllm;
  std::string model;
  std::string tenant_id = "default";
  std::string lora_name;
  uint32_t block_size = 16;
  std::string additional_salt;
  ReportMode report_mode = ReportMode::kIncremental;

  friend bool operator==(const ZmqListenerConfig&, const ZmqListenerConfig&) = default;
};

// The group a stream's batches go to: its state machine (stream positions, tallies) and
// applier (docs/scaling.md §Groups on every server).
struct ZmqTarget {
  StateMachine* machine = nullptr;
  Applier* applier = nullptr;
  // How a batch is handed over, with Applier::TrySubmitAsync's contract (refused: the batch
  // left as it was, to retry); null = applier->TrySubmitAsync. A server sets it to forward
  // to the group's leader where it does not lead the group (docs/scaling.md §Writes reach
  // every group's leader).
  std::function<Status(CommandBatch*, Applier::Callback)> try_submit;
  // Its raft group: the stream is followed while this server leads it (led_groups).
  GroupId group = 1;
  // Removes from a batch the stores the stream cannot write now (contexts new to a group
  // that takes none) and returns how many; null = applier->DropNewContextStores. A server
  // of several groups sets it to place new contexts first (docs/scaling.md §Placed
  // contexts).
  std::function<size_t(CommandBatch*)> drop_new_context_stores = nullptr;
};

struct ZmqIngestOptions {
  std::vector<ZmqListenerConfig> listeners;
  // The group holding a stream's context (its home group: one engine's stream maps to one
  // group); null = the ingest's own machine and applier. The registrations it follows are
  // read from its own machine (group 1's), and a registered stream is followed once its
  // group holds the same registration (a registration is every group's: until its group
  // applied it, the group would drop the stream's batches as an unregistered stream's).
  std::function<ZmqTarget(const ContextKey&)> target_of;
  // Replays running at once; more gaps wait (their live batches buffered) for a slot.
  size_t max_concurrent_replays = 4;
  // A replay that receives nothing for this long, or runs longer than the total, is
  // abandoned: the stream goes on from its buffered live batches and counts the loss.
  std::chrono::milliseconds replay_idle_timeout{2'000};
  std::chrono::milliseconds replay_total_timeout{30'000};
  // After a failed replay, gaps on that stream are not replayed for this long.
  std::chrono::milliseconds replay_cooldown{30'000};
  // Live batches held per stream while it replays; past it they are dropped (and counted
  // as lost, since the next replay starts after them).
  size_t max_buffered_batches = 10'000;
  // ZMQ receive high-water mark of every SUB socket, in messages.
  int receive_hwm = 100'000;
  // libzmq's reconnection backoff of SUB sockets (ZMQ_RECONNECT_IVL, doubling up to
  // ZMQ_RECONNECT_IVL_MAX), also the backoff of recreating a socket whose connection libzmq
  // closed for good (publisher_socket.h).
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{5'000};
  // Registrations the service layer admits (registration_service.h); sizes the ZMQ
  // context's socket limit (three sockets per registered stream).
  size_t max_registrations = 256;
  // Messages taken from one socket per poll round, so one busy publisher cannot starve
  // the others.
  size_t max_messages_per_round = 256;
  MapperOptions mapper;
  // The groups this server leads: bit g - 1 for group g (groups 1 to 64). A stream is
  // followed only by the leader of its group (ZmqTarget::group): the other servers drop
  // its socket (a listener's stays bound, its messages of that group ignored), and the
  // group's next leader resumes the stream from the replicated position (replaying the gap
  // from the engine). Null = every group.
  std::function<uint64_t()> led_groups;
};

class ZmqIngest {
 public:
  // The pointers must outlive the ZmqIngest. Nothing runs before Start().
  ZmqIngest(StateMachine* machine, Applier* applier, ZmqIngestOptions options);
  ~ZmqIngest();  // Stop()s
  ZmqIngest(const ZmqIngest&) = delete;
  ZmqIngest& operator=(const ZmqIngest&) = delete;

  // Binds the configured listeners (kUnavailable naming the endpoint if one cannot be
  // bound), then starts the ingest thread, which connects to every registered publisher.
  [[nodiscard]] Status Start();

  // Stops the thread and closes every socket. Batches already handed to the Applier are
  // applied by it. Idempotent.
  void Stop();

  // Registrations changed: the thread re-reads the Registry on its next round (within
  // ~50 ms). Cheap and non-blocking; safe from the applier thread.
  void NotifyRegistryChanged() { registry_dirty_.store(true, std::memory_order_release); }

  // Every stream, registered ones first (by key), then listener streams as they appeared.
  std::vector<std::shared_ptr<const StreamView>> Streams() const;

  // Checks that `endpoint` is a ZMQ endpoint kvatlas can connect to or bind:
  // tcp://HOST:PORT (HOST may be * for binds), ipc://PATH or inproc://NAME.
  [[nodiscard]] static Status ValidateEndpoint(std::string_view endpoint, bool for_bind);

 private:
  class Loop;

  // The group a context's stream goes to (options_.target_of, else this ingest's own).
  ZmqTarget TargetOf(const ContextKey& context) const {
    return options_.target_of ? options_.target_of(context)
                              : ZmqTarget{machine_, applier_, nullptr, 1, nullptr};
  }

  StateMachine* machine_;
  Applier* applier_;
  ZmqIngestOptions options_;
  std::atomic<bool> registry_dirty_{true};
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;

  mutable std::mutex views_mu_;
  std::vector<std::shared_ptr<StreamView>> views_;  // guarded by views_mu_
};

}  // namespace kvatlas::server
