// The Index's hash-table growth outside the write lock: PrepareGrowth builds grown tables
// from a const index, AdoptGrowth swaps them in (index.h, docs/architecture.md §Index).
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "server/index/flat_table.h"
#include "server/index/index.h"
#include "server/index/index_impl.h"

namespace kvatlas::server {

struct IndexGrowth::Tables {
  std::optional<FlatTable::Grown> forward;
  std::optional<FlatTable::Grown> aliases;
  std::optional<FlatTable::Grown> hot;
};

IndexGrowth::IndexGrowth() = default;
IndexGrowth::~IndexGrowth() = default;
IndexGrowth::IndexGrowth(IndexGrowth&&) noexcept = default;
IndexGrowth& IndexGrowth::operator=(IndexGrowth&&) noexcept = default;

IndexGrowth Index::PrepareGrowth(const GrowthBound& bound) const {
  const Impl& m = *impl_;
  IndexGrowth growth;
  // Every new block is one forward insert; every new entry attaches at most one alias, and
  // only when its engine hash differs from its block key (bound.aliases).
  std::optional<FlatTable::Grown> forward = m.forward_.PrepareGrowth(bound.blocks);
  std::optional<FlatTable::Grown> aliases = m.aliases_.PrepareGrowth(bound.aliases);
  // The hot table is bounded loosely: a new entry on a hot block is one insert, but the
  // entry that makes a block hot inserts all kHotChain of its entries. The exact bound
  // (kHotChain × entries) would grow a table that holds hot blocks only up to eight times
  // ahead of need, for a case that is rare per batch (blocks turn hot once); so the table is
  // prepared for one insert per entry and a batch that turns many blocks hot at once falls
  // back to Insert's own growth. The hot table is the smallest of the three anyway.
  std::optional<FlatTable::Grown> hot = m.hot_.PrepareGrowth(bound.entries);
  if (!forward && !aliases && !hot) return growth;
  growth.tables_ = std::make_unique<IndexGrowth::Tables>();
  growth.tables_->forward = std::move(forward);
  growth.tables_->aliases = std::move(aliases);
  growth.tables_->hot = std::move(hot);
  return growth;
}

bool Index::AdoptGrowth(IndexGrowth growth) {
  if (growth.empty()) return true;
  Impl& m = *impl_;
  IndexGrowth::Tables& t = *growth.tables_;
  bool all = true;
  if (t.forward) all &= m.forward_.Adopt(std::move(*t.forward));
  if (t.aliases) all &= m.aliases_.Adopt(std::move(*t.aliases));
  if (t.hot) all &= m.hot_.Adopt(std::move(*t.hot));
  return all;
}

struct IndexSpare::Body {
  IndexPart part;
  FlatTable::Spare slots;                    // a table's
  std::unique_ptr<void, FreeDeleter> chunk;  // a pool's
};

IndexSpare::IndexSpare() = default;
IndexSpare::~IndexSpare() = default;
IndexSpare::IndexSpare(IndexSpare&&) noexcept = default;
IndexSpare& IndexSpare::operator=(IndexSpare&&) noexcept = default;

namespace {

constexpr IndexPart kTables[] = {IndexPart::kForward, IndexPart::kAliases, IndexPart::kHot};

// REQUIRES: `part` is one of kTables.
template <typename Impl>
auto& TableOf(Impl& m, IndexPart part) {
  switch (part) {
    case IndexPart::kForward:
      return m.forward_;
    case IndexPart::kAliases:
      return m.aliases_;
    default:
      break;
  }
  return m.hot_;
}

}  // namespace

std::vector<SpareNeed> Index::SparesWanted() const {
  const Impl& m = *impl_;
  std::vector<SpareNeed> needs;
  for (IndexPart table : kTables) {
    if (const size_t capacity = TableOf(m, table).SpareWanted(); capacity != 0) {
      needs.push_back(SpareNeed{table, capacity});
    }
  }
  // A pool's need names its capacity after the spare: one request per chunk.
  if (m.blocks_.SpareWanted()) {
    needs.push_back(SpareNeed{IndexPart::kBlocks, m.blocks_.capacity() + m.blocks_.kChunkSize});
  }
  if (m.entries_.SpareWanted()) {
    needs.push_back(SpareNeed{IndexPart::kEntries, m.entries_.capacity() + m.entries_.kChunkSize});
  }
  return needs;
}

IndexSpare Index::MakeSpare(const SpareNeed& need) {
  IndexSpare spare;
  spare.body_ = std::make_unique<IndexSpare::Body>();
  spare.body_->part = need.part;
  switch (need.part) {
    case IndexPart::kBlocks:
      spare.body_->chunk = decltype(Impl::blocks_)::MakeSpareChunk();
      break;
    case IndexPart::kEntries:
      spare.body_->chunk = decltype(Impl::entries_)::MakeSpareChunk();
      break;
    default:
      spare.body_->slots = FlatTable::MakeSpare(need.capacity);
      break;
  }
  return spare;
}

void Index::ProvideSpare(IndexSpare spare) {
  if (spare.body_ == nullptr) return;
  Impl& m = *impl_;
  IndexSpare::Body& body = *spare.body_;
  // Chunks are all one size: a pool's spare fits whichever chunk comes next.
  if (body.part == IndexPart::kBlocks) {
    m.blocks_.ProvideSpare(std::move(body.chunk));
  } else if (body.part == IndexPart::kEntries) {
    m.entries_.ProvideSpare(std::move(body.chunk));
  } else {
    TableOf(m, body.part).ProvideSpare(std::move(body.slots));
  }
}

TableCapacities Index::table_capacities() const {
  const Impl& m = *impl_;
  return TableCapacities{m.forward_.capacity(), m.aliases_.capacity(), m.hot_.capacity()};
}

}  // namespace kvatlas::server
