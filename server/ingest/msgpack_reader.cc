// Readers of msgpack object fields (msgpack_reader.h): type checks and range checks of
// the scalars the engine event formats carry, and the folding of engine hashes to 64 bits.
#include "server/ingest/msgpack_reader.h"

#include <algorithm>
#include <limits>

namespace kvatlas::server::msgpack_reader {

namespace mt = msgpack::type;

const char* TypeName(const Obj& o) {
  switch (o.type) {
    case mt::NIL:
      return "nil";
    case mt::BOOLEAN:
      return "bool";
    case mt::POSITIVE_INTEGER:
    case mt::NEGATIVE_INTEGER:
      return "int";
    case mt::FLOAT32:
    case mt::FLOAT64:
      return "float";
    case mt::STR:
      return "str";
    case mt::BIN:
      return "bin";
    case mt::ARRAY:
      return "array";
    case mt::MAP:
      return "map";
    default:
      return "ext";
  }
}

bool ReadHash(const Obj& o, uint64_t* out) {
  switch (o.type) {
    case mt::POSITIVE_INTEGER:
      *out = o.via.u64;
      return true;
    case mt::NEGATIVE_INTEGER:
      *out = static_cast<uint64_t>(o.via.i64);  // two's-complement bits
      return true;
    case mt::BIN: {
      const uint32_t n = o.via.bin.size;
      const uint32_t from = n > 8 ? n - 8 : 0;
      uint64_t v = 0;
      for (uint32_t i = from; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(o.via.bin.ptr[i]);
      *out = v;
      return true;
    }
    default:
      return false;
  }
}

bool ReadHashes(const Obj& o, std::vector<uint64_t>* out) {
  if (o.type != mt::ARRAY) return false;
  out->resize(o.via.array.size);
  uint64_t* dst = out->data();
  for (const Obj& item : Items(o)) {
    if (!ReadHash(item, dst++)) return false;
  }
  return true;
}

bool ReadOptHash(const Obj* o, std::optional<uint64_t>* out) {
  if (IsNil(o)) return true;
  uint64_t v = 0;
  if (!ReadHash(*o, &v)) return false;
  *out = v;
  return true;
}

bool ReadTokens(const Obj* o, std::vector<uint32_t>* out) {
  if (IsNil(o)) return true;
  if (o->type != mt::ARRAY) return false;
  out->resize(o->via.array.size);
  uint32_t* dst = out->data();
  for (const Obj& item : Items(*o)) {
    if (item.type != mt::POSITIVE_INTEGER || item.via.u64 > std::numeric_limits<uint32_t>::max()) {
      return false;
    }
    *dst++ = static_cast<uint32_t>(item.via.u64);
  }
  return true;
}

bool ReadInt64(const Obj& o, int64_t* out) {
  if (o.type == mt::NEGATIVE_INTEGER) {
    *out = o.via.i64;
    return true;
  }
  if (o.type == mt::POSITIVE_INTEGER &&
      o.via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    *out = static_cast<int64_t>(o.via.u64);
    return true;
  }
  return false;
}

bool ReadOptInt64(const Obj* o, std::optional<int64_t>* out) {
  if (IsNil(o)) return true;
  int64_t v = 0;
  if (!ReadInt64(*o, &v)) return false;
  *out = v;
  return true;
}

bool ReadOptU32(const Obj* o, std::optional<uint32_t>* out) {
  if (IsNil(o)) return true;
  if (o->type != mt::POSITIVE_INTEGER || o->via.u64 > std::numeric_limits<uint32_t>::max()) {
    return false;
  }
  *out = static_cast<uint32_t>(o->via.u64);
  return true;
}

bool ReadOptString(const Obj* o, std::optional<std::string>* out) {
  if (IsNil(o)) return true;
  if (!IsStr(*o)) return false;
  out->emplace(Str(*o));
  return true;
}

}  // namespace kvatlas::server::msgpack_reader
