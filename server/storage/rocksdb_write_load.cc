// Writing applied mutations and loading them back at boot. Write puts a group of mutations
// and applied_index in one WriteBatch (the atomicity contract in docs/storage.md);
// LoadInto and LoadRegistry scan the records by type and hand them over in the order
// record_loader.h states, refusing a record that does not decode (kCorruption).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "server/storage/rocksdb_storage_impl.h"

namespace kvatlas::server::rocksdb_storage {

Result<Revision> RocksDbStorage::AppliedIndex() const {
  KVATLAS_ASSIGN_OR_RETURN(std::optional<std::string> stored, GetMeta(kMetaAppliedIndex));
  if (!stored.has_value()) return Revision{0};
  return DecodeMetaFixed64(MetaKey(kMetaAppliedIndex), *stored);
}

Status RocksDbStorage::Write(Revision applied_index, std::span<const Mutation> mutations) {
  // One batch, cleared and refilled by every write: it keeps its buffer, where a new one
  // per group would grow into freshly faulted pages each time (Write has one caller, the
  // applier).
  rocksdb::WriteBatch& batch = write_batch_;
  batch.Clear();
  std::string& key = write_key_;
  std::string& value = write_value_;
  // Later mutations of the same record win: WriteBatch applies in insertion order.
  for (const Mutation& m : mutations) {
    key.clear();
    value.clear();
    // Mutations come from the Index, so these are bugs; refusing them keeps a key that
    // LoadInto would reject off the disk.
    if (static_cast<int>(m.tier) >= kNumTiers) {
      return Status::Internal("mutation with unknown tier " +
                              std::to_string(static_cast<int>(m.tier)));
    }
    if ((m.kind == MutationKind::kPutContext && !m.context_key) ||
        (m.kind == MutationKind::kPutHolder && !m.holder_key) ||
        (m.kind == MutationKind::kPutRegistration && !m.registration) ||
        (m.kind == MutationKind::kPutServerAddresses && !m.server_addresses) ||
        (m.kind == MutationKind::kPutDisowned && !m.context_key) ||
        (m.kind == MutationKind::kPutImporting && !m.context_key) ||
        (m.kind == MutationKind::kDeleteImporting && !m.context_key) ||
        (m.kind == MutationKind::kPutHolderWide && !m.holder_key)) {
      return Status::Internal(
          "context, holder, registration, server addresses or disowned context mutation "
          "without its value");
    }
    rocksdb::Status s;
    switch (m.kind) {
      case MutationKind::kPutContext:
        AppendContextKey(m.context, &key);
        AppendContextValue(*m.context_key, &value);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kPutHolder:
        AppendHolderKey(m.holder, &key);
        AppendHolderValue(*m.holder_key, &value);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kPredicted:
        continue;  // soft state: in memory only (docs/routing.md §Approximate mode)
      case MutationKind::kPutBlock:
      case MutationKind::kDeleteBlock:
        // No record of their own: a block lives in its entries' records, and the Index
        // never keeps a block without entries (its last entry's delete removes it).
        continue;
      case MutationKind::kPutEntry:
        AppendEntryKey(m.stamp, m.context, m.holder, m.tier, &key);
        AppendEntryValue(m.depth, m.key, m.refcount, m.engine_hash, m.location, &value);
        s = batch.Put(entries_, ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kDeleteEntry:
        AppendEntryKey(m.stamp, m.context, m.holder, m.tier, &key);
        s = batch.Delete(entries_, ToSlice(key));
        break;
      case MutationKind::kPutRegistration:
        AppendRegistrationKey(m.location, &key);
        PutRegistration(&value, *m.registration);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kDeleteRegistration:
        AppendRegistrationKey(m.location, &key);
        s = batch.Delete(ToSlice(key));
        break;
      case MutationKind::kPutStreamPosition:
        AppendStreamPositionKey(m.location, &key);
        AppendStreamPositionValue(m.stamp, &value);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kDeleteStreamPosition:
        AppendStreamPositionKey(m.location, &key);
        s = batch.Delete(ToSlice(key));
        break;
      case MutationKind::kPutServerAddresses:
        AppendServerAddressesKey(m.stamp, &key);
        AppendServerAddressesValue(*m.server_addresses, &value);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kDeleteServerAddresses:
        AppendServerAddressesKey(m.stamp, &key);
        s = batch.Delete(ToSlice(key));
        break;
      case MutationKind::kPutDirectory:
        AppendDirectoryKey(&key);
        s = batch.Put(ToSlice(key), ToSlice(m.location));
        break;
      case MutationKind::kPutDisowned:
        AppendDisownedKey(*m.context_key, &key);
        AppendDisownedValue(DisownedContext{m.stamp, m.key}, &value);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kPutHolderWide:
        AppendHolderWideKey(*m.holder_key, &key);
        s = batch.Put(ToSlice(key), ToSlice(m.location));
        break;
      case MutationKind::kPutImporting:
        AppendImportingKey(*m.context_key, &key);
        PutFixed64(&value, m.stamp);
        s = batch.Put(ToSlice(key), ToSlice(value));
        break;
      case MutationKind::kDeleteImporting:
        AppendImportingKey(*m.context_key, &key);
        s = batch.Delete(ToSlice(key));
        break;
      default:
        return Status::Internal("unknown mutation kind " +
                                std::to_string(static_cast<int>(m.kind)));
    }
    KVATLAS_RETURN_IF_ERROR(FromRocks(s, "building write batch"));
  }
  value.clear();
  PutFixed64(&value, applied_index);
  KVATLAS_RETURN_IF_ERROR(FromRocks(batch.Put(ToSlice(MetaKey(kMetaAppliedIndex)), ToSlice(value)),
                                    "building write batch"));
  Status written = FromRocks(db_->Write(write_options_, &batch), "writing to " + path_);
  if (!written.ok()) write_failed_.store(true, std::memory_order_release);
  return written;
}

Status RocksDbStorage::LoadInto(RecordLoader* loader) const {
  auto load_context = [loader](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(uint32_t id, DecodeContextRecordKey(k));
    KVATLAS_ASSIGN_OR_RETURN(ContextKey context, DecodeContextValue(k, v));
    return loader->LoadContext(id, context);
  };
  auto load_holder = [loader](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(uint32_t id, DecodeHolderRecordKey(k));
    KVATLAS_ASSIGN_OR_RETURN(HolderKey holder, DecodeHolderValue(k, v));
    return loader->LoadHolder(id, holder);
  };
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kContext, load_context));
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kHolder, load_holder));
  return LoadEntries(loader);
}

Status RocksDbStorage::LoadRegistry(Registry* registry) const {
  auto load_registration = [registry](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(std::string_view name,
                             DecodeNamedRecordKey(k, RecordType::kRegistration));
    KVATLAS_ASSIGN_OR_RETURN(Registration r, DecodeRegistrationValue(k, v));
    if (r.Key() != name) {
      return Status::Corruption("record " + DescribeKey(k) + " holds the registration of " +
                                r.Key());
    }
    registry->registrations.emplace(std::string(name), std::move(r));
    return Status::Ok();
  };
  auto load_position = [registry](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(std::string_view name,
                             DecodeNamedRecordKey(k, RecordType::kStreamPosition));
    KVATLAS_ASSIGN_OR_RETURN(uint64_t sequence, DecodeStreamPositionValue(k, v));
    registry->positions.emplace(std::string(name), sequence);
    return Status::Ok();
  };
  auto load_server = [registry](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(uint64_t id, DecodeServerAddressesRecordKey(k));
    KVATLAS_ASSIGN_OR_RETURN(ServerAddresses addresses, DecodeServerAddressesValue(k, v));
    registry->servers.emplace(id, std::move(addresses));
    return Status::Ok();
  };
  auto load_directory = [registry](std::string_view k, std::string_view v) -> Status {
    if (k.size() != 1) return Status::Corruption("malformed record key " + DescribeKey(k));
    KVATLAS_ASSIGN_OR_RETURN(registry->directory, DecodeDirectoryValue(k, v));
    return Status::Ok();
  };
  auto load_disowned = [registry](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(ContextKey context, DecodeContextRecordKey(k, RecordType::kDisowned));
    KVATLAS_ASSIGN_OR_RETURN(DisownedContext disowned, DecodeDisownedValue(k, v));
    registry->disowned.emplace(std::move(context), disowned);
    return Status::Ok();
  };
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kRegistration, load_registration));
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kStreamPosition, load_position));
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kDirectory, load_directory));
  auto load_holder_wide = [registry](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(HolderKey holder, DecodeHolderWideRecordKey(k));
    KVATLAS_ASSIGN_OR_RETURN(registry->holder_wide[holder], DecodeHolderWideValue(k, v));
    return Status::Ok();
  };
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kDisowned, load_disowned));
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kHolderWide, load_holder_wide));
  auto load_importing = [registry](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(ContextKey context, DecodeContextRecordKey(k, RecordType::kImporting));
    KVATLAS_ASSIGN_OR_RETURN(registry->importing[context], DecodeImportingValue(k, v));
    return Status::Ok();
  };
  KVATLAS_RETURN_IF_ERROR(Scan(RecordType::kImporting, load_importing));
  return Scan(RecordType::kServerAddresses, load_server);
}

// Entry records come off disk by (stamp, context, holder, tier): each context's blocks in
// creation order, which is the FIFO eviction order the Index needs (it must be the same
// on every replica and after every restart; docs/storage.md §Boot), and the entries of a
// block together, after which comes the next block.
Status RocksDbStorage::LoadEntries(RecordLoader* loader) const {
  // The block being loaded: its first entry's key, and the block key and depth that entry
  // recorded.
  std::optional<EntryRecordKey> block;
  BlockKey block_key = 0;
  uint32_t block_depth = 0;
  auto load = [&](std::string_view k, std::string_view v) -> Status {
    KVATLAS_ASSIGN_OR_RETURN(EntryRecordKey e, DecodeEntryRecordKey(k));
    KVATLAS_ASSIGN_OR_RETURN(EntryValue ev, DecodeEntryValue(k, v));
    if (block && block->stamp == e.stamp && block->context == e.context) {
      // Another copy of the block just loaded: it must agree on the block's part.
      if (ev.key != block_key || ev.depth != block_depth) {
        return Status::Corruption("record " + DescribeKey(k) +
                                  " disagrees with its block's other entries on key or depth");
      }
    } else {
      KVATLAS_RETURN_IF_ERROR(loader->LoadBlock(e.context, ev.key, ev.depth, e.stamp));
      block = e;
      block_key = ev.key;
      block_depth = ev.depth;
    }
    return loader->LoadEntry(e.context, ev.key, e.holder, e.tier, ev.refcount, ev.engine_hash,
                             std::move(ev.location));
  };
  return Scan(RecordType::kEntry, load);
}

}  // namespace kvatlas::server::rocksdb_storage
