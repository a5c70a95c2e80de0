#include "server/runtime/prediction_forwarder.h"

#include <optional>
#include <string>
#include <utility>

#include "server/api/forwarded_predictions.h"
#include "server/api/forwarding.h"

namespace kvatlas::server {

PredictionRecorder::Forward MakePredictionForward(uint64_t self_id, RaftLog* raft,
                                                  StateMachine* machine, PeerAuth* auth,
                                                  PeerHttpOptions peer_http) {
  return [=, peer_http = std::move(peer_http)](const CommandBatch& batch) -> Status {
    const uint64_t leader = raft->GetStatus().leader_id;
    if (leader == 0) return Status::Unavailable("no leader is known");
    if (leader == self_id) return Status::Unavailable("this server's leadership is changing");
    const std::optional<ServerAddresses> addresses = machine->AddressesOf(leader);
    if (!addresses || addresses->http_address.empty()) {
      return Status::Unavailable("the leader, server " + std::to_string(leader) +
                                 ", has not announced its HTTP address yet");
    }
    return PostInternalCall(peer_http, auth, leader, addresses->http_address, "/v1/cluster/predict",
                            EncodeForwardedPredictions(batch),
                            {kPredictionForwardConnectTimeout, kPredictionForwardTimeout})
        .status();
  };
}

}  // namespace kvatlas::server
