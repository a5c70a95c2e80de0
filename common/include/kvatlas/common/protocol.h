// The kvatlas binary protocol (docs/protocol.md): length-prefixed frames carrying a
// version, a message type, a request id and a status, over TCP. Requests are pipelined:
// a client may send many before reading, and answers carry the id of their request (they
// may come back in a different order). This header is the codec only — pure functions and
// an incremental frame decoder — shared by the server (server/rpc) and the client library.
//
// Thread-safety: functions are pure; a FrameDecoder is a value owned by one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/events.h"
#include "kvatlas/common/export.h"
#include "kvatlas/common/feed.h"
#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/role.h"
#include "kvatlas/common/routing.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas::protocol {

inline constexpr uint8_t kVersion = 1;
// Bytes of the fixed header, including the 4-byte length prefix.
inline constexpr size_t kHeaderBytes = 20;
// Default and hard upper bounds of one frame's payload.
inline constexpr uint32_t kDefaultMaxPayloadBytes = 16u << 20;
inline constexpr uint32_t kMaxPayloadBytes = 256u << 20;

// Stable numbers: never renumber or reuse. A response carries its request's type.
enum class MessageType : uint8_t {
  kError = 0,        // response to a frame that could not be read as a request (type unknown)
  kIngest = 1,       // request: IngestRequest → response: IngestAnswer
  kLookup = 2,       // request: LookupRequest → response: LookupAnswer
  kLocate = 3,       // request: LocateRequest → response: LocateAnswer
  kStats = 4,        // request: empty → response: StatsAnswer
  kPing = 5,         // request: empty → response: empty (liveness, round-trip time)
  kRoute = 6,        // request: RoutingRequest → response: RoutingAnswer (routing.h)
  kWatch = 7,        // request: WatchRequest → a stream of response frames (docs/protocol.md)
  kSnapshot = 8,     // request: SnapshotRequest → one or more SnapshotPart response frames
  kHeartbeat = 9,    // request: HeartbeatRequest → response: HeartbeatAnswer (holder leases)
  kAuth = 10,        // request: AuthRequest → response: AuthAnswer; a connection's first frame
  kLoadReport = 11,  // request: LoadReport → response: LoadReportAnswer (shared load)
  kLoadView = 12,    // request: empty → response: LoadViewAnswer (the live load reports)
  kPredict = 13,     // request: PredictRequest → response: PredictAnswer (a local decision)
  kDirectory = 14,   // request: empty → response: DirectoryAnswer (routing by the directory)
};

// "ingest", "lookup", ..., "auth", "error" for kError; "other" for a number that is no
// MessageType (metrics labels, log lines).
[[nodiscard]] KVATLAS_EXPORT std::string_view MessageTypeName(MessageType type);

inline constexpr uint8_t kFlagResponse = 1;  // set on every frame the server sends

// The fixed header. On the wire (all little-endian):
//   u32 length      bytes after this field: 16 + payload
//   u8  version     kVersion
//   u8  type        MessageType
//   u8  flags       kFlagResponse on answers
//   u8  reserved    0
//   u16 status      StatusCode number; 0 (ok) on requests
//   u16 reserved    0
//   u64 request_id  chosen by the client, echoed by the server
struct FrameHeader {
  uint8_t version = kVersion;
  MessageType type = MessageType::kError;
  uint8_t flags = 0;
  StatusCode status = StatusCode::kOk;
  uint64_t request_id = 0;
  uint32_t payload_bytes = 0;

  bool is_response() const { return (flags & kFlagResponse) != 0; }
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

struct Frame {
  FrameHeader header;
  std::string payload;
};

// Appends header (payload_bytes is taken from payload.size()) and payload to *out.
// Reserved bytes are written as 0. REQUIRES: payload.size() <= kMaxPayloadBytes.
KVATLAS_EXPORT void AppendFrame(FrameHeader header, std::string_view payload, std::string* out);

// Splits a byte stream into frames. Feed() appends received bytes; Next() returns the next
// complete frame, nullopt when more bytes are needed, or an error for a stream that can
// never become valid: an unknown version (kInvalidArgument), a length below the header
// (kInvalidArgument) or a payload over max_payload_bytes (kPayloadTooLarge). After an
// error the decoder stays failed: the connection must be closed (after an error frame).
// Frames of an unknown MessageType are returned as any other (the stream stays in sync, so
// the server answers kError and goes on); reserved bytes and unknown flag bits are ignored.
// A status number outside status_codes.def reads as kInternal.
// Memory: the buffer holds the bytes fed and not yet returned, plus already-returned ones
// up to max(64 KiB, as many again) until the next Feed() compacts it; the header is checked
// before a payload is awaited, so an oversized frame is never buffered. Bytes fed after a
// failure are dropped.
class KVATLAS_EXPORT FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_payload_bytes = kDefaultMaxPayloadBytes)
      : max_payload_bytes_(max_payload_bytes) {}

  void Feed(std::string_view bytes);
  [[nodiscard]] Result<std::optional<Frame>> Next();
  size_t buffered_bytes() const { return buffer_.size() - consumed_; }
  // The header of the frame that made Next() fail, when its version was known (a bad
  // length or an oversized payload), so that the error answer can carry the request's id
  // and type; nullopt otherwise.
  const std::optional<FrameHeader>& failed_header() const { return failed_header_; }

 private:
  uint32_t max_payload_bytes_;
  std::string buffer_;
  size_t consumed_ = 0;
  std::optional<Status> failed_;
  std::optional<FrameHeader> failed_header_;
};

// ---------------------------------------------------------------------------------------
// Payloads. Every decoder validates completely (kInvalidArgument naming the field; never
// throws, never reads past the input, never allocates more than the input can describe)
// and rejects trailing bytes.

// kIngest request: a batch of RFC #1527 events (the same BlockEvent the REST API decodes;
// each is checked with ValidateBlockEvent, errors named "events[i].<field>"). As the JSON
// decoder does, an empty tenant becomes "default", fields that do not apply to the event
// type are dropped and an empty token_ids is absent. The tier travels as a byte (0-3); with
// a medium it must equal TierFromMedium(medium), which also sets medium_known.
struct IngestRequest {
  std::vector<BlockEvent> events;
  // Exactly-once application (events.h WriterPosition); an optional trailer on the wire.
  std::optional<WriterPosition> writer;
  // Every field of every event (BlockEvent has no operator== of its own); for tests.
  friend KVATLAS_EXPORT bool operator==(const IngestRequest& a, const IngestRequest& b);
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeIngestRequest(const IngestRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<IngestRequest> DecodeIngestRequest(std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeIngestAnswerBinary(const IngestAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<IngestAnswer> DecodeIngestAnswerBinary(
    std::string_view payload);

// kLookup: LookupRequest / LookupAnswer of lookup.h, in binary. The request decoder
// checks the context as POST /v1/lookup does (non-empty model, block_size > 0, empty tenant
// = "default"); only the query list that by_hash selects is sent.
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLookupRequestBinary(const LookupRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<LookupRequest> DecodeLookupRequestBinary(
    std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLookupAnswerBinary(const LookupAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<LookupAnswer> DecodeLookupAnswerBinary(
    std::string_view payload);

// kLocate: every copy of one block key, in one context or in all. A request's context is
// checked as a lookup's.
struct LocateRequest {
  BlockKey key = 0;
  std::optional<ContextKey> context;
  friend bool operator==(const LocateRequest&, const LocateRequest&) = default;
};
using BlockCopy = ::kvatlas::BlockCopy;  // types.h
struct LocateAnswer {
  Revision revision = 0;
  std::vector<BlockCopy> copies;
  friend bool operator==(const LocateAnswer&, const LocateAnswer&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLocateRequest(const LocateRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<LocateRequest> DecodeLocateRequest(std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLocateAnswer(const LocateAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<LocateAnswer> DecodeLocateAnswer(std::string_view payload);

// kStats answer: the JSON document of GET /v1/stats, as a length-prefixed string (one
// schema for both APIs; the codec does not parse it).
struct StatsAnswer {
  std::string json;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeStatsAnswer(const StatsAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<StatsAnswer> DecodeStatsAnswer(std::string_view payload);

// An error answer's payload: the message (UTF-8, the whole payload, no length prefix); the
// code is the header's status. Decoding with kOk gives kInternal: an error is never success.
[[nodiscard]] KVATLAS_EXPORT std::string EncodeErrorPayload(const Status& status);
[[nodiscard]] KVATLAS_EXPORT Status DecodeErrorPayload(StatusCode code, std::string_view payload);

// kRoute (protocol_route.cc): RoutingRequest / RoutingAnswer of routing.h. The request nests a
// kLookup request payload (its instance_id and include_locations are ignored) and is checked
// as POST /v1/route checks its body.
[[nodiscard]] KVATLAS_EXPORT std::string EncodeRouteRequestBinary(const RoutingRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<RoutingRequest> DecodeRouteRequestBinary(
    std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeRouteAnswerBinary(const RoutingAnswer& answer);
// As above; `predicted` appends the predicted trailer (docs/protocol.md §kRoute), for a
// request that carried the approximate trailer (RouteRequestUsesApproximate).
[[nodiscard]] KVATLAS_EXPORT std::string EncodeRouteAnswerBinary(const RoutingAnswer& answer,
                                                                 bool predicted);
// Whether a request uses approximate mode (a candidate flagged predict, or a PREDICTED
// weight other than 1): its encoding carries the approximate trailer.
[[nodiscard]] KVATLAS_EXPORT bool RouteRequestUsesApproximate(const RoutingRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<RoutingAnswer> DecodeRouteAnswerBinary(
    std::string_view payload);

// ---------------------------------------------------------------------------------------
// The change feed (protocol_feed.cc; docs/protocol.md §kWatch, §kSnapshot). Both are
// streams: one request, then one or more response frames under its id. A response frame
// whose status is not ok carries an error payload and is always its request's last; the
// payload of an ok frame of a stream starts with a StreamMarker saying whether more follow.

enum class StreamMarker : uint8_t {
  kMore = 0,   // more frames of this request follow
  kFinal = 1,  // the request's last frame
};

// Whether a response frame of a stream (kWatch, kSnapshot) is its request's last: a status
// other than ok, or an ok payload that does not start with kMore (an empty payload is
// malformed, hence final too). Reads one byte: the transport's test, before decoding.
[[nodiscard]] KVATLAS_EXPORT bool IsFinalStreamFrame(StatusCode status, std::string_view payload);

// kWatch request: start a watch, or cancel the open watch that has the same request id.
// A start's records are those after `from` (nullopt: from now) that `filter` matches; the
// server checks `from` (kCompacted, kInvalidArgument for the future) when it subscribes.
struct WatchRequest {
  bool cancel = false;  // true: the payload is only the action byte
  std::optional<Revision> from;
  FeedFilter filter;
  friend KVATLAS_EXPORT bool operator==(const WatchRequest& a, const WatchRequest& b);
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeWatchRequest(const WatchRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<WatchRequest> DecodeWatchRequest(std::string_view payload);

// An ok kWatch response frame. kMore: records, in revision order; `through` says which
// revisions are complete: every matching record of a revision <= through has been sent (in
// this frame or an earlier one), so a revision without records (all filtered out) still
// advances it. Only the frame's last revision may be above `through`: a revision too large
// for one frame continues in the next. The first frame of a watch (its answer) has the
// revision it starts after as `through`. kFinal (final = true): the watch was cancelled;
// `through` is the last revision sent and `records` is empty.
struct WatchBatch {
  bool final = false;
  Revision through = 0;
  std::vector<FeedRecord> records;
  friend bool operator==(const WatchBatch&, const WatchBatch&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeWatchBatch(const WatchBatch& batch);
[[nodiscard]] KVATLAS_EXPORT Result<WatchBatch> DecodeWatchBatch(std::string_view payload);
// Encoded bytes of `record` in a WatchBatch, for splitting records over frames.
[[nodiscard]] KVATLAS_EXPORT size_t WatchRecordBytes(const FeedRecord& record);

// The error payload that ends a watch (status watch_cut, compacted, unavailable, ...): the
// message, then machine-readable lines as a not_leader error has (docs/protocol.md):
// "\nresume_from=<revision>" (the last revision sent; watch again after it) once the watch
// has started, "\noldest_revision=<r>\ncurrent_revision=<r>" on compacted.
struct WatchEndHint {
  std::optional<Revision> resume_from;
  std::optional<Revision> oldest_revision;
  std::optional<Revision> current_revision;
  friend bool operator==(const WatchEndHint&, const WatchEndHint&) = default;
};
struct WatchEnd {
  Status status;  // its message without the hint lines
  WatchEndHint hint;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeWatchEnd(const Status& status,
                                                        const WatchEndHint& hint);
// Never fails: a payload without (or with unreadable) hint lines is all message.
[[nodiscard]] KVATLAS_EXPORT WatchEnd DecodeWatchEnd(StatusCode code, std::string_view payload);

// kSnapshot: every copy of one context at one revision (GET /v1/snapshot), sent as parts of
// at most kMaxSnapshotPartCopies copies. The request's context is checked as a lookup's.
inline constexpr size_t kMaxSnapshotPartCopies = 65536;
struct SnapshotRequest {
  ContextKey context;
  friend bool operator==(const SnapshotRequest&, const SnapshotRequest&) = default;
};
// One copy of the context: its block key and the copy; copy.context is not sent (it is
// the part's) and decodes empty.
struct SnapshotCopy {
  BlockKey key = 0;
  BlockCopy copy;
  friend bool operator==(const SnapshotCopy&, const SnapshotCopy&) = default;
};
// One ok kSnapshot response frame. Parts are numbered from 0; every part of one answer has
// the same revision and context; `last` is the stream marker (kFinal).
struct SnapshotPart {
  bool last = true;
  Revision revision = 0;
  uint32_t part = 0;
  ContextKey context;
  std::vector<SnapshotCopy> copies;
  friend bool operator==(const SnapshotPart&, const SnapshotPart&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeSnapshotRequest(const SnapshotRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<SnapshotRequest> DecodeSnapshotRequest(
    std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeSnapshotPart(const SnapshotPart& part);
[[nodiscard]] KVATLAS_EXPORT Result<SnapshotPart> DecodeSnapshotPart(std::string_view payload);
// Encoded bytes of `copy` in a SnapshotPart, for bounding a part's size.
[[nodiscard]] KVATLAS_EXPORT size_t SnapshotCopyBytes(const SnapshotCopy& copy);

// kHeartbeat (protocol_heartbeat.cc): keeps holders' leases alive (docs/leases.md), as
// POST /v1/heartbeat does. Leader-only: a follower answers not_leader with the leader's
// address. Each holder id must be non-empty; at most kMaxHeartbeatHolders per request.
inline constexpr size_t kMaxHeartbeatHolders = 10'000;
struct HeartbeatRequest {
  std::vector<HolderKey> holders;
  friend bool operator==(const HeartbeatRequest&, const HeartbeatRequest&) = default;
};
struct HeartbeatAnswer {
  uint32_t holders = 0;      // holders the heartbeat named
  uint32_t ttl_seconds = 0;  // the server's holder_ttl_seconds; 0 = leases are off
  friend bool operator==(const HeartbeatAnswer&, const HeartbeatAnswer&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeHeartbeatRequest(const HeartbeatRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<HeartbeatRequest> DecodeHeartbeatRequest(
    std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeHeartbeatAnswer(const HeartbeatAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<HeartbeatAnswer> DecodeHeartbeatAnswer(
    std::string_view payload);

// kLoadReport (protocol_load.cc; docs/protocol.md §kLoadReport): a router's absolute
// in-flight load (fleet_load.h), as POST /v1/load. A write: a follower answers not_leader
// with the leader's address. Validated as ValidateLoadReport.
struct LoadReportAnswer {
  uint64_t revision = 0;       // the report's
  uint64_t expires_at_ms = 0;  // its lease's end, Unix ms on the leader's clock
  friend bool operator==(const LoadReportAnswer&, const LoadReportAnswer&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLoadReportRequest(const LoadReport& report);
[[nodiscard]] KVATLAS_EXPORT Result<LoadReport> DecodeLoadReportRequest(std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLoadReportAnswer(const LoadReportAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<LoadReportAnswer> DecodeLoadReportAnswer(
    std::string_view payload);

// kPredict (protocol_predict.cc; docs/protocol.md §kPredict): a router that decided
// locally sent `keys` (block keys from block 0 of a request) to `holder`; the server records
// them as predicted there (approximate mode, docs/routing.md), as its own routes do, through
// its PredictionRecorder. A write (writer role) that any server takes: followers forward.
// The context is checked as a lookup's (empty tenant = "default"); the holder id must be
// non-empty; 1 … kMaxPredictKeys keys (more: kPayloadTooLarge).
inline constexpr size_t kMaxPredictKeys = 65'536;
struct PredictRequest {
  ContextKey context;
  HolderKey holder;
  std::vector<BlockKey> keys;
  friend bool operator==(const PredictRequest&, const PredictRequest&) = default;
};
struct PredictAnswer {
  uint32_t queued = 0;  // keys queued (the server's max_lookup_blocks at most)
  friend bool operator==(const PredictAnswer&, const PredictAnswer&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodePredictRequest(const PredictRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<PredictRequest> DecodePredictRequest(std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodePredictAnswer(const PredictAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<PredictAnswer> DecodePredictAnswer(std::string_view payload);

// kLoadView (protocol_load.cc; docs/protocol.md §kLoadView): the live load reports as the
// answering server sees them, as GET /v1/load's `routers`. A read: any server answers from
// its own table. A scheduler scoring in its own process loads them into a FleetLoadTable
// (LoadViewAnswer::FillTable) to fill its candidates as the server does.
struct LoadViewRouter {
  std::string router_id;
  uint64_t expires_in_ms = 0;  // how long the report still counts, on the server's clock
  std::vector<InstanceLoad> loads;
  friend bool operator==(const LoadViewRouter&, const LoadViewRouter&) = default;
};
struct LoadViewAnswer {
  uint64_t revision = 0;  // the answering server's applied revision
  std::vector<LoadViewRouter> routers;
  friend bool operator==(const LoadViewAnswer&, const LoadViewAnswer&) = default;

  // Replaces `table`'s reports with these, each expiring `expires_in_ms` after `now`.
  KVATLAS_EXPORT void FillTable(FleetLoadTable* table, FleetLoadTable::Clock::time_point now) const;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeLoadViewAnswer(const LoadViewAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<LoadViewAnswer> DecodeLoadViewAnswer(std::string_view payload);

// kDirectory (protocol_directory.cc; docs/protocol.md §kDirectory): what a client needs to
// send each context's reads to a server that holds its group (docs/scaling.md §Clients that
// route by the directory): the number of groups, the placement directory (group 1's copy on
// the answering server) and the binary-protocol address each server has announced. A read:
// any server answers from its own state. The request is empty.
inline constexpr size_t kMaxDirectoryServers = 4'096;
struct ServerRpcAddress {
  uint64_t id = 0;
  std::string rpc_address;  // "host:port"
  friend bool operator==(const ServerRpcAddress&, const ServerRpcAddress&) = default;
};
struct DirectoryAnswer {
  uint32_t groups = 1;  // 1..kMaxGroupId; 1: one group, every server holds everything
  PlacementDirectory directory;
  std::vector<ServerRpcAddress> servers;  // ascending by id, each id once
  friend bool operator==(const DirectoryAnswer&, const DirectoryAnswer&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeDirectoryAnswer(const DirectoryAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<DirectoryAnswer> DecodeDirectoryAnswer(
    std::string_view payload);

// kAuth (protocol_auth.cc; docs/protocol.md §kAuth): presents an access token. On a server
// with access control on it must be a connection's first frame; the answer names the
// token and its role. A token is 1 … kMaxTokenBytes bytes.
inline constexpr size_t kMaxTokenBytes = 1024;
struct AuthRequest {
  std::string token;
  friend bool operator==(const AuthRequest&, const AuthRequest&) = default;
};
struct AuthAnswer {
  Role role = Role::kRead;  // u8 on the wire: 1 read, 2 write, 3 admin
  std::string name;         // the token's configured name ("anonymous" with access control off)
  friend bool operator==(const AuthAnswer&, const AuthAnswer&) = default;
};
[[nodiscard]] KVATLAS_EXPORT std::string EncodeAuthRequest(const AuthRequest& request);
[[nodiscard]] KVATLAS_EXPORT Result<AuthRequest> DecodeAuthRequest(std::string_view payload);
[[nodiscard]] KVATLAS_EXPORT std::string EncodeAuthAnswer(const AuthAnswer& answer);
[[nodiscard]] KVATLAS_EXPORT Result<AuthAnswer> DecodeAuthAnswer(std::string_view payload);

}  // namespace kvatlas::protocol
