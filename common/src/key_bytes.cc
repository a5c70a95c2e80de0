#include "common/internal/key_bytes.h"

namespace kvatlas {

void PutContextKey(std::string* out, const ContextKey& key) {
  PutLengthPrefixed(out, key.tenant);
  PutLengthPrefixed(out, key.model);
  PutLengthPrefixed(out, key.lora_name);
  PutVarint64(out, key.block_size);
  PutLengthPrefixed(out, key.salt);
}

ContextKey ReadContextKey(ByteReader* in) {
  ContextKey key;
  key.tenant = in->LengthPrefixed();
  key.model = in->LengthPrefixed();
  key.lora_name = in->LengthPrefixed();
  key.block_size = in->Varint32();
  key.salt = in->LengthPrefixed();
  return key;
}

void PutHolderKey(std::string* out, const HolderKey& key) {
  PutLengthPrefixed(out, key.id);
  PutVarint64(out, key.dp_rank);
}

HolderKey ReadHolderKey(ByteReader* in) {
  HolderKey key;
  key.id = in->LengthPrefixed();
  key.dp_rank = in->Varint32();
  return key;
}

}  // namespace kvatlas
