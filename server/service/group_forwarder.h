// GroupForwarder: how a write reaches the leader of a raft group that this server does not
// lead (docs/scaling.md §Writes reach every group's leader). On a server hosting several
// groups, a write batch is split by group (SplitByGroup, ingest_service.h); each part goes
// to its group's applier where this server leads that group, and through the forwarder
// otherwise — whatever protocol the write came over (REST, binary, ZMQ) and whichever
// server leads each group. The service layer only sees this interface; the transport
// (a signed internal call, server/api/group_forwarder.h) lives with the REST adapter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "server/model/command.h"
#include "server/state/applier.h"

namespace kvatlas::server {

struct Services;

class GroupForwarder {
 public:
  virtual ~GroupForwarder() = default;

  // Queues `*batch` for the leader of `group`'s raft group (`group`: that group's copy of
  // the Services, which must outlive the forwarder). Accepted: `*batch` is moved from and
  // `done` is called once, on a forwarder thread, with the revision the batch was applied at
  // in that group, or the error. Refused with kResourceExhausted when the forwarder's queue
  // is full: `*batch` is left as it was and `done` is not called.
  [[nodiscard]] virtual Status TryForward(const Services& group, CommandBatch* batch,
                                          Applier::Callback done) = 0;

  // A binary-protocol read (a kLookup's or kRoute's request payload, `type` its message
  // type) of `group` on a server that holds no replica of it (docs/scaling.md §Replicas on
  // some servers): queued for one of the group's recorded members, which answers it as it
  // would its own (its consistency included). Accepted: `done` is called once, on a
  // forwarder thread, with the answer's payload, or the error. Refused with
  // kResourceExhausted when the queue is full (`done` is not called).
  using ReadCallback = std::function<void(Result<std::string>)>;
  [[nodiscard]] virtual Status TryRead(const Services& group, uint8_t type, std::string payload,
                                       ReadCallback done) = 0;
};

}  // namespace kvatlas::server
