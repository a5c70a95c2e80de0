// kvatlas::BlockHasher for clients: tokens → the standard rolling block hashes of a context
// (Mooncake RFC #1403), the very code the server uses to index token_ids, so that a
// scheduler's keys always match the server's. Immutable; safe to share across threads.
// Also kvatlas::VllmBlockHasher: the exact block hashes a vLLM engine started with
// `--prefix-caching-hash-algo sha256_cbor` publishes in its KV events (docs/hashing.md).
#pragma once

#include "kvatlas/common/block_hasher.h"       // IWYU pragma: export
#include "kvatlas/common/vllm_block_hasher.h"  // IWYU pragma: export
