#include "server/state/audit_proposer.h"

#include <future>
#include <string>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server {

AuditProposer::AuditProposer(std::chrono::milliseconds interval, const StateMachine* machine,
                             Applier* applier, std::function<bool()> should_audit)
    : interval_(interval),
      machine_(machine),
      applier_(applier),
      should_audit_(std::move(should_audit)),
      last_proposal_(std::chrono::steady_clock::now()),
      task_(interval, [this]() -> PeriodicTask::Next {
        Round();
        return interval_;
      }) {}

AuditProposer::~AuditProposer() { Stop(); }

void AuditProposer::Start() {
  if (interval_.count() <= 0) return;
  last_proposal_ = std::chrono::steady_clock::now();
  task_.Start();
}

bool AuditProposer::Due(Revision applied, Revision latest_audit_index,
                        std::chrono::steady_clock::duration since_last_proposal,
                        std::chrono::milliseconds interval) {
  return applied > latest_audit_index || since_last_proposal >= interval * kIdleIntervals;
}

void AuditProposer::Round() {
  // Bounded so that Stop never waits long; an audit not applied in time is harmless (the
  // next one carries whatever audit point this server has recorded by then).
  constexpr auto kTimeout = std::chrono::milliseconds(2'000);
  const auto now = std::chrono::steady_clock::now();
  const std::optional<AuditPoint> latest = machine_->audit().latest;
  if (!should_audit_() || !Due(machine_->applied_revision(), latest ? latest->index : 0,
                               now - last_proposal_, interval_)) {
    return;
  }
  last_proposal_ = now;
  CommandBatch batch;
  batch.commands.emplace_back(
      AuditCommand{latest ? latest->index : 0, latest ? latest->digest : 0, kReplicaDigestScheme});
  std::future<Result<Revision>> applied = applier_->Submit(std::move(batch));
  const Status status = applied.wait_for(kTimeout) == std::future_status::ready
                            ? applied.get().status()
                            : Status(StatusCode::kDeadlineExceeded, "not applied in time");
  // Expected around a change of leader; log changes only.
  if (!status.ok() && status.ToString() != last_error_) {
    LogInfo("replica audit: proposing an audit point: " + status.ToString() +
            " (retrying at the next interval)");
  }
  last_error_ = status.ok() ? std::string() : status.ToString();
}

}  // namespace kvatlas::server
