#include "client/cli/lookup_command.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "client/cli/help.h"
#include "client/cli/json_text.h"
#include "client/cli/rest_client.h"
#include "kvatlas/common/json_codec.h"

namespace kvatlas::cli {
namespace {

using nlohmann::json;

Result<ContextKey> ContextFrom(const Args& args, bool required) {
  ContextKey context;
  const std::optional<std::string> model = args.Flag("model");
  const std::optional<std::string> block_size = args.Flag("block-size");
  if (!model && !block_size && !required) return context;
  if (!model || model->empty()) return Status::InvalidArgument("--model is required");
  if (!block_size) return Status::InvalidArgument("--block-size is required");
  KVATLAS_ASSIGN_OR_RETURN(context.block_size, ParseU32(block_size.value_or(""), "--block-size"));
  if (context.block_size == 0) return Status::InvalidArgument("--block-size must be > 0");
  context.model = *model;
  if (auto tenant = args.Flag("tenant"); tenant && !tenant->empty()) context.tenant = *tenant;
  context.lora_name = args.Flag("lora").value_or("");
  context.salt = args.Flag("salt").value_or("");
  return context;
}

Result<LookupRequest> BuildLookup(const Args& args) {
  if (!args.positional.empty()) {
    return Status::InvalidArgument("unexpected argument \"" + args.positional[0] + "\"");
  }
  KVATLAS_ASSIGN_OR_RETURN(ContextKey context, ContextFrom(args, /*required=*/true));
  LookupRequest request;
  request.context = std::move(context);
  const std::optional<std::string> tokens = args.Flag("tokens");
  const std::optional<std::string> hashes = args.Flag("hashes");
  if (tokens.has_value() == hashes.has_value()) {
    return Status::InvalidArgument("give exactly one of --tokens and --hashes");
  }
  if (args.Has("json") && args.Has("conductor")) {
    return Status::InvalidArgument("give at most one of --json and --conductor");
  }
  if (tokens) {
    KVATLAS_ASSIGN_OR_RETURN(request.token_ids, ParseTokenList(*tokens));
  } else {
    KVATLAS_ASSIGN_OR_RETURN(request.seq_hashes, ParseHashList(*hashes));
    request.by_hash = true;
  }
  request.instance_id = args.Flag("instance").value_or("");
  return request;
}

void PrintLookupTable(const LookupAnswer& a) {
  std::printf("revision %llu: %u of %u blocks found (block size %u, context %s)\n",
              static_cast<unsigned long long>(a.revision), a.blocks_found, a.blocks_queried,
              a.context.block_size, a.context.ToString().c_str());
  if (a.instances.empty() && a.shared.empty()) {
    std::printf("no instance holds a prefix\n");
    return;
  }
  if (!a.instances.empty()) {
    std::printf("%-24s %8s %8s %8s %8s %8s\n", "INSTANCE", "LONGEST", "GPU", "GPU+CPU", "CPU",
                "DISK");
    for (const InstanceMatch& m : a.instances) {
      std::printf("%-24s %8u %8u %8u %8u %8u\n", m.instance_id.c_str(), m.blocks.disk, m.blocks.gpu,
                  m.blocks.cpu, m.blocks.cpu_only, m.blocks.disk_only);
    }
    std::printf(
        "(blocks; LONGEST, GPU and GPU+CPU are prefixes over the tiers together, CPU "
        "and DISK in that medium alone)\n");
  }
  if (!a.shared.empty()) {
    std::printf("%-24s %8s %8s\n", "SHARED BACKEND", "RANK", "BLOCKS");
    for (const SharedMatch& m : a.shared) {
      std::printf("%-24s %8u %8u\n", m.backend_id.c_str(), m.dp_rank, m.blocks);
    }
  }
}

std::string Field(const json& object, const char* name) { return FieldText(object, name, ""); }

// "1 block", "7 blocks".
std::string Blocks(const json& context) {
  const std::string n = Field(context, "blocks");
  return n + (n == "1" ? " block" : " blocks");
}

// The REST address of the server the binary protocol reached: its own http_address in the
// stats document's cluster view, else --http/$KVATLAS_HTTP/the default.
std::string RestAddressOf(const json& stats, const Args& args) {
  const json cluster = stats.value("cluster", json::object());
  if (cluster.is_object()) {
    for (const json& m : cluster.value("members", json::array())) {
      if (m.is_object() && m.value("id", json()) == cluster.value("id", json()) &&
          m.value("http_address", json()).is_string()) {
        return m["http_address"].get<std::string>();
      }
    }
  }
  Result<std::string> address = RestAddress(args);
  return address ? *address : "127.0.0.1:7070";
}

// After a lookup that found nothing: what the server knows, from its statistics and its
// contexts (GET /v1/contexts: the binary protocol does not list them). Best effort: a
// failure of either only shortens the hint.
void PrintNothingFoundHint(Client& client, const LookupAnswer& answer, const Args& args,
                           const RpcTarget& target) {
  if (answer.blocks_queried == 0) {
    std::printf("the prompt is shorter than one block (%u tokens): nothing to look up\n",
                answer.context.block_size);
    return;
  }
  Result<StatsAnswer> stats = client.Stats();
  if (!stats) return;
  const json doc = json::parse(stats->json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return;
  const json index = doc.value("index", json::object());
  if (index.is_object() && index.value("contexts", json()) == json(0)) {
    std::printf(
        "the server has no blocks in any context yet: engines report them through their event "
        "streams (POST /register) or kvatlas ingest\n");
    return;
  }
  RestTarget rest{RestAddressOf(doc, args), target.tls, target.token,
                  std::min<std::chrono::milliseconds>(target.timeout, std::chrono::seconds(3))};
  Result<RestAnswer> contexts = RestRequest(rest, "GET", "/v1/contexts");
  if (!contexts || contexts->status != 200) {
    std::printf("(the contexts the server has blocks in: GET /v1/contexts on its REST API, %s)\n",
                rest.address.c_str());
    return;
  }
  std::fputs(NothingFoundHint(ContextKeyToJson(answer.context).dump(), contexts->body).c_str(),
             stdout);
}

// The REST GET /v1/blocks/{key} shape.
json LocateJson(BlockKey key, const LocateAnswer& answer) {
  json copies = json::array();
  for (const BlockCopy& c : answer.copies) {
    copies.push_back({{"context", ContextKeyToJson(c.context)},
                      {"holder_id", c.holder.id},
                      {"dp_rank", c.holder.dp_rank},
                      {"tier", TierName(c.tier)},
                      {"depth", c.depth},
                      {"refcount", c.refcount},
                      {"engine_hash", c.engine_hash},
                      {"location", c.location}});
  }
  return {{"revision", answer.revision}, {"key", key}, {"copies", std::move(copies)}};
}

Result<LocateRequest> BuildLocate(const Args& args) {
  if (args.positional.size() != 1) return Status::InvalidArgument("give one block KEY");
  Result<uint64_t> key = ParseHashText(args.positional[0]);
  if (!key) return key.error().WithContext("KEY");
  KVATLAS_ASSIGN_OR_RETURN(ContextKey context, ContextFrom(args, /*required=*/false));
  LocateRequest request{*key, {}};
  if (!context.model.empty()) request.context = std::move(context);
  return request;
}

}  // namespace

std::string NothingFoundHint(const std::string& context, const std::string& contexts,
                             size_t limit) {
  const json asked = json::parse(context, nullptr, /*allow_exceptions=*/false);
  const json doc = json::parse(contexts, nullptr, /*allow_exceptions=*/false);
  if (!asked.is_object() || !doc.is_object() || !doc.value("contexts", json()).is_array()) {
    return "";
  }
  static const char* const kFields[] = {"tenant_id", "model_name", "lora_name", "block_size",
                                        "additional_salt"};
  std::vector<json> same_model;
  std::vector<json> others;
  for (const json& c : doc["contexts"]) {
    if (!c.is_object()) continue;
    if (std::all_of(std::begin(kFields), std::end(kFields),
                    [&](const char* f) { return Field(c, f) == Field(asked, f); })) {
      return "context " + DescribeContext(asked) + " holds " + Blocks(c) +
             ", but not the first block of this prompt: check its tokens (or hashes)\n";
    }
    (Field(c, "model_name") == Field(asked, "model_name") ? same_model : others).push_back(c);
  }
  if (same_model.empty() && others.empty()) {
    return "no blocks stored in context " + DescribeContext(asked) +
           "; the server has no blocks in any context\n";
  }
  std::string out = "no blocks stored in context " + DescribeContext(asked) + "; known contexts:\n";
  same_model.insert(same_model.end(), others.begin(), others.end());
  for (size_t i = 0; i < same_model.size() && i < limit; ++i) {
    out += "  " + DescribeContext(same_model[i]) + " (" + Blocks(same_model[i]) + ")\n";
  }
  if (same_model.size() > limit) {
    out += "  ... and " + std::to_string(same_model.size() - limit) +
           " more (GET /v1/contexts lists them all)\n";
  }
  return out;
}

int RunLookup(const Args& args, const RpcTarget& target) {
  Result<LookupRequest> request = BuildLookup(args);
  if (!request) return UsageError("lookup", "lookup: " + request.error().message());
  std::unique_ptr<Client> client = ConnectOrExplain(target);
  if (client == nullptr) return 1;
  Result<LookupAnswer> answer = client->Lookup(std::move(*request));
  if (!answer) return Failed(answer.error(), target);
  if (args.Has("conductor")) {
    std::printf("%s\n", EncodeConductorAnswer(*answer).c_str());
  } else if (args.Has("json")) {
    std::printf("%s\n", EncodeLookupAnswer(*answer).c_str());
  } else {
    PrintLookupTable(*answer);
    if (answer->blocks_found == 0) PrintNothingFoundHint(*client, *answer, args, target);
  }
  return 0;
}

int RunBlocks(const Args& args, const RpcTarget& target) {
  Result<LocateRequest> request = BuildLocate(args);
  if (!request) return UsageError("blocks", "blocks: " + request.error().message());
  std::unique_ptr<Client> client = ConnectOrExplain(target);
  if (client == nullptr) return 1;
  const BlockKey key = request->key;
  Result<LocateAnswer> answer = client->Locate(*request);
  if (!answer) return Failed(answer.error(), target);
  if (args.Has("json")) {
    std::printf("%s\n", DumpJson(LocateJson(key, *answer)).c_str());
    return 0;
  }
  std::printf("revision %llu: %zu copies of block %llu\n",
              static_cast<unsigned long long>(answer->revision), answer->copies.size(),
              static_cast<unsigned long long>(key));
  if (answer->copies.empty()) return 0;
  std::printf("%-24s %5s %-7s %6s %8s  %-32s %s\n", "HOLDER", "RANK", "TIER", "DEPTH", "REFS",
              "CONTEXT", "LOCATION");
  for (const BlockCopy& c : answer->copies) {
    std::printf("%-24s %5u %-7s %6u %8u  %-32s %s\n", c.holder.id.c_str(), c.holder.dp_rank,
                std::string(TierName(c.tier)).c_str(), c.depth, c.refcount,
                c.context.ToString().c_str(), c.location.c_str());
  }
  return 0;
}

}  // namespace kvatlas::cli
