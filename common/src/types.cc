#include "kvatlas/common/types.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace kvatlas {
namespace {

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

struct MediumAlias {
  std::string_view name;
  Tier tier;
};

constexpr std::array<MediumAlias, 19> kMediumAliases{{
    {"GPU", Tier::kGpu},        {"DEVICE", Tier::kGpu},      {"HBM", Tier::kGpu},
    {"CPU", Tier::kCpu},        {"CPU_PINNED", Tier::kCpu},  {"HOST", Tier::kCpu},
    {"CPU_TIER1", Tier::kCpu},  {"DRAM", Tier::kCpu},        {"DISK", Tier::kDisk},
    {"NVME", Tier::kDisk},      {"SSD", Tier::kDisk},        {"STORAGE", Tier::kDisk},
    {"CPU_TIER2", Tier::kDisk}, {"LOCAL_DISK", Tier::kDisk}, {"EXTERNAL", Tier::kShared},
    {"REMOTE", Tier::kShared},  {"SHARED", Tier::kShared},   {"NETWORK", Tier::kShared},
    {"HOSTPINNED", Tier::kCpu},
}};

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kGpu:
      return "GPU";
    case Tier::kCpu:
      return "CPU";
    case Tier::kDisk:
      return "DISK";
    case Tier::kShared:
      return "SHARED";
  }
  return "GPU";
}

Tier TierFromMedium(std::string_view medium, bool* known) {
  if (known) *known = true;
  if (medium.empty()) return Tier::kGpu;
  const std::string up = Upper(medium);
  for (const auto& alias : kMediumAliases) {
    if (up == alias.name) return alias.tier;
  }
  if (known) *known = false;
  // Nearest tier by the most specific word the string contains.
  if (up.find("SHARED") != std::string::npos || up.find("REMOTE") != std::string::npos ||
      up.find("EXTERNAL") != std::string::npos) {
    return Tier::kShared;
  }
  if (up.find("DISK") != std::string::npos || up.find("NVME") != std::string::npos ||
      up.find("SSD") != std::string::npos || up.find("FILE") != std::string::npos) {
    return Tier::kDisk;
  }
  if (up.find("CPU") != std::string::npos || up.find("HOST") != std::string::npos ||
      up.find("DRAM") != std::string::npos || up.find("MEM") != std::string::npos) {
    return Tier::kCpu;
  }
  return Tier::kGpu;
}

std::optional<Tier> ParseTierName(std::string_view name) {
  const std::string up = Upper(name);
  for (Tier t : {Tier::kGpu, Tier::kCpu, Tier::kDisk, Tier::kShared}) {
    if (up == TierName(t)) return t;
  }
  return std::nullopt;
}

std::string ContextKey::ToString() const {
  return tenant + "/" + model + "/" + lora_name + "/" + std::to_string(block_size) + "/" + salt;
}

std::string HolderKey::ToString() const { return id + "|" + std::to_string(dp_rank); }

size_t ContextKeyHash::operator()(const ContextKey& k) const {
  std::hash<std::string> h;
  uint64_t v = h(k.tenant);
  v = Mix(v, h(k.model));
  v = Mix(v, h(k.lora_name));
  v = Mix(v, k.block_size);
  v = Mix(v, h(k.salt));
  return static_cast<size_t>(v);
}

size_t HolderKeyHash::operator()(const HolderKey& k) const {
  return static_cast<size_t>(Mix(std::hash<std::string>{}(k.id), k.dp_rank));
}

}  // namespace kvatlas
