// Core value types of the kvatlas data model (docs/architecture.md §Data model).
// All types are plain values; safe to share read-only across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvatlas/common/export.h"

namespace kvatlas {

// A block key: the rolling sequence hash of a prefix block (see block_hasher.h).
using BlockKey = uint64_t;
// The replicated log index of a change; every answer carries the revision it reflects.
using Revision = uint64_t;

// Where a copy of a block lives. The numeric values are stored on disk and on the wire.
// GPU < CPU < DISK is the order of the cumulative prefix answers (GPU ≤ GPU∪CPU ≤ …).
enum class Tier : uint8_t { kGpu = 0, kCpu = 1, kDisk = 2, kShared = 3 };
inline constexpr int kNumTiers = 4;

// "GPU", "CPU", "DISK", "SHARED".
[[nodiscard]] KVATLAS_EXPORT std::string_view TierName(Tier tier);

// Maps an engine `medium` string onto a tier, case-insensitively:
// GPU/DEVICE/HBM → GPU; CPU/CPU_PINNED/HOST/CPU_TIER1/DRAM → CPU;
// DISK/NVME/SSD/STORAGE/CPU_TIER2/LOCAL_DISK → DISK; EXTERNAL/REMOTE/SHARED/NETWORK → SHARED.
// An empty medium means GPU (engines omit it for device blocks). `known` is set false for
// strings outside these lists; they map to the nearest tier by substring, else GPU.
[[nodiscard]] KVATLAS_EXPORT Tier TierFromMedium(std::string_view medium, bool* known = nullptr);
// Parses exactly a TierName (case-insensitive). nullopt otherwise.
[[nodiscard]] KVATLAS_EXPORT std::optional<Tier> ParseTierName(std::string_view name);

// A hash namespace: blocks from different contexts never match.
struct KVATLAS_EXPORT ContextKey {
  std::string tenant = "default";
  std::string model;
  std::string lora_name;  // empty = base model
  uint32_t block_size = 0;
  std::string salt;  // additional_salt / cache_salt

  friend bool operator==(const ContextKey&, const ContextKey&) = default;
  // "tenant/model/lora/block_size/salt", for logs and metrics labels.
  std::string ToString() const;
};

// Who holds a copy: an instance (router-facing target, e.g. an engine endpoint) or a shared
// storage backend, plus the data-parallel rank. Events name it by `backend_id`/`instance_id`.
struct KVATLAS_EXPORT HolderKey {
  std::string id;
  uint32_t dp_rank = 0;

  friend bool operator==(const HolderKey&, const HolderKey&) = default;
  std::string ToString() const;  // "id|rank"
};

// One copy of a block: where it is held, in which tier, and what the holder said of it.
// The answer to "where is block K?" on every interface (Index::Locate, GET /v1/blocks,
// the binary kLocate answer).
struct BlockCopy {
  ContextKey context;
  HolderKey holder;
  Tier tier = Tier::kGpu;
  uint32_t depth = 0;     // position from block 0
  uint32_t refcount = 0;  // duplicate stores of this copy not yet removed
  uint64_t engine_hash = 0;
  std::string location;  // storage-tier descriptor; empty when none was recorded

  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct KVATLAS_EXPORT ContextKeyHash {
  size_t operator()(const ContextKey& k) const;
};
struct KVATLAS_EXPORT HolderKeyHash {
  size_t operator()(const HolderKey& k) const;
};

}  // namespace kvatlas
