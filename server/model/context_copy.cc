#include "server/model/context_copy.h"

#include <utility>

#include "kvatlas/common/events.h"
#include "server/model/registration.h"

namespace kvatlas::server {

ContextCopier::ContextCopier(ContextKey context, std::string writer, size_t max_hashes,
                             std::function<Status(CommandBatch)> emit)
    : context_(std::move(context)),
      writer_(std::move(writer)),
      max_hashes_(max_hashes == 0 ? 1 : max_hashes),
      emit_(std::move(emit)) {}

Status ContextCopier::Add(BlockKey key, const BlockCopy& copy) {
  if (block_ == 0 || key != last_key_) {
    ++block_;
    last_key_ = key;
  }
  ++copies_;
  const auto run_key = std::make_tuple(copy.holder.id, copy.holder.dp_rank, copy.tier);
  const auto run = runs_.find(run_key);
  if (run != runs_.end() && run->second.last_block + 1 == block_ &&
      uint64_t{run->second.last_depth} + 1 == copy.depth) {
    auto& store = std::get<StoreCommand>(batch_.commands[run->second.command]);
    store.hashes.push_back(key);
    store.engine_hashes.push_back(copy.engine_hash);
    if (!copy.location.empty() && store.locations.empty()) {
      store.locations.resize(store.hashes.size() - 1);  // "": none recorded
    }
    if (!store.locations.empty()) store.locations.push_back(copy.location);
    run->second.last_block = block_;
    run->second.last_depth = copy.depth;
  } else {
    StoreCommand store = StoreOf(key, copy);
    if (!copy.location.empty()) store.locations = {copy.location};
    runs_[run_key] = Run{batch_.commands.size(), block_, copy.depth};
    batch_.commands.emplace_back(std::move(store));
  }
  ++hashes_;
  // Every reference past the first: one more store of the block alone, after the command
  // that makes the copy (later in the same batch).
  for (uint32_t r = 1; r < copy.refcount; ++r) {
    batch_.commands.emplace_back(StoreOf(key, copy));
    ++hashes_;
  }
  return hashes_ >= max_hashes_ ? Emit() : Status::Ok();
}

StoreCommand ContextCopier::StoreOf(BlockKey key, const BlockCopy& copy) const {
  StoreCommand store;
  store.context = context_;
  store.holder = copy.holder;
  store.tier = copy.tier;
  store.mode = KeyMode::kSequence;
  store.base_depth = copy.depth;
  store.hashes = {key};
  store.engine_hashes = {copy.engine_hash};
  return store;
}

Status ContextCopier::Finish() { return hashes_ == 0 ? Status::Ok() : Emit(); }

Status ContextCopier::Emit() {
  // A command whose engine hashes are its keys needs none (the index takes the key).
  for (Command& command : batch_.commands) {
    auto& store = std::get<StoreCommand>(command);
    if (store.engine_hashes == store.hashes) store.engine_hashes.clear();
  }
  batch_.position = WriterStreamPosition(WriterPosition{writer_, ++sequence_});
  CommandBatch batch = std::move(batch_);
  batch_ = CommandBatch{};
  hashes_ = 0;
  runs_.clear();
  return emit_(std::move(batch));
}

}  // namespace kvatlas::server
