#include "server/storage/sorted_vector_rep.h"

#include <rocksdb/slice.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/internal/bytes.h"
#include "common/internal/prefetch.h"

namespace kvatlas::server {
namespace {

using rocksdb::MemTableRep;
using rocksdb::Slice;

// Entries ahead of an iterator's position whose bytes are prefetched: the flush reads
// every entry once, in an order unrelated to where the entries lie.
constexpr size_t kPrefetchDistance = 16;

// One entry as sorted: the first 16 bytes of its user key (zero-padded, big-endian), then
// the entry. Zero-padding keeps the order of the prefixes consistent with the bytewise
// order of the keys (a key that is a prefix of another never sorts after it), so items
// whose prefixes differ are ordered by them alone; equal prefixes fall back to the full
// internal-key comparison (user key, then sequence number descending).
struct SortItem {
  uint64_t high;
  uint64_t low;
  const char* entry;
};

// The internal key of a memtable entry: a varint32 length, then that many bytes (a format
// memtablerep.h declares part of RocksDB's API). Decoded here, not with
// KeyComparator::decode_key: its inline default calls rocksdb::GetLengthPrefixedSlice,
// which Debian's arm64 librocksdb.so does not export (the amd64 one happens to), so the
// server would not link for arm64.
Slice EntryKeyOf(const char* entry) {
  const auto* p = reinterpret_cast<const unsigned char*>(entry);
  uint32_t length = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    const unsigned char byte = *p++;
    length |= static_cast<uint32_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  return Slice(reinterpret_cast<const char*>(p), length);
}

// The user key of a memtable entry (its internal key without the 8-byte trailer).
Slice UserKeyOf(const Slice& internal_key) {
  return Slice(internal_key.data(), internal_key.size() >= 8 ? internal_key.size() - 8 : 0);
}

// The prefix of an internal key (user key + 8-byte trailer).
void PrefixOf(const Slice& internal_key, uint64_t* high, uint64_t* low) {
  char bytes[16] = {};
  const Slice user_key = UserKeyOf(internal_key);
  std::memcpy(bytes, user_key.data(), std::min(user_key.size(), sizeof(bytes)));
  ByteReader reader(std::string_view(bytes, sizeof(bytes)));
  *high = reader.BigEndian64();
  *low = reader.BigEndian64();
}

using Items = std::vector<SortItem>;

// The entries in insertion order, in fixed-size chunks: an append never moves what is
// stored. A std::vector's doubling copied up to 8 MB at once into fresh memory, on the
// writing thread (the raft loop), where first touches of memory cost ~4 ms per MB on the
// CI VM: 40-60 ms stalls of one apply, on every replica at the same entry.
class EntryChunks {
 public:
  void Append(const char* entry) {
    if (size_ % kChunkEntries == 0) {
      // Not value-initialised: pages are touched as entries fill them, not all at once.
      chunks_.push_back(std::make_unique_for_overwrite<const char*[]>(kChunkEntries));
    }
    chunks_.back()[size_ % kChunkEntries] = entry;
    ++size_;
  }

  size_t size() const { return size_; }
  // The bytes the entries fill. Not the chunks' size: RocksDB flushes a memtable by its
  // memory use, and a chunk's untouched tail takes no memory yet (and with small write
  // buffers, counting it would flush after every write).
  size_t MemoryBytes() const { return size_ * sizeof(const char*); }

  // True, and stops there, at the first entry that `pred` holds for.
  template <typename Pred>
  bool AnyOf(Pred&& pred) const {
    for (size_t i = 0; i < size_; ++i) {
      if (pred(chunks_[i / kChunkEntries][i % kChunkEntries])) return true;
    }
    return false;
  }

  template <typename Fn>
  void ForEach(Fn&& fn) const {
    AnyOf([&](const char* entry) {
      fn(entry);
      return false;
    });
  }

 private:
  static constexpr size_t kChunkEntries = size_t{1} << 15;  // 256 KB of pointers
  std::vector<std::unique_ptr<const char*[]>> chunks_;
  size_t size_ = 0;
};

class PointReadIterator;

class SortedVectorRep final : public MemTableRep {
 public:
  SortedVectorRep(const KeyComparator& compare, rocksdb::Allocator* allocator)
      : MemTableRep(allocator), compare_(compare) {}

  void Insert(rocksdb::KeyHandle handle) override {
    std::unique_lock lock(mu_);
    entries_.Append(static_cast<const char*>(handle));
    memory_bytes_.store(entries_.MemoryBytes(), std::memory_order_relaxed);
  }

  bool Contains(const char* key) const override {
    std::shared_lock lock(mu_);
    return entries_.AnyOf([&](const char* entry) { return compare_(entry, key) == 0; });
  }

  void MarkReadOnly() override { read_only_.store(true, std::memory_order_release); }

  size_t ApproximateMemoryUsage() override { return memory_bytes_.load(std::memory_order_relaxed); }

  Iterator* GetIterator(rocksdb::Arena* arena) override;

  // Without an arena, only RocksDB's default MemTableRep::Get asks (there is no prefix
  // extractor), and RocksDB 7.8 never frees that iterator. So the memtable owns it: one per
  // thread, reused by the thread's next point read (a Get is over when its thread asks
  // again), and it reads only the entries of the key sought, not a sorted copy of all.
  Iterator* GetDynamicPrefixIterator(rocksdb::Arena* arena) override;

  // The entries in order. A read-only memtable (the one a flush reads) is sorted once and
  // shared; a mutable one is copied and sorted per iterator, as writes may follow.
  std::shared_ptr<const Items> Sorted() const {
    if (read_only_.load(std::memory_order_acquire)) {
      std::call_once(sort_once_, [this] { sorted_ = SortedItems(ItemsOf(entries_)); });
      return sorted_;
    }
    Items items;
    {
      std::shared_lock lock(mu_);
      items = ItemsOf(entries_);
    }
    return SortedItems(std::move(items));
  }

  // <0, 0, >0 as `entry` sorts before, with, or after the seek target: the encoded
  // `memtable_key` when RocksDB gives one, else `internal_key`.
  int CompareToTarget(const char* entry, const Slice& internal_key,
                      const char* memtable_key) const {
    return memtable_key != nullptr ? compare_(entry, memtable_key) : compare_(entry, internal_key);
  }

  // The number of items that sort before the target (`inclusive`: at or before it).
  // REQUIRES: `items` sorted.
  size_t CountBefore(const Items& items, const Slice& internal_key, const char* memtable_key,
                     bool inclusive) const {
    uint64_t high = 0, low = 0;
    PrefixOf(internal_key, &high, &low);
    auto it = std::partition_point(items.begin(), items.end(), [&](const SortItem& item) {
      int order = 0;
      if (item.high != high) {
        order = item.high < high ? -1 : 1;
      } else if (item.low != low) {
        order = item.low < low ? -1 : 1;
      } else {
        order = CompareToTarget(item.entry, internal_key, memtable_key);
      }
      return inclusive ? order <= 0 : order < 0;
    });
    return static_cast<size_t>(it - items.begin());
  }

  // The entries of the user key of `internal_key` that sort at or after it, in order.
  std::vector<const char*> EntriesFrom(const Slice& internal_key, const char* memtable_key) const {
    const Slice user_key = UserKeyOf(internal_key);
    std::vector<const char*> found;
    auto keep = [&](const char* entry) {
      const Slice key = EntryKeyOf(entry);
      if (UserKeyOf(key) != user_key) return;
      if (CompareToTarget(entry, internal_key, memtable_key) >= 0) found.push_back(entry);
    };
    // A read-only memtable takes no more inserts: no lock needed.
    std::shared_lock lock(mu_, std::defer_lock);
    if (!read_only_.load(std::memory_order_acquire)) lock.lock();
    entries_.ForEach(keep);
    std::sort(found.begin(), found.end(),
              [this](const char* a, const char* b) { return compare_(a, b) < 0; });
    return found;
  }

 private:
  Items ItemsOf(const EntryChunks& entries) const {
    Items items;
    items.reserve(entries.size());
    entries.ForEach([&](const char* entry) {
      SortItem item{0, 0, entry};
      PrefixOf(EntryKeyOf(entry), &item.high, &item.low);
      items.push_back(item);
    });
    return items;
  }

  std::shared_ptr<const Items> SortedItems(Items unsorted) const {
    auto items = std::make_shared<Items>(std::move(unsorted));
    std::sort(items->begin(), items->end(), [this](const SortItem& a, const SortItem& b) {
      if (a.high != b.high) return a.high < b.high;
      if (a.low != b.low) return a.low < b.low;
      return compare_(a.entry, b.entry) < 0;
    });
    return items;
  }

  const KeyComparator& compare_;
  mutable std::shared_mutex mu_;
  EntryChunks entries_;  // insertion order; guarded by mu_ until read-only
  std::atomic<bool> read_only_{false};
  std::atomic<size_t> memory_bytes_{0};
  mutable std::once_flag sort_once_;
  mutable std::shared_ptr<const Items> sorted_;

  // Storage of the iterators RocksDB places in its arena (it destroys them in place and
  // never frees them). The arena's interface is not public, so the storage is ours and is
  // freed with the memtable, which every iterator over it keeps alive.
  std::mutex iterator_storage_mu_;
  std::vector<std::unique_ptr<std::byte[]>> iterator_storage_;
  std::map<std::thread::id, std::unique_ptr<PointReadIterator>> point_reads_;  // same mutex
};

class PointReadIterator final : public MemTableRep::Iterator {
 public:
  explicit PointReadIterator(const SortedVectorRep* rep) : rep_(rep) {}

  bool Valid() const override { return position_ < entries_.size(); }
  const char* key() const override { return entries_[position_]; }
  void Next() override { ++position_; }
  void Prev() override { position_ = position_ == 0 ? entries_.size() : position_ - 1; }
  void Seek(const Slice& internal_key, const char* memtable_key) override {
    entries_ = rep_->EntriesFrom(internal_key, memtable_key);
    position_ = 0;
  }
  // A point read only seeks forward; the other positionings find nothing.
  void SeekForPrev(const Slice&, const char*) override { Clear(); }
  void SeekToFirst() override { Clear(); }
  void SeekToLast() override { Clear(); }

 private:
  void Clear() {
    entries_.clear();
    position_ = 0;
  }

  const SortedVectorRep* rep_;
  std::vector<const char*> entries_;
  size_t position_ = 0;
};

class SortedIterator final : public MemTableRep::Iterator {
 public:
  explicit SortedIterator(const SortedVectorRep* rep) : rep_(rep) {}

  bool Valid() const override { return items_ != nullptr && position_ < items_->size(); }
  const char* key() const override { return (*items_)[position_].entry; }

  void Next() override {
    ++position_;
    PrefetchAhead();
  }

  void Prev() override { position_ = position_ == 0 ? items_->size() : position_ - 1; }

  void Seek(const Slice& internal_key, const char* memtable_key) override {
    Load();
    position_ = rep_->CountBefore(*items_, internal_key, memtable_key, /*inclusive=*/false);
    PrefetchAhead();
  }

  void SeekForPrev(const Slice& internal_key, const char* memtable_key) override {
    Load();
    const size_t at_or_before =
        rep_->CountBefore(*items_, internal_key, memtable_key, /*inclusive=*/true);
    position_ = at_or_before == 0 ? items_->size() : at_or_before - 1;
  }

  void SeekToFirst() override {
    Load();
    position_ = 0;
    for (size_t i = 0; i < kPrefetchDistance && i < items_->size(); ++i) {
      Prefetch((*items_)[i].entry);
    }
  }

  void SeekToLast() override {
    Load();
    position_ = items_->empty() ? 0 : items_->size() - 1;
  }

 private:
  void Load() {
    if (items_ == nullptr) items_ = rep_->Sorted();
  }

  void PrefetchAhead() const {
    const size_t ahead = position_ + kPrefetchDistance;
    if (ahead < items_->size()) Prefetch((*items_)[ahead].entry);
  }

  const SortedVectorRep* rep_;
  std::shared_ptr<const Items> items_;  // null until first positioned
  size_t position_ = 0;
};

MemTableRep::Iterator* SortedVectorRep::GetIterator(rocksdb::Arena* arena) {
  if (arena == nullptr) return new SortedIterator(this);
  // Caller destroys in place and never frees: see iterator_storage_.
  static_assert(alignof(SortedIterator) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  auto storage = std::make_unique<std::byte[]>(sizeof(SortedIterator));
  void* place = storage.get();
  {
    std::lock_guard lock(iterator_storage_mu_);
    iterator_storage_.push_back(std::move(storage));
  }
  return new (place) SortedIterator(this);
}

MemTableRep::Iterator* SortedVectorRep::GetDynamicPrefixIterator(rocksdb::Arena* arena) {
  if (arena != nullptr) return GetIterator(arena);
  std::lock_guard lock(iterator_storage_mu_);
  std::unique_ptr<PointReadIterator>& slot = point_reads_[std::this_thread::get_id()];
  if (slot == nullptr) slot = std::make_unique<PointReadIterator>(this);
  return slot.get();
}

}  // namespace

rocksdb::MemTableRep* SortedVectorRepFactory::CreateMemTableRep(
    const rocksdb::MemTableRep::KeyComparator& compare, rocksdb::Allocator* allocator,
    const rocksdb::SliceTransform* /*prefix_extractor*/, rocksdb::Logger* /*logger*/) {
  return new SortedVectorRep(compare, allocator);
}

}  // namespace kvatlas::server
