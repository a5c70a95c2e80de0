// Readers of the fields that name an engine event's namespace (salt_reader.h).
#include "server/ingest/salt_reader.h"

#include <algorithm>
#include <string_view>

#include "server/ingest/msgpack_reader.h"

namespace kvatlas::server::salt_reader {

using msgpack_reader::EqualsIgnoreCase;
using msgpack_reader::IsNil;
using msgpack_reader::IsStr;
using msgpack_reader::Pairs;
using msgpack_reader::Str;
namespace mt = msgpack::type;

bool NamesSalt(const Obj& key) {
  if (key.type != mt::STR && key.type != mt::BIN) return false;
  const std::string_view name(key.type == mt::STR ? key.via.str.ptr : key.via.bin.ptr,
                              key.type == mt::STR ? key.via.str.size : key.via.bin.size);
  for (size_t i = 0; i + 4 <= name.size(); ++i) {
    if (EqualsIgnoreCase(name.substr(i, 4), "salt")) return true;
  }
  return false;
}

void ReadSalt(const Obj* o, EngineEvent* e, EventNotes* notes) {
  if (IsNil(o)) return;
  if (!IsStr(*o) || (e->cache_salt && *e->cache_salt != Str(*o))) {
    notes->unclear_namespace = true;
    return;
  }
  e->cache_salt.emplace(Str(*o));
}

void UnknownField(const Obj& key, const Obj& value, EventNotes* notes) {
  ++notes->unknown;
  if (NamesSalt(key) && !IsNil(&value)) notes->unclear_namespace = true;
}

void ReadMetadata(const Obj* o, EngineEvent* e, EventNotes* notes) {
  if (IsNil(o)) return;
  if (o->type != mt::MAP) {
    notes->unclear_namespace = true;
    return;
  }
  for (const msgpack::object_kv& kv : Pairs(*o)) {
    const std::string_view key = IsStr(kv.key) ? Str(kv.key) : std::string_view();
    if (key == "cache_salt") {
      ReadSalt(&kv.val, e, notes);
    } else if (key != "session_id" || !(IsNil(&kv.val) || IsStr(kv.val))) {
      UnknownField(kv.key, kv.val, notes);
    }
  }
}

bool IsTypedSaltItem(const Obj& item) {
  if (item.type != mt::MAP) return false;
  return std::any_of(Pairs(item).begin(), Pairs(item).end(), [](const msgpack::object_kv& kv) {
    return NamesSalt(kv.key) || (IsStr(kv.key) && Str(kv.key) == "type" && NamesSalt(kv.val));
  });
}

void ReadTypedSaltItem(const Obj& item, EngineEvent* e, EventNotes* notes) {
  const Obj* salt = nullptr;
  for (const msgpack::object_kv& kv : Pairs(item)) {
    if (!NamesSalt(kv.key)) continue;
    if (salt != nullptr) {
      notes->unclear_namespace = true;
      return;
    }
    salt = &kv.val;
  }
  if (IsNil(salt)) {
    notes->unclear_namespace = true;
    return;
  }
  ReadSalt(salt, e, notes);
}

}  // namespace kvatlas::server::salt_reader
