// The raft transport's peer handshake messages and the checks of both ends
// (peer_handshake.h), without sockets; RaftLog over real sockets is in raft_log_test.cc.
#include "server/replication/peer_handshake.h"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

namespace kvatlas::server {
namespace {

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
const auto kAnyone = [](uint64_t) { return true; };

std::vector<uint8_t> Preamble(uint64_t protocol, uint64_t id, uint64_t length) {
  std::vector<uint8_t> out(24);
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(protocol >> (8 * i));
    out[8 + i] = static_cast<uint8_t>(id >> (8 * i));
    out[16 + i] = static_cast<uint8_t>(length >> (8 * i));
  }
  return out;
}

// One full exchange between `connector` (dialling server `dialled`) and `acceptor`; the
// connector's error, or nullopt when both accepted.
struct Outcome {
  FinishCode verdict = FinishCode::kAccepted;
  std::optional<HandshakeError> connector_error;
};
Outcome Exchange(const PeerAuth& connector, const PeerAuth& acceptor, uint64_t dialled,
                 const std::function<bool(uint64_t)>& is_member = kAnyone) {
  const std::string address = "127.0.0.1:7102";
  uint8_t hello_bytes[kHelloBytes], proof_bytes[kProofBytes], finish_bytes[kFinishBytes];
  const PeerNonce acceptor_nonce = PeerAuth::NewNonce();
  EncodeHello({acceptor.self_id(), acceptor.fingerprint(), acceptor_nonce}, hello_bytes);
  Outcome outcome;
  const std::optional<PeerHello> hello = DecodeHello(hello_bytes);
  if ((outcome.connector_error = CheckHello(connector, hello, dialled))) return outcome;
  const PeerNonce connector_nonce = PeerAuth::NewNonce();
  EncodeProof({connector.fingerprint(), connector_nonce,
               connector.RaftProof(PeerAuth::Side::kConnector, connector.self_id(), address,
                                   dialled, hello->nonce, connector_nonce)},
              proof_bytes);
  const PeerFinish finish = JudgeProof(acceptor, {connector.self_id(), address, acceptor_nonce},
                                       DecodeProof(proof_bytes), is_member);
  outcome.verdict = finish.code;
  EncodeFinish(finish, finish_bytes);
  outcome.connector_error = CheckFinish(connector, DecodeFinish(finish_bytes), address, dialled,
                                        hello->nonce, connector_nonce);
  return outcome;
}

TEST_CASE("the raft preamble is parsed within its limits") {
  std::optional<RaftPreamble> ok = ParseRaftPreamble(Preamble(1, 7, 16).data());
  REQUIRE(ok);
  CHECK(ok->connector_id == 7);
  CHECK(ok->address_bytes == 16);
  CHECK_FALSE(ParseRaftPreamble(Preamble(2, 7, 16).data()));  // another protocol
  CHECK_FALSE(ParseRaftPreamble(Preamble(1, 0, 16).data()));  // no id
  CHECK_FALSE(ParseRaftPreamble(Preamble(1, 7, 0).data()));   // no address
  CHECK_FALSE(ParseRaftPreamble(Preamble(1, 7, 12).data()));  // not padded to 8
  CHECK_FALSE(ParseRaftPreamble(Preamble(1, 7, kMaxRaftAddressBytes + 8).data()));
  CHECK_FALSE(
      ParseRaftPreamble(Preamble(1, 7, uint64_t{1} << 62).data()));  // libraft would malloc it

  const uint8_t address[16] = "10.0.0.1:7100";
  CHECK(ParseRaftAddress(address, sizeof(address)) == "10.0.0.1:7100");
  uint8_t unterminated[8];
  std::memset(unterminated, 'a', sizeof(unterminated));
  CHECK_FALSE(ParseRaftAddress(unterminated, sizeof(unterminated)));
  const uint8_t empty[8] = {};
  CHECK_FALSE(ParseRaftAddress(empty, sizeof(empty)));
}

TEST_CASE("a raft address names its group: none for group 1, a suffix for the others") {
  CHECK(RaftAddressGroup("127.0.0.1:7072") == std::optional<uint32_t>(1));
  CHECK(RaftAddressGroup("kvatlas-1.peers:7072/2") == std::optional<uint32_t>(2));
  CHECK(RaftAddressGroup("127.0.0.1:7072/65535") == std::optional<uint32_t>(65'535));
  for (const char* bad : {"h:1/", "h:1/1", "h:1/0", "h:1/02", "h:1/65536", "h:1/2x", "h:1/-2",
                          "h:1/123456", "h:1/ 2"}) {
    CHECK_MESSAGE(!RaftAddressGroup(bad), bad);
  }
  CHECK(RaftAddressEndpoint("127.0.0.1:7072/12") == "127.0.0.1:7072");
  CHECK(RaftAddressEndpoint("127.0.0.1:7072") == "127.0.0.1:7072");
  CHECK(RaftAddressOfGroup("127.0.0.1:7072", 1) == "127.0.0.1:7072");
  CHECK(RaftAddressOfGroup("127.0.0.1:7072", 9) == "127.0.0.1:7072/9");
  CHECK(RaftAddressGroup(RaftAddressOfGroup("h:1", 300)) == std::optional<uint32_t>(300));
}

TEST_CASE("members of one cluster accept each other") {
  PeerAuth one(1, "prod", kSecret), two(2, "prod", kSecret);
  const Outcome outcome = Exchange(two, one, 1);
  CHECK(outcome.verdict == FinishCode::kAccepted);
  CHECK_FALSE(outcome.connector_error);
}

TEST_CASE("another secret is refused by the acceptor, and an acceptor without it too") {
  PeerAuth one(1, "prod", kSecret), impostor(2, "prod", "not the secret of this cluster!!");
  Outcome outcome = Exchange(impostor, one, 1);
  CHECK(outcome.verdict == FinishCode::kBadProof);
  REQUIRE(outcome.connector_error);
  CHECK(outcome.connector_error->reason == PeerRefusal::kRefusedByPeer);
  CHECK(RefusalOf(outcome.verdict) == PeerRefusal::kBadProof);

  // An acceptor without the secret that says it accepted: its own proof fails.
  uint8_t finish_bytes[kFinishBytes];
  EncodeFinish({FinishCode::kAccepted, PeerMac{}}, finish_bytes);
  PeerAuth two(2, "prod", kSecret);
  std::optional<HandshakeError> error =
      CheckFinish(two, DecodeFinish(finish_bytes), "127.0.0.1:7102", 1, PeerAuth::NewNonce(),
                  PeerAuth::NewNonce());
  REQUIRE(error);
  CHECK(error->reason == PeerRefusal::kBadProof);
}

TEST_CASE("another cluster id is told apart, both ways") {
  PeerAuth one(1, "prod", kSecret), stranger(2, "staging", kSecret);
  const Outcome outcome = Exchange(stranger, one, 1);
  REQUIRE(outcome.connector_error);
  CHECK(outcome.connector_error->reason == PeerRefusal::kWrongCluster);  // seen in the hello
  // Had the connector gone on, the acceptor would refuse it as well.
  const PeerNonce nonce = PeerAuth::NewNonce();
  const PeerFinish finish = JudgeProof(
      one, {2, "a", nonce}, PeerProof{stranger.fingerprint(), nonce, PeerMac{}}, kAnyone);
  CHECK(finish.code == FinishCode::kWrongCluster);
  CHECK(finish.mac == PeerMac{});
}

TEST_CASE("a proven server outside the configuration is refused") {
  PeerAuth one(1, "prod", kSecret), nine(9, "prod", kSecret);
  const Outcome outcome = Exchange(nine, one, 1, [](uint64_t id) { return id != 9; });
  CHECK(outcome.verdict == FinishCode::kNotMember);
  REQUIRE(outcome.connector_error);
  CHECK(outcome.connector_error->message.find("not in its configuration") != std::string::npos);
}

TEST_CASE("the server reached must be the one dialled, and must speak the handshake") {
  PeerAuth one(1, "prod", kSecret), two(2, "prod", kSecret);
  const Outcome outcome = Exchange(two, one, 3);
  REQUIRE(outcome.connector_error);
  CHECK(outcome.connector_error->reason == PeerRefusal::kWrongServer);

  uint8_t junk[kHelloBytes] = {};
  CHECK_FALSE(DecodeHello(junk));
  CHECK(CheckHello(two, DecodeHello(junk), 1)->reason == PeerRefusal::kMalformed);
  uint8_t proof_junk[kProofBytes] = {};
  CHECK(JudgeProof(one, {2, "a", PeerAuth::NewNonce()}, DecodeProof(proof_junk), kAnyone).code ==
        FinishCode::kMalformed);
  uint8_t finish_junk[kFinishBytes] = {};
  finish_junk[0] = 9;
  CHECK_FALSE(DecodeFinish(finish_junk));
}

}  // namespace
}  // namespace kvatlas::server
