// One change-feed record as the JSON object of a GET /v1/watch `data:` line (docs/api.md
// §Change feed): {"additional_salt", "backend_id", "block_size", "dp_rank", "expires_at_ms"?,
// "keys", "locations"?, "lora_name", "medium"?, "model_name", "op", "revision", "tenant_id"}
// (predicted records have expires_at_ms and no medium).
//
// Written directly rather than through a JSON document: after a commit stall a watcher gets
// hundreds of records at once, and building a document of 64 keys per record was most of
// the time it then took to send them (measured: docs/feed.md). The bytes are those
// nlohmann's dump() gives for the same object (the tests compare them); strings that are
// not valid UTF-8 get U+FFFD, as DumpJson does.
#pragma once

#include <string>

#include "kvatlas/common/feed.h"

namespace kvatlas::server {

void AppendFeedRecordJson(const FeedRecord& record, std::string* out);

}  // namespace kvatlas::server
