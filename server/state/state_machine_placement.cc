// The StateMachine's placement state (docs/scaling.md §The directory, §Placed contexts): the
// placement directory group 1 keeps (PlaceContextCommand, SetGroupAcceptingCommand,
// SetGroupMembersCommand), the
// contexts a group disowned (DisownContextCommand) and the batches it refuses for them, and
// the positions of placed streams (PlacedStreamKey).
#include <algorithm>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/model/replica_digest.h"
#include "server/model/value_codec.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

bool StateMachine::NamesDisownedContext(const CommandBatch& batch) const {
  for (const Command& command : batch.commands) {
    const ContextKey* context = NamedContext(command);
    if (context != nullptr && registry_.disowned.contains(*context)) return true;
  }
  return false;
}

void StateMachine::ApplyPlaceContext(const PlaceContextCommand& c) {
  // Changed on a copy (the directory before, for the digest) and kept only when the
  // placement succeeds: a refused placement (a context placed already, a group that takes
  // no new contexts, an id out of range) adds no group either and keeps the epoch.
  if (registry_.directory.Find(c.context) != nullptr) return;
  const GroupDescriptor* group = registry_.directory.FindGroup(c.group);
  if (group != nullptr && !group->accepting) return;
  PlacementDirectory next = registry_.directory;
  if (group == nullptr && !next.AddGroup({c.group, {}, true}).ok()) return;
  if (!next.Assign(c.context, c.group).ok()) return;
  std::swap(registry_.directory, next);
  DirectoryChanged(next);
}

void StateMachine::ApplySetGroupAccepting(const SetGroupAcceptingCommand& c) {
  const GroupDescriptor* group = registry_.directory.FindGroup(c.group);
  if (group != nullptr && group->accepting == c.accepting) return;  // as recorded: no new epoch
  PlacementDirectory next = registry_.directory;
  const Status changed = group == nullptr ? next.AddGroup({c.group, {}, c.accepting})
                                          : next.SetAccepting(c.group, c.accepting);
  if (!changed.ok()) return;  // an id out of range
  std::swap(registry_.directory, next);
  DirectoryChanged(next);
}

void StateMachine::ApplySetGroupMembers(const SetGroupMembersCommand& c) {
  std::vector<std::string> members;
  members.reserve(c.members.size());
  for (const uint64_t id : c.members) members.push_back(std::to_string(id));
  const GroupDescriptor* group = registry_.directory.FindGroup(c.group);
  if (group != nullptr && group->members == members) return;  // as recorded: no new epoch
  PlacementDirectory next = registry_.directory;
  const Status changed = group == nullptr ? next.AddGroup({c.group, std::move(members), true})
                                          : next.SetMembers(c.group, std::move(members));
  if (!changed.ok()) return;  // an id out of range, or members the decoder would refuse
  std::swap(registry_.directory, next);
  DirectoryChanged(next);
}

void StateMachine::ApplyDisownContext(const DisownContextCommand& c, Revision revision) {
  if (index_.HasContext(c.context) || registry_.disowned.contains(c.context)) return;
  AddDisowned(c.context, DisownedContext{revision, c.epoch});
}

void StateMachine::AddDisowned(const ContextKey& context, const DisownedContext& disowned) {
  DigestRegistry(DisownedElement(context, disowned), +1);
  registry_.disowned.emplace(context, disowned);
  has_disowned_.store(true, std::memory_order_release);
  Mutation m;
  m.kind = MutationKind::kPutDisowned;
  m.context_key = std::make_shared<const ContextKey>(context);
  m.stamp = disowned.revision;
  m.key = disowned.epoch;
  scratch_.push_back(std::move(m));
}

void StateMachine::DirectoryChanged(const PlacementDirectory& before) {
  if (options_.index.replica_digest) {
    DigestRegistry(DirectoryElement(before), -1);
    DigestRegistry(DirectoryElement(registry_.directory), +1);
  }
  Mutation m;
  m.kind = MutationKind::kPutDirectory;
  m.location = EncodePlacementDirectory(registry_.directory);
  scratch_.push_back(std::move(m));
  PublishDirectory();
}

void StateMachine::PublishDirectory() {
  // With the directory, whether any context is disowned (Recover and Restore load both).
  has_disowned_.store(!registry_.disowned.empty(), std::memory_order_release);
  auto copy = std::make_shared<const PlacementDirectory>(registry_.directory);
  published_directory_.store(std::move(copy), std::memory_order_release);
}

std::shared_ptr<const PlacementDirectory> StateMachine::directory() const {
  return published_directory_.load(std::memory_order_acquire);
}

std::optional<DisownedContext> StateMachine::Disowned(const ContextKey& context) const {
  std::shared_lock lock(mu_);
  const auto it = registry_.disowned.find(context);
  if (it == registry_.disowned.end()) return std::nullopt;
  return it->second;
}

std::vector<uint64_t> StateMachine::HolderWideIds(const HolderKey& holder) const {
  std::shared_lock lock(mu_);
  const auto it = registry_.holder_wide.find(holder);
  return it == registry_.holder_wide.end() ? std::vector<uint64_t>() : it->second;
}

void StateMachine::NoteHolderWide(const HolderKey& holder, uint64_t fanout) {
  if (fanout == 0) return;
  std::vector<uint64_t>& ids = registry_.holder_wide[holder];
  // Applied again (an unpositioned part sent twice): it was applied, which is all a move
  // asks of the record.
  if (std::find(ids.begin(), ids.end(), fanout) != ids.end()) return;
  if (!ids.empty()) DigestRegistry(HolderWideElement(holder, ids), -1);
  if (ids.size() >= kHolderWideKept) ids.erase(ids.begin());
  ids.push_back(fanout);
  DigestRegistry(HolderWideElement(holder, ids), +1);
  Mutation m;
  m.kind = MutationKind::kPutHolderWide;
  m.holder_key = std::make_shared<const HolderKey>(holder);
  PutHolderWideIds(&m.location, ids);
  scratch_.push_back(std::move(m));
}

void StateMachine::ErasePositionsOf(std::string_view key) {
  const auto erase = [this](auto it) {
    DigestRegistry(StreamPositionElement(it->first, it->second), -1);
    Mutation m;
    m.kind = MutationKind::kDeleteStreamPosition;
    m.location = it->first;
    scratch_.push_back(std::move(m));
    return registry_.positions.erase(it);
  };
  if (const auto own = registry_.positions.find(key); own != registry_.positions.end()) {
    erase(own);
  }
  // The placed streams' keys (key, 0x1f, context) are the ones from `key` + 0x1f on that
  // start with it (keys with a smaller byte after `key` sort between: not from there).
  std::string placed_prefix(key);
  placed_prefix.push_back(kPlacedStreamSeparator);
  auto it = registry_.positions.lower_bound(placed_prefix);
  while (it != registry_.positions.end() && it->first.starts_with(placed_prefix)) it = erase(it);
}

}  // namespace kvatlas::server
