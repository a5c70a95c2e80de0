// kvatlas::BlockHasher for clients: tokens → the standard rolling block hashes of a context
// (Mooncake RFC #1403), the very code the server uses to index token_ids, so that a
// scheduler's keys always match the server's. Immutable; safe to share across threads.
#pragma once

#include "kvatlas/common/block_hasher.h"  // IWYU pragma: export
