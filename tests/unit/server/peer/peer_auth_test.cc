// PeerAuth: the internal-call signatures (request and answer), the time window and replay
// guard, the raft proofs' bindings, and reading a cluster secret file.
#include "server/peer/peer_auth.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::TempDir;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
const auto kAnyone = [](uint64_t) { return true; };

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t Refused(const PeerAuth& auth, PeerChannel channel, PeerRefusal reason) {
  return auth.counters().refused[static_cast<size_t>(channel)][static_cast<size_t>(reason)];
}

// Replaces `key=`'s value in a header "v1 k=v k=v".
std::string With(std::string header, const std::string& key, const std::string& value) {
  const size_t at = header.find(" " + key + "=") + key.size() + 2;
  const size_t end = header.find(' ', at);
  return header.replace(at, end == std::string::npos ? std::string::npos : end - at, value);
}

TEST_CASE("a signed internal call verifies once, for its method, target and body") {
  PeerAuth sender(2, "prod", kSecret);
  PeerAuth receiver(1, "prod", kSecret);
  const SignedPeerRequest request = sender.SignRequest("POST", "/v1/events", "{\"events\":[]}");
  Result<PeerCall> call = receiver.VerifyRequest(request.header, "POST", "/v1/events",
                                                 "{\"events\":[]}", kAnyone, "10.0.0.2");
  REQUIRE_MESSAGE(call.has_value(), call.status().ToString());
  CHECK(call->sender == 2);
  CHECK(call->nonce == request.nonce);
  CHECK(receiver.counters().calls_verified == 1);

  // The same bytes again: a replay.
  Result<PeerCall> again = receiver.VerifyRequest(request.header, "POST", "/v1/events",
                                                  "{\"events\":[]}", kAnyone, "10.0.0.2");
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().code() == StatusCode::kUnauthenticated);
  CHECK(Refused(receiver, PeerChannel::kHttpIn, PeerRefusal::kReplay) == 1);

  // Any change of what was signed.
  for (const auto& [method, target, body] :
       {std::tuple{"PUT", "/v1/events", "{\"events\":[]}"},
        std::tuple{"POST", "/v1/events?x=1", "{\"events\":[]}"},
        std::tuple{"POST", "/v1/events", "{\"events\":[1]}"}}) {
    const SignedPeerRequest fresh = sender.SignRequest("POST", "/v1/events", "{\"events\":[]}");
    CHECK_FALSE(
        receiver.VerifyRequest(fresh.header, method, target, body, kAnyone, "x").has_value());
  }
  CHECK(Refused(receiver, PeerChannel::kHttpIn, PeerRefusal::kBadProof) == 3);
  // Another sender id than the one signed.
  const SignedPeerRequest fresh = sender.SignRequest("POST", "/p", "");
  CHECK_FALSE(receiver.VerifyRequest(With(fresh.header, "id", "3"), "POST", "/p", "", kAnyone, "x")
                  .has_value());
}

TEST_CASE("another secret or another cluster id does not verify") {
  PeerAuth receiver(1, "prod", kSecret);
  PeerAuth other_secret(2, "prod", "another secret, 32 bytes long...");
  PeerAuth other_cluster(2, "staging", kSecret);
  PeerAuth no_secret(2, "prod", "");
  for (PeerAuth* sender : {&other_secret, &other_cluster, &no_secret}) {
    const SignedPeerRequest request = sender->SignRequest("POST", "/p", "b");
    Result<PeerCall> call = receiver.VerifyRequest(request.header, "POST", "/p", "b", kAnyone, "x");
    REQUIRE_FALSE(call.has_value());
    CHECK(call.error().code() == StatusCode::kUnauthenticated);
    CHECK(call.error().message().find("does not verify") != std::string::npos);
  }
  // Two servers without a secret share the well-known key; a single server's is random.
  PeerAuth open_receiver(1, "dev", "");
  PeerAuth open_sender(2, "dev", "");
  CHECK(open_receiver
            .VerifyRequest(open_sender.SignRequest("GET", "/", "").header, "GET", "/", "", kAnyone,
                           "x")
            .has_value());
  PeerAuth lonely(1, "dev", "", /*random_if_no_secret=*/true);
  CHECK_FALSE(lonely
                  .VerifyRequest(open_sender.SignRequest("GET", "/", "").header, "GET", "/", "",
                                 kAnyone, "x")
                  .has_value());
}

TEST_CASE("malformed, stale and non-member calls are refused with their reason") {
  PeerAuth sender(2, "prod", kSecret);
  PeerAuth receiver(1, "prod", kSecret);
  for (const std::string& header :
       {std::string(""), std::string("v1"), std::string("v2 id=2 ts=1 nonce=00 mac=00"),
        std::string(300, 'x'), With(sender.SignRequest("POST", "/p", "").header, "nonce", "XYZ"),
        sender.SignRequest("POST", "/p", "").header + " extra=1"}) {
    CHECK_FALSE(receiver.VerifyRequest(header, "POST", "/p", "", kAnyone, "x").has_value());
  }
  CHECK(Refused(receiver, PeerChannel::kHttpIn, PeerRefusal::kMalformed) == 6);

  const SignedPeerRequest request = sender.SignRequest("POST", "/p", "");
  const int64_t late = NowMs() + 31'000;
  Result<PeerCall> stale =
      receiver.VerifyRequest(request.header, "POST", "/p", "", kAnyone, "x", late);
  REQUIRE_FALSE(stale.has_value());
  CHECK(stale.error().message().find("clocks must agree") != std::string::npos);
  CHECK(Refused(receiver, PeerChannel::kHttpIn, PeerRefusal::kStale) == 1);

  Result<PeerCall> stranger = receiver.VerifyRequest(
      request.header, "POST", "/p", "", [](uint64_t id) { return id != 2; }, "x");
  REQUIRE_FALSE(stranger.has_value());
  CHECK(stranger.error().code() == StatusCode::kPermissionDenied);
  CHECK(Refused(receiver, PeerChannel::kHttpIn, PeerRefusal::kNotMember) == 1);
}

TEST_CASE("the replay guard stays sound when its cache overflows") {
  PeerAuth sender(2, "prod", kSecret);
  PeerAuth receiver(1, "prod", kSecret);
  const SignedPeerRequest first = sender.SignRequest("GET", "/", "");
  // The replay is judged at the time it was first seen: filling the cache takes over 30 s
  // in a loaded sanitizer build, and it must be refused as a replay, not as stale.
  const int64_t first_seen = NowMs();
  REQUIRE(receiver.VerifyRequest(first.header, "GET", "/", "", kAnyone, "x").has_value());
  // Fill the cache: the first nonce is forgotten, and with it everything signed no later.
  for (size_t i = 0; i < kPeerReplayCacheEntries; ++i) {
    REQUIRE(
        receiver
            .VerifyRequest(sender.SignRequest("GET", "/", "").header, "GET", "/", "", kAnyone, "x")
            .has_value());
  }
  CHECK_FALSE(
      receiver.VerifyRequest(first.header, "GET", "/", "", kAnyone, "x", first_seen).has_value());
  CHECK(Refused(receiver, PeerChannel::kHttpIn, PeerRefusal::kReplay) == 1);
}

TEST_CASE("an answer verifies only as the responder's, for the request's nonce") {
  PeerAuth follower(2, "prod", kSecret);
  PeerAuth leader(1, "prod", kSecret);
  const PeerCall call{2, "00112233445566778899aabbccddeeff"};
  const std::string signature = leader.SignReply(call, 200, "{\"revision\":7}");
  CHECK(follower.VerifyReply(signature, 1, call.nonce, 200, "{\"revision\":7}", "l").ok());
  // Another status, body, nonce or responder; no signature; another secret.
  CHECK_FALSE(follower.VerifyReply(signature, 1, call.nonce, 201, "{\"revision\":7}", "l").ok());
  CHECK_FALSE(follower.VerifyReply(signature, 1, call.nonce, 200, "{\"revision\":8}", "l").ok());
  CHECK_FALSE(follower
                  .VerifyReply(signature, 1, "ff112233445566778899aabbccddeeff", 200,
                               "{\"revision\":7}", "l")
                  .ok());
  const Status wrong = follower.VerifyReply(signature, 3, call.nonce, 200, "{\"revision\":7}", "l");
  CHECK(wrong.code() == StatusCode::kUnavailable);
  CHECK(wrong.message().find("answered by server 1") != std::string::npos);
  CHECK_FALSE(follower.VerifyReply("", 1, call.nonce, 200, "{\"revision\":7}", "l").ok());
  PeerAuth impostor(1, "prod", "not the cluster secret at all!!!");
  CHECK_FALSE(follower
                  .VerifyReply(impostor.SignReply(call, 200, "{\"revision\":7}"), 1, call.nonce,
                               200, "{\"revision\":7}", "l")
                  .ok());
  CHECK(Refused(follower, PeerChannel::kHttpReply, PeerRefusal::kUnsigned) == 1);
  CHECK(Refused(follower, PeerChannel::kHttpReply, PeerRefusal::kWrongServer) == 1);
  CHECK(Refused(follower, PeerChannel::kHttpReply, PeerRefusal::kBadProof) == 4);
}

TEST_CASE("raft proofs bind the side, the cluster, both ids, the address and both nonces") {
  PeerAuth a(1, "prod", kSecret);
  const PeerNonce n1 = PeerAuth::NewNonce(), n2 = PeerAuth::NewNonce();
  const PeerMac base = a.RaftProof(PeerAuth::Side::kConnector, 2, "10.0.0.2:7100", 1, n1, n2);
  CHECK(base == PeerAuth(5, "prod", kSecret)
                    .RaftProof(PeerAuth::Side::kConnector, 2, "10.0.0.2:7100", 1, n1, n2));
  CHECK(base != a.RaftProof(PeerAuth::Side::kAcceptor, 2, "10.0.0.2:7100", 1, n1, n2));
  CHECK(base != a.RaftProof(PeerAuth::Side::kConnector, 3, "10.0.0.2:7100", 1, n1, n2));
  CHECK(base != a.RaftProof(PeerAuth::Side::kConnector, 2, "10.0.0.3:7100", 1, n1, n2));
  CHECK(base != a.RaftProof(PeerAuth::Side::kConnector, 2, "10.0.0.2:7100", 4, n1, n2));
  CHECK(base != a.RaftProof(PeerAuth::Side::kConnector, 2, "10.0.0.2:7100", 1, n2, n1));
  CHECK(base != PeerAuth(1, "dev", kSecret)
                    .RaftProof(PeerAuth::Side::kConnector, 2, "10.0.0.2:7100", 1, n1, n2));
  CHECK(a.fingerprint() != PeerAuth(1, "dev", kSecret).fingerprint());
  CHECK(n1 != n2);
}

TEST_CASE("refusals are counted every time and logged once per host and window") {
  PeerAuth auth(1, "prod", kSecret);
  for (int i = 0; i < 5; ++i) {
    auth.Refuse(PeerChannel::kRaftIn, PeerRefusal::kTimeout, "10.0.0.9:" + std::to_string(4000 + i),
                "slow");
  }
  CHECK(Refused(auth, PeerChannel::kRaftIn, PeerRefusal::kTimeout) == 5);
  CHECK(PeerChannelName(PeerChannel::kHttpReply) == "http_reply");
  CHECK(PeerRefusalName(PeerRefusal::kRefusedByPeer) == "refused_by_peer");
}

TEST_CASE("cluster secret files and cluster ids") {
  TempDir dir;
  const auto write = [&](const std::string& name, const std::string& content) {
    const std::string path = dir.str() + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), 0600);
    return path;
  };
  Result<std::string> secret = ReadClusterSecret(write("ok", std::string(kSecret) + "\n\n"));
  REQUIRE_MESSAGE(secret.has_value(), secret.status().ToString());
  CHECK(*secret == kSecret);
  Result<std::string> short_one = ReadClusterSecret(write("short", "too short\n"));
  REQUIRE_FALSE(short_one.has_value());
  CHECK(short_one.error().message().find("at least 16 bytes") != std::string::npos);
  CHECK_FALSE(ReadClusterSecret(write("long", std::string(5000, 'x'))).has_value());
  Result<std::string> missing = ReadClusterSecret(dir.str() + "/none");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code() == StatusCode::kIOError);

  CHECK(CheckClusterId("").ok());
  CHECK(CheckClusterId("prod-eu.1_a").ok());
  CHECK_FALSE(CheckClusterId("has space").ok());
  CHECK_FALSE(CheckClusterId(std::string(65, 'a')).ok());
}

}  // namespace
}  // namespace kvatlas::server
