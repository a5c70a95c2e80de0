// RecordLoader: what boot-time loading hands the persisted map to. Storage reads its records
// and calls these in the order below; the Index implements them (server/index/index.h), so
// that storage needs no index and the index no storage.
//
// Order contract: contexts and holders (any order) first; then each context's blocks in
// ascending stamp order, each block before its entries. Ids and stamps are storage's.
// A loader returns kCorruption for records that contradict each other (an entry without its
// block); the caller stops at the first error.
#pragma once

#include <cstdint>
#include <string>

#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas::server {

class RecordLoader {
 public:
  virtual ~RecordLoader() = default;

  [[nodiscard]] virtual Status LoadContext(uint32_t id, const ContextKey& key) = 0;
  [[nodiscard]] virtual Status LoadHolder(uint32_t id, const HolderKey& key) = 0;
  [[nodiscard]] virtual Status LoadBlock(uint32_t context, BlockKey key, uint32_t depth,
                                         uint64_t stamp) = 0;
  [[nodiscard]] virtual Status LoadEntry(uint32_t context, BlockKey key, uint32_t holder, Tier tier,
                                         uint32_t refcount, uint64_t engine_hash,
                                         std::string location) = 0;
};

}  // namespace kvatlas::server
