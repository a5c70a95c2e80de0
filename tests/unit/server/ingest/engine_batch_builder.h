// Engine KV-event payloads built with msgpack-cxx for the ingest unit tests: batches of
// SGLang / vLLM / Mooncake BlockStored events in their array and map forms, with extra
// fields appended by the caller (the salt and namespace cases of docs/engine-events.md).
#pragma once

#include <cstdint>
#include <functional>
#include <msgpack.hpp>
#include <string>
#include <vector>

namespace kvatlas::server::test {

using Packer = msgpack::packer<msgpack::sbuffer>;
using PackFn = std::function<void(Packer&)>;

// [1.0, [events...], 0] with each event packed by one function.
inline std::vector<uint8_t> PackBatch(const std::vector<PackFn>& events) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack(1.0);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const PackFn& event : events) event(pk);
  pk.pack(0);
  return {reinterpret_cast<const uint8_t*>(buf.data()),
          reinterpret_cast<const uint8_t*>(buf.data()) + buf.size()};
}

// One key/value pair of a map.
template <typename V>
void Pair(Packer& pk, const std::string& key, const V& value) {
  pk.pack(key);
  pk.pack(value);
}
inline void NilPair(Packer& pk, const std::string& key) {
  pk.pack(key);
  pk.pack_nil();
}

// SGLang's tagged-map BlockStored {"type": "BlockStored", "block_hashes": [hash],
// "parent_block_hash": nil, "token_ids": [1, 2], "block_size": 2, "lora_id": nil,
// "medium": "GPU", ...} followed by `n_extra` pairs packed by `extra`.
inline PackFn StoredMap(int64_t hash, uint32_t n_extra, PackFn extra) {
  return [hash, n_extra, extra](Packer& pk) {
    pk.pack_map(7 + n_extra);
    Pair(pk, "type", std::string("BlockStored"));
    Pair(pk, "block_hashes", std::vector<int64_t>{hash});
    NilPair(pk, "parent_block_hash");
    Pair(pk, "token_ids", std::vector<uint32_t>{1, 2});
    Pair(pk, "block_size", 2);
    NilPair(pk, "lora_id");
    Pair(pk, "medium", std::string("GPU"));
    if (extra) extra(pk);
  };
}

// The positional BlockStored ["BlockStored", [hash], nil, [1, 2], 2, nil, "GPU", ...]
// followed by `n_extra` positions packed by `extra`.
inline PackFn StoredArray(int64_t hash, uint32_t n_extra, PackFn extra) {
  return [hash, n_extra, extra](Packer& pk) {
    pk.pack_array(7 + n_extra);
    pk.pack(std::string("BlockStored"));
    pk.pack(std::vector<int64_t>{hash});
    pk.pack_nil();
    pk.pack(std::vector<uint32_t>{1, 2});
    pk.pack(2);
    pk.pack_nil();
    pk.pack(std::string("GPU"));
    if (extra) extra(pk);
  };
}

// A Mooncake RFC #1527 stored map {"event_type": "stored", "seq_hashes": [hash],
// "token_ids": [1, 2], "block_size": 2, ...} followed by `n_extra` pairs.
inline PackFn MooncakeStored(int64_t hash, uint32_t n_extra, PackFn extra) {
  return [hash, n_extra, extra](Packer& pk) {
    pk.pack_map(4 + n_extra);
    Pair(pk, "event_type", std::string("stored"));
    Pair(pk, "seq_hashes", std::vector<int64_t>{hash});
    Pair(pk, "token_ids", std::vector<uint32_t>{1, 2});
    Pair(pk, "block_size", 2);
    if (extra) extra(pk);
  };
}

// {"cache_salt": salt, "session_id": "sess-1"}: SGLang's BlockStoredMetadata.
inline void SaltMetadata(Packer& pk, const std::string& salt) {
  pk.pack_map(2);
  Pair(pk, "cache_salt", salt);
  Pair(pk, "session_id", std::string("sess-1"));
}

}  // namespace kvatlas::server::test
