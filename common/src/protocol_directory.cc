// The kDirectory answer of the binary protocol (docs/protocol.md §kDirectory): the
// placement directory and the servers' binary-protocol addresses, for clients that route
// by the directory.
#include <string>
#include <string_view>
#include <utility>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {

std::string EncodeDirectoryAnswer(const DirectoryAnswer& answer) {
  std::string out;
  PutVarint64(&out, answer.groups);
  PutLengthPrefixed(&out, EncodePlacementDirectory(answer.directory));
  PutVarint64(&out, answer.servers.size());
  for (const ServerRpcAddress& server : answer.servers) {
    PutFixed64(&out, server.id);
    PutLengthPrefixed(&out, server.rpc_address);
  }
  return out;
}

Result<DirectoryAnswer> DecodeDirectoryAnswer(std::string_view payload) {
  PayloadReader in(payload);
  DirectoryAnswer answer;
  answer.groups = in.Varint32("groups");
  if (in.ok() && (answer.groups == 0 || answer.groups > kMaxGroupId)) {
    in.Reject("groups", "must be 1.." + std::to_string(kMaxGroupId));
  }
  const std::string_view directory = in.Bytes("directory");
  if (in.ok()) {
    Result<PlacementDirectory> decoded = DecodePlacementDirectory(directory);
    if (decoded.has_value()) {
      answer.directory = std::move(*decoded);
    } else {
      in.Reject("directory", decoded.error().message());
    }
  }
  const uint64_t count = in.Count(9, "servers");
  if (in.ok() && count > kMaxDirectoryServers) {
    in.Reject("servers", "at most " + std::to_string(kMaxDirectoryServers));
  }
  for (uint64_t i = 0; in.ok() && i < count; ++i) {
    in.Scope("servers", i);
    ServerRpcAddress server;
    server.id = in.Fixed64("id");
    server.rpc_address = in.String("rpc_address");
    if (in.ok() && (server.id == 0 || server.rpc_address.empty())) {
      in.Reject("id", "a server needs a non-zero id and an address");
    }
    if (in.ok() && !answer.servers.empty() && answer.servers.back().id >= server.id) {
      in.Reject("id", "servers must be ascending by id, each once");
    }
    answer.servers.push_back(std::move(server));
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

}  // namespace kvatlas::protocol
