// PayloadReader: the field-naming reader every binary-protocol payload decoder uses
// (protocol_payloads.cc, protocol_route.cc, protocol_feed.cc), and the encodings of the keys
// several payloads carry (context, holder). Private to common/src.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/internal/bytes.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas::protocol {

// A ByteReader that remembers which field failed first. Field paths are built only on
// failure: the ingest path decodes millions of fields per second.
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view payload) : in_(payload) {}

  // Names the list element the next fields belong to ("events[3]"); Scope({}, 0) clears.
  void Scope(std::string_view list, size_t index) {
    list_ = list;
    index_ = index;
  }

  uint8_t U8(std::string_view field) { return Checked(in_.U8(), field); }
  uint64_t Fixed64(std::string_view field) { return Checked(in_.Fixed64(), field); }
  uint32_t Varint32(std::string_view field) { return Checked(in_.Varint32(), field); }
  uint64_t Varint64(std::string_view field) { return Checked(in_.Varint64(), field); }
  bool Flag(std::string_view field) { return Checked(in_.Flag(), field); }
  std::string_view Bytes(std::string_view field) { return Checked(in_.LengthPrefixed(), field); }
  std::string String(std::string_view field) { return std::string(Bytes(field)); }
  // An IEEE-754 double in a fixed64; NaN and infinities are rejected.
  double Double(std::string_view field) {
    const double v = std::bit_cast<double>(Fixed64(field));
    if (in_.ok() && !std::isfinite(v)) Reject(field, "must be a finite number");
    return v;
  }
  uint64_t Count(size_t min_element_bytes, std::string_view field) {
    return Checked(in_.Count(min_element_bytes), field);
  }

  // Fails the reader with `problem` for a value that decoded but is not allowed.
  void Reject(std::string_view field, std::string_view problem) {
    if (!error_) error_ = Status::InvalidArgument(Path(field) + ": " + std::string(problem));
    in_.Fail();
  }

  // Fails the reader with `status` (e.g. a nested payload's own error).
  void Fail(Status status) {
    if (!error_) error_ = std::move(status);
    in_.Fail();
  }

  bool ok() const { return in_.ok(); }
  bool AtEnd() const { return in_.remaining() == 0; }

  // OK when every read succeeded and consumed the whole payload.
  Status Finish() const {
    if (error_) return *error_;
    if (in_.remaining() != 0) {
      return Status::InvalidArgument("payload: " + std::to_string(in_.remaining()) +
                                     " trailing bytes");
    }
    return Status::Ok();
  }

 private:
  template <typename T>
  T Checked(T value, std::string_view field) {
    if (!in_.ok() && !error_) {
      error_ = Status::InvalidArgument(Path(field) + ": truncated or malformed");
    }
    return value;
  }

  std::string Path(std::string_view field) const {
    if (list_.empty()) return std::string(field);
    return std::string(list_) + "[" + std::to_string(index_) + "]." + std::string(field);
  }

  ByteReader in_;
  std::string_view list_;
  size_t index_ = 0;
  std::optional<Status> error_;
};

// A context: tenant, model, lora_name (strings), block_size (varint), salt (string).
inline void PutContext(const ContextKey& context, std::string* out) {
  PutLengthPrefixed(out, context.tenant);
  PutLengthPrefixed(out, context.model);
  PutLengthPrefixed(out, context.lora_name);
  PutVarint64(out, context.block_size);
  PutLengthPrefixed(out, context.salt);
}

inline ContextKey ReadContext(PayloadReader* in) {
  ContextKey context;
  context.tenant = in->String("tenant_id");
  context.model = in->String("model_name");
  context.lora_name = in->String("lora_name");
  context.block_size = in->Varint32("block_size");
  context.salt = in->String("additional_salt");
  return context;
}

// A context checked as a lookup's (kSnapshot, kPredict): an empty tenant is "default", the
// model must be non-empty and the block size positive (the reader fails naming the field).
inline ContextKey ReadLookupContext(PayloadReader* in) {
  ContextKey context = ReadContext(in);
  if (context.tenant.empty()) context.tenant = "default";
  if (in->ok() && context.model.empty()) in->Reject("model_name", "must be a non-empty string");
  if (in->ok() && context.block_size == 0) in->Reject("block_size", "must be a positive integer");
  return context;
}

// A holder: id (string), dp_rank (varint).
inline void PutHolder(const HolderKey& holder, std::string* out) {
  PutLengthPrefixed(out, holder.id);
  PutVarint64(out, holder.dp_rank);
}

inline HolderKey ReadHolder(PayloadReader* in) {
  HolderKey holder;
  holder.id = in->String("backend_id");
  holder.dp_rank = in->Varint32("dp_rank");
  return holder;
}

}  // namespace kvatlas::protocol
