// Framing of the binary protocol: the fixed header and the incremental FrameDecoder.
// Byte layout: docs/protocol.md §Frames.
#include <algorithm>
#include <utility>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"

namespace kvatlas::protocol {
namespace {

// The header bytes after the length prefix.
constexpr uint32_t kHeaderBodyBytes = kHeaderBytes - 4;
// Consumed bytes are dropped from the buffer's front once they are this many and at least
// half of it, so that pipelined small frames do not copy the buffer on every Next().
constexpr size_t kCompactBytes = 64 << 10;

// Reads everything after the length prefix; `length` is that prefix.
FrameHeader ParseHeader(uint32_t length, ByteReader* in) {
  FrameHeader header;
  header.version = in->U8();
  header.type = static_cast<MessageType>(in->U8());
  header.flags = in->U8();
  in->U8();  // reserved
  header.status = StatusCodeFromNumber(in->Fixed16());
  in->Fixed16();  // reserved
  header.request_id = in->Fixed64();
  header.payload_bytes = length - kHeaderBodyBytes;
  return header;
}

}  // namespace

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kError:
      return "error";
    case MessageType::kIngest:
      return "ingest";
    case MessageType::kLookup:
      return "lookup";
    case MessageType::kLocate:
      return "locate";
    case MessageType::kStats:
      return "stats";
    case MessageType::kPing:
      return "ping";
    case MessageType::kRoute:
      return "route";
    case MessageType::kWatch:
      return "watch";
    case MessageType::kSnapshot:
      return "snapshot";
    case MessageType::kHeartbeat:
      return "heartbeat";
    case MessageType::kAuth:
      return "auth";
    case MessageType::kLoadReport:
      return "load_report";
    case MessageType::kLoadView:
      return "load_view";
    case MessageType::kPredict:
      return "predict";
    case MessageType::kDirectory:
      return "directory";
  }
  return "other";
}

void AppendFrame(FrameHeader header, std::string_view payload, std::string* out) {
  out->reserve(out->size() + kHeaderBytes + payload.size());
  PutFixed32(out, static_cast<uint32_t>(kHeaderBodyBytes + payload.size()));
  out->push_back(static_cast<char>(header.version));
  out->push_back(static_cast<char>(header.type));
  out->push_back(static_cast<char>(header.flags));
  out->push_back(0);
  PutFixed16(out, static_cast<uint16_t>(header.status));
  PutFixed16(out, 0);
  PutFixed64(out, header.request_id);
  out->append(payload);
}

void FrameDecoder::Feed(std::string_view bytes) {
  if (failed_) return;  // the stream is dead; buffering more would only cost memory
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  } else if (consumed_ >= kCompactBytes && consumed_ * 2 >= buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes);
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  if (failed_) return *failed_;
  const std::string_view pending = std::string_view(buffer_).substr(consumed_);
  if (pending.size() < kHeaderBytes) return std::optional<Frame>();
  ByteReader in(pending);
  const uint32_t length = in.Fixed32();
  // The version decides how the rest is read, so it is checked before the length.
  const auto version = static_cast<uint8_t>(pending[4]);
  if (version != kVersion) {
    failed_ =
        Status::InvalidArgument("frame: unsupported protocol version " + std::to_string(version) +
                                " (this peer speaks " + std::to_string(kVersion) + ")");
    return *failed_;
  }
  if (length < kHeaderBodyBytes) {
    failed_ = Status::InvalidArgument("frame: length " + std::to_string(length) +
                                      " is shorter than the header (" +
                                      std::to_string(kHeaderBodyBytes) + ")");
    failed_header_ = ParseHeader(kHeaderBodyBytes, &in);
    return *failed_;
  }
  FrameHeader header = ParseHeader(length, &in);
  const uint32_t limit = std::min(max_payload_bytes_, kMaxPayloadBytes);
  if (header.payload_bytes > limit) {
    failed_ = Status::PayloadTooLarge("frame: payload of " + std::to_string(header.payload_bytes) +
                                      " bytes exceeds the limit of " + std::to_string(limit));
    failed_header_ = header;
    return *failed_;
  }
  if (in.remaining() < header.payload_bytes) return std::optional<Frame>();
  Frame frame{header, std::string(pending.substr(kHeaderBytes, header.payload_bytes))};
  consumed_ += kHeaderBytes + header.payload_bytes;
  return std::optional<Frame>(std::move(frame));
}

}  // namespace kvatlas::protocol
