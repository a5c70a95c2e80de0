// Byte encodings of the keys every binary format shares: a context and a holder are the same
// bytes in a raft log entry, a RocksDB record (server/model/value_codec.h) and the placement
// directory (kvatlas/common/placement.h). Readers never fail loudly: a short read marks the
// ByteReader failed (bytes.h), which the caller checks once at the end.
// Pure functions: safe from any thread.
#pragma once

#include <string>

#include "common/internal/bytes.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// tenant, model, lora_name (length-prefixed), block_size (varint), salt (length-prefixed).
void PutContextKey(std::string* out, const ContextKey& key);
ContextKey ReadContextKey(ByteReader* in);
// id (length-prefixed), dp_rank (varint).
void PutHolderKey(std::string* out, const HolderKey& key);
HolderKey ReadHolderKey(ByteReader* in);

}  // namespace kvatlas
