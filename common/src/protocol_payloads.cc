// Payload encodings of the binary protocol (docs/protocol.md §Messages). Little-endian
// fixed-width integers, LEB128 varints for counts and small numbers, varint-length-prefixed
// strings, one presence byte (0/1) before each optional. Decoders read through Reader,
// which names the first field that failed and bounds every count by the bytes left.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include "common/internal/bytes.h"
#include "kvatlas/common/limits.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {
namespace {

using Reader = PayloadReader;

// Lower bounds of one encoded element, for ByteReader::Count: a count larger than the bytes
// left could describe is rejected before anything is reserved.
constexpr size_t kMinEventBytes = 16;
constexpr size_t kMinInstanceBytes = 7;
constexpr size_t kMinRankBytes = 6;
constexpr size_t kMinSharedBytes = 4;
constexpr size_t kMinCopyBytes = 19;
// The kLookup read-consistency trailer's bits (docs/protocol.md §kLookup).
constexpr uint8_t kReadLinearizable = 0x01;
constexpr uint8_t kReadMinRevision = 0x02;
constexpr uint8_t kReadConsistencyBits = kReadLinearizable | kReadMinRevision;

// Runs `read` over the whole payload; its value counts only if Finish() is OK.
template <typename F>
auto DecodeWhole(std::string_view payload, F read)
    -> Result<decltype(read(std::declval<Reader*>()))> {
  Reader in(payload);
  auto value = read(&in);
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return value;
}

// --- shared pieces ----------------------------------------------------------------------

// A request's context, checked as the REST decoders check it (an empty tenant is the
// default one).
ContextKey ReadRequestContext(Reader* in) {
  ContextKey context = ReadContext(in);
  if (context.tenant.empty()) context.tenant = "default";
  if (in->ok() && context.model.empty()) in->Reject("model_name", "must be a non-empty string");
  if (in->ok() && context.block_size == 0) in->Reject("block_size", "must be a positive integer");
  if (in->ok()) {
    if (Status s = CheckContextLimits(context, ""); !s.ok()) in->Fail(std::move(s));
  }
  return context;
}

void PutTierByte(Tier tier, std::string* out) { out->push_back(static_cast<char>(tier)); }

Tier ReadTier(Reader* in) {
  const uint8_t b = in->U8("tier");
  if (in->ok() && b >= kNumTiers) {
    in->Reject("tier", std::to_string(b) + " is not a tier (0-3)");
    return Tier::kGpu;
  }
  return static_cast<Tier>(b);
}

void PutHashes(const std::vector<uint64_t>& hashes, std::string* out) {
  PutVarint64(out, hashes.size());
  for (uint64_t h : hashes) PutFixed64(out, h);
}

std::vector<uint64_t> ReadHashes(Reader* in, std::string_view field) {
  std::vector<uint64_t> hashes(in->Count(8, field));
  for (uint64_t& h : hashes) h = in->Fixed64(field);
  return hashes;
}

void PutTokens(const std::vector<uint32_t>& tokens, std::string* out) {
  PutVarint64(out, tokens.size());
  for (uint32_t t : tokens) PutVarint64(out, t);
}

std::vector<uint32_t> ReadTokens(Reader* in) {
  std::vector<uint32_t> tokens(in->Count(1, "token_ids"));
  for (uint32_t& t : tokens) t = in->Varint32("token_ids");
  return tokens;
}

void PutStrings(const std::vector<std::string>& strings, std::string* out) {
  PutVarint64(out, strings.size());
  for (const std::string& s : strings) PutLengthPrefixed(out, s);
}

std::vector<std::string> ReadStrings(Reader* in, std::string_view field) {
  std::vector<std::string> strings(in->Count(1, field));
  for (std::string& s : strings) s = in->String(field);
  return strings;
}

// --- ingest -----------------------------------------------------------------------------

void PutEvent(const BlockEvent& event, std::string* out) {
  out->push_back(static_cast<char>(event.type));
  PutFlag(out, event.event_id.has_value());
  if (event.event_id) PutFixed64(out, *event.event_id);
  PutFlag(out, event.timestamp.has_value());
  if (event.timestamp) PutFixed64(out, std::bit_cast<uint64_t>(*event.timestamp));
  PutContext(event.context, out);
  PutHolder(event.holder, out);
  PutFlag(out, event.medium.has_value());
  if (event.medium) PutLengthPrefixed(out, *event.medium);
  PutTierByte(event.tier, out);
  PutHashes(event.seq_hashes, out);
  PutFlag(out, event.parent_hash.has_value());
  if (event.parent_hash) PutFixed64(out, *event.parent_hash);
  PutFlag(out, event.base_block_idx.has_value());
  if (event.base_block_idx) PutVarint64(out, *event.base_block_idx);
  PutFlag(out, event.token_ids.has_value());
  if (event.token_ids) PutTokens(*event.token_ids, out);
  PutStrings(event.locations, out);
}

// Reads the fields in PutEvent's order, then drops what REST ignores for the event type
// (DecodeEvent in json_codec.cc), so both paths hand the same events to the server.
BlockEvent ReadEvent(Reader* in) {
  BlockEvent event;
  const uint8_t type = in->U8("event_type");
  if (in->ok() && type > static_cast<uint8_t>(EventType::kCleared)) {
    in->Reject("event_type", std::to_string(type) + " is not an event type (0-2)");
  }
  event.type = static_cast<EventType>(type);
  if (in->Flag("event_id")) event.event_id = in->Fixed64("event_id");
  if (in->Flag("timestamp")) {
    event.timestamp = std::bit_cast<double>(in->Fixed64("timestamp"));
    if (in->ok() && !std::isfinite(*event.timestamp)) {
      in->Reject("timestamp", "must be a finite number");
    }
  }
  event.context = ReadContext(in);
  if (event.context.tenant.empty()) event.context.tenant = "default";
  event.holder = ReadHolder(in);
  if (in->Flag("medium")) event.medium = in->String("medium");
  event.tier = ReadTier(in);
  if (event.medium && in->ok()) {
    const Tier mapped = TierFromMedium(*event.medium, &event.medium_known);
    if (mapped != event.tier) {
      in->Reject("tier", std::string(TierName(event.tier)) + " does not match medium \"" +
                             *event.medium + "\" (" + std::string(TierName(mapped)) + ")");
    }
  }
  event.seq_hashes = ReadHashes(in, "seq_hashes");
  if (in->Flag("parent_hash")) event.parent_hash = in->Fixed64("parent_hash");
  if (in->Flag("base_block_idx")) event.base_block_idx = in->Varint32("base_block_idx");
  if (in->Flag("token_ids")) event.token_ids = ReadTokens(in);
  event.locations = ReadStrings(in, "location");
  if (event.token_ids && event.token_ids->empty()) event.token_ids.reset();  // [] = not given
  if (event.type != EventType::kStored) {
    event.parent_hash.reset();
    event.token_ids.reset();
    event.locations.clear();
  }
  if (event.type == EventType::kCleared) {
    event.seq_hashes.clear();
    event.base_block_idx.reset();
  }
  return event;
}

// --- lookup -----------------------------------------------------------------------------

void PutTierBlocks(const TierBlocks& blocks, std::string* out) {
  for (uint32_t n : {blocks.gpu, blocks.cpu, blocks.disk, blocks.cpu_only, blocks.disk_only}) {
    PutVarint64(out, n);
  }
}

TierBlocks ReadTierBlocks(Reader* in) {
  TierBlocks blocks;
  blocks.gpu = in->Varint32("gpu");
  blocks.cpu = in->Varint32("cpu");
  blocks.disk = in->Varint32("disk");
  blocks.cpu_only = in->Varint32("cpu_only");
  blocks.disk_only = in->Varint32("disk_only");
  return blocks;
}

InstanceMatch ReadInstance(Reader* in) {
  InstanceMatch instance;
  instance.instance_id = in->String("instance_id");
  instance.blocks = ReadTierBlocks(in);
  instance.dp_ranks.resize(in->Count(kMinRankBytes, "dp_ranks"));
  for (RankMatch& rank : instance.dp_ranks) {
    rank.dp_rank = in->Varint32("dp_ranks.dp_rank");
    rank.blocks = ReadTierBlocks(in);
  }
  return instance;
}

SharedMatch ReadShared(Reader* in) {
  SharedMatch match;
  match.backend_id = in->String("backend_id");
  match.dp_rank = in->Varint32("dp_rank");
  match.blocks = in->Varint32("blocks");
  match.locations = ReadStrings(in, "locations");
  return match;
}

// --- locate -----------------------------------------------------------------------------

BlockCopy ReadCopy(Reader* in) {
  BlockCopy copy;
  copy.context = ReadContext(in);
  copy.holder = ReadHolder(in);
  copy.tier = ReadTier(in);
  copy.depth = in->Varint32("depth");
  copy.refcount = in->Varint32("refcount");
  copy.engine_hash = in->Fixed64("engine_hash");
  copy.location = in->String("location");
  return copy;
}

// Reads a counted list of T with `read`, scoping field names to "list[i]".
template <typename T, typename F>
std::vector<T> ReadList(Reader* in, std::string_view list, size_t min_element_bytes, F read) {
  std::vector<T> items(in->Count(min_element_bytes, list));
  for (size_t i = 0; i < items.size() && in->ok(); ++i) {
    in->Scope(list, i);
    items[i] = read(in);
  }
  in->Scope({}, 0);
  return items;
}

constexpr uint8_t kOriginMask = 0x03;
constexpr uint8_t kClearAllContextsFlag = 0x04;

// The event-flags trailer (EncodeIngestRequest): one byte per event.
void ReadEventFlags(Reader* in, std::vector<BlockEvent>* events) {
  const uint64_t n = in->Varint64("event_flags");
  if (in->ok() && n != events->size()) {
    in->Reject("event_flags", "has " + std::to_string(n) + " entries; expected one per event (" +
                                  std::to_string(events->size()) + ")");
    return;
  }
  bool any = false;
  for (BlockEvent& event : *events) {
    const uint8_t flags = in->U8("event_flags");
    if (!in->ok()) return;
    any |= flags != 0;
    const uint8_t origin = flags & kOriginMask;
    if (origin > static_cast<uint8_t>(BlockOrigin::kReused) ||
        (flags & ~(kOriginMask | kClearAllContextsFlag)) != 0) {
      in->Reject("event_flags", std::to_string(flags) +
                                    " is not a flag byte (bits 0-1: origin 0-2, bit 2: clear "
                                    "every context)");
      return;
    }
    // Like the JSON decoder, what does not apply to the event type is ignored.
    if (origin != 0 && event.type == EventType::kStored) {
      event.origin = static_cast<BlockOrigin>(origin);
    }
    event.clear_all_contexts =
        (flags & kClearAllContextsFlag) != 0 && event.type == EventType::kCleared;
  }
  // Written only when some event has a flag: one request, one encoding.
  if (!any) in->Reject("event_flags", "present, but no event has a flag");
}

bool SameEvent(const BlockEvent& a, const BlockEvent& b) {
  return a.type == b.type && a.event_id == b.event_id && a.timestamp == b.timestamp &&
         a.context == b.context && a.holder == b.holder && a.medium == b.medium &&
         a.tier == b.tier && a.medium_known == b.medium_known && a.seq_hashes == b.seq_hashes &&
         a.parent_hash == b.parent_hash && a.base_block_idx == b.base_block_idx &&
         a.token_ids == b.token_ids && a.locations == b.locations && a.origin == b.origin &&
         a.clear_all_contexts == b.clear_all_contexts;
}

}  // namespace

bool operator==(const IngestRequest& a, const IngestRequest& b) {
  return a.writer == b.writer &&
         std::equal(a.events.begin(), a.events.end(), b.events.begin(), b.events.end(), SameEvent);
}

std::string EncodeIngestRequest(const IngestRequest& request) {
  std::string out;
  PutVarint64(&out, request.events.size());
  for (const BlockEvent& event : request.events) PutEvent(event, &out);
  // The writer and the event flags are optional trailers, so that a request without them is
  // the same bytes as before they existed: flag + writer, then (only when some event has a
  // flag) one byte per event: bits 0-1 the origin (0 none, 1 new, 2 reused), bit 2 a clear
  // of every context.
  const auto flags_of = [](const BlockEvent& e) {
    return static_cast<uint8_t>((e.origin ? static_cast<uint8_t>(*e.origin) : 0) |
                                (e.clear_all_contexts ? kClearAllContextsFlag : 0));
  };
  const bool flagged = std::any_of(request.events.begin(), request.events.end(),
                                   [&](const BlockEvent& e) { return flags_of(e) != 0; });
  if (request.writer || flagged) {
    PutFlag(&out, request.writer.has_value());
    if (request.writer) {
      PutLengthPrefixed(&out, request.writer->writer_id);
      PutVarint64(&out, request.writer->sequence);
    }
  }
  if (flagged) {
    PutVarint64(&out, request.events.size());
    for (const BlockEvent& event : request.events)
      out.push_back(static_cast<char>(flags_of(event)));
  }
  return out;
}

Result<IngestRequest> DecodeIngestRequest(std::string_view payload) {
  KVATLAS_ASSIGN_OR_RETURN(IngestRequest request, DecodeWhole(payload, [](Reader* in) {
                             IngestRequest r{
                                 ReadList<BlockEvent>(in, "events", kMinEventBytes, ReadEvent),
                                 std::nullopt};
                             if (in->ok() && !in->AtEnd()) {
                               if (in->Flag("writer")) {
                                 WriterPosition writer;
                                 writer.writer_id = in->String("writer_id");
                                 writer.sequence = in->Varint64("writer_sequence");
                                 r.writer = std::move(writer);
                               } else if (in->ok() && in->AtEnd()) {
                                 // 0x00 is written only before event flags.
                                 in->Reject("writer", "must be 0x01 when present");
                                 return r;
                               }
                             }
                             if (in->ok() && !in->AtEnd()) ReadEventFlags(in, &r.events);
                             return r;
                           }));
  if (request.writer) KVATLAS_RETURN_IF_ERROR(ValidateWriterPosition(*request.writer, ""));
  // The same check as POST /v1/events, with the same field paths.
  for (size_t i = 0; i < request.events.size(); ++i) {
    KVATLAS_RETURN_IF_ERROR(
        ValidateBlockEvent(request.events[i], "events[" + std::to_string(i) + "]"));
  }
  return request;
}

std::string EncodeIngestAnswerBinary(const IngestAnswer& answer) {
  std::string out;
  PutFixed64(&out, answer.revision);
  PutVarint64(&out, answer.events);
  PutVarint64(&out, answer.blocks);
  return out;
}

Result<IngestAnswer> DecodeIngestAnswerBinary(std::string_view payload) {
  return DecodeWhole(payload, [](Reader* in) {
    IngestAnswer answer;
    answer.revision = in->Fixed64("revision");
    answer.events = in->Varint64("events");
    answer.blocks = in->Varint64("blocks");
    return answer;
  });
}

std::string EncodeLookupRequestBinary(const LookupRequest& request) {
  std::string out;
  PutContext(request.context, &out);
  PutFlag(&out, request.by_hash);
  if (request.by_hash) {
    PutHashes(request.seq_hashes, &out);
  } else {
    PutTokens(request.token_ids, &out);
  }
  PutLengthPrefixed(&out, request.instance_id);
  PutFlag(&out, request.include_locations);
  // Read consistency is an optional trailer, written only when asked for: a default read is
  // the same bytes as before it existed, and a server without it refuses (trailing bytes)
  // rather than answering a linearizable read from its own applied state.
  if (request.linearizable || request.min_revision) {
    uint8_t consistency = request.linearizable ? kReadLinearizable : 0;
    if (request.min_revision) consistency |= kReadMinRevision;
    out.push_back(static_cast<char>(consistency));
    if (request.min_revision) PutVarint64(&out, *request.min_revision);
  }
  return out;
}

Result<LookupRequest> DecodeLookupRequestBinary(std::string_view payload) {
  return DecodeWhole(payload, [](Reader* in) {
    LookupRequest request;
    request.context = ReadRequestContext(in);
    request.by_hash = in->Flag("by_hash");
    if (request.by_hash) {
      request.seq_hashes = ReadHashes(in, "seq_hashes");
    } else {
      request.token_ids = ReadTokens(in);
    }
    request.instance_id = in->String("instance_id");
    if (in->ok() && request.instance_id.size() > kMaxNameBytes) {
      in->Fail(TooLong("", "instance_id", request.instance_id.size(), kMaxNameBytes));
    }
    request.include_locations = in->Flag("include_locations");
    if (in->ok() && !in->AtEnd()) {
      const uint8_t consistency = in->U8("consistency");
      if (in->ok() && (consistency == 0 || (consistency & ~kReadConsistencyBits) != 0)) {
        in->Reject("consistency", "must be bit 0 (linearizable) and/or bit 1 (min_revision)");
      }
      request.linearizable = (consistency & kReadLinearizable) != 0;
      if ((consistency & kReadMinRevision) != 0) {
        request.min_revision = in->Varint64("min_revision");
      }
    }
    return request;
  });
}

std::string EncodeLookupAnswerBinary(const LookupAnswer& answer) {
  std::string out;
  PutFixed64(&out, answer.revision);
  PutContext(answer.context, &out);
  PutVarint64(&out, answer.blocks_queried);
  PutVarint64(&out, answer.blocks_found);
  PutVarint64(&out, answer.instances.size());
  for (const InstanceMatch& instance : answer.instances) {
    PutLengthPrefixed(&out, instance.instance_id);
    PutTierBlocks(instance.blocks, &out);
    PutVarint64(&out, instance.dp_ranks.size());
    for (const RankMatch& rank : instance.dp_ranks) {
      PutVarint64(&out, rank.dp_rank);
      PutTierBlocks(rank.blocks, &out);
    }
  }
  PutVarint64(&out, answer.shared.size());
  for (const SharedMatch& match : answer.shared) {
    PutLengthPrefixed(&out, match.backend_id);
    PutVarint64(&out, match.dp_rank);
    PutVarint64(&out, match.blocks);
    PutStrings(match.locations, &out);
  }
  return out;
}

Result<LookupAnswer> DecodeLookupAnswerBinary(std::string_view payload) {
  return DecodeWhole(payload, [](Reader* in) {
    LookupAnswer answer;
    answer.revision = in->Fixed64("revision");
    answer.context = ReadContext(in);
    answer.blocks_queried = in->Varint32("blocks_queried");
    answer.blocks_found = in->Varint32("blocks_found");
    answer.instances = ReadList<InstanceMatch>(in, "instances", kMinInstanceBytes, ReadInstance);
    answer.shared = ReadList<SharedMatch>(in, "shared", kMinSharedBytes, ReadShared);
    return answer;
  });
}

std::string EncodeLocateRequest(const LocateRequest& request) {
  std::string out;
  PutFixed64(&out, request.key);
  PutFlag(&out, request.context.has_value());
  if (request.context) PutContext(*request.context, &out);
  return out;
}

Result<LocateRequest> DecodeLocateRequest(std::string_view payload) {
  return DecodeWhole(payload, [](Reader* in) {
    LocateRequest request;
    request.key = in->Fixed64("key");
    if (in->Flag("context")) request.context = ReadRequestContext(in);
    return request;
  });
}

std::string EncodeLocateAnswer(const LocateAnswer& answer) {
  std::string out;
  PutFixed64(&out, answer.revision);
  PutVarint64(&out, answer.copies.size());
  for (const BlockCopy& copy : answer.copies) {
    PutContext(copy.context, &out);
    PutHolder(copy.holder, &out);
    PutTierByte(copy.tier, &out);
    PutVarint64(&out, copy.depth);
    PutVarint64(&out, copy.refcount);
    PutFixed64(&out, copy.engine_hash);
    PutLengthPrefixed(&out, copy.location);
  }
  return out;
}

Result<LocateAnswer> DecodeLocateAnswer(std::string_view payload) {
  return DecodeWhole(payload, [](Reader* in) {
    LocateAnswer answer;
    answer.revision = in->Fixed64("revision");
    answer.copies = ReadList<BlockCopy>(in, "copies", kMinCopyBytes, ReadCopy);
    return answer;
  });
}

std::string EncodeStatsAnswer(const StatsAnswer& answer) {
  std::string out;
  PutLengthPrefixed(&out, answer.json);
  return out;
}

Result<StatsAnswer> DecodeStatsAnswer(std::string_view payload) {
  return DecodeWhole(payload, [](Reader* in) { return StatsAnswer{in->String("json")}; });
}

std::string EncodeErrorPayload(const Status& status) { return status.message(); }

Status DecodeErrorPayload(StatusCode code, std::string_view payload) {
  // An error answer with status 0 is a peer's bug; it must not read as success.
  if (code == StatusCode::kOk) {
    return Status::Internal("error answer with status ok: " + std::string(payload));
  }
  return Status(code, std::string(payload));
}

}  // namespace kvatlas::protocol
