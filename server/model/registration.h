// Registrations and stream positions: the part of the replicated state that says which
// engine publishers kvatlas follows (POST /register, the config file) and how far each of
// their event streams has been applied. They change only through commands (command.h), so
// they are persisted with the map (docs/storage.md `R`/`S` records) and, under raft,
// replicated: a new leader resumes every stream where the old one stopped.
// Plain values: thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kvatlas/common/events.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/types.h"

namespace kvatlas::server {

enum class EngineType : uint8_t { kVllm = 0, kSglang = 1, kMooncake = 2 };

// The Conductor wire names: "vLLM", "SGLang", "Mooncake".
std::string_view EngineTypeName(EngineType type);
// Case-insensitive; nullopt for anything else.
std::optional<EngineType> ParseEngineType(std::string_view name);

// What a publisher's stores mean (docs/engine-events.md §Report modes).
enum class ReportMode : uint8_t {
  // Every store announces a newly cached physical block: a copy, counted (vLLM's default
  // "incremental" mode; SGLang and Mooncake publish a block once until it is removed).
  kIncremental = 0,
  // vLLM requests with kv_cache_report_mode="full" also re-send, on a prefix hit, the
  // blocks they reused: a store without a parent (the only shape such a re-report has) is a
  // report of blocks already held, not new copies. Stores that continue a parent stay
  // copies. An event's own `origin` (NEW / REUSED) overrides either mode.
  kFull = 1,
};
inline constexpr uint8_t kMaxReportMode = 1;

// "incremental", "full".
std::string_view ReportModeName(ReportMode mode);
// Case-insensitive; nullopt for anything else.
std::optional<ReportMode> ParseReportMode(std::string_view name);
// Why a publisher of `type` cannot use `mode`, or "" when it can: only vLLM has modes.
std::string ReportModeProblem(EngineType type, ReportMode mode);

// One followed publisher: an engine process (one data-parallel rank) or a storage daemon.
// Its events update holder {instance_id, dp_rank} in the contexts of `tenant_id`/`model`.
struct Registration {
  // ZMQ endpoint of the publisher's PUB socket, which kvatlas connects a SUB socket to
  // (e.g. "tcp://10.0.0.5:5557"); empty for an instance that publishes no KV events, whose
  // cache routes predict (docs/routing.md §Approximate mode).
  std::string endpoint;
  // ZMQ endpoint of its replay ROUTER socket; empty = the publisher cannot replay.
  std::string replay_endpoint;
  EngineType type = EngineType::kVllm;
  std::string model;
  std::string lora_name;  // default LoRA of the stream's events (events may name their own)
  std::string tenant_id = "default";
  std::string instance_id;
  uint32_t block_size = 0;
  uint32_t dp_rank = 0;
  std::string additional_salt;
  // SUB topic prefix filter; empty = every topic.
  std::string topic;
  ReportMode report_mode = ReportMode::kIncremental;

  friend bool operator==(const Registration&, const Registration&) = default;

  // The Conductor identity of a registration: "<instance>|<tenant>|<rank>". Registering
  // the same key again replaces the registration.
  std::string Key() const { return RegistrationKey(instance_id, tenant_id, dp_rank); }
  HolderKey Holder() const { return HolderKey{instance_id, dp_rank}; }
  bool PublishesEvents() const { return !endpoint.empty(); }

  static std::string RegistrationKey(std::string_view instance, std::string_view tenant,
                                     uint32_t dp_rank) {
    std::string key(instance);
    key += '|';
    key += tenant;
    key += '|';
    key += std::to_string(dp_rank);
    return key;
  }
};

// Streams of bound (centralized-mode) listeners are keyed "listen:<endpoint>|<topic>|<rank>";
// the batches of a REST or binary-protocol writer (events.h WriterPosition) are keyed
// "writer:<writer_id>"; every other stream key is the key of the registration it belongs
// to. Listener and writer streams need no registration.
inline constexpr std::string_view kListenerStreamPrefix = "listen:";
inline constexpr std::string_view kWriterStreamPrefix = "writer:";

inline bool IsListenerStream(std::string_view stream) {
  return stream.substr(0, kListenerStreamPrefix.size()) == kListenerStreamPrefix;
}
inline bool IsWriterStream(std::string_view stream) {
  return stream.substr(0, kWriterStreamPrefix.size()) == kWriterStreamPrefix;
}

// Where a batch sits in its publisher's stream. The StateMachine applies a batch carrying
// a position only if its sequence is past the stream's recorded one, then records it: a
// batch delivered twice (a replay overlapping live traffic, a retried submission, a new
// leader replaying a gap) changes nothing the second time.
struct StreamPosition {
  std::string stream;  // a stream key (a registration key, or a listener's topic key)
  uint64_t sequence = 0;
  // The publisher restarted (its sequence went backwards): forget the recorded position,
  // apply the batch (typically a clear of the holder) and record no position, so that the
  // new sequence, which starts again at 0, is accepted. `sequence` is then unused.
  bool restart = false;

  friend bool operator==(const StreamPosition&, const StreamPosition&) = default;
};

// The position key of a batch part holding a context placed off its home group by the
// directory (docs/scaling.md §Placed contexts): the stream's key, a 0x1f separator and the
// context, so that its group records the context's position apart from the stream's other
// contexts there — a part routed again after a `wrong_group` refusal is then not skipped
// as a position that group applied already. Injective in (stream, context).
[[nodiscard]] std::string PlacedStreamKey(std::string_view stream, const ContextKey& context);
// The stream a position key belongs to: `key` itself, or the stream of a PlacedStreamKey.
[[nodiscard]] std::string_view BaseStreamKey(std::string_view key);
inline constexpr char kPlacedStreamSeparator = '\x1f';

// Where a cluster member serves clients (AnnounceCommand): "HOST:PORT" of its REST API and
// of its binary protocol; and whether it is draining (DrainCommand): leads no group.
struct ServerAddresses {
  std::string http_address;
  std::string rpc_address;
  bool draining = false;

  // The addresses alone, whatever the drain.
  bool SameAddresses(const ServerAddresses& other) const {
    return http_address == other.http_address && rpc_address == other.rpc_address;
  }

  friend bool operator==(const ServerAddresses&, const ServerAddresses&) = default;
};

// The stream position of a writer's batch (events.h WriterPosition).
inline StreamPosition WriterStreamPosition(const WriterPosition& writer) {
  return StreamPosition{std::string(kWriterStreamPrefix) + writer.writer_id, writer.sequence,
                        /*restart=*/false};
}

// The registry part of the state: registrations by key, last applied sequence by stream,
// and the announced addresses of cluster members by raft server id.
// A context its home group disowned (DisownContextCommand): at which revision of that
// group, and the directory epoch named then.
struct DisownedContext {
  Revision revision = 0;
  Epoch epoch = 0;

  friend bool operator==(const DisownedContext&, const DisownedContext&) = default;
};

// Orders holders by id, then rank (Registry::holder_wide).
struct HolderKeyLess {
  bool operator()(const HolderKey& a, const HolderKey& b) const {
    return a.id != b.id ? a.id < b.id : a.dp_rank < b.dp_rank;
  }
};

// Holder-wide commands' fan-out ids kept per holder (Registry::holder_wide).
inline constexpr size_t kHolderWideKept = 64;

struct Registry {
  std::map<std::string, Registration, std::less<>> registrations;
  std::map<std::string, uint64_t, std::less<>> positions;
  std::map<uint64_t, ServerAddresses> servers;
  // Group 1's only: where contexts placed off their home group live (PlaceContextCommand,
  // SetGroupAcceptingCommand). Empty (epoch 0) in every other group.
  PlacementDirectory directory;
  // The contexts this group refuses (DisownContextCommand).
  std::map<ContextKey, DisownedContext, ContextKeyLess> disowned;
  // Per holder, the fan-out ids of the last kHolderWideKept holder-wide commands this group
  // applied (ClearCommand::fanout, UnregisterCommand::fanout), oldest first: what a move
  // compares between two groups (docs/scaling.md §Moves).
  std::map<HolderKey, std::vector<uint64_t>, HolderKeyLess> holder_wide;
  // The contexts this group imports in a move (ImportContextCommand), each with the revision
  // its import started at: holder-wide commands keep off their copies until the move ends
  // here (docs/scaling.md §Moves).
  std::map<ContextKey, Revision, ContextKeyLess> importing;

  friend bool operator==(const Registry&, const Registry&) = default;
};

}  // namespace kvatlas::server
