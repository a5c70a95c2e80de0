#include "server/storage/context_scan.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/storage/key_codec.h"

namespace kvatlas::server {

Status ScanContext(const Storage::Capture& capture, const ContextKey& context,
                   ContextScanVisitor* visitor) {
  // The default family comes first, in key order: contexts ('C'), holders ('H') and the
  // applied index ('M') are all known before the first entry record ('T', entries family).
  std::optional<uint32_t> context_id;
  std::unordered_map<uint32_t, HolderKey> holders;
  Revision revision = 0;
  bool entries_started = false;
  bool unknown_context = false;  // ends the scan early: a sentinel, not an error
  uint64_t records = 0;
  std::string meta_applied;
  AppendMetaKey(kMetaAppliedIndex, &meta_applied);
  Status scanned = capture.ForEachRecord([&](std::string_view key, std::string_view value) {
    if (key.empty()) return Status::Corruption("a record with an empty key");
    if (++records % 4096 == 0 && visitor->Cancelled()) {
      return Status(StatusCode::kCancelled, "the scan was cancelled");
    }
    switch (static_cast<RecordType>(key[0])) {
      case RecordType::kContext: {
        KVATLAS_ASSIGN_OR_RETURN(uint32_t id, DecodeContextRecordKey(key));
        KVATLAS_ASSIGN_OR_RETURN(ContextKey decoded, DecodeContextValue(key, value));
        if (decoded == context) context_id = id;
        return Status::Ok();
      }
      case RecordType::kHolder: {
        KVATLAS_ASSIGN_OR_RETURN(uint32_t id, DecodeHolderRecordKey(key));
        KVATLAS_ASSIGN_OR_RETURN(HolderKey decoded, DecodeHolderValue(key, value));
        holders.emplace(id, std::move(decoded));
        return Status::Ok();
      }
      case RecordType::kStreamPosition: {
        if (!visitor->WantsRegistry()) return Status::Ok();
        KVATLAS_ASSIGN_OR_RETURN(std::string_view stream,
                                 DecodeNamedRecordKey(key, RecordType::kStreamPosition));
        KVATLAS_ASSIGN_OR_RETURN(uint64_t sequence, DecodeStreamPositionValue(key, value));
        return visitor->OnStreamPosition(stream, sequence);
      }
      case RecordType::kHolderWide: {
        if (!visitor->WantsRegistry()) return Status::Ok();
        KVATLAS_ASSIGN_OR_RETURN(HolderKey holder, DecodeHolderWideRecordKey(key));
        KVATLAS_ASSIGN_OR_RETURN(std::vector<uint64_t> ids, DecodeHolderWideValue(key, value));
        return visitor->OnHolderWide(holder, ids);
      }
      case RecordType::kMeta:
        if (key == meta_applied) {
          KVATLAS_ASSIGN_OR_RETURN(revision, DecodeMetaFixed64(key, value));
        }
        return Status::Ok();
      case RecordType::kEntry: {
        if (!entries_started) {
          entries_started = true;
          KVATLAS_RETURN_IF_ERROR(visitor->OnRevision(revision));
          if (!context_id) {
            unknown_context = true;
            return Status(StatusCode::kCancelled, "unknown context");
          }
        }
        KVATLAS_ASSIGN_OR_RETURN(EntryRecordKey entry, DecodeEntryRecordKey(key));
        if (entry.context != *context_id) return Status::Ok();
        KVATLAS_ASSIGN_OR_RETURN(EntryValue decoded, DecodeEntryValue(key, value));
        const auto holder = holders.find(entry.holder);
        if (holder == holders.end()) {
          return Status::Corruption("record " + DescribeKey(key) + " names no holder record");
        }
        return visitor->OnCopy(decoded.key, holder->second, entry.tier, decoded.depth,
                               decoded.refcount, decoded.engine_hash, decoded.location);
      }
      default:
        return Status::Ok();
    }
  });
  if (unknown_context) return Status::Ok();
  KVATLAS_RETURN_IF_ERROR(scanned);
  // No entry record at all: the revision was not handed over yet.
  if (!entries_started) return visitor->OnRevision(revision);
  return Status::Ok();
}

}  // namespace kvatlas::server
