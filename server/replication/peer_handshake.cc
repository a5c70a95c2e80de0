#include "server/replication/peer_handshake.h"

#include <cstring>

namespace kvatlas::server {
namespace {

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void PutU64(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <size_t N>
const uint8_t* Take(std::array<uint8_t, N>* out, const uint8_t* p) {
  std::memcpy(out->data(), p, N);
  return p + N;
}

template <size_t N>
uint8_t* Put(const std::array<uint8_t, N>& in, uint8_t* p) {
  std::memcpy(p, in.data(), N);
  return p + N;
}

bool HasMagic(const uint8_t* p) { return std::memcmp(p, kHandshakeMagic.data(), 8) == 0; }

bool SameMac(const PeerMac& a, const PeerMac& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::optional<RaftPreamble> ParseRaftPreamble(const uint8_t* bytes) {
  RaftPreamble out;
  if (GetU64(bytes) != 1) return std::nullopt;
  out.connector_id = GetU64(bytes + 8);
  const uint64_t length = GetU64(bytes + 16);
  if (out.connector_id == 0 || length < 8 || length > kMaxRaftAddressBytes || length % 8 != 0) {
    return std::nullopt;
  }
  out.address_bytes = static_cast<size_t>(length);
  return out;
}

std::optional<std::string> ParseRaftAddress(const uint8_t* bytes, size_t size) {
  const void* nul = std::memchr(bytes, 0, size);
  if (nul == nullptr || nul == bytes) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(bytes),
                     static_cast<size_t>(static_cast<const uint8_t*>(nul) - bytes));
}

std::optional<uint32_t> RaftAddressGroup(std::string_view address) {
  const size_t slash = address.rfind('/');
  if (slash == std::string_view::npos) return 1;
  const std::string_view digits = address.substr(slash + 1);
  if (digits.empty() || digits.size() > 5 || digits.front() == '0') return std::nullopt;
  uint32_t group = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    group = group * 10 + static_cast<uint32_t>(c - '0');
  }
  if (group < 2 || group > kMaxRaftGroup) return std::nullopt;
  return group;
}

std::string_view RaftAddressEndpoint(std::string_view address) {
  return address.substr(0, address.rfind('/'));
}

std::string RaftAddressOfGroup(std::string_view endpoint, uint32_t group) {
  std::string address(endpoint);
  if (group != 1) address += "/" + std::to_string(group);
  return address;
}

void EncodeHello(const PeerHello& hello, uint8_t* out) {
  std::memcpy(out, kHandshakeMagic.data(), 8);
  PutU64(hello.acceptor_id, out + 8);
  Put(hello.nonce, Put(hello.cluster, out + 16));
}

void EncodeProof(const PeerProof& proof, uint8_t* out) {
  std::memcpy(out, kHandshakeMagic.data(), 8);
  Put(proof.mac, Put(proof.nonce, Put(proof.cluster, out + 8)));
}

void EncodeFinish(const PeerFinish& finish, uint8_t* out) {
  PutU64(static_cast<uint64_t>(finish.code), out);
  Put(finish.mac, out + 8);
}

std::optional<PeerHello> DecodeHello(const uint8_t* bytes) {
  if (!HasMagic(bytes)) return std::nullopt;
  PeerHello hello;
  hello.acceptor_id = GetU64(bytes + 8);
  Take(&hello.nonce, Take(&hello.cluster, bytes + 16));
  return hello;
}

std::optional<PeerProof> DecodeProof(const uint8_t* bytes) {
  if (!HasMagic(bytes)) return std::nullopt;
  PeerProof proof;
  Take(&proof.mac, Take(&proof.nonce, Take(&proof.cluster, bytes + 8)));
  return proof;
}

std::optional<PeerFinish> DecodeFinish(const uint8_t* bytes) {
  const uint64_t code = GetU64(bytes);
  if (code > static_cast<uint64_t>(FinishCode::kMalformed)) return std::nullopt;
  PeerFinish finish;
  finish.code = static_cast<FinishCode>(code);
  Take(&finish.mac, bytes + 8);
  return finish;
}

PeerFinish JudgeProof(const PeerAuth& auth, const AcceptorView& view,
                      const std::optional<PeerProof>& proof,
                      const std::function<bool(uint64_t)>& is_member) {
  PeerFinish finish;
  if (!proof) {
    finish.code = FinishCode::kMalformed;
    return finish;
  }
  if (proof->cluster != auth.fingerprint()) {
    finish.code = FinishCode::kWrongCluster;
    return finish;
  }
  const PeerMac expected =
      auth.RaftProof(PeerAuth::Side::kConnector, view.connector_id, view.connector_address,
                     auth.self_id(), view.acceptor_nonce, proof->nonce);
  if (!SameMac(expected, proof->mac)) {
    finish.code = FinishCode::kBadProof;
    return finish;
  }
  // Only a proven peer learns whether its id is a member.
  if (!is_member(view.connector_id)) {
    finish.code = FinishCode::kNotMember;
    return finish;
  }
  finish.mac = auth.RaftProof(PeerAuth::Side::kAcceptor, view.connector_id, view.connector_address,
                              auth.self_id(), view.acceptor_nonce, proof->nonce);
  return finish;
}

std::optional<HandshakeError> CheckHello(const PeerAuth& auth,
                                         const std::optional<PeerHello>& hello,
                                         uint64_t acceptor_id) {
  if (!hello) {
    return HandshakeError{PeerRefusal::kMalformed,
                          "the peer did not answer with the kvatlas peer handshake (another "
                          "program, or a kvatlas without peer authentication)"};
  }
  if (hello->cluster != auth.fingerprint()) {
    return HandshakeError{PeerRefusal::kWrongCluster,
                          "the peer belongs to another cluster (its cluster_id differs from \"" +
                              auth.cluster_id() + "\")"};
  }
  if (hello->acceptor_id != acceptor_id) {
    return HandshakeError{PeerRefusal::kWrongServer,
                          "the peer says it is server " + std::to_string(hello->acceptor_id) +
                              ", not server " + std::to_string(acceptor_id)};
  }
  return std::nullopt;
}

std::optional<HandshakeError> CheckFinish(const PeerAuth& auth,
                                          const std::optional<PeerFinish>& finish,
                                          std::string_view connector_address, uint64_t acceptor_id,
                                          const PeerNonce& acceptor_nonce,
                                          const PeerNonce& connector_nonce) {
  if (!finish) return HandshakeError{PeerRefusal::kMalformed, "a malformed handshake answer"};
  switch (finish->code) {
    case FinishCode::kAccepted:
      break;
    case FinishCode::kWrongCluster:
      return HandshakeError{PeerRefusal::kRefusedByPeer,
                            "the peer refused this server: another cluster id"};
    case FinishCode::kBadProof:
      return HandshakeError{PeerRefusal::kRefusedByPeer,
                            "the peer refused this server's proof: another cluster secret"};
    case FinishCode::kNotMember:
      return HandshakeError{PeerRefusal::kRefusedByPeer, "the peer refused this server: server " +
                                                             std::to_string(auth.self_id()) +
                                                             " is not in its configuration"};
    case FinishCode::kMalformed:
      return HandshakeError{PeerRefusal::kRefusedByPeer,
                            "the peer refused this server's proof as malformed"};
  }
  const PeerMac expected =
      auth.RaftProof(PeerAuth::Side::kAcceptor, auth.self_id(), connector_address, acceptor_id,
                     acceptor_nonce, connector_nonce);
  if (!SameMac(expected, finish->mac)) {
    return HandshakeError{PeerRefusal::kBadProof,
                          "the peer's proof does not verify: it does not hold this cluster's "
                          "secret"};
  }
  return std::nullopt;
}

PeerRefusal RefusalOf(FinishCode code) {
  switch (code) {
    case FinishCode::kWrongCluster:
      return PeerRefusal::kWrongCluster;
    case FinishCode::kBadProof:
      return PeerRefusal::kBadProof;
    case FinishCode::kNotMember:
      return PeerRefusal::kNotMember;
    case FinishCode::kMalformed:
    case FinishCode::kAccepted:
      break;
  }
  return PeerRefusal::kMalformed;
}

}  // namespace kvatlas::server
