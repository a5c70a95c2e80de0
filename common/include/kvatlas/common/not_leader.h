// The machine-readable part of a binary-protocol `not_leader` error (docs/protocol.md
// §Not leader): the error payload is the message text followed by lines
// "\nleader_id=<decimal>" and, once the leader's address is known,
// "\nleader_rpc_address=<HOST:PORT>". A client reconnects to that address and retries.
// Old clients simply see a longer message. Pure functions: safe from any thread.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvatlas::protocol {

inline constexpr std::string_view kLeaderIdField = "\nleader_id=";
inline constexpr std::string_view kLeaderRpcAddressField = "\nleader_rpc_address=";

struct NotLeaderHint {
  uint64_t leader_id = 0;          // 0 = unknown
  std::string leader_rpc_address;  // empty = unknown
};

// `message` with the hint's lines appended (leader_id always; the address when known).
inline std::string AppendNotLeaderHint(std::string message, const NotLeaderHint& hint) {
  message += kLeaderIdField;
  message += std::to_string(hint.leader_id);
  if (!hint.leader_rpc_address.empty()) {
    message += kLeaderRpcAddressField;
    message += hint.leader_rpc_address;
  }
  return message;
}

// The hint in a not_leader error payload; nullopt when it carries none (an older server).
inline std::optional<NotLeaderHint> ParseNotLeaderHint(std::string_view message) {
  const auto field = [message](std::string_view name) -> std::optional<std::string_view> {
    const size_t at = message.rfind(name);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view value = message.substr(at + name.size());
    return value.substr(0, value.find('\n'));
  };
  const std::optional<std::string_view> id_text = field(kLeaderIdField);
  if (!id_text) return std::nullopt;
  NotLeaderHint hint;
  const auto [ptr, ec] =
      std::from_chars(id_text->data(), id_text->data() + id_text->size(), hint.leader_id);
  if (id_text->empty() || ec != std::errc() || ptr != id_text->data() + id_text->size()) {
    return std::nullopt;
  }
  if (const auto address = field(kLeaderRpcAddressField)) {
    hint.leader_rpc_address = std::string(*address);
  }
  return hint;
}

}  // namespace kvatlas::protocol
