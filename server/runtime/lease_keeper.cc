#include "server/runtime/lease_keeper.h"

#include <future>
#include <string>
#include <utility>
#include <vector>

#include "common/internal/log.h"

namespace kvatlas::server {

LeaseKeeper::LeaseKeeper(LeaseTracker* leases, Applier* applier,
                         std::chrono::milliseconds apply_wait)
    : leases_(leases),
      applier_(applier),
      apply_wait_(apply_wait),
      task_(leases->check_interval(), [this] { return Round(); }) {}

PeriodicTask::Next LeaseKeeper::Round() {
  std::vector<ExpireHolderCommand> due = leases_->DueExpiries(std::chrono::steady_clock::now());
  if (due.empty()) return leases_->check_interval();
  std::string names;
  CommandBatch batch;
  for (ExpireHolderCommand& expire : due) {
    names += (names.empty() ? "" : ", ") + expire.holder.ToString();
    batch.commands.emplace_back(std::move(expire));
  }
  std::future<Result<Revision>> applied = applier_->Submit(std::move(batch));
  const Result<Revision> result =
      applied.wait_for(apply_wait_) == std::future_status::ready
          ? applied.get()
          : Result<Revision>(Status(StatusCode::kDeadlineExceeded, "not applied in time"));
  if (result.has_value()) {
    // Applied: each expiry dropped its holder's entries unless the race guard or the
    // publisher exemption skipped it (kvatlas_holder_expiries_skipped_total).
    LogInfo("expiry of silent holder(s) " + names + " applied at revision " +
            std::to_string(*result));
  } else {
    // Expected around a change of leader; the next check tries again.
    LogWarning("expiring silent holder(s) " + names + ": " + result.error().ToString());
  }
  return leases_->check_interval();
}

}  // namespace kvatlas::server
