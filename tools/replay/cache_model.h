// The simulated KV cache of one inference instance: a GPU tier and a larger CPU tier, each
// an LRU of blocks with a capacity in blocks, and an optional shared storage backend that
// every instance reads and writes (also an LRU). Blocks are trace block ids, which are
// prefix-unique, so a block id stands for its whole prefix.
//
// Model (docs/routing.md §Trace replay): a request's prompt is matched block by block from
// block 0 against GPU, then CPU, then shared storage, and stops at the first block none
// holds. Serving it puts every prompt block in GPU (computed, or loaded from CPU / shared),
// touched from the last block to the first so that a prompt's tail is evicted before its
// head. A block evicted from GPU is offloaded to CPU; one evicted from CPU is gone. Blocks
// that were computed are also written to shared storage when there is one.
//
// Not thread-safe: one simulator thread owns every cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvatlas::replay {

// An LRU set of block ids with a capacity in blocks (0 = holds nothing).
class LruBlocks {
 public:
  explicit LruBlocks(size_t capacity) : capacity_(capacity) {}

  bool Contains(uint32_t id) const { return where_.contains(id); }
  size_t size() const { return where_.size(); }
  size_t capacity() const { return capacity_; }
  // Makes `id` the most recently used, inserting it if absent. Returns true when it was
  // inserted; blocks evicted to make room are appended to *evicted.
  bool Touch(uint32_t id, std::vector<uint32_t>* evicted);
  // Removes `id`; false when absent.
  bool Erase(uint32_t id);

 private:
  size_t capacity_;
  std::list<uint32_t> order_;  // front = most recently used
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> where_;
};

// A prompt's cached prefix on one instance: the leading blocks found, by the tier each was
// found in first (GPU, else CPU, else shared).
struct TierMatch {
  uint32_t gpu = 0;
  uint32_t cpu = 0;
  uint32_t shared = 0;
  uint32_t total() const { return gpu + cpu + shared; }
  friend bool operator==(const TierMatch&, const TierMatch&) = default;
};

// What serving a request changed, per tier, as block ids (for publishing events).
struct CacheChanges {
  std::vector<uint32_t> gpu_stored, gpu_removed;
  std::vector<uint32_t> cpu_stored, cpu_removed;
  std::vector<uint32_t> shared_stored, shared_removed;
};

class InstanceCache {
 public:
  InstanceCache(size_t gpu_blocks, size_t cpu_blocks) : gpu_(gpu_blocks), cpu_(cpu_blocks) {}

  // The cached prefix of `blocks`. `shared` may be null (no shared storage).
  [[nodiscard]] TierMatch Match(std::span<const uint32_t> blocks, const LruBlocks* shared) const;
  // Serves a request (see the file comment); `shared` may be null. Returns what changed.
  CacheChanges Admit(std::span<const uint32_t> blocks, LruBlocks* shared);

  const LruBlocks& gpu() const { return gpu_; }
  const LruBlocks& cpu() const { return cpu_; }

 private:
  LruBlocks gpu_;
  LruBlocks cpu_;
};

}  // namespace kvatlas::replay
