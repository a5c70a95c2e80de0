#include "server/service/lookup_service.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/internal/prefix_match.h"
#include "server/service/ingest_service.h"
#include "server/service/placement_service.h"
#include "server/service/replica_audit_service.h"

namespace kvatlas::server {

Result<LookupAnswer> LookupPrefix(const Services& services, const LookupRequest& request) {
  return LookupPrefix(services, request, nullptr);
}

Result<LookupAnswer> LookupPrefix(const Services& services, const LookupRequest& request,
                                  std::vector<BlockKey>* looked_up) {
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  if (request.context.block_size == 0) {
    return Status::InvalidArgument("block_size: must be a positive integer, got 0");
  }
  // The configured name limits; the fields are named neutrally (the dialects differ).
  KVATLAS_RETURN_IF_ERROR(CheckContextLimits(request.context, "", {"model", "additional_salt"},
                                             services.options.names));
  const size_t max_blocks = services.options.max_lookup_blocks;
  std::vector<BlockKey> hashed;
  std::span<const BlockKey> keys = request.seq_hashes;
  if (!request.by_hash) {
    std::span<const uint32_t> tokens = request.token_ids;
    tokens = tokens.first(std::min(tokens.size(), max_blocks * request.context.block_size));
    hashed = services.machine->hasher().SequenceHashes(tokens, request.context.block_size);
    keys = hashed;
  }
  keys = keys.first(std::min(keys.size(), max_blocks));
  if (looked_up != nullptr) looked_up->assign(keys.begin(), keys.end());
  LookupOptions options;
  options.include_locations = request.include_locations;
  auto [result, revision] = services.machine->Read([&](const Index& index, Revision rev) {
    return std::make_pair(index.Lookup(request.context, keys, options), rev);
  });
  LookupAnswer answer = BuildLookupAnswer(result, request.context, request.instance_id, revision);
  if (services.metrics != nullptr) {
    services.metrics->RecordLookup(answer.blocks_queried, answer.blocks_found);
  }
  return answer;
}

namespace {

// AwaitReadConsistency in one group: `group`'s revisions, its leader.
Status AwaitInGroup(const Services& group, const LookupRequest& request,
                    std::chrono::steady_clock::time_point deadline) {
  std::optional<uint64_t> wanted = request.min_revision;
  const StateMachine& machine = *group.machine;
  if (request.linearizable) {
    // A linearizable read costs one log entry (libraft 0.15 has no ReadIndex): an empty
    // batch committed through the leader orders the read after every write acknowledged
    // before it. Followers answer not_leader.
    KVATLAS_ASSIGN_OR_RETURN(Revision barrier, SubmitAndWait(group, CommandBatch{}));
    wanted = std::max<uint64_t>(wanted.value_or(0), barrier);
  }
  if (!wanted || machine.applied_revision() >= *wanted) return Status::Ok();
  while (machine.applied_revision() < *wanted) {
    if (std::chrono::steady_clock::now() >= deadline) return RevisionNotApplied(group, *wanted);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return Status::Ok();
}

}  // namespace

Status AwaitReadConsistency(const Services& services, const LookupRequest& request) {
  const auto deadline = std::chrono::steady_clock::now() + services.options.apply_timeout;
  while (true) {
    const Services& group = ServicesFor(services, request.context);
    KVATLAS_RETURN_IF_ERROR(AwaitInGroup(group, request, deadline));
    // The group gave the context away (a placement this server has not applied yet): the
    // read waits for the directory, then for the group it names.
    if (!GaveAway(services, group, request.context) ||
        !AwaitPlacement(services, request.context, deadline)) {
      return Status::Ok();
    }
  }
}

Status RevisionNotApplied(const Services& services, Revision wanted) {
  return Status(StatusCode::kDeadlineExceeded,
                "min_revision " + std::to_string(wanted) + " not applied here within " +
                    std::to_string(services.options.apply_timeout.count()) +
                    " ms (applied: " + std::to_string(services.machine->applied_revision()) + ")");
}

namespace {

// The groups a listing visits: `only`, or every group this server holds; `services` alone
// on a single-group server.
std::vector<const Services*> ListedGroups(const Services& services, std::optional<GroupId> only) {
  if (services.groups == nullptr) return {&services};
  if (only) return {&(*services.groups)[*only - 1]};
  std::vector<const Services*> hosted;
  for (const Services& group : *services.groups) {
    if (HostsGroup(group)) hosted.push_back(&group);
  }
  return hosted;
}

// Whether `group`'s revision is the one a listing answers.
bool AnswersRevision(const Services& group, std::optional<GroupId> only) {
  return only ? group.group == *only : group.group == 1;
}

}  // namespace

std::vector<GroupId> UnhostedGroups(const Services& services) {
  std::vector<GroupId> unhosted;
  if (services.groups == nullptr) return unhosted;
  for (const Services& group : *services.groups) {
    if (!HostsGroup(group)) unhosted.push_back(group.group);
  }
  return unhosted;
}

BlockCopies LocateBlock(const Services& services, BlockKey key, const ContextKey* context,
                        std::optional<GroupId> only) {
  if (context != nullptr) {
    return ServicesFor(services, *context).machine->Read([&](const Index& index, Revision at) {
      return BlockCopies{index.Locate(key, context), at};
    });
  }
  // Every context: every group's copies; the revision is group 1's (each group numbers its
  // own).
  BlockCopies found;
  for (const Services* group : ListedGroups(services, only)) {
    BlockCopies part = group->machine->Read([&](const Index& index, Revision at) {
      return BlockCopies{index.Locate(key, nullptr), at};
    });
    if (AnswersRevision(*group, only)) found.revision = part.revision;
    for (BlockLocation& copy : part.copies) found.copies.push_back(std::move(copy));
  }
  return found;
}

HolderListing ListHolders(const Services& services, std::optional<GroupId> only) {
  // A holder's entries in every group, summed (ids are group 1's where it has one).
  HolderListing listing;
  std::unordered_map<HolderKey, size_t, HolderKeyHash> at;
  for (const Services* group : ListedGroups(services, only)) {
    HolderListing part = group->machine->Read([](const Index& index, Revision revision) {
      return HolderListing{index.Holders(), std::nullopt, revision};
    });
    if (AnswersRevision(*group, only)) listing.revision = part.revision;
    for (HolderInfo& h : part.holders) {
      auto [it, added] = at.try_emplace(h.holder, listing.holders.size());
      if (added) {
        listing.holders.push_back(std::move(h));
        continue;
      }
      HolderInfo& sum = listing.holders[it->second];
      sum.entries += h.entries;
      for (size_t t = 0; t < kNumTiers; ++t) sum.entries_by_tier[t] += h.entries_by_tier[t];
    }
  }
  if (services.leases != nullptr) {
    std::vector<HolderKey> keys;
    keys.reserve(listing.holders.size());
    for (const HolderInfo& h : listing.holders) keys.push_back(h.holder);
    listing.idle_seconds = services.leases->IdleSeconds(keys, std::chrono::steady_clock::now());
  }
  return listing;
}

ContextListing ListContexts(const Services& services, std::optional<GroupId> only) {
  // Each context lives in one group; the revision is group 1's.
  ContextListing listing;
  for (const Services* group : ListedGroups(services, only)) {
    ContextListing part = group->machine->Read([](const Index& index, Revision revision) {
      return ContextListing{index.Contexts(), revision};
    });
    if (AnswersRevision(*group, only)) listing.revision = part.revision;
    for (auto& context : part.contexts) listing.contexts.push_back(std::move(context));
  }
  return listing;
}

}  // namespace kvatlas::server
