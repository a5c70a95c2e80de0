#include "server/storage/flush_jitter.h"

#include <rocksdb/db.h>

#include <string>
#include <unordered_map>

#include "common/internal/log.h"

namespace kvatlas::server {

FlushJitter::FlushJitter(uint64_t max_bytes, uint64_t seed) : max_bytes_(max_bytes), rng_(seed) {}

uint64_t FlushJitter::NextSize() {
  std::lock_guard lock(mu_);
  return Draw();
}

uint64_t FlushJitter::Draw() {
  return std::uniform_int_distribution<uint64_t>(max_bytes_ / 2, max_bytes_)(rng_);
}

void FlushJitter::Track(rocksdb::ColumnFamilyHandle* family) {
  std::lock_guard lock(mu_);
  family_ = family;
}

void FlushJitter::OnFlushCompleted(rocksdb::DB* db, const rocksdb::FlushJobInfo& info) {
  // Held across SetOptions so that Track(nullptr) waits for a resize in progress.
  std::lock_guard lock(mu_);
  if (family_ == nullptr || family_->GetID() != info.cf_id) return;
  const rocksdb::Status s =
      db->SetOptions(family_, {{"write_buffer_size", std::to_string(Draw())}});
  // Only the spreading is lost: the memtables keep their last size.
  if (!s.ok()) LogWarning("storage: cannot change the memtable size: " + s.ToString());
}

}  // namespace kvatlas::server
