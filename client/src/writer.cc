#include "kvatlas/client/writer.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace kvatlas {
namespace {

// Errors after which the batch may or may not have been applied, or was refused for now:
// resending the same (writer, sequence) is both safe and needed.
bool OutcomeUnknownOrRetryable(StatusCode code) {
  switch (code) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kResourceExhausted:
    case StatusCode::kNotLeader:
    // A part of it refused by a group its context was just placed away from: the other
    // parts may have been applied.
    case StatusCode::kWrongGroup:
      return true;
    default:
      return false;
  }
}

}  // namespace

Writer::Writer(Client* client, std::string writer_id, uint64_t next_sequence, WriterOptions options)
    : client_(client),
      writer_id_(std::move(writer_id)),
      options_(options),
      next_sequence_(std::max<uint64_t>(next_sequence, 1)) {}

uint64_t Writer::next_sequence() const {
  std::lock_guard lock(mu_);
  return next_sequence_;
}

bool Writer::has_pending() const {
  std::lock_guard lock(mu_);
  return pending_.has_value();
}

Status Writer::Settle() {
  std::lock_guard lock(mu_);
  if (!pending_) return Status::Ok();
  Result<IngestAnswer> sent = SendPendingLocked();
  return sent.has_value() ? Status::Ok() : sent.error();
}

Result<IngestAnswer> Writer::Write(std::vector<BlockEvent> events) {
  std::lock_guard lock(mu_);
  if (pending_) {
    Result<IngestAnswer> earlier = SendPendingLocked();
    if (!earlier.has_value() && pending_) {
      return earlier.error().WithContext("an earlier batch of writer " + writer_id_ +
                                         " (sequence " + std::to_string(next_sequence_) +
                                         ") is still unsettled");
    }
  }
  pending_ = std::move(events);
  return SendPendingLocked();
}

Result<IngestAnswer> Writer::SendPendingLocked() {
  const auto give_up = std::chrono::steady_clock::now() + options_.retry_for;
  std::chrono::milliseconds backoff = options_.backoff_min;
  while (true) {
    Result<IngestAnswer> answer =
        client_->Ingest(*pending_, WriterPosition{writer_id_, next_sequence_},
                        std::chrono::duration_cast<Client::Timeout>(options_.call_deadline));
    if (answer.has_value()) {
      pending_.reset();
      ++next_sequence_;
      return answer;
    }
    if (!OutcomeUnknownOrRetryable(answer.error().code())) {
      // Rejected as a whole, so not applied: the sequence is free for the next batch.
      pending_.reset();
      return answer;
    }
    if (std::chrono::steady_clock::now() + backoff >= give_up) return answer;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

}  // namespace kvatlas
