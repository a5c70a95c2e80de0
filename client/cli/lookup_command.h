// `kvatlas lookup` and `kvatlas blocks`: the binary protocol's kLookup and kLocate, printed
// as tables or as the REST answers' JSON. A lookup that finds nothing says why it may be:
// whether the server has blocks in the context asked, and which contexts it has.
#pragma once

#include <string>
#include <vector>

#include "client/cli/args.h"
#include "client/cli/rpc_client.h"

namespace kvatlas::cli {

// Builds the request from the flags (a usage error as kInvalidArgument), then connects and
// runs it. Exit code 0, 1 (failure printed) or 2 (usage error printed).
int RunLookup(const Args& args, const RpcTarget& target);
int RunBlocks(const Args& args, const RpcTarget& target);

// What a lookup that found nothing in `context` (ContextKeyToJson's fields, as JSON text)
// adds, given the GET /v1/contexts document `contexts`: that the context holds blocks but
// not this prompt's, or that it holds none and the contexts that do (at most `limit`, those
// of the same model first). Lines end with "\n".
[[nodiscard]] std::string NothingFoundHint(const std::string& context, const std::string& contexts,
                                           size_t limit = 10);

}  // namespace kvatlas::cli
