// The raft transport's peer handshake (docs/replication.md §Peer handshake): the messages
// both ends exchange after libraft's connection preamble and before any raft message, and
// the checks each end makes. Pure functions over fixed-size byte arrays, so that the
// transport (tcp_transport.cc) only moves bytes; safe from any thread.
//
//   connector -> acceptor   libraft preamble: u64 protocol (1), u64 connector id,
//                           u64 address length L (8..kMaxRaftAddressBytes, a multiple of 8),
//                           L bytes of NUL-terminated "HOST:PORT"
//   acceptor  -> connector  Hello  (56 bytes)
//   connector -> acceptor   Proof  (80 bytes)
//   acceptor  -> connector  Finish (40 bytes)
//
// Integers are little-endian, as in libraft's preamble.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "server/peer/peer_auth.h"

namespace kvatlas::server {

inline constexpr size_t kRaftPreambleBytes = 24;
// Longest raft address a preamble may carry (libraft parses at most 255 characters).
inline constexpr size_t kMaxRaftAddressBytes = 256;
inline constexpr size_t kHelloBytes = 56;
inline constexpr size_t kProofBytes = 80;
inline constexpr size_t kFinishBytes = 40;
inline constexpr std::string_view kHandshakeMagic = "KVAPEER1";  // 8 bytes

struct RaftPreamble {
  uint64_t connector_id = 0;
  size_t address_bytes = 0;  // what follows the 24 bytes
};
// nullopt unless protocol 1, a non-zero id and an address length within the limits.
[[nodiscard]] std::optional<RaftPreamble> ParseRaftPreamble(const uint8_t* bytes);
// The NUL-terminated address in `bytes` (the preamble's second part); nullopt without a
// NUL or when empty.
[[nodiscard]] std::optional<std::string> ParseRaftAddress(const uint8_t* bytes, size_t size);

// Raft groups on one port (tcp_transport.h §Groups on one port): group 1's raft address is
// "HOST:PORT" and group g's (2..kMaxRaftGroup) "HOST:PORT/g", so that a connection's
// preamble, which carries the connector's own address, names the group it belongs to.
inline constexpr uint32_t kMaxRaftGroup = 65'535;
// The group `address` names; nullopt for a suffix that is not a group number in
// 2..kMaxRaftGroup written without leading zeros.
[[nodiscard]] std::optional<uint32_t> RaftAddressGroup(std::string_view address);
// "HOST:PORT", without a group suffix.
[[nodiscard]] std::string_view RaftAddressEndpoint(std::string_view address);
// Group `group`'s raft address at `endpoint` ("HOST:PORT"): the endpoint itself for group 1.
[[nodiscard]] std::string RaftAddressOfGroup(std::string_view endpoint, uint32_t group);

struct PeerHello {
  uint64_t acceptor_id = 0;
  ClusterFingerprint cluster{};
  PeerNonce nonce{};
};
struct PeerProof {
  ClusterFingerprint cluster{};
  PeerNonce nonce{};
  PeerMac mac{};
};
// The acceptor's verdict; a refusal carries a zero MAC.
enum class FinishCode : uint64_t {
  kAccepted = 0,
  kWrongCluster = 1,
  kBadProof = 2,
  kNotMember = 3,
  kMalformed = 4,
};
struct PeerFinish {
  FinishCode code = FinishCode::kAccepted;
  PeerMac mac{};
};

void EncodeHello(const PeerHello& hello, uint8_t* out);     // kHelloBytes
void EncodeProof(const PeerProof& proof, uint8_t* out);     // kProofBytes
void EncodeFinish(const PeerFinish& finish, uint8_t* out);  // kFinishBytes
// nullopt when the magic is wrong.
[[nodiscard]] std::optional<PeerHello> DecodeHello(const uint8_t* bytes);
[[nodiscard]] std::optional<PeerProof> DecodeProof(const uint8_t* bytes);
// nullopt for a code outside FinishCode.
[[nodiscard]] std::optional<PeerFinish> DecodeFinish(const uint8_t* bytes);

// What the acceptor knows when the proof arrives.
struct AcceptorView {
  uint64_t connector_id = 0;
  std::string connector_address;
  PeerNonce acceptor_nonce{};
};

// The acceptor's verdict on `proof` (nullopt: the bytes were not a proof) and, when it
// accepts, its own proof. `is_member(id)`: whether the connecting server is a member.
[[nodiscard]] PeerFinish JudgeProof(const PeerAuth& auth, const AcceptorView& view,
                                    const std::optional<PeerProof>& proof,
                                    const std::function<bool(uint64_t)>& is_member);

// The connector's side: the refusal (and a message) of `hello` from the server it dialled
// as `acceptor_id`, or nullopt to go on with the proof.
struct HandshakeError {
  PeerRefusal reason;
  std::string message;
};
[[nodiscard]] std::optional<HandshakeError> CheckHello(const PeerAuth& auth,
                                                       const std::optional<PeerHello>& hello,
                                                       uint64_t acceptor_id);
// The connector's check of the acceptor's verdict.
[[nodiscard]] std::optional<HandshakeError> CheckFinish(const PeerAuth& auth,
                                                        const std::optional<PeerFinish>& finish,
                                                        std::string_view connector_address,
                                                        uint64_t acceptor_id,
                                                        const PeerNonce& acceptor_nonce,
                                                        const PeerNonce& connector_nonce);

// The PeerRefusal an acceptor's refusal code is counted as.
[[nodiscard]] PeerRefusal RefusalOf(FinishCode code);

}  // namespace kvatlas::server
