// Layout, byte by byte: docs/storage.md §Command batches. The primitives (varints,
// length-prefixed strings, context and holder keys: value_codec.h) are shared with storage,
// so a context is the same bytes in a log entry and in its `C` record.
#include "server/model/command_codec.h"

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "server/model/value_codec.h"

namespace kvatlas::server {
namespace {

// The tag of a command is its index in the Command variant plus one.
enum class CommandTag : uint8_t {
  kStore = 1,
  kRemove = 2,
  kClear = 3,
  kRegister = 4,            // version 2
  kUnregister = 5,          // version 2
  kAnnounce = 6,            // version 3
  kForgetServer = 7,        // version 3
  kExpireHolder = 8,        // version 4
  kAudit = 9,               // version 6; with its digest scheme, version 7
  kLoadReport = 10,         // version 8
  kPredict = 11,            // version 9
  kDrain = 12,              // version 10
  kPlaceContext = 13,       // version 11
  kSetGroupAccepting = 14,  // version 11
  kDisownContext = 15,      // version 11
  kSetGroupMembers = 16,    // version 12
  kReplaceCopies = 17,      // version 14
  kFenceContext = 18,       // version 14
  kImportContext = 19,      // version 14
  kDropContext = 20,        // version 14
};
static_assert(std::is_same_v<std::variant_alternative_t<0, Command>, StoreCommand> &&
              std::is_same_v<std::variant_alternative_t<1, Command>, RemoveCommand> &&
              std::is_same_v<std::variant_alternative_t<2, Command>, ClearCommand> &&
              std::is_same_v<std::variant_alternative_t<3, Command>, RegisterCommand> &&
              std::is_same_v<std::variant_alternative_t<4, Command>, UnregisterCommand> &&
              std::is_same_v<std::variant_alternative_t<5, Command>, AnnounceCommand> &&
              std::is_same_v<std::variant_alternative_t<6, Command>, ForgetServerCommand> &&
              std::is_same_v<std::variant_alternative_t<7, Command>, ExpireHolderCommand> &&
              std::is_same_v<std::variant_alternative_t<8, Command>, AuditCommand> &&
              std::is_same_v<std::variant_alternative_t<9, Command>, LoadReportCommand> &&
              std::is_same_v<std::variant_alternative_t<10, Command>, PredictCommand> &&
              std::is_same_v<std::variant_alternative_t<11, Command>, DrainCommand> &&
              std::is_same_v<std::variant_alternative_t<12, Command>, PlaceContextCommand> &&
              std::is_same_v<std::variant_alternative_t<13, Command>, SetGroupAcceptingCommand> &&
              std::is_same_v<std::variant_alternative_t<14, Command>, DisownContextCommand> &&
              std::is_same_v<std::variant_alternative_t<15, Command>, SetGroupMembersCommand> &&
              std::is_same_v<std::variant_alternative_t<16, Command>, ReplaceCopiesCommand> &&
              std::is_same_v<std::variant_alternative_t<17, Command>, FenceContextCommand> &&
              std::is_same_v<std::variant_alternative_t<18, Command>, ImportContextCommand> &&
              std::is_same_v<std::variant_alternative_t<19, Command>, DropContextCommand> &&
              std::variant_size_v<Command> == 20);

// A StoreCommand's mode byte: its KeyMode, with kReportBit set when the store is a report
// (StoreCommand::report). One byte for both, so that a batch of copies keeps the bytes it
// had before reports existed.
inline constexpr uint8_t kReportBit = 0x80;
template <typename C>
struct StoreModeByte {
  C& store;
};

// An AuditCommand's digest scheme: a varint32 in version 7, absent (scheme 1) before.
template <typename C>
struct AuditScheme {
  C& audit;
};

// A holder-wide command's fan-out id: a fixed64 in version 13, absent (0) before.
template <typename F>
struct FanoutField {
  F& fanout;
};

// A group id: a varint in 1..kMaxGroupId (0 names no group).
template <typename G>
struct GroupIdField {
  G& group;
};

// A directory epoch: a varint (the uint64_t default is fixed64, for hashes).
template <typename E>
struct EpochField {
  E& epoch;
};

template <typename F>
FanoutField<F> FanoutOf(F& fanout) {
  return {fanout};
}
template <typename G>
GroupIdField<G> GroupIdOf(G& group) {
  return {group};
}
template <typename E>
EpochField<E> EpochOf(E& epoch) {
  return {epoch};
}

// The smallest encoded command (a SetGroupAccepting of a group below 128: tag, group,
// flag; before version 11, a Clear of an empty holder id without context or tier, 5 bytes).
// Bounds the command count of a batch.
constexpr size_t kMinCommandBytes = 3;

// A ReplaceCopiesCommand's elements, for both directions (as VisitFields).
template <typename Io, typename H>
void VisitHeldCopy(Io& io, H& v) {
  io(v.holder);
  io(v.tier);
  io(v.refcount);     // varint32, >= 1
  io(v.engine_hash);  // fixed64
  io(v.location);
}
template <typename Io, typename B>
void VisitBlockCopies(Io& io, B& v) {
  io(v.key);    // fixed64
  io(v.depth);  // varint32
  io(v.copies);
  io(v.anew);  // flag
}

// Writes fields in the wire form of their type (docs/storage.md §Command batches).
class FieldWriter {
 public:
  FieldWriter(std::string* out, uint8_t version) : out_(out), version_(version) {}

  void operator()(const ContextKey& v) { PutContextKey(out_, v); }
  void operator()(const HolderKey& v) { PutHolderKey(out_, v); }
  void operator()(Tier v) { PutTier(out_, v); }
  void operator()(StoreModeByte<const StoreCommand> v) {
    out_->push_back(
        static_cast<char>(static_cast<uint8_t>(v.store.mode) | (v.store.report ? kReportBit : 0)));
  }
  void operator()(AuditScheme<const AuditCommand> v) {
    if (version_ >= 7) PutVarint64(out_, v.audit.digest_scheme);
  }
  void operator()(FanoutField<const uint64_t> v) {
    if (version_ >= 13) PutFixed64(out_, v.fanout);
  }
  void operator()(GroupIdField<const GroupId> v) { PutVarint64(out_, v.group); }
  void operator()(EpochField<const Epoch> v) { PutVarint64(out_, v.epoch); }
  void operator()(KeyMode v) { out_->push_back(static_cast<char>(v)); }
  void operator()(uint64_t v) { PutFixed64(out_, v); }  // hashes: fixed width
  void operator()(uint32_t v) { PutVarint64(out_, v); }
  void operator()(const std::string& v) { PutLengthPrefixed(out_, v); }
  void operator()(const Registration& v) { PutRegistration(out_, v); }
  void operator()(bool v) { PutFlag(out_, v); }
  void operator()(const InstanceLoad& v) {
    (*this)(v.instance_id);
    (*this)(v.dp_rank);
    (*this)(v.prefill_blocks);
    (*this)(v.decode_blocks);
  }
  void operator()(const HeldCopy& v) { VisitHeldCopy(*this, v); }
  void operator()(const MovedBlock& v) { VisitBlockCopies(*this, v); }
  template <typename T>
  void operator()(const std::optional<T>& v) {
    PutFlag(out_, v.has_value());
    if (v.has_value()) (*this)(*v);
  }
  template <typename T>
  void operator()(const std::vector<T>& v) {
    PutVarint64(out_, v.size());
    for (const T& x : v) (*this)(x);
  }

 private:
  std::string* out_;
  uint8_t version_;  // of the batch
};

// The inverse of FieldWriter over an untrusted input; failures stick in the ByteReader.
class FieldReader {
 public:
  FieldReader(ByteReader* in, uint8_t version) : in_(in), version_(version) {}

  void operator()(ContextKey& v) { v = ReadContextKey(in_); }
  void operator()(HolderKey& v) { v = ReadHolderKey(in_); }
  void operator()(Tier& v) { v = ReadTier(in_); }
  void operator()(StoreModeByte<StoreCommand> v) {
    const uint8_t byte = in_->U8();
    const uint8_t mode = byte & ~kReportBit;
    if (mode > static_cast<uint8_t>(KeyMode::kAlias)) in_->Fail();
    v.store.mode = static_cast<KeyMode>(mode);
    v.store.report = (byte & kReportBit) != 0;
  }
  void operator()(AuditScheme<AuditCommand> v) {
    v.audit.digest_scheme = version_ >= 7 ? in_->Varint32() : 1;
    if (v.audit.digest_scheme == 0) in_->Fail();
  }
  void operator()(FanoutField<uint64_t> v) { v.fanout = version_ >= 13 ? in_->Fixed64() : 0; }
  void operator()(GroupIdField<GroupId> v) {
    v.group = in_->Varint32();
    if (v.group == kNoGroup || v.group > kMaxGroupId) in_->Fail();
  }
  void operator()(EpochField<Epoch> v) { v.epoch = in_->Varint64(); }
  void operator()(uint64_t& v) { v = in_->Fixed64(); }
  void operator()(uint32_t& v) { v = in_->Varint32(); }
  void operator()(std::string& v) { v = in_->LengthPrefixed(); }
  void operator()(Registration& v) { v = ReadRegistration(in_); }
  void operator()(bool& v) { v = in_->Flag(); }
  void operator()(InstanceLoad& v) {
    (*this)(v.instance_id);
    (*this)(v.dp_rank);
    (*this)(v.prefill_blocks);
    (*this)(v.decode_blocks);
  }
  void operator()(HeldCopy& v) {
    VisitHeldCopy(*this, v);
    if (v.refcount == 0) in_->Fail();
  }
  void operator()(MovedBlock& v) { VisitBlockCopies(*this, v); }
  template <typename T>
  void operator()(std::optional<T>& v) {
    v.reset();
    if (!in_->Flag()) return;
    (*this)(v.emplace());
  }
  // Count() bounds n by the remaining input (each element takes at least one byte, a
  // fixed64 eight), and elements are appended as they decode, so memory stays proportional
  // to the input.
  template <typename T>
  void operator()(std::vector<T>& v) {
    const uint64_t n = in_->Count(std::is_same_v<T, uint64_t> ? sizeof(uint64_t) : 1);
    v.clear();
    for (uint64_t i = 0; i < n && in_->ok(); ++i) (*this)(v.emplace_back());
  }

 private:
  ByteReader* in_;
  uint8_t version_;  // of the batch
};

// The fields of each command, in wire order: the one description both directions use, so
// that the encoder and the decoder cannot disagree. `C` is a command, const or not.
template <typename Io, typename C>
void VisitFields(Io& io, C& c) {
  using T = std::remove_const_t<C>;
  if constexpr (std::is_same_v<T, StoreCommand>) {
    io(c.context);
    io(c.holder);
    io(c.tier);
    io(StoreModeByte<C>{c});  // u8: mode, with kReportBit for a report (version 5)
    io(c.parent);             // fixed64: a hash
    io(c.base_depth);         // varint32
    io(c.hashes);
    io(c.engine_hashes);
    io(c.locations);
  } else if constexpr (std::is_same_v<T, RemoveCommand>) {
    io(c.context);
    io(c.holder);
    io(c.tier);  // optional
    io(c.hashes);
  } else if constexpr (std::is_same_v<T, ClearCommand>) {
    io(c.holder);
    io(c.context);           // optional
    io(c.tier);              // optional
    io(FanoutOf(c.fanout));  // fixed64 (version 13)
  } else if constexpr (std::is_same_v<T, RegisterCommand>) {
    io(c.registration);
  } else if constexpr (std::is_same_v<T, UnregisterCommand>) {
    io(c.instance_id);
    io(c.tenant_id);
    io(c.dp_rank);           // varint32
    io(FanoutOf(c.fanout));  // fixed64 (version 13)
  } else if constexpr (std::is_same_v<T, AnnounceCommand>) {
    io(c.server_id);  // fixed64
    io(c.http_address);
    io(c.rpc_address);
  } else if constexpr (std::is_same_v<T, ForgetServerCommand>) {
    io(c.server_id);  // fixed64
  } else if constexpr (std::is_same_v<T, ExpireHolderCommand>) {
    io(c.holder);
    io(c.last_activity_revision);  // fixed64
  } else if constexpr (std::is_same_v<T, AuditCommand>) {
    io(c.checked_index);    // fixed64
    io(c.checked_digest);   // fixed64
    io(AuditScheme<C>{c});  // varint32 (version 7)
  } else if constexpr (std::is_same_v<T, LoadReportCommand>) {
    io(c.report.router_id);
    io(c.report.ttl_ms);   // varint32
    io(c.accepted_at_ms);  // fixed64
    io(c.report.loads);    // varint n, n × (str, varint32, fixed64, fixed64)
  } else if constexpr (std::is_same_v<T, PredictCommand>) {
    io(c.context);
    io(c.holder);
    io(c.ttl_ms);          // varint32
    io(c.accepted_at_ms);  // fixed64
    io(c.hashes);          // varint n, n × fixed64
  } else if constexpr (std::is_same_v<T, DrainCommand>) {
    io(c.server_id);  // fixed64
    io(c.draining);   // flag
  } else if constexpr (std::is_same_v<T, PlaceContextCommand>) {
    io(c.context);
    io(GroupIdOf(c.group));  // varint, 1..kMaxGroupId
  } else if constexpr (std::is_same_v<T, SetGroupAcceptingCommand>) {
    io(GroupIdOf(c.group));  // varint, 1..kMaxGroupId
    io(c.accepting);         // flag
  } else if constexpr (std::is_same_v<T, DisownContextCommand>) {
    io(c.context);
    io(EpochOf(c.epoch));  // varint
  } else if constexpr (std::is_same_v<T, SetGroupMembersCommand>) {
    io(GroupIdOf(c.group));  // varint, 1..kMaxGroupId
    io(c.members);           // varint n (1..kMaxGroupMembers), n × fixed64 ascending, none 0
  } else if constexpr (std::is_same_v<T, ReplaceCopiesCommand>) {
    io(c.context);
    io(c.blocks);  // varint n, n × (fixed64 key, varint32 depth, varint m, m × copy, flag anew)
  } else if constexpr (std::is_same_v<T, FenceContextCommand>) {
    io(c.context);
    io(EpochOf(c.epoch));  // varint
  } else if constexpr (std::is_same_v<T, ImportContextCommand> ||
                       std::is_same_v<T, DropContextCommand>) {
    io(c.context);
  } else {
    static_assert(std::is_same_v<T, StreamPosition>);
    io(c.stream);
    io(c.sequence);  // fixed64
    io(c.restart);   // flag
  }
}

// A SetGroupMembersCommand's members: 1..kMaxGroupMembers server ids, ascending, none 0.
bool ValidRecordedMembers(const std::vector<uint64_t>& members) {
  if (members.empty() || members.size() > kMaxGroupMembers || members.front() == 0) return false;
  return std::adjacent_find(members.begin(), members.end(),
                            [](uint64_t a, uint64_t b) { return a >= b; }) == members.end();
}

constexpr CommandTag TagOf(const Command& command) {
  return static_cast<CommandTag>(command.index() + 1);
}

template <typename C>
void ReadInto(CommandBatch* batch, ByteReader* in, uint8_t version) {
  FieldReader reader(in, version);
  VisitFields(reader, std::get<C>(batch->commands.emplace_back(std::in_place_type<C>)));
}

// The first version that has `command`.
uint8_t VersionOf(const Command& command) {
  const CommandTag tag = TagOf(command);
  const auto* store = std::get_if<StoreCommand>(&command);
  const auto* registration = std::get_if<RegisterCommand>(&command);
  const auto* audit = std::get_if<AuditCommand>(&command);
  const auto* clear = std::get_if<ClearCommand>(&command);
  const auto* unregister = std::get_if<UnregisterCommand>(&command);
  if (tag >= CommandTag::kReplaceCopies) return 14;
  if ((clear && clear->fanout != 0) || (unregister && unregister->fanout != 0)) return 13;
  if (tag >= CommandTag::kSetGroupMembers) return 12;
  if (tag >= CommandTag::kPlaceContext) return 11;
  if (tag >= CommandTag::kDrain) return 10;
  if (tag >= CommandTag::kPredict) return 9;
  if (tag >= CommandTag::kLoadReport) return 8;
  if (audit) return audit->digest_scheme == 1 ? 6 : 7;
  if ((store && store->report) ||
      (registration && registration->registration.report_mode != ReportMode::kIncremental)) {
    return 5;
  }
  if (tag >= CommandTag::kExpireHolder) return 4;
  if (tag >= CommandTag::kAnnounce) return 3;
  if (tag >= CommandTag::kRegister || (store && store->mode == KeyMode::kAlias)) return 2;
  return 1;
}

// Batches are written in the oldest version that can hold them, so that the encoding stays
// canonical (one byte string per batch) and old logs and new ones agree byte for byte:
// 14 with a move's command (ReplaceCopies, FenceContext, ImportContext, DropContext; its
// Clears and Unregisters carry their fan-out ids as in 13), else 13 with a holder-wide command's
// fan-out id (every Clear and Unregister of the batch then carries one, 0 included), else 12 with a
// group's members (SetGroupMembers), else 11 with a placement command (PlaceContext,
// SetGroupAccepting, DisownContext), else 10 with a drain, else 9 with a prediction, else 8 with a
// load report, else 7 with an audit point of a digest scheme other than 1, else 6 with an audit
// point, else 5 with a report store or a registration in a report mode other than incremental, else
// 4 with an expiry, else 3 with server-address commands, else 2 with a position, registry commands
// or kAlias stores, else 1. Versions 2 to 12 share the layout; 3, 4, 6 and 8 to 12 only add tags, 5
// only the report bit of a store's mode byte and the report-mode bits of a registration's type
// byte, 7 only the digest scheme after an audit point's fields (every audit point of a version-7
// batch has it, scheme 1 included).
uint8_t NeededVersion(const CommandBatch& batch) {
  uint8_t version = batch.position ? 2 : 1;
  for (const Command& command : batch.commands) version = std::max(version, VersionOf(command));
  return version;
}

}  // namespace

std::string EncodeCommandBatch(const CommandBatch& batch) {
  std::string out;
  const uint8_t version = NeededVersion(batch);
  out.push_back(static_cast<char>(version));
  PutVarint64(&out, batch.commands.size());
  FieldWriter writer(&out, version);
  for (const Command& command : batch.commands) {
    out.push_back(static_cast<char>(TagOf(command)));
    std::visit([&writer](const auto& c) { VisitFields(writer, c); }, command);
  }
  if (version == 1) return out;
  PutFlag(&out, batch.position.has_value());
  if (batch.position) VisitFields(writer, *batch.position);
  return out;
}

Result<CommandBatch> DecodeCommandBatch(std::string_view bytes) {
  ByteReader in(bytes);
  const uint8_t version = in.U8();
  if (!in.ok()) return Status::Corruption("command batch is empty");
  if (version < kOldestCommandBatchVersion || version > kCommandBatchVersion) {
    return Status::Corruption("command batch has unknown version " + std::to_string(version));
  }
  const uint64_t count = in.Count(kMinCommandBytes);
  if (!in.ok()) return Status::Corruption("command batch has a malformed command count");
  CommandBatch batch;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t tag = in.U8();
    switch (static_cast<CommandTag>(tag)) {
      case CommandTag::kStore:
        ReadInto<StoreCommand>(&batch, &in, version);
        break;
      case CommandTag::kRemove:
        ReadInto<RemoveCommand>(&batch, &in, version);
        break;
      case CommandTag::kClear:
        ReadInto<ClearCommand>(&batch, &in, version);
        break;
      case CommandTag::kRegister:
        if (version < 2) in.Fail();
        if (in.ok()) ReadInto<RegisterCommand>(&batch, &in, version);
        break;
      case CommandTag::kUnregister:
        if (version < 2) in.Fail();
        if (in.ok()) ReadInto<UnregisterCommand>(&batch, &in, version);
        break;
      case CommandTag::kAnnounce:
        if (version < 3) in.Fail();
        if (in.ok()) ReadInto<AnnounceCommand>(&batch, &in, version);
        break;
      case CommandTag::kForgetServer:
        if (version < 3) in.Fail();
        if (in.ok()) ReadInto<ForgetServerCommand>(&batch, &in, version);
        break;
      case CommandTag::kExpireHolder:
        if (version < 4) in.Fail();
        if (in.ok()) ReadInto<ExpireHolderCommand>(&batch, &in, version);
        break;
      case CommandTag::kAudit:
        if (version < 6) in.Fail();
        if (in.ok()) ReadInto<AuditCommand>(&batch, &in, version);
        break;
      case CommandTag::kLoadReport:
        if (version < 8) in.Fail();
        if (in.ok()) ReadInto<LoadReportCommand>(&batch, &in, version);
        break;
      case CommandTag::kPredict:
        if (version < 9) in.Fail();
        if (in.ok()) ReadInto<PredictCommand>(&batch, &in, version);
        break;
      case CommandTag::kDrain:
        if (version < 10) in.Fail();
        if (in.ok()) ReadInto<DrainCommand>(&batch, &in, version);
        break;
      case CommandTag::kPlaceContext:
        if (version < 11) in.Fail();
        if (in.ok()) ReadInto<PlaceContextCommand>(&batch, &in, version);
        break;
      case CommandTag::kSetGroupAccepting:
        if (version < 11) in.Fail();
        if (in.ok()) ReadInto<SetGroupAcceptingCommand>(&batch, &in, version);
        break;
      case CommandTag::kDisownContext:
        if (version < 11) in.Fail();
        if (in.ok()) ReadInto<DisownContextCommand>(&batch, &in, version);
        break;
      case CommandTag::kSetGroupMembers:
        if (version < 12) in.Fail();
        if (in.ok()) ReadInto<SetGroupMembersCommand>(&batch, &in, version);
        if (in.ok() && !ValidRecordedMembers(
                           std::get<SetGroupMembersCommand>(batch.commands.back()).members)) {
          in.Fail();
        }
        break;
      case CommandTag::kReplaceCopies:
        if (version < 14) in.Fail();
        if (in.ok()) ReadInto<ReplaceCopiesCommand>(&batch, &in, version);
        break;
      case CommandTag::kFenceContext:
        if (version < 14) in.Fail();
        if (in.ok()) ReadInto<FenceContextCommand>(&batch, &in, version);
        break;
      case CommandTag::kImportContext:
        if (version < 14) in.Fail();
        if (in.ok()) ReadInto<ImportContextCommand>(&batch, &in, version);
        break;
      case CommandTag::kDropContext:
        if (version < 14) in.Fail();
        if (in.ok()) ReadInto<DropContextCommand>(&batch, &in, version);
        break;
      default:
        in.Fail();
    }
    if (!in.ok()) {
      return Status::Corruption("command batch: command " + std::to_string(i) + " of " +
                                std::to_string(count) + " (tag " + std::to_string(tag) +
                                ") is truncated or malformed");
    }
  }
  if (version >= 2 && in.Flag()) {
    FieldReader reader(&in, version);
    VisitFields(reader, batch.position.emplace());
  }
  if (!in.ok()) return Status::Corruption("command batch has a truncated or malformed position");
  // Tags are checked against the version while reading, so a batch can only need a lower
  // version than it declares (or, for version 1, a kAlias store).
  if (const uint8_t needed = NeededVersion(batch); needed != version) {
    return Status::Corruption("command batch is version " + std::to_string(version) +
                              " but its content needs version " + std::to_string(needed) +
                              " (the encoding is canonical)");
  }
  if (!in.Done()) {
    return Status::Corruption("command batch has " + std::to_string(in.remaining()) +
                              " trailing bytes");
  }
  return batch;
}

std::string EncodeLogEntry(std::span<const CommandBatch* const> batches) {
  std::string out;
  out.push_back(static_cast<char>(kLogEntryVersion));
  PutVarint64(&out, batches.size());
  for (const CommandBatch* batch : batches) PutLengthPrefixed(&out, EncodeCommandBatch(*batch));
  return out;
}

Result<std::vector<CommandBatch>> DecodeLogEntry(std::string_view bytes) {
  ByteReader in(bytes);
  if (in.U8() != kLogEntryVersion || !in.ok()) {
    return Status::Corruption("log entry is empty or has an unknown version");
  }
  // Each batch takes at least three bytes (length, version, count).
  const uint64_t n = in.Count(3);
  std::vector<CommandBatch> batches;
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const std::string_view encoded = in.LengthPrefixed();
    if (!in.ok()) break;
    Result<CommandBatch> batch = DecodeCommandBatch(encoded);
    if (!batch.has_value()) {
      return batch.error().WithContext("log entry batch " + std::to_string(i));
    }
    batches.push_back(std::move(*batch));
  }
  if (!in.ok()) return Status::Corruption("log entry is truncated or malformed");
  // The log pads entries with up to 7 zero bytes (8-byte alignment).
  if (in.remaining() >= 8) return Status::Corruption("log entry has trailing bytes");
  while (in.remaining() > 0) {
    if (in.U8() != 0) return Status::Corruption("log entry has non-zero trailing bytes");
  }
  return batches;
}

}  // namespace kvatlas::server
