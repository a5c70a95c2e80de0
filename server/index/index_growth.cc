// The Index's growth made ahead: spares for its hash tables and pools, made off the
// writer thread (index.h, docs/architecture.md §Index).
#include <memory>
#include <utility>
#include <vector>

#include "server/index/flat_table.h"
#include "server/index/index.h"
#include "server/index/index_impl.h"

namespace kvatlas::server {

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
