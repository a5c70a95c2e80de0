// SortedVectorRepFactory: a RocksDB memtable that appends in O(1) and sorts once, like
// RocksDB's VectorRep, but sorts cheaply. VectorRep sorts pointers to the entries, so every
// comparison of its sort reads two entries scattered over the memtable's arena; on this
// service's write pattern (random block keys) that sort and the flush's walk over the
// sorted pointers were ~44% of a 3-server cluster's CPU. Here each entry is sorted as a
// 24-byte item holding the first 16 bytes of its user key, so nearly every comparison stays
// inside one contiguous array, and iterators prefetch the entries ahead of the walk. A
// point read (Get) scans for the entries of its key instead of sorting a copy of all.
//
// Contract (what RocksDB's MemTableRep requires, docs/storage.md §RocksDB tuning): one
// writer at a time (allow_concurrent_memtable_write = false), readers concurrent with it.
// Valid only with a bytewise user comparator (RocksDB's default, which kvatlas uses): the
// key prefixes are compared as big-endian integers.
#pragma once

#include <rocksdb/memtablerep.h>

namespace kvatlas::server {

class SortedVectorRepFactory final : public rocksdb::MemTableRepFactory {
 public:
  static const char* kClassName() { return "KvatlasSortedVectorRepFactory"; }
  const char* Name() const override { return kClassName(); }

  using MemTableRepFactory::CreateMemTableRep;
  rocksdb::MemTableRep* CreateMemTableRep(const rocksdb::MemTableRep::KeyComparator& compare,
                                          rocksdb::Allocator* allocator,
                                          const rocksdb::SliceTransform* prefix_extractor,
                                          rocksdb::Logger* logger) override;
};

}  // namespace kvatlas::server
