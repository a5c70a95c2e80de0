#include "server/service/feed_service.h"

#include <unordered_map>
#include <utility>

#include "server/service/replica_audit_service.h"

namespace kvatlas::server {

namespace {

// The group whose feed a watch with `filter` follows: each group numbers its own
// revisions, so on a server hosting several a watch follows one context's group
// (FeedFilter::GroupContext: the context it names, else its model's).
Result<const Services*> FeedGroup(const Services& services, const FeedFilter& filter) {
  if (services.groups == nullptr) return &services;
  const std::optional<ContextKey> context = filter.GroupContext();
  if (!context) {
    return Status::InvalidArgument(
        "filter: this server hosts several raft groups, each with its own revisions: a watch "
        "names model_name and block_size (and tenant_id, else \"default\"), which pick its "
        "group");
  }
  return &ServicesFor(services, *context);
}

}  // namespace

Result<std::unique_ptr<Watcher>> Subscribe(const Services& all, std::optional<Revision> from,
                                           FeedFilter filter) {
  KVATLAS_ASSIGN_OR_RETURN(const Services* group, FeedGroup(all, filter));
  const Services& services = *group;
  if (services.feed == nullptr) return Status::Unavailable("this server has no change feed");
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  return services.feed->Subscribe(from, std::move(filter));
}

Result<ContextSnapshot> SnapshotContext(const Services& all, const ContextKey& context) {
  const Services& services = ServicesFor(all, context);  // the context's group
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  ContextSnapshot snapshot;
  snapshot.context = context;
  const size_t limit = services.options.max_snapshot_copies;
  bool too_large = false;
  std::unordered_map<HolderKey, uint32_t, HolderKeyHash> holder_index;
  snapshot.revision = services.machine->Read([&](const Index& index, Revision at) {
    index.ForEachCopy(context, [&](BlockKey key, const BlockCopy& copy) {
      if (snapshot.rows.size() >= limit) {
        too_large = true;
        return;
      }
      const auto [holder, added] =
          holder_index.try_emplace(copy.holder, static_cast<uint32_t>(snapshot.holders.size()));
      if (added) snapshot.holders.push_back(copy.holder);
      snapshot.rows.push_back(SnapshotRow{key, holder->second, copy.tier, copy.depth, copy.refcount,
                                          copy.engine_hash, copy.location});
    });
    return at;
  });
  if (too_large) {
    return Status::PayloadTooLarge("the context has more than max_snapshot_copies (" +
                                   std::to_string(limit) + ") copies");
  }
  return snapshot;
}

}  // namespace kvatlas::server
