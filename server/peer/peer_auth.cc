#include "server/peer/peer_auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "common/internal/log.h"

namespace kvatlas::server {
namespace {

// Any non-empty string works as an HMAC key; OpenSSL wants a non-null pointer even for an
// empty one.
PeerMac Hmac(std::string_view key, std::string_view message) {
  static const unsigned char kEmpty = 0;
  PeerMac out{};
  unsigned int len = 0;
  const unsigned char* key_bytes =
      key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
           &len) == nullptr ||
      len != out.size()) {
    // Only an OpenSSL that cannot do SHA-256 at all fails here: nothing can be proven.
    std::fputs("kvatlas: HMAC-SHA256 failed\n", stderr);
    std::abort();
  }
  return out;
}

std::string_view View(const PeerMac& key) {
  return {reinterpret_cast<const char*>(key.data()), key.size()};
}

std::string Hex(const uint8_t* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 0xf];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    std::fputs("kvatlas: SHA-256 failed\n", stderr);
    std::abort();
  }
  return Hex(digest, len);
}

// Compares in time independent of where the first difference is.
bool SameBytes(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

void AppendU64(std::string* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

// Length-prefixed, so that no two field lists encode to the same bytes.
void AppendField(std::string* out, std::string_view field) {
  AppendU64(out, field.size());
  out->append(field);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "v1 k=v k=v ...": the values of `keys`, in that order, each exactly once. nullopt when
// the header is not of that form.
std::optional<std::vector<std::string_view>> ParseFields(
    std::string_view header, std::initializer_list<std::string_view> keys) {
  if (!header.starts_with("v1 ")) return std::nullopt;
  header.remove_prefix(3);
  std::vector<std::string_view> values;
  for (std::string_view key : keys) {
    const size_t end = header.find(' ');
    std::string_view item = header.substr(0, end);
    if (!item.starts_with(key) || item.size() <= key.size() || item[key.size()] != '=') {
      return std::nullopt;
    }
    values.push_back(item.substr(key.size() + 1));
    header = end == std::string_view::npos ? std::string_view() : header.substr(end + 1);
  }
  if (!header.empty()) return std::nullopt;
  return values;
}

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

bool IsLowerHex(std::string_view text, size_t size) {
  if (text.size() != size) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string_view HostOf(std::string_view peer) {
  if (peer.starts_with('[')) return peer.substr(0, peer.find(']') + 1);
  const size_t colon = peer.rfind(':');
  // An unbracketed IPv6 address has several colons: it is a host alone.
  if (colon == std::string_view::npos || peer.find(':') != colon) return peer;
  return peer.substr(0, colon);
}

}  // namespace

std::string_view PeerChannelName(PeerChannel channel) {
  switch (channel) {
    case PeerChannel::kRaftIn:
      return "raft_in";
    case PeerChannel::kRaftOut:
      return "raft_out";
    case PeerChannel::kHttpIn:
      return "http_in";
    case PeerChannel::kHttpReply:
      return "http_reply";
  }
  return "unknown";
}

std::string_view PeerRefusalName(PeerRefusal reason) {
  switch (reason) {
    case PeerRefusal::kBadProof:
      return "bad_proof";
    case PeerRefusal::kWrongCluster:
      return "wrong_cluster";
    case PeerRefusal::kNotMember:
      return "not_member";
    case PeerRefusal::kWrongServer:
      return "wrong_server";
    case PeerRefusal::kMalformed:
      return "malformed";
    case PeerRefusal::kTimeout:
      return "timeout";
    case PeerRefusal::kTooMany:
      return "too_many";
    case PeerRefusal::kStale:
      return "stale";
    case PeerRefusal::kReplay:
      return "replay";
    case PeerRefusal::kUnsigned:
      return "unsigned";
    case PeerRefusal::kWrongSender:
      return "wrong_sender";
    case PeerRefusal::kRefusedByPeer:
      return "refused_by_peer";
  }
  return "unknown";
}

PeerAuth::PeerAuth(uint64_t self_id, std::string cluster_id, std::string_view secret,
                   bool random_if_no_secret)
    : self_id_(self_id), cluster_id_(std::move(cluster_id)) {
  std::string key_material(secret);
  if (key_material.empty() && random_if_no_secret) {
    const PeerNonce random = NewNonce();
    key_material.assign(reinterpret_cast<const char*>(random.data()), random.size());
  }
  // One key per use, so that a proof of one kind can never pass for another.
  raft_key_ = Hmac(key_material, "kvatlas peer key v1: raft handshake");
  http_key_ = Hmac(key_material, "kvatlas peer key v1: internal http");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(cluster_id_.data(), cluster_id_.size(), digest, &len, EVP_sha256(), nullptr) !=
      1) {
    std::fputs("kvatlas: SHA-256 failed\n", stderr);
    std::abort();
  }
  std::memcpy(fingerprint_.data(), digest, fingerprint_.size());
}

PeerNonce PeerAuth::NewNonce() {
  PeerNonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    // Without randomness a proof could be replayed: refuse to go on.
    std::fputs("kvatlas: RAND_bytes failed\n", stderr);
    std::abort();
  }
  return nonce;
}

PeerMac PeerAuth::RaftProof(Side side, uint64_t connector_id, std::string_view connector_address,
                            uint64_t acceptor_id, const PeerNonce& acceptor_nonce,
                            const PeerNonce& connector_nonce) const {
  std::string message(side == Side::kConnector ? "kvatlas raft v1 connector"
                                               : "kvatlas raft v1 acceptor");
  AppendField(&message, cluster_id_);
  AppendU64(&message, connector_id);
  AppendField(&message, connector_address);
  AppendU64(&message, acceptor_id);
  message.append(reinterpret_cast<const char*>(acceptor_nonce.data()), acceptor_nonce.size());
  message.append(reinterpret_cast<const char*>(connector_nonce.data()), connector_nonce.size());
  return Hmac(View(raft_key_), message);
}

namespace {

std::string RequestMessage(std::string_view cluster_id, uint64_t sender, int64_t ts_ms,
                           std::string_view nonce, std::string_view method, std::string_view target,
                           std::string_view body) {
  std::string message("kvatlas http v1 request");
  AppendField(&message, cluster_id);
  AppendU64(&message, sender);
  AppendU64(&message, static_cast<uint64_t>(ts_ms));
  AppendField(&message, nonce);
  AppendField(&message, method);
  AppendField(&message, target);
  AppendField(&message, Sha256Hex(body));
  return message;
}

std::string ReplyMessage(std::string_view cluster_id, uint64_t responder, std::string_view nonce,
                         int status, std::string_view body) {
  std::string message("kvatlas http v1 reply");
  AppendField(&message, cluster_id);
  AppendU64(&message, responder);
  AppendField(&message, nonce);
  AppendU64(&message, static_cast<uint64_t>(status));
  AppendField(&message, Sha256Hex(body));
  return message;
}

}  // namespace

SignedPeerRequest PeerAuth::SignRequest(std::string_view method, std::string_view target,
                                        std::string_view body) const {
  const PeerNonce random = NewNonce();
  SignedPeerRequest out;
  out.nonce = Hex(random.data(), 16);
  const int64_t ts = NowMs();
  const PeerMac mac = Hmac(
      View(http_key_), RequestMessage(cluster_id_, self_id_, ts, out.nonce, method, target, body));
  out.header = "v1 id=" + std::to_string(self_id_) + " ts=" + std::to_string(ts) +
               " nonce=" + out.nonce + " mac=" + Hex(mac.data(), mac.size());
  return out;
}

Result<PeerCall> PeerAuth::VerifyRequest(std::string_view header, std::string_view method,
                                         std::string_view target, std::string_view body,
                                         const std::function<bool(uint64_t)>& is_member,
                                         std::string_view remote, std::optional<int64_t> now_ms) {
  const auto refuse = [&](PeerRefusal reason, const std::string& why,
                          StatusCode code = StatusCode::kUnauthenticated) {
    Refuse(PeerChannel::kHttpIn, reason, remote,
           std::string(method) + " " + std::string(target) + ": " + why);
    return Status(code, std::string(kPeerAuthHeader) + ": " + why);
  };
  if (header.size() > kMaxPeerHeaderBytes) {
    return refuse(PeerRefusal::kMalformed,
                  "longer than " + std::to_string(kMaxPeerHeaderBytes) + " bytes");
  }
  const auto fields = ParseFields(header, {"id", "ts", "nonce", "mac"});
  PeerCall call;
  int64_t ts = 0;
  if (!fields || !ParseNumber((*fields)[0], &call.sender) || call.sender == 0 ||
      !ParseNumber((*fields)[1], &ts) || !IsLowerHex((*fields)[2], 32) ||
      !IsLowerHex((*fields)[3], 64)) {
    return refuse(PeerRefusal::kMalformed,
                  "not of the form \"v1 id=<server> ts=<unix ms> nonce=<32 hex> mac=<64 hex>\"");
  }
  call.nonce = std::string((*fields)[2]);
  const PeerMac mac = Hmac(View(http_key_), RequestMessage(cluster_id_, call.sender, ts, call.nonce,
                                                           method, target, body));
  if (!SameBytes(Hex(mac.data(), mac.size()), (*fields)[3])) {
    return refuse(PeerRefusal::kBadProof,
                  "the signature does not verify (another cluster secret or cluster id, or "
                  "a modified request); claimed sender server " +
                      std::to_string(call.sender));
  }
  const int64_t now = now_ms.value_or(NowMs());
  const int64_t window = std::chrono::milliseconds(kPeerCallWindow).count();
  if (ts < now - window || ts > now + window) {
    return refuse(PeerRefusal::kStale, "signed at " + std::to_string(ts) + ", more than " +
                                           std::to_string(kPeerCallWindow.count()) +
                                           " s from this server's clock (" + std::to_string(now) +
                                           "): the servers' clocks must agree");
  }
  if (!RememberNonce(call.nonce, ts, now)) {
    return refuse(PeerRefusal::kReplay, "this signed call was already received (a replay)");
  }
  if (!is_member(call.sender)) {
    return refuse(PeerRefusal::kNotMember,
                  "server " + std::to_string(call.sender) + " is not a member of the cluster",
                  StatusCode::kPermissionDenied);
  }
  calls_verified_.fetch_add(1, std::memory_order_relaxed);
  return call;
}

std::string PeerAuth::SignReply(const PeerCall& call, int status, std::string_view body) const {
  const PeerMac mac =
      Hmac(View(http_key_), ReplyMessage(cluster_id_, self_id_, call.nonce, status, body));
  return "v1 id=" + std::to_string(self_id_) + " mac=" + Hex(mac.data(), mac.size());
}

Status PeerAuth::VerifyReply(std::string_view header, uint64_t responder, std::string_view nonce,
                             int status, std::string_view body, std::string_view remote) {
  const auto refuse = [&](PeerRefusal reason, const std::string& why) {
    Refuse(PeerChannel::kHttpReply, reason, remote, why);
    return Status::Unavailable("the answer from " + std::string(remote) +
                               " is not authenticated as server " + std::to_string(responder) +
                               "'s of this cluster (" + why + "); it is not relayed");
  };
  if (header.empty()) return refuse(PeerRefusal::kUnsigned, "no " + std::string(kPeerReplyHeader));
  const auto fields =
      header.size() <= kMaxPeerHeaderBytes ? ParseFields(header, {"id", "mac"}) : std::nullopt;
  uint64_t id = 0;
  if (!fields || !ParseNumber((*fields)[0], &id) || !IsLowerHex((*fields)[1], 64)) {
    return refuse(PeerRefusal::kMalformed, "a malformed " + std::string(kPeerReplyHeader));
  }
  if (id != responder) {
    return refuse(PeerRefusal::kWrongServer, "answered by server " + std::to_string(id));
  }
  const PeerMac mac = Hmac(View(http_key_), ReplyMessage(cluster_id_, id, nonce, status, body));
  if (!SameBytes(Hex(mac.data(), mac.size()), (*fields)[1])) {
    return refuse(PeerRefusal::kBadProof, "the signature does not verify");
  }
  return Status::Ok();
}

bool PeerAuth::RememberNonce(const std::string& nonce, int64_t ts_ms, int64_t now_ms) {
  const int64_t window = std::chrono::milliseconds(kPeerCallWindow).count();
  std::lock_guard lock(replay_mu_);
  // Calls signed before now - window are refused by the time check: forget them.
  while (!seen_order_.empty()) {
    auto it = seen_.find(seen_order_.front());
    if (it != seen_.end() && it->second >= now_ms - window) break;
    if (it != seen_.end()) seen_.erase(it);
    seen_order_.pop_front();
  }
  if (ts_ms <= forgotten_up_to_ms_) return false;
  if (!seen_.emplace(nonce, ts_ms).second) return false;
  seen_order_.push_back(nonce);
  while (seen_order_.size() > kPeerReplayCacheEntries) {
    auto it = seen_.find(seen_order_.front());
    if (it != seen_.end()) {
      forgotten_up_to_ms_ = std::max(forgotten_up_to_ms_, it->second);
      seen_.erase(it);
    }
    seen_order_.pop_front();
  }
  return true;
}

void PeerAuth::Refuse(PeerChannel channel, PeerRefusal reason, std::string_view peer,
                      std::string_view detail) {
  refused_[static_cast<size_t>(channel)][static_cast<size_t>(reason)].fetch_add(
      1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  uint64_t folded = 0;
  {
    std::lock_guard lock(audit_mu_);
    // Bounded: a flood from many hosts forgets the older entries (they log again).
    if (audit_.size() >= 1024) audit_.clear();
    AuditKey key{static_cast<uint8_t>(channel), static_cast<uint8_t>(reason),
                 std::string(HostOf(peer))};
    auto [it, inserted] = audit_.try_emplace(std::move(key));
    if (!inserted && now - it->second.last < kAuditRepeatWindow) {
      ++it->second.folded;
      return;
    }
    it->second.last = now;
    folded = std::exchange(it->second.folded, 0);
  }
  std::string line = "audit: peer refused: channel=" + std::string(PeerChannelName(channel)) +
                     " peer=" + std::string(peer) +
                     " reason=" + std::string(PeerRefusalName(reason)) + ": " + std::string(detail);
  // A detail may quote what a stranger sent (an address, a target): one line, printable.
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (folded > 0) {
    line += " (and " + std::to_string(folded) + " more like it from this host in the last " +
            std::to_string(kAuditRepeatWindow.count()) + " s)";
  }
  LogWarning(line);
}

PeerCounters PeerAuth::counters() const {
  PeerCounters out;
  out.handshakes = handshakes_.load(std::memory_order_relaxed);
  out.calls_verified = calls_verified_.load(std::memory_order_relaxed);
  for (size_t c = 0; c < kPeerChannels; ++c) {
    for (size_t r = 0; r < kPeerRefusals; ++r) {
      out.refused[c][r] = refused_[c][r].load(std::memory_order_relaxed);
    }
  }
  return out;
}

Result<std::string> ReadClusterSecret(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::IOError("cluster_secret_file " + path +
                           ": cannot open: " + std::strerror(errno));
  }
  std::string secret;
  secret.resize(kMaxClusterSecretBytes + 1);
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  secret.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) return Status::IOError("cluster_secret_file " + path + ": read failed");
  if (secret.size() > kMaxClusterSecretBytes) {
    return Status::InvalidArgument("cluster_secret_file " + path + ": longer than " +
                                   std::to_string(kMaxClusterSecretBytes) + " bytes");
  }
  while (!secret.empty() && std::strchr(" \t\r\n", secret.back()) != nullptr) secret.pop_back();
  if (secret.size() < kMinClusterSecretBytes) {
    return Status::InvalidArgument(
        "cluster_secret_file " + path + ": the secret must be at least " +
        std::to_string(kMinClusterSecretBytes) +
        " bytes (make one with: head -c 32 /dev/urandom | base64 > FILE)");
  }
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && (info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    LogWarning("cluster_secret_file " + path +
               " is accessible to other users: anyone who reads it can pose as a member of the "
               "cluster (chmod 600 it)");
  }
  return secret;
}

Status CheckClusterId(std::string_view cluster_id) {
  if (cluster_id.size() > kMaxClusterIdBytes) {
    return Status::InvalidArgument("cluster_id: longer than " + std::to_string(kMaxClusterIdBytes) +
                                   " bytes");
  }
  for (char c : cluster_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("cluster_id: only letters, digits, '.', '_' and '-'");
  }
  return Status::Ok();
}

}  // namespace kvatlas::server
