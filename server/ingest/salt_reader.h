// Readers of the fields that name an engine event's namespace (its cache salt), private to
// server/ingest and shared by the event readers of engine_event_decoder.cc. The rule they
// implement (docs/engine-events.md §Namespace): a salt is read exactly or the event is not
// indexed; a salt field of a type they cannot read, two salts that disagree, or an unknown
// field named like a salt leave the namespace unclear and the event is skipped.
#pragma once

#include <cstdint>
#include <msgpack.hpp>

#include "server/ingest/engine_event.h"

namespace kvatlas::server::salt_reader {

using Obj = msgpack::object;

// What reading one event found besides its fields. Both are dropped with the event when it
// is skipped.
struct EventNotes {
  uint32_t unknown = 0;  // fields not known for the event (EngineBatch::unknown_fields)
  // The event names a namespace the decoder cannot read exactly: it must not be indexed.
  bool unclear_namespace = false;
};

// True when a map key (str or bin) contains "salt", in any case: a field that may change
// the namespace of the blocks, whatever engine generation added it.
bool NamesSalt(const Obj& key);

// A field that names the event's salt: a str (nil or absent = none). Another type, or a
// salt that disagrees with one the event already named, leaves the namespace unclear.
void ReadSalt(const Obj* o, EngineEvent* e, EventNotes* notes);

// A key the event's reader does not know: counted, and when it is named like a salt and
// set, the namespace is unclear.
void UnknownField(const Obj& key, const Obj& value, EventNotes* notes);

// SGLang's BlockStoredMetadata {cache_salt?: str, session_id?: str}: at index 7 of the
// positional form, or the "metadata" field of a map. nil or absent is no metadata; another
// type leaves the namespace unclear; other keys are unknown fields.
void ReadMetadata(const Obj* o, EngineEvent* e, EventNotes* notes);

// True for a map item of extra_keys (a typed key, e.g. {"type": "CacheSaltKey", "salt":
// "s"}) that is about a salt: one whose keys or "type" name a salt.
bool IsTypedSaltItem(const Obj& item);

// An item IsTypedSaltItem accepts: its one salt-named str field is the event's salt; any
// other shape leaves the namespace unclear.
void ReadTypedSaltItem(const Obj& item, EngineEvent* e, EventNotes* notes);

}  // namespace kvatlas::server::salt_reader
