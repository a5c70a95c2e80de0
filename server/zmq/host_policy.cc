// ParseHostPatterns and CheckHost (endpoint_policy.h): the hosts registered tcp publishers
// may name (config zmq_allowed_hosts).
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/zmq/endpoint_policy.h"

namespace kvatlas::server {
namespace {

struct Address {
  std::array<uint8_t, 16> bytes{};
  bool ipv6 = false;
};

// An IPv4 or IPv6 literal, IPv6 with or without brackets; nullopt for anything else.
std::optional<Address> ParseAddress(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  if (text.empty() || text.size() > 45) return std::nullopt;
  const std::string copy(text);
  Address a;
  if (inet_pton(AF_INET, copy.c_str(), a.bytes.data()) == 1) return a;
  if (inet_pton(AF_INET6, copy.c_str(), a.bytes.data()) == 1) {
    a.ipv6 = true;
    return a;
  }
  return std::nullopt;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Letters, digits, '-', '_' and '.', as DNS names (and Kubernetes service names) use.
bool IsHostName(std::string_view name) {
  return !name.empty() && name.size() <= 253 && name.front() != '.' && name.back() != '.' &&
         std::all_of(name.begin(), name.end(), [](unsigned char c) {
           return std::isalnum(c) || c == '-' || c == '_' || c == '.';
         });
}

bool InNetwork(const Address& address, const HostPattern& network) {
  if (address.ipv6 != network.ipv6) return false;
  unsigned bits = network.prefix_bits;
  for (size_t i = 0; bits > 0; ++i, bits = bits >= 8 ? bits - 8 : 0) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((address.bytes[i] & mask) != (network.address[i] & mask)) return false;
  }
  return true;
}

Result<HostPattern> ParseHostPattern(std::string_view item) {
  HostPattern p;
  p.text = std::string(item);
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("zmq_allowed_hosts: \"" + std::string(item) + "\": " + why);
  };
  if (item == "*") return p;
  if (item.starts_with("*.")) {
    if (!IsHostName(item.substr(2))) return bad("not a host name suffix");
    p.kind = HostPattern::Kind::kSuffix;
    p.name = Lower(item.substr(1));
    return p;
  }
  std::string_view address_text = item;
  std::optional<unsigned> prefix;
  if (const size_t slash = item.rfind('/'); slash != std::string_view::npos) {
    address_text = item.substr(0, slash);
    const std::string_view bits = item.substr(slash + 1);
    unsigned value = 0;
    const auto [ptr, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), value);
    if (bits.empty() || ec != std::errc() || ptr != bits.data() + bits.size()) {
      return bad("the prefix length must be a number");
    }
    prefix = value;
  }
  if (const std::optional<Address> address = ParseAddress(address_text)) {
    const unsigned max_bits = address->ipv6 ? 128 : 32;
    if (prefix.value_or(max_bits) > max_bits) {
      return bad("the prefix length is more than " + std::to_string(max_bits));
    }
    p.kind = HostPattern::Kind::kNetwork;
    p.address = address->bytes;
    p.ipv6 = address->ipv6;
    p.prefix_bits = prefix.value_or(max_bits);
    return p;
  }
  if (prefix) return bad("expected ADDRESS/BITS");
  if (!IsHostName(item)) {
    return bad("expected *, an address, ADDRESS/BITS, a host name or *.SUFFIX");
  }
  p.kind = HostPattern::Kind::kName;
  p.name = Lower(item);
  return p;
}

std::string Join(const std::vector<HostPattern>& patterns) {
  std::string out;
  for (const HostPattern& p : patterns) out += (out.empty() ? "" : ",") + p.text;
  return out;
}

// `address` is the host parsed as an address literal; `name` the lower-case host otherwise.
bool Matches(const std::optional<Address>& address, const std::string& name,
             const HostPattern& pattern) {
  if (pattern.kind == HostPattern::Kind::kAny) return true;
  if (address) return pattern.kind == HostPattern::Kind::kNetwork && InNetwork(*address, pattern);
  if (pattern.kind == HostPattern::Kind::kName) return name == pattern.name;
  return pattern.kind == HostPattern::Kind::kSuffix && name.size() > pattern.name.size() &&
         name.ends_with(pattern.name);
}

}  // namespace

Result<std::vector<HostPattern>> ParseHostPatterns(std::string_view csv) {
  std::vector<HostPattern> out;
  for (const std::string_view item : SplitCommaList(csv)) {
    if (item.empty()) {
      return Status::InvalidArgument("zmq_allowed_hosts: \"" + std::string(csv) +
                                     "\": an empty element (use * to allow any host)");
    }
    KVATLAS_ASSIGN_OR_RETURN(HostPattern pattern, ParseHostPattern(item));
    out.push_back(std::move(pattern));
  }
  return out;
}

Status CheckHost(std::string_view field, std::string_view endpoint,
                 const std::vector<HostPattern>& allowed) {
  if (!endpoint.starts_with("tcp://")) return Status::Ok();
  std::string_view host = endpoint.substr(6);
  host = host.substr(0, host.rfind(':'));
  // libzmq's "tcp://SOURCE;HOST:PORT": the remote host is what is connected to.
  if (const size_t semicolon = host.rfind(';'); semicolon != std::string_view::npos) {
    host = host.substr(semicolon + 1);
  }
  const std::optional<Address> address = ParseAddress(host);
  const std::string name = address ? std::string() : Lower(host);
  for (const HostPattern& pattern : allowed) {
    if (Matches(address, name, pattern)) return Status::Ok();
  }
  return Status::InvalidArgument(std::string(field) + ": host " + std::string(host) +
                                 " of endpoint \"" + std::string(endpoint) +
                                 "\" is not allowed (zmq_allowed_hosts: " + Join(allowed) + ")");
}

}  // namespace kvatlas::server
