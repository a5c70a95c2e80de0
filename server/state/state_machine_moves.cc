// The StateMachine's part of a move between groups (docs/scaling.md §Moves): the fence in
// the group a context leaves, the import in the one it goes to, the drop at either end,
// and holder-wide commands kept off the contexts both hold apart meanwhile.
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "server/model/replica_digest.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

void StateMachine::ApplyFenceContext(const FenceContextCommand& c, Revision revision) {
  if (registry_.disowned.contains(c.context)) return;
  AddDisowned(c.context, DisownedContext{revision, c.epoch});
}

void StateMachine::ApplyImportContext(const ImportContextCommand& c, Revision revision) {
  if (registry_.importing.contains(c.context) || registry_.disowned.contains(c.context)) return;
  registry_.importing.emplace(c.context, revision);
  DigestRegistry(ImportingElement(c.context, revision), +1);
  Mutation m;
  m.kind = MutationKind::kPutImporting;
  m.context_key = std::make_shared<const ContextKey>(c.context);
  m.stamp = revision;
  scratch_.push_back(std::move(m));
}

void StateMachine::ApplyDropContext(const DropContextCommand& c) {
  index_.DropContext(c.context, &scratch_);
  const auto importing = registry_.importing.find(c.context);
  if (importing == registry_.importing.end()) return;
  DigestRegistry(ImportingElement(importing->first, importing->second), -1);
  Mutation m;
  m.kind = MutationKind::kDeleteImporting;
  m.context_key = std::make_shared<const ContextKey>(c.context);
  scratch_.push_back(std::move(m));
  registry_.importing.erase(importing);
}

std::vector<ContextKey> StateMachine::SparedContexts() const {
  std::vector<ContextKey> spared;
  for (const auto& [context, since] : registry_.importing) spared.push_back(context);
  for (const auto& [context, disowned] : registry_.disowned) spared.push_back(context);
  return spared;
}

void StateMachine::ClearHolder(const HolderKey& holder, std::optional<Tier> tier) {
  if (registry_.importing.empty() && registry_.disowned.empty()) {
    (void)index_.Apply(ClearCommand{holder, std::nullopt, tier}, options_.hash_seed, &scratch_);
    return;
  }
  index_.ClearHolderExcept(holder, tier, SparedContexts(), &scratch_);
}

}  // namespace kvatlas::server
