// The change feed's payloads of the binary protocol (docs/protocol.md §kWatch, §kSnapshot):
// watch requests, the batches of records a watch pushes, the hints of the error that ends
// one, and snapshot requests and parts. Contexts, holders and tiers are encoded as in
// protocol_payloads.cc (the same bytes, kept in step by the byte tests).
#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {
namespace {

using Reader = PayloadReader;

// Lower bounds of one encoded element, for PayloadReader::Count.
constexpr size_t kMinRecordBytes = 19;        // revision, op, context, holder, tier, 2 lists
constexpr size_t kMinSnapshotCopyBytes = 22;  // key, holder, tier, 2 varints, hash, location
constexpr uint8_t kMaxFeedOp = static_cast<uint8_t>(FeedOp::kPredicted);
// The start request's optional trailer (docs/protocol.md §kWatch): a u8 of option bits.
constexpr uint8_t kWatchPredicted = 0x01;  // also send predicted records

constexpr std::string_view kResumeFromField = "\nresume_from=";
constexpr std::string_view kOldestRevisionField = "\noldest_revision=";
constexpr std::string_view kCurrentRevisionField = "\ncurrent_revision=";

size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

size_t StringBytes(std::string_view s) { return VarintBytes(s.size()) + s.size(); }

// --- shared pieces (the encodings of protocol_payloads.cc) ------------------------------

Tier ReadTier(Reader* in, std::string_view field) {
  const uint8_t b = in->U8(field);
  if (in->ok() && b >= kNumTiers) {
    in->Reject(field, std::to_string(b) + " is not a tier (0-3)");
    return Tier::kGpu;
  }
  return static_cast<Tier>(b);
}

uint8_t ReadMarker(Reader* in, std::string_view field) {
  const uint8_t marker = in->U8(field);
  if (in->ok() && marker > static_cast<uint8_t>(StreamMarker::kFinal)) {
    in->Reject(field, std::to_string(marker) + " is neither 0 (more) nor 1 (final)");
  }
  return marker;
}

// --- watch ------------------------------------------------------------------------------

template <typename T, typename Put>
void PutOptional(const std::optional<T>& value, std::string* out, Put put) {
  PutFlag(out, value.has_value());
  if (value) put(*value);
}

void PutFilter(const FeedFilter& f, std::string* out) {
  const auto string = [out](const std::string& s) { PutLengthPrefixed(out, s); };
  const auto number = [out](uint32_t v) { PutVarint64(out, v); };
  PutOptional(f.tenant, out, string);
  PutOptional(f.model, out, string);
  PutOptional(f.lora_name, out, string);
  PutOptional(f.block_size, out, number);
  PutOptional(f.salt, out, string);
  PutOptional(f.holder_id, out, string);
  PutOptional(f.dp_rank, out, number);
  PutOptional(f.tier, out, [out](Tier t) { out->push_back(static_cast<char>(t)); });
}

FeedFilter ReadFilter(Reader* in) {
  FeedFilter f;
  if (in->Flag("filter.tenant_id")) f.tenant = in->String("filter.tenant_id");
  if (in->Flag("filter.model_name")) f.model = in->String("filter.model_name");
  if (in->Flag("filter.lora_name")) f.lora_name = in->String("filter.lora_name");
  if (in->Flag("filter.block_size")) f.block_size = in->Varint32("filter.block_size");
  if (in->Flag("filter.additional_salt")) f.salt = in->String("filter.additional_salt");
  if (in->Flag("filter.backend_id")) f.holder_id = in->String("filter.backend_id");
  if (in->Flag("filter.dp_rank")) f.dp_rank = in->Varint32("filter.dp_rank");
  if (in->Flag("filter.tier")) f.tier = ReadTier(in, "filter.tier");
  return f;
}

bool SameFilter(const FeedFilter& a, const FeedFilter& b) {
  return a.tenant == b.tenant && a.model == b.model && a.lora_name == b.lora_name &&
         a.block_size == b.block_size && a.salt == b.salt && a.holder_id == b.holder_id &&
         a.dp_rank == b.dp_rank && a.tier == b.tier && a.predicted == b.predicted;
}

void PutRecord(const FeedRecord& r, std::string* out) {
  PutFixed64(out, r.revision);
  out->push_back(static_cast<char>(r.op));
  PutContext(r.context, out);
  PutHolder(r.holder, out);
  out->push_back(static_cast<char>(r.tier));
  PutVarint64(out, r.keys.size());
  for (BlockKey key : r.keys) PutFixed64(out, key);
  PutVarint64(out, r.locations.size());
  for (const std::string& location : r.locations) PutLengthPrefixed(out, location);
  if (r.op == FeedOp::kPredicted) PutFixed64(out, r.expires_at_ms);
}

FeedRecord ReadRecord(Reader* in) {
  FeedRecord r;
  r.revision = in->Fixed64("revision");
  const uint8_t op = in->U8("op");
  if (in->ok() && op > kMaxFeedOp) {
    in->Reject("op",
               std::to_string(op) + " is not a record op (0-" + std::to_string(kMaxFeedOp) + ")");
  }
  r.op = static_cast<FeedOp>(op);
  r.context = ReadContext(in);
  r.holder = ReadHolder(in);
  r.tier = ReadTier(in, "tier");
  r.keys.resize(in->Count(8, "keys"));
  for (BlockKey& key : r.keys) key = in->Fixed64("keys");
  r.locations.resize(in->Count(1, "locations"));
  for (std::string& location : r.locations) location = in->String("locations");
  if (in->ok() && !r.locations.empty() && r.locations.size() != r.keys.size()) {
    in->Reject("locations", "must be empty or one per key (" + std::to_string(r.keys.size()) +
                                "), got " + std::to_string(r.locations.size()));
  }
  if (in->ok() && r.op == FeedOp::kPredicted) {
    if (!r.locations.empty()) in->Reject("locations", "must be empty on a predicted record");
    r.expires_at_ms = in->Fixed64("expires_at_ms");
  }
  return r;
}

// "\n<name><decimal>" at its last occurrence in `message`, if it parses.
std::optional<Revision> HintField(std::string_view message, std::string_view name) {
  const size_t at = message.rfind(name);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view text = message.substr(at + name.size());
  text = text.substr(0, text.find('\n'));
  Revision value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// --- snapshot ---------------------------------------------------------------------------

void PutSnapshotCopy(const SnapshotCopy& c, std::string* out) {
  PutFixed64(out, c.key);
  PutHolder(c.copy.holder, out);
  out->push_back(static_cast<char>(c.copy.tier));
  PutVarint64(out, c.copy.depth);
  PutVarint64(out, c.copy.refcount);
  PutFixed64(out, c.copy.engine_hash);
  PutLengthPrefixed(out, c.copy.location);
}

SnapshotCopy ReadSnapshotCopy(Reader* in) {
  SnapshotCopy c;
  c.key = in->Fixed64("key");
  c.copy.context = ContextKey{"", "", "", 0, ""};
  c.copy.holder = ReadHolder(in);
  c.copy.tier = ReadTier(in, "tier");
  c.copy.depth = in->Varint32("depth");
  c.copy.refcount = in->Varint32("refcount");
  c.copy.engine_hash = in->Fixed64("engine_hash");
  c.copy.location = in->String("location");
  return c;
}

}  // namespace

bool IsFinalStreamFrame(StatusCode status, std::string_view payload) {
  return status != StatusCode::kOk || payload.empty() ||
         static_cast<uint8_t>(payload[0]) != static_cast<uint8_t>(StreamMarker::kMore);
}

bool operator==(const WatchRequest& a, const WatchRequest& b) {
  return a.cancel == b.cancel && a.from == b.from && SameFilter(a.filter, b.filter);
}

std::string EncodeWatchRequest(const WatchRequest& request) {
  std::string out;
  PutFlag(&out, request.cancel);
  if (request.cancel) return out;
  PutFlag(&out, request.from.has_value());
  if (request.from) PutFixed64(&out, *request.from);
  PutFilter(request.filter, &out);
  // The options trailer only when an option is on: a watch without one is the same bytes
  // as before options existed, which every server reads.
  if (request.filter.predicted) out.push_back(static_cast<char>(kWatchPredicted));
  return out;
}

Result<WatchRequest> DecodeWatchRequest(std::string_view payload) {
  Reader in(payload);
  WatchRequest request;
  const uint8_t action = in.U8("action");
  if (in.ok() && action > 1) {
    in.Reject("action", std::to_string(action) + " is neither 0 (start) nor 1 (cancel)");
  }
  request.cancel = action == 1;
  if (in.ok() && !request.cancel) {
    if (in.Flag("from")) request.from = in.Fixed64("from");
    request.filter = ReadFilter(&in);
    if (in.ok() && !in.AtEnd()) {
      const uint8_t options = in.U8("options");
      // 0 is refused too: a sender with no option leaves the byte out (one encoding each).
      if (in.ok() && options == 0) in.Reject("options", "0 sets no option (leave the byte out)");
      if (in.ok() && (options & ~kWatchPredicted) != 0) {
        in.Reject("options", "unknown option bits " + std::to_string(options & ~kWatchPredicted) +
                                 " (known: 1 = predicted)");
      }
      request.filter.predicted = (options & kWatchPredicted) != 0;
    }
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return request;
}

std::string EncodeWatchBatch(const WatchBatch& batch) {
  std::string out;
  out.push_back(static_cast<char>(batch.final ? StreamMarker::kFinal : StreamMarker::kMore));
  PutFixed64(&out, batch.through);
  if (batch.final) return out;
  PutVarint64(&out, batch.records.size());
  for (const FeedRecord& record : batch.records) PutRecord(record, &out);
  return out;
}

Result<WatchBatch> DecodeWatchBatch(std::string_view payload) {
  Reader in(payload);
  WatchBatch batch;
  batch.final = ReadMarker(&in, "marker") == static_cast<uint8_t>(StreamMarker::kFinal);
  batch.through = in.Fixed64("through");
  if (in.ok() && !batch.final) {
    const uint64_t count = in.Count(kMinRecordBytes, "records");
    batch.records.reserve(count);
    for (uint64_t i = 0; i < count && in.ok(); ++i) {
      in.Scope("records", i);
      FeedRecord record = ReadRecord(&in);
      if (in.ok() && !batch.records.empty()) {
        const Revision previous = batch.records.back().revision;
        if (record.revision < previous) {
          in.Reject("revision", "records must be in revision order (" +
                                    std::to_string(record.revision) + " after " +
                                    std::to_string(previous) + ")");
        } else if (previous > batch.through && record.revision != previous) {
          // Only the last revision of a frame may continue in the next one.
          in.Reject("revision", "revision " + std::to_string(previous) + " is above through (" +
                                    std::to_string(batch.through) +
                                    ") but is not the frame's last");
        }
      }
      batch.records.push_back(std::move(record));
    }
    in.Scope({}, 0);
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return batch;
}

size_t WatchRecordBytes(const FeedRecord& r) {
  size_t n = 8 + 1 + StringBytes(r.context.tenant) + StringBytes(r.context.model) +
             StringBytes(r.context.lora_name) + VarintBytes(r.context.block_size) +
             StringBytes(r.context.salt) + StringBytes(r.holder.id) +
             VarintBytes(r.holder.dp_rank) + 1 + VarintBytes(r.keys.size()) + 8 * r.keys.size() +
             VarintBytes(r.locations.size()) + (r.op == FeedOp::kPredicted ? 8 : 0);
  for (const std::string& location : r.locations) n += StringBytes(location);
  return n;
}

std::string EncodeWatchEnd(const Status& status, const WatchEndHint& hint) {
  std::string out = EncodeErrorPayload(status);
  const auto field = [&out](std::string_view name, const std::optional<Revision>& value) {
    if (!value) return;
    out += name;
    out += std::to_string(*value);
  };
  field(kResumeFromField, hint.resume_from);
  field(kOldestRevisionField, hint.oldest_revision);
  field(kCurrentRevisionField, hint.current_revision);
  return out;
}

WatchEnd DecodeWatchEnd(StatusCode code, std::string_view payload) {
  WatchEnd end;
  end.hint.resume_from = HintField(payload, kResumeFromField);
  end.hint.oldest_revision = HintField(payload, kOldestRevisionField);
  end.hint.current_revision = HintField(payload, kCurrentRevisionField);
  // The message is what precedes the first hint line that parsed.
  size_t message_end = payload.size();
  for (std::string_view name : {kResumeFromField, kOldestRevisionField, kCurrentRevisionField}) {
    if (!HintField(payload, name)) continue;
    message_end = std::min(message_end, payload.find(name));
  }
  end.status = DecodeErrorPayload(code, payload.substr(0, message_end));
  return end;
}

std::string EncodeSnapshotRequest(const SnapshotRequest& request) {
  std::string out;
  PutContext(request.context, &out);
  return out;
}

Result<SnapshotRequest> DecodeSnapshotRequest(std::string_view payload) {
  Reader in(payload);
  SnapshotRequest request;
  // Checked as a lookup's context (and GET /v1/snapshot's parameters).
  request.context = ReadLookupContext(&in);
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return request;
}

std::string EncodeSnapshotPart(const SnapshotPart& part) {
  std::string out;
  out.push_back(static_cast<char>(part.last ? StreamMarker::kFinal : StreamMarker::kMore));
  PutFixed64(&out, part.revision);
  PutVarint64(&out, part.part);
  PutContext(part.context, &out);
  PutVarint64(&out, part.copies.size());
  for (const SnapshotCopy& copy : part.copies) PutSnapshotCopy(copy, &out);
  return out;
}

Result<SnapshotPart> DecodeSnapshotPart(std::string_view payload) {
  Reader in(payload);
  SnapshotPart part;
  part.last = ReadMarker(&in, "marker") == static_cast<uint8_t>(StreamMarker::kFinal);
  part.revision = in.Fixed64("revision");
  part.part = in.Varint32("part");
  part.context = ReadContext(&in);
  const uint64_t count = in.Count(kMinSnapshotCopyBytes, "copies");
  if (in.ok() && count > kMaxSnapshotPartCopies) {
    in.Reject("copies", std::to_string(count) + " in one part; at most " +
                            std::to_string(kMaxSnapshotPartCopies));
  }
  if (in.ok()) part.copies.reserve(count);
  for (uint64_t i = 0; i < count && in.ok(); ++i) {
    in.Scope("copies", i);
    part.copies.push_back(ReadSnapshotCopy(&in));
  }
  in.Scope({}, 0);
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return part;
}

size_t SnapshotCopyBytes(const SnapshotCopy& c) {
  return 8 + StringBytes(c.copy.holder.id) + VarintBytes(c.copy.holder.dp_rank) + 1 +
         VarintBytes(c.copy.depth) + VarintBytes(c.copy.refcount) + 8 +
         StringBytes(c.copy.location);
}

}  // namespace kvatlas::protocol
