#include "kvatlas/common/feed.h"

namespace kvatlas {

std::string_view FeedOpName(FeedOp op) {
  switch (op) {
    case FeedOp::kStored:
      return "stored";
    case FeedOp::kRemoved:
      return "removed";
    case FeedOp::kCleared:
      return "cleared";
    case FeedOp::kEvicted:
      return "evicted";
    case FeedOp::kExpired:
      return "holder-expired";
    case FeedOp::kPredicted:
      return "predicted";
  }
  return "unknown";
}

bool FeedFilter::Matches(const FeedRecord& r) const {
  if (r.op == FeedOp::kPredicted && (!predicted || tier)) return false;
  return (!tenant || *tenant == r.context.tenant) && (!model || *model == r.context.model) &&
         (!lora_name || *lora_name == r.context.lora_name) &&
         (!block_size || *block_size == r.context.block_size) &&
         (!salt || *salt == r.context.salt) && (!holder_id || *holder_id == r.holder.id) &&
         (!dp_rank || *dp_rank == r.holder.dp_rank) && (!tier || *tier == r.tier);
}

FeedFilter FeedFilter::ForContext(const ContextKey& context) {
  FeedFilter filter;
  filter.tenant = context.tenant;
  filter.model = context.model;
  filter.lora_name = context.lora_name;
  filter.block_size = context.block_size;
  filter.salt = context.salt;
  return filter;
}

std::optional<ContextKey> FeedFilter::GroupContext() const {
  if (!model || !block_size) return std::nullopt;
  const bool exact = lora_name.has_value() && salt.has_value();
  return ContextKey{tenant.value_or("default"), *model, exact ? *lora_name : "", *block_size,
                    exact ? *salt : ""};
}

}  // namespace kvatlas
