// The value types of the Python binding: contexts, holders, lookup and routing answers,
// events, copies, feed records. Each is the C++ struct itself (common/include/kvatlas/
// common/), so no field is renamed or re-encoded on the way; lists convert to Python lists
// on access (a copy).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>

#include "client/python/src/bindings.h"
#include "kvatlas/client/local_index.h"
#include "kvatlas/common/events.h"
#include "kvatlas/common/feed.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/routing.h"

namespace kvatlas::python {
namespace {

std::string Quote(const std::string& s) { return py::repr(py::str(s)).cast<std::string>(); }

// Value equality (the C++ operator==) for a bound struct.
template <typename T>
py::class_<T> WithEq(py::class_<T> c) {
  c.def("__eq__", [](const T& a, const T& b) { return a == b; });
  c.attr("__hash__") = py::none();  // mutable or unhashable values
  return c;
}

std::string ReprContext(const ContextKey& c) {
  std::ostringstream out;
  out << "Context(model=" << Quote(c.model) << ", block_size=" << c.block_size;
  if (c.tenant != "default") out << ", tenant=" << Quote(c.tenant);
  if (!c.lora_name.empty()) out << ", lora_name=" << Quote(c.lora_name);
  if (!c.salt.empty()) out << ", salt=" << Quote(c.salt);
  out << ")";
  return out.str();
}

std::string ReprBlocks(const TierBlocks& b) {
  std::ostringstream out;
  out << "TierBlocks(gpu=" << b.gpu << ", cpu=" << b.cpu << ", disk=" << b.disk
      << ", cpu_only=" << b.cpu_only << ", disk_only=" << b.disk_only << ")";
  return out.str();
}

void DefineContexts(py::module_& m) {
  py::enum_<Tier>(m, "Tier", "Where a copy lives; GPU < CPU < DISK in cumulative answers.")
      .value("GPU", Tier::kGpu)
      .value("CPU", Tier::kCpu)
      .value("DISK", Tier::kDisk)
      .value("SHARED", Tier::kShared);
  m.def(
      "tier_from_medium", [](const std::string& medium) { return TierFromMedium(medium); },
      py::arg("medium"), "An engine's medium string (\"GPU\", \"cpu_pinned\", ...) as a Tier.");

  py::class_<ContextKey>(m, "Context",
                         "A hash namespace (tenant, model, LoRA, block size, salt): blocks of "
                         "different contexts never match.")
      .def(py::init([](std::string model, uint32_t block_size, std::string tenant,
                       std::string lora_name, std::string salt) {
             ContextKey c;
             c.model = std::move(model);
             c.block_size = block_size;
             c.tenant = tenant.empty() ? "default" : std::move(tenant);
             c.lora_name = std::move(lora_name);
             c.salt = std::move(salt);
             return c;
           }),
           py::arg("model"), py::arg("block_size"), py::kw_only(), py::arg("tenant") = "default",
           py::arg("lora_name") = "", py::arg("salt") = "")
      .def_readwrite("model", &ContextKey::model)
      .def_readwrite("block_size", &ContextKey::block_size)
      .def_readwrite("tenant", &ContextKey::tenant)
      .def_readwrite("lora_name", &ContextKey::lora_name)
      .def_readwrite("salt", &ContextKey::salt)
      .def("__eq__", [](const ContextKey& a, const ContextKey& b) { return a == b; })
      .def("__hash__", [](const ContextKey& c) { return ContextKeyHash()(c); })
      .def("__str__", &ContextKey::ToString)
      .def("__repr__", &ReprContext);

  py::class_<HolderKey>(m, "Holder", "Who holds a copy: an instance or backend id and a dp rank.")
      .def(py::init([](std::string id, uint32_t dp_rank) {
             return HolderKey{std::move(id), dp_rank};
           }),
           py::arg("id"), py::arg("dp_rank") = 0)
      .def_readwrite("id", &HolderKey::id)
      .def_readwrite("dp_rank", &HolderKey::dp_rank)
      .def("__eq__", [](const HolderKey& a, const HolderKey& b) { return a == b; })
      .def("__hash__", [](const HolderKey& h) { return HolderKeyHash()(h); })
      .def("__repr__", [](const HolderKey& h) {
        return "Holder(" + Quote(h.id) + ", dp_rank=" + std::to_string(h.dp_rank) + ")";
      });
  py::implicitly_convertible<py::str, HolderKey>();
}

void DefineLookup(py::module_& m) {
  py::class_<TierBlocks>(m, "TierBlocks",
                         "Prefix lengths in blocks: gpu <= cpu <= disk are cumulative; "
                         "cpu_only and disk_only are per medium alone.")
      .def_readonly("gpu", &TierBlocks::gpu)
      .def_readonly("cpu", &TierBlocks::cpu)
      .def_readonly("disk", &TierBlocks::disk)
      .def_readonly("cpu_only", &TierBlocks::cpu_only)
      .def_readonly("disk_only", &TierBlocks::disk_only)
      .def("__eq__", [](const TierBlocks& a, const TierBlocks& b) { return a == b; })
      .def("__repr__", &ReprBlocks);
  WithEq(py::class_<RankMatch>(m, "RankMatch"))
      .def_readonly("dp_rank", &RankMatch::dp_rank)
      .def_readonly("blocks", &RankMatch::blocks);
  WithEq(
      py::class_<InstanceMatch>(m, "InstanceMatch", "An instance's match, the max over its ranks."))
      .def_readonly("instance_id", &InstanceMatch::instance_id)
      .def_readonly("blocks", &InstanceMatch::blocks)
      .def_readonly("dp_ranks", &InstanceMatch::dp_ranks)
      .def("__repr__", [](const InstanceMatch& i) {
        return "InstanceMatch(" + Quote(i.instance_id) + ", " + ReprBlocks(i.blocks) + ")";
      });
  WithEq(py::class_<SharedMatch>(m, "SharedMatch", "A shared backend holding a prefix."))
      .def_readonly("backend_id", &SharedMatch::backend_id)
      .def_readonly("dp_rank", &SharedMatch::dp_rank)
      .def_readonly("blocks", &SharedMatch::blocks)
      .def_readonly("locations", &SharedMatch::locations);
  WithEq(py::class_<PredictedPrefix>(
             m, "PredictedPrefix",
             "A prefix predicted on an instance's rank (approximate mode, docs/routing.md)."))
      .def_readonly("instance_id", &PredictedPrefix::instance_id)
      .def_readonly("dp_rank", &PredictedPrefix::dp_rank)
      .def_readonly("blocks", &PredictedPrefix::blocks);
  py::class_<LookupAnswer>(m, "LookupAnswer", "The longest cached prefix per instance and tier.")
      .def_readonly("revision", &LookupAnswer::revision)
      .def_readonly("context", &LookupAnswer::context)
      .def_readonly("blocks_queried", &LookupAnswer::blocks_queried)
      .def_readonly("blocks_found", &LookupAnswer::blocks_found)
      .def_readonly("instances", &LookupAnswer::instances)
      .def_readonly("shared", &LookupAnswer::shared)
      .def_readonly("predicted", &LookupAnswer::predicted)
      .def(
          "instance",
          [](const LookupAnswer& a, const std::string& id) -> py::object {
            for (const InstanceMatch& i : a.instances) {
              if (i.instance_id == id) return py::cast(i);
            }
            return py::none();
          },
          py::arg("instance_id"), "The named instance's match, or None.")
      .def("__eq__", [](const LookupAnswer& a, const LookupAnswer& b) { return a == b; })
      .def("__repr__", [](const LookupAnswer& a) {
        return "LookupAnswer(revision=" + std::to_string(a.revision) +
               ", blocks_queried=" + std::to_string(a.blocks_queried) +
               ", blocks_found=" + std::to_string(a.blocks_found) +
               ", instances=" + std::to_string(a.instances.size()) + ")";
      });
}

void DefineRouting(py::module_& m) {
  constexpr RoutingOptions kDefaults{};
  WithEq(py::class_<RouteCandidate>(m, "Candidate", "A routing target and its current load."))
      .def(
          py::init([](std::string instance_id, std::optional<uint32_t> dp_rank,
                      uint64_t queued_prefill_tokens, uint64_t active_decode_blocks, bool predict) {
            return RouteCandidate{std::move(instance_id), dp_rank, queued_prefill_tokens,
                                  active_decode_blocks, predict};
          }),
          py::arg("instance_id"), py::kw_only(), py::arg("dp_rank") = py::none(),
          py::arg("queued_prefill_tokens") = 0, py::arg("active_decode_blocks") = 0,
          py::arg("predict") = false)
      .def_readwrite("instance_id", &RouteCandidate::instance_id)
      .def_readwrite("dp_rank", &RouteCandidate::dp_rank)
      .def_readwrite("queued_prefill_tokens", &RouteCandidate::queued_prefill_tokens)
      .def_readwrite("active_decode_blocks", &RouteCandidate::active_decode_blocks)
      .def_readwrite("predict", &RouteCandidate::predict)
      .def("__repr__", [](const RouteCandidate& c) {
        return "Candidate(" + Quote(c.instance_id) +
               ", queued_prefill_tokens=" + std::to_string(c.queued_prefill_tokens) +
               ", active_decode_blocks=" + std::to_string(c.active_decode_blocks) + ")";
      });
  WithEq(
      py::class_<PrefixMatch>(m, "PrefixMatch", "A candidate's cached prefix per tier, in blocks."))
      .def(py::init([](uint32_t gpu, uint32_t cpu, uint32_t disk, uint32_t shared) {
             return PrefixMatch{gpu, cpu, disk, shared};
           }),
           py::kw_only(), py::arg("gpu") = 0, py::arg("cpu") = 0, py::arg("disk") = 0,
           py::arg("shared") = 0)
      .def_readwrite("gpu", &PrefixMatch::gpu)
      .def_readwrite("cpu", &PrefixMatch::cpu)
      .def_readwrite("disk", &PrefixMatch::disk)
      .def_readwrite("shared", &PrefixMatch::shared)
      .def_readwrite("predicted", &PrefixMatch::predicted);
  WithEq(py::class_<RoutingOptions>(m, "RoutingOptions",
                                    "The route cost's weights (docs/routing.md)."))
      .def(
          py::init([](double gpu, double cpu, double disk, double shared, double predicted,
                      double prefill_scale, double queue_scale, double decode_scale,
                      double replica_credit, double excess_queue_scale, double excess_queue_epsilon,
                      double temperature, std::optional<uint64_t> seed) {
            RoutingOptions o;
            o.weights = TierWeights{gpu, cpu, disk, shared};
            o.weights.predicted = predicted;
            o.prefill_scale = prefill_scale;
            o.queue_scale = queue_scale;
            o.decode_scale = decode_scale;
            o.replica_credit = replica_credit;
            o.excess_queue_scale = excess_queue_scale;
            o.excess_queue_epsilon = excess_queue_epsilon;
            o.temperature = temperature;
            o.seed = seed;
            ThrowIfError(ValidateRoutingOptions(o));
            return o;
          }),
          // The C++ defaults (docs/routing.md §Defaults), from one place.
          py::kw_only(), py::arg("gpu") = kDefaults.weights.gpu,
          py::arg("cpu") = kDefaults.weights.cpu, py::arg("disk") = kDefaults.weights.disk,
          py::arg("shared") = kDefaults.weights.shared,
          py::arg("predicted") = kDefaults.weights.predicted,
          py::arg("prefill_scale") = kDefaults.prefill_scale,
          py::arg("queue_scale") = kDefaults.queue_scale,
          py::arg("decode_scale") = kDefaults.decode_scale,
          py::arg("replica_credit") = kDefaults.replica_credit,
          py::arg("excess_queue_scale") = kDefaults.excess_queue_scale,
          py::arg("excess_queue_epsilon") = kDefaults.excess_queue_epsilon,
          py::arg("temperature") = kDefaults.temperature, py::arg("seed") = py::none())
      .def_property_readonly("gpu", [](const RoutingOptions& o) { return o.weights.gpu; })
      .def_property_readonly("cpu", [](const RoutingOptions& o) { return o.weights.cpu; })
      .def_property_readonly("disk", [](const RoutingOptions& o) { return o.weights.disk; })
      .def_property_readonly("shared", [](const RoutingOptions& o) { return o.weights.shared; })
      .def_property_readonly("predicted",
                             [](const RoutingOptions& o) { return o.weights.predicted; })
      .def_readonly("prefill_scale", &RoutingOptions::prefill_scale)
      .def_readonly("queue_scale", &RoutingOptions::queue_scale)
      .def_readonly("decode_scale", &RoutingOptions::decode_scale)
      .def_readonly("replica_credit", &RoutingOptions::replica_credit)
      .def_readonly("excess_queue_scale", &RoutingOptions::excess_queue_scale)
      .def_readonly("excess_queue_epsilon", &RoutingOptions::excess_queue_epsilon)
      .def_readonly("temperature", &RoutingOptions::temperature)
      .def_readonly("seed", &RoutingOptions::seed);
  WithEq(
      py::class_<ScoredCandidate>(m, "ScoredCandidate", "A candidate's score and its breakdown."))
      .def_readonly("index", &ScoredCandidate::index)
      .def_readonly("candidate", &ScoredCandidate::candidate)
      .def_readonly("matched", &ScoredCandidate::matched)
      .def_readonly("gpu_blocks", &ScoredCandidate::gpu_blocks)
      .def_readonly("cpu_blocks", &ScoredCandidate::cpu_blocks)
      .def_readonly("disk_blocks", &ScoredCandidate::disk_blocks)
      .def_readonly("shared_blocks", &ScoredCandidate::shared_blocks)
      .def_readonly("predicted_blocks", &ScoredCandidate::predicted_blocks)
      .def_readonly("credit", &ScoredCandidate::credit)
      .def_readonly("new_prefill_blocks", &ScoredCandidate::new_prefill_blocks)
      .def_readonly("queued_prefill_blocks", &ScoredCandidate::queued_prefill_blocks)
      .def_readonly("prefill_cost", &ScoredCandidate::prefill_cost)
      .def_readonly("decode_cost", &ScoredCandidate::decode_cost)
      .def_readonly("cost", &ScoredCandidate::cost)
      .def_readonly("probability", &ScoredCandidate::probability)
      .def_property_readonly("instance_id",
                             [](const ScoredCandidate& s) { return s.candidate.instance_id; })
      .def("__repr__", [](const ScoredCandidate& s) {
        return "ScoredCandidate(" + Quote(s.candidate.instance_id) +
               ", cost=" + std::to_string(s.cost) + ", gpu_blocks=" + std::to_string(s.gpu_blocks) +
               ")";
      });
  WithEq(py::class_<RoutingAnswer>(m, "RoutingAnswer", "Candidates ranked: the pick first."))
      .def_readonly("revision", &RoutingAnswer::revision)
      .def_readonly("prompt_blocks", &RoutingAnswer::prompt_blocks)
      .def_readonly("blocks_found", &RoutingAnswer::blocks_found)
      .def_readonly("ranked", &RoutingAnswer::ranked)
      .def_property_readonly(
          "pick", [](const RoutingAnswer& a) { return a.ranked.at(0).candidate.instance_id; },
          "The chosen candidate's instance id.");
}

void DefineEvents(py::module_& m) {
  py::enum_<EventType>(m, "EventType")
      .value("STORED", EventType::kStored)
      .value("REMOVED", EventType::kRemoved)
      .value("CLEARED", EventType::kCleared);
  py::class_<BlockEvent>(m, "BlockEvent",
                         "One KV-cache event (RFC #1527): stored, removed or cleared blocks of "
                         "a holder. Validated when sent (Error invalid_argument naming the "
                         "field).")
      .def(py::init([](EventType type, ContextKey context, HolderKey holder,
                       const py::object& seq_hashes, std::optional<uint64_t> parent_hash,
                       const py::object& token_ids, std::optional<std::string> medium,
                       std::optional<Tier> tier, std::vector<std::string> locations,
                       std::optional<uint32_t> base_block_idx, std::optional<uint64_t> event_id,
                       std::optional<double> timestamp, std::optional<std::string> origin,
                       const std::string& scope) {
             BlockEvent e;
             e.type = type;
             e.context = std::move(context);
             e.holder = std::move(holder);
             if (!seq_hashes.is_none()) e.seq_hashes = ToU64s(seq_hashes, "seq_hashes");
             e.parent_hash = parent_hash;
             if (!token_ids.is_none()) e.token_ids = ToU32s(token_ids, "token_ids");
             if (medium) {
               e.tier = TierFromMedium(*medium, &e.medium_known);
               e.medium = std::move(medium);
             }
             if (tier) {
               if (medium && *tier != e.tier) {
                 throw py::value_error("tier: does not match the medium's tier");
               }
               e.tier = *tier;
             }
             e.locations = std::move(locations);
             e.base_block_idx = base_block_idx;
             e.event_id = event_id;
             e.timestamp = timestamp;
             if (origin) {
               if (*origin == "new") {
                 e.origin = BlockOrigin::kNew;
               } else if (*origin == "reused") {
                 e.origin = BlockOrigin::kReused;
               } else {
                 throw py::value_error("origin: must be \"new\" or \"reused\"");
               }
               if (type != EventType::kStored) {
                 throw py::value_error("origin: only a stored event has one");
               }
             }
             if (scope != "context" && scope != "holder") {
               throw py::value_error("scope: must be \"context\" or \"holder\"");
             }
             if (scope == "holder" && type != EventType::kCleared) {
               throw py::value_error("scope: only a cleared event has one");
             }
             e.clear_all_contexts = scope == "holder";
             return e;
           }),
           py::arg("type"), py::arg("context"), py::arg("holder"), py::kw_only(),
           py::arg("seq_hashes") = py::none(), py::arg("parent_hash") = py::none(),
           py::arg("token_ids") = py::none(), py::arg("medium") = py::none(),
           py::arg("tier") = py::none(), py::arg("locations") = std::vector<std::string>{},
           py::arg("base_block_idx") = py::none(), py::arg("event_id") = py::none(),
           py::arg("timestamp") = py::none(), py::arg("origin") = py::none(),
           py::arg("scope") = "context")
      .def_readonly("type", &BlockEvent::type)
      .def_readonly("context", &BlockEvent::context)
      .def_readonly("holder", &BlockEvent::holder)
      .def_readonly("seq_hashes", &BlockEvent::seq_hashes)
      .def_readonly("parent_hash", &BlockEvent::parent_hash)
      .def_readonly("token_ids", &BlockEvent::token_ids)
      .def_readonly("medium", &BlockEvent::medium)
      .def_readonly("tier", &BlockEvent::tier)
      .def_readonly("locations", &BlockEvent::locations)
      .def_property_readonly("origin",
                             [](const BlockEvent& e) -> std::optional<std::string> {
                               if (!e.origin) return std::nullopt;
                               return std::string(BlockOriginName(*e.origin));
                             })
      .def_property_readonly("scope", [](const BlockEvent& e) {
        return std::string(e.clear_all_contexts ? "holder" : "context");
      });
  py::class_<IngestAnswer>(m, "IngestAnswer")
      .def_readonly("revision", &IngestAnswer::revision)
      .def_readonly("events", &IngestAnswer::events)
      .def_readonly("blocks", &IngestAnswer::blocks)
      .def("__repr__", [](const IngestAnswer& a) {
        return "IngestAnswer(revision=" + std::to_string(a.revision) +
               ", events=" + std::to_string(a.events) + ", blocks=" + std::to_string(a.blocks) +
               ")";
      });
  WithEq(py::class_<HeartbeatAnswer>(m, "HeartbeatAnswer"))
      .def_readonly("holders", &HeartbeatAnswer::holders)
      .def_readonly("ttl_seconds", &HeartbeatAnswer::ttl_seconds);
}

// A failed attempt's wire code ("unauthenticated", ...), '' for OK.
std::string ErrorCodeName(const Status& status) {
  return status.ok() ? std::string() : std::string(WireNameOf(status.code()));
}

void DefineCopiesAndFeed(py::module_& m) {
  WithEq(
      py::class_<BlockCopy>(m, "BlockCopy", "One copy of a block: holder, tier, depth, location."))
      .def_readonly("context", &BlockCopy::context)
      .def_readonly("holder", &BlockCopy::holder)
      .def_readonly("tier", &BlockCopy::tier)
      .def_readonly("depth", &BlockCopy::depth)
      .def_readonly("refcount", &BlockCopy::refcount)
      .def_readonly("engine_hash", &BlockCopy::engine_hash)
      .def_readonly("location", &BlockCopy::location);
  WithEq(py::class_<LocateAnswer>(m, "LocateAnswer"))
      .def_readonly("revision", &LocateAnswer::revision)
      .def_readonly("copies", &LocateAnswer::copies);
  WithEq(
      py::class_<SnapshotCopy>(m, "SnapshotCopy", "A copy in a snapshot; copy.context is empty."))
      .def_readonly("key", &SnapshotCopy::key)
      .def_readonly("copy", &SnapshotCopy::copy);
  py::class_<ContextSnapshot>(m, "ContextSnapshot", "Every copy of one context at a revision.")
      .def_readonly("revision", &ContextSnapshot::revision)
      .def_readonly("context", &ContextSnapshot::context)
      .def_readonly("copies", &ContextSnapshot::copies);

  py::enum_<FeedOp>(m, "FeedOp")
      .value("STORED", FeedOp::kStored)
      .value("REMOVED", FeedOp::kRemoved)
      .value("CLEARED", FeedOp::kCleared)
      .value("EVICTED", FeedOp::kEvicted)
      .value("EXPIRED", FeedOp::kExpired)
      .value("PREDICTED", FeedOp::kPredicted);
  WithEq(py::class_<FeedRecord>(m, "FeedRecord", "One applied change to the map (docs/feed.md)."))
      .def_readonly("revision", &FeedRecord::revision)
      .def_readonly("op", &FeedRecord::op)
      .def_readonly("context", &FeedRecord::context)
      .def_readonly("holder", &FeedRecord::holder)
      .def_readonly("tier", &FeedRecord::tier)
      .def_readonly("keys", &FeedRecord::keys)
      .def_readonly("locations", &FeedRecord::locations)
      .def_readonly("expires_at_ms", &FeedRecord::expires_at_ms)
      .def("__repr__", [](const FeedRecord& r) {
        return "FeedRecord(revision=" + std::to_string(r.revision) +
               ", op=" + std::string(FeedOpName(r.op)) + ", holder=" + Quote(r.holder.ToString()) +
               ", keys=" + std::to_string(r.keys.size()) + ")";
      });
  py::class_<FeedFilter>(m, "FeedFilter", "Which feed records a watch wants; None matches all.")
      .def(py::init([](std::optional<std::string> tenant, std::optional<std::string> model,
                       std::optional<std::string> lora_name, std::optional<uint32_t> block_size,
                       std::optional<std::string> salt, std::optional<std::string> holder_id,
                       std::optional<uint32_t> dp_rank, std::optional<Tier> tier, bool predicted) {
             return FeedFilter{std::move(tenant),
                               std::move(model),
                               std::move(lora_name),
                               block_size,
                               std::move(salt),
                               std::move(holder_id),
                               dp_rank,
                               tier,
                               predicted};
           }),
           py::kw_only(), py::arg("tenant") = py::none(), py::arg("model") = py::none(),
           py::arg("lora_name") = py::none(), py::arg("block_size") = py::none(),
           py::arg("salt") = py::none(), py::arg("holder_id") = py::none(),
           py::arg("dp_rank") = py::none(), py::arg("tier") = py::none(),
           py::arg("predicted") = false)
      .def_static("for_context", &FeedFilter::ForContext, py::arg("context"))
      .def_readwrite("tenant", &FeedFilter::tenant)
      .def_readwrite("model", &FeedFilter::model)
      .def_readwrite("lora_name", &FeedFilter::lora_name)
      .def_readwrite("block_size", &FeedFilter::block_size)
      .def_readwrite("salt", &FeedFilter::salt)
      .def_readwrite("holder_id", &FeedFilter::holder_id)
      .def_readwrite("dp_rank", &FeedFilter::dp_rank)
      .def_readwrite("tier", &FeedFilter::tier)
      .def_readwrite("predicted", &FeedFilter::predicted);

  py::class_<LocalIndexStats>(m, "LocalIndexStats")
      .def_readonly("revision", &LocalIndexStats::revision)
      .def_readonly("synced", &LocalIndexStats::synced)
      .def_property_readonly(
          "staleness",
          [](const LocalIndexStats& s) {
            return std::chrono::duration<double>(s.staleness).count();
          },
          "Seconds since the replica was last known in sync (0 while synced).")
      .def_readonly("blocks", &LocalIndexStats::blocks)
      .def_readonly("copies", &LocalIndexStats::copies)
      .def_readonly("memory_bytes", &LocalIndexStats::memory_bytes)
      .def_readonly("records_applied", &LocalIndexStats::records_applied)
      .def_readonly("snapshots_loaded", &LocalIndexStats::snapshots_loaded)
      .def_readonly("watch_resumes", &LocalIndexStats::watch_resumes)
      .def_readonly("predicted_entries", &LocalIndexStats::predicted_entries)
      .def_readonly("predicted_dropped", &LocalIndexStats::predicted_dropped)
      .def_property_readonly(
          "state",
          [](const LocalIndexStats& s) { return std::string(LocalIndexStateName(s.state)); },
          "The least advanced context's state: connecting, loading_snapshot, synced, retrying.")
      .def_property_readonly(
          "last_error_code", [](const LocalIndexStats& s) { return ErrorCodeName(s.last_error); },
          "The most recent failed attempt's code (e.g. unauthenticated), '' when none.")
      .def_property_readonly(
          "last_error", [](const LocalIndexStats& s) { return s.last_error.message(); },
          "The most recent failed attempt's message, '' when none.");

  using ContextStatus = LocalIndexContextStatus;
  py::class_<ContextStatus>(m, "LocalIndexContextStatus")
      .def_readonly("context", &ContextStatus::context)
      .def_property_readonly(
          "state", [](const ContextStatus& s) { return std::string(LocalIndexStateName(s.state)); },
          "connecting, loading_snapshot, synced or retrying.")
      .def_readonly("snapshot_revision", &ContextStatus::snapshot_revision)
      .def_readonly("snapshot_copies", &ContextStatus::snapshot_copies)
      .def_readonly("buffered_records", &ContextStatus::buffered_records)
      .def_readonly("buffered_bytes", &ContextStatus::buffered_bytes)
      .def_readonly("buffered_through", &ContextStatus::buffered_through)
      .def_readonly("failures", &ContextStatus::failures)
      .def_property_readonly(
          "last_error_code", [](const ContextStatus& s) { return ErrorCodeName(s.last_error); },
          "The last failed attempt's code for this context, '' when none since its sync.")
      .def_property_readonly(
          "last_error", [](const ContextStatus& s) { return s.last_error.message(); },
          "The last failed attempt's message, '' when none.");
}

}  // namespace

void DefineTypes(py::module_& m) {
  DefineContexts(m);
  DefineLookup(m);
  DefineRouting(m);
  DefineEvents(m);
  DefineCopiesAndFeed(m);
}

}  // namespace kvatlas::python
