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
#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/result.h"
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
  kError = 0,      // response to a frame that could not be read as a request (type unknown)
  kIngest = 1,     // request: IngestRequest → response: IngestAnswer
  kLookup = 2,     // request: LookupRequest → response: LookupAnswer
  kLocate = 3,     // request: LocateRequest → response: LocateAnswer
  kStats = 4,      // request: empty → response: StatsAnswer
  kPing = 5,       // request: empty → response: empty (liveness, round-trip time)
  kRoute = 6,      // request: RoutingRequest → response: RoutingAnswer (routing.h)
  kWatch = 7,      // request: WatchRequest → a stream of response frames (docs/protocol.md)
  kSnapshot = 8,   // request: SnapshotRequest → one or more SnapshotPart response frames
  kHeartbeat = 9,  // request: HeartbeatRequest → response: HeartbeatAnswer (holder leases)
};

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
void AppendFrame(FrameHeader header, std::string_view payload, std::string* out);

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
class FrameDecoder {
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
  friend bool operator==(const IngestRequest& a, const IngestRequest& b);
};
[[nodiscard]] std::string EncodeIngestRequest(const IngestRequest& request);
[[nodiscard]] Result<IngestRequest> DecodeIngestRequest(std::string_view payload);
[[nodiscard]] std::string EncodeIngestAnswerBinary(const IngestAnswer& answer);
[[nodiscard]] Result<IngestAnswer> DecodeIngestAnswerBinary(std::string_view payload);

// kLookup: LookupRequest / LookupAnswer of json_codec.h, in binary. The request decoder
// checks the context as POST /v1/lookup does (non-empty model, block_size > 0, empty tenant
// = "default"); only the query list that by_hash selects is sent.
[[nodiscard]] std::string EncodeLookupRequestBinary(const LookupRequest& request);
[[nodiscard]] Result<LookupRequest> DecodeLookupRequestBinary(std::string_view payload);
[[nodiscard]] std::string EncodeLookupAnswerBinary(const LookupAnswer& answer);
[[nodiscard]] Result<LookupAnswer> DecodeLookupAnswerBinary(std::string_view payload);

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
[[nodiscard]] std::string EncodeLocateRequest(const LocateRequest& request);
[[nodiscard]] Result<LocateRequest> DecodeLocateRequest(std::string_view payload);
[[nodiscard]] std::string EncodeLocateAnswer(const LocateAnswer& answer);
[[nodiscard]] Result<LocateAnswer> DecodeLocateAnswer(std::string_view payload);

// kStats answer: the JSON document of GET /v1/stats, as a length-prefixed string (one
// schema for both APIs; the codec does not parse it).
struct StatsAnswer {
  std::string json;
};
[[nodiscard]] std::string EncodeStatsAnswer(const StatsAnswer& answer);
[[nodiscard]] Result<StatsAnswer> DecodeStatsAnswer(std::string_view payload);

// An error answer's payload: the message (UTF-8, the whole payload, no length prefix); the
// code is the header's status. Decoding with kOk gives kInternal: an error is never success.
[[nodiscard]] std::string EncodeErrorPayload(const Status& status);
[[nodiscard]] Status DecodeErrorPayload(StatusCode code, std::string_view payload);

// kRoute (protocol_route.cc): RoutingRequest / RoutingAnswer of routing.h. The request nests a
// kLookup request payload (its instance_id and include_locations are ignored) and is checked
// as POST /v1/route checks its body.
[[nodiscard]] std::string EncodeRouteRequestBinary(const RoutingRequest& request);
[[nodiscard]] Result<RoutingRequest> DecodeRouteRequestBinary(std::string_view payload);
[[nodiscard]] std::string EncodeRouteAnswerBinary(const RoutingAnswer& answer);
[[nodiscard]] Result<RoutingAnswer> DecodeRouteAnswerBinary(std::string_view payload);

}  // namespace kvatlas::protocol
