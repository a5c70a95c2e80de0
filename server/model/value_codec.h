// Byte encodings of the model's values, shared by the command-batch codec (command_codec.h)
// and storage's records (server/storage/key_codec.h): a context, holder, tier or
// registration is the same bytes in a raft log entry and in RocksDB (docs/storage.md).
// Readers never fail loudly: a short read or a value out of range marks the ByteReader
// failed (common/internal/bytes.h), which the caller checks once at the end.
// Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/internal/bytes.h"
#include "common/internal/key_bytes.h"
#include "kvatlas/common/types.h"
#include "server/model/registration.h"

namespace kvatlas::server {

// Contexts and holders: PutContextKey / ReadContextKey, PutHolderKey / ReadHolderKey
// (common/internal/key_bytes.h).
// One byte, the Tier's numeric value; values >= kNumTiers fail the reader.
void PutTier(std::string* out, Tier tier);
Tier ReadTier(ByteReader* in);
// endpoint, replay_endpoint (length-prefixed), type (u8), model, lora_name, tenant_id,
// instance_id (length-prefixed), block_size, dp_rank (varints), additional_salt, topic.
void PutRegistration(std::string* out, const Registration& registration);
Registration ReadRegistration(ByteReader* in);
// A holder's holder-wide ids (Registry::holder_wide): varint n (1..kHolderWideKept), n ×
// fixed64 (none 0), oldest first. The reader fails the ByteReader on any other n or a 0.
void PutHolderWideIds(std::string* out, const std::vector<uint64_t>& ids);
std::vector<uint64_t> ReadHolderWideIds(ByteReader* in);

}  // namespace kvatlas::server
