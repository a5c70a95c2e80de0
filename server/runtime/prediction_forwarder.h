// How a follower's PredictionRecorder sends its rounds to the leader (docs/routing.md
// §Approximate mode): a POST of the batch to the leader's /v1/cluster/predict, signed with
// the cluster secret (forwarding.h PostInternalCall), to the leader raft names at the REST
// address the replicated state records for it. Each call is bounded by
// kPredictionForwardTimeout (its connection, then the exchange), so a round waits at most
// about 1.25 s for an unreachable leader; then the recorder records locally.
//
// Thread-safety: the forward is called on the recorder's thread; what it reads (raft's
// status, the state's addresses) is safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "server/peer/peer_auth.h"
#include "server/replication/raft_log.h"
#include "server/service/services.h"
#include "server/state/prediction_recorder.h"
#include "server/state/state_machine.h"

namespace kvatlas::server {

inline constexpr std::chrono::milliseconds kPredictionForwardConnectTimeout{250};
inline constexpr std::chrono::milliseconds kPredictionForwardTimeout{1'000};

// The forward of server `self_id`. kUnavailable while no leader (or its address) is known,
// while this server is named leader (its leadership is changing), and when the call fails.
// `raft`, `machine` and `auth` must outlive the recorder's task.
[[nodiscard]] PredictionRecorder::Forward MakePredictionForward(uint64_t self_id, RaftLog* raft,
                                                                StateMachine* machine,
                                                                PeerAuth* auth,
                                                                PeerHttpOptions peer_http);

}  // namespace kvatlas::server
