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
      should_audit_(std::move(should_audit)) {}

AuditProposer::~AuditProposer() { Stop(); }

void AuditProposer::Start() {
  if (interval_.count() <= 0 || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void AuditProposer::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool AuditProposer::Due(Revision applied, Revision latest_audit_index,
                        std::chrono::steady_clock::duration since_last_proposal,
                        std::chrono::milliseconds interval) {
  return applied > latest_audit_index || since_last_proposal >= interval * kIdleIntervals;
}

void AuditProposer::Run() {
  // Bounded so that Stop never waits long; an audit not applied in time is harmless (the
  // next one carries whatever audit point this server has recorded by then).
  constexpr auto kTimeout = std::chrono::milliseconds(2'000);
  auto last_proposal = std::chrono::steady_clock::now();
  std::string last_error;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    const std::optional<AuditPoint> latest = machine_->audit().latest;
    if (should_audit_() && Due(machine_->applied_revision(), latest ? latest->index : 0,
                               now - last_proposal, interval_)) {
      last_proposal = now;
      CommandBatch batch;
      batch.commands.emplace_back(AuditCommand{latest ? latest->index : 0,
                                               latest ? latest->digest : 0, kReplicaDigestScheme});
      std::future<Result<Revision>> applied = applier_->Submit(std::move(batch));
      const Status status = applied.wait_for(kTimeout) == std::future_status::ready
                                ? applied.get().status()
                                : Status(StatusCode::kDeadlineExceeded, "not applied in time");
      // Expected around a change of leader; log changes only.
      if (!status.ok() && status.ToString() != last_error) {
        LogInfo("replica audit: proposing an audit point: " + status.ToString() +
                " (retrying at the next interval)");
      }
      last_error = status.ok() ? std::string() : status.ToString();
    }
    lock.lock();
  }
}

}  // namespace kvatlas::server
