// Readers of msgpack object fields for the engine event decoder (engine_event_decoder.cc),
// private to server/ingest. Each Read* returns false when the object has the wrong type or
// its value is out of range, and then leaves `out` unspecified; the Opt/nil-tolerant ones
// treat a null pointer (an absent field) like msgpack nil. Strings are views into the
// payload the object tree was unpacked from (the decoder unpacks by reference).
#pragma once

#include <cstdint>
#include <msgpack.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/names.h"

namespace kvatlas::server::msgpack_reader {

using Obj = msgpack::object;

// The msgpack type of `o` as an error message names it ("int", "str", "array", ...).
const char* TypeName(const Obj& o);

// Views of an ARRAY's items, a MAP's pairs and a STR's bytes (the type is the caller's to
// check).
inline std::span<const Obj> Items(const Obj& o) { return {o.via.array.ptr, o.via.array.size}; }
inline std::span<const msgpack::object_kv> Pairs(const Obj& o) {
  return {o.via.map.ptr, o.via.map.size};
}
inline std::string_view Str(const Obj& o) { return {o.via.str.ptr, o.via.str.size}; }
inline bool IsNil(const Obj* o) { return o == nullptr || o->type == msgpack::type::NIL; }
inline bool IsStr(const Obj& o) { return o.type == msgpack::type::STR; }

// ASCII case-insensitive equality (common/internal/names.h).
using kvatlas::EqualsIgnoreCase;

// Engine hash folded to 64 bits: see EngineEvent::block_hashes.
bool ReadHash(const Obj& o, uint64_t* out);
// An array of engine hashes.
bool ReadHashes(const Obj& o, std::vector<uint64_t>* out);
// nil or absent → nullopt.
bool ReadOptHash(const Obj* o, std::optional<uint64_t>* out);
// An array of uint32 (nil or absent → empty).
bool ReadTokens(const Obj* o, std::vector<uint32_t>* out);
bool ReadInt64(const Obj& o, int64_t* out);
bool ReadOptInt64(const Obj* o, std::optional<int64_t>* out);
bool ReadOptU32(const Obj* o, std::optional<uint32_t>* out);
bool ReadOptString(const Obj* o, std::optional<std::string>* out);

}  // namespace kvatlas::server::msgpack_reader
