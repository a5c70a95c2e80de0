// A ReplicatedLog that only reports a status and metrics, set by the test: for the service
// layer's decisions that read the log's state and never propose (readiness, forwarding).
#pragma once

#include <functional>
#include <string>

#include "server/state/replicated_log.h"

namespace kvatlas::testing {

class StatusOnlyLog : public server::ReplicatedLog {
 public:
  Status Propose(std::string*, std::function<void(Result<uint64_t>)>) override {
    return Status::Unavailable("not used");
  }
  server::ClusterStatus GetStatus() const override { return status; }
  server::LogMetrics GetMetrics() const override { return metrics; }
  void AddServer(uint64_t, std::string, Done done) override { done(Status::Unavailable("")); }
  void RemoveServer(uint64_t, Done done) override { done(Status::Unavailable("")); }
  void TransferLeadership(uint64_t, Done done) override { done(Status::Unavailable("")); }

  server::ClusterStatus status;
  server::LogMetrics metrics;
};

}  // namespace kvatlas::testing
