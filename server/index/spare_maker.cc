#include "server/index/spare_maker.h"

#include <algorithm>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "common/internal/log.h"
#include "common/internal/thread_name.h"

namespace kvatlas::server {
namespace {

bool SameNeed(const SpareNeed& a, const SpareNeed& b) {
  return a.part == b.part && a.capacity == b.capacity;
}

}  // namespace

SpareMaker::SpareMaker()
    : thread_([this] {
        SetCurrentThreadName("index-spares");
        Run();
      }) {}

SpareMaker::~SpareMaker() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SpareMaker::Request(const SpareNeed& need) {
  {
    std::lock_guard lock(mu_);
    for (const SpareNeed& asked : asked_) {
      if (SameNeed(asked, need)) return;
    }
    // A part asking for a new capacity no longer needs its older request.
    std::erase_if(asked_, [&](const SpareNeed& asked) { return asked.part == need.part; });
    std::erase_if(pending_, [&](const SpareNeed& p) { return p.part == need.part; });
    asked_.push_back(need);
    pending_.push_back(need);
  }
  cv_.notify_one();
}

std::vector<IndexSpare> SpareMaker::TakeReady() {
  std::vector<IndexSpare> ready;
  std::lock_guard lock(mu_);
  for (auto& [need, spare] : ready_) {
    // Taken spares are the part's now: a later request for the same need (the part may
    // have dropped one that no longer fit) is a new one.
    // (A named reference: clang before 16 cannot capture a structured binding.)
    const SpareNeed& taken = need;
    std::erase_if(asked_, [&](const SpareNeed& asked) { return SameNeed(asked, taken); });
    ready.push_back(std::move(spare));
  }
  ready_.clear();
  return ready;
}

void SpareMaker::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (stopping_) return;
    const SpareNeed need = pending_.front();
    pending_.pop_front();
    lock.unlock();
    std::optional<IndexSpare> spare;
    try {
      spare = Index::MakeSpare(need);
    } catch (const std::bad_alloc&) {
      // A spare is a head start, not a need: the growth will allocate for itself.
      LogWarning("index: no memory for a spare made ahead of a growth to " +
                 std::to_string(need.capacity) + " slots or records");
    }
    lock.lock();
    if (spare) {
      ready_.emplace_back(need, std::move(*spare));
    } else {
      std::erase_if(asked_, [&](const SpareNeed& asked) { return SameNeed(asked, need); });
    }
  }
}

}  // namespace kvatlas::server
