// BlockHasher, VllmBlockHasher and Scorer for Python: the very C++ code the server and the
// C++ client run (common/block_hasher, common/vllm_block_hasher, client/scorer), so that a
// Python router computes the keys the server indexes and a vLLM engine publishes, and ranks
// candidates with the server's route cost.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "client/python/src/bindings.h"
#include "kvatlas/client/block_hasher.h"
#include "kvatlas/client/scorer.h"

namespace kvatlas::python {
namespace {

using ExtraItem = VllmBlockHasher::ExtraItem;
using Digest = VllmBlockHasher::Digest;

// A Python extra key as the CBOR value vLLM hashes: str → text, int → (un)signed int,
// bytes → byte string, (str, int) → the multimodal [identifier, offset] pair.
ExtraItem ToExtraItem(const py::handle& item) {
  if (py::isinstance<py::str>(item)) return ExtraItem::Text(item.cast<std::string>());
  if (py::isinstance<py::bytes>(item)) {
    const std::string b = item.cast<std::string>();
    return ExtraItem::Bytes(std::vector<uint8_t>(b.begin(), b.end()));
  }
  if (py::isinstance<py::int_>(item) && !py::isinstance<py::bool_>(item)) {
    if (item.cast<py::int_>() < py::int_(0)) return ExtraItem::Int(item.cast<int64_t>());
    return ExtraItem::Uint(item.cast<uint64_t>());
  }
  if (py::isinstance<py::tuple>(item) && py::len(item) == 2) {
    const auto pair = item.cast<py::tuple>();
    return ExtraItem::Mm(pair[0].cast<std::string>(), pair[1].cast<int64_t>());
  }
  throw py::type_error("an extra key must be str, int, bytes or a (str, int) tuple, got " +
                       py::repr(item).cast<std::string>());
}

std::vector<ExtraItem> ToExtraItems(const py::handle& items) {
  std::vector<ExtraItem> out;
  for (const py::handle item : items) out.push_back(ToExtraItem(item));
  return out;
}

std::vector<std::vector<ExtraItem>> ToPerBlock(const py::object& blocks) {
  std::vector<std::vector<ExtraItem>> out;
  if (blocks.is_none()) return out;
  for (const py::handle block : blocks) out.push_back(ToExtraItems(block));
  return out;
}

VllmBlockHasher::Extras MakeExtras(std::string lora_name, std::string cache_salt,
                                   const py::object& mm_keys, const py::object& trailing_keys) {
  VllmBlockHasher::Extras extras;
  extras.lora_name = std::move(lora_name);
  extras.cache_salt = std::move(cache_salt);
  extras.mm_keys = ToPerBlock(mm_keys);
  extras.trailing_keys = ToPerBlock(trailing_keys);
  return extras;
}

py::bytes DigestBytes(const Digest& d) {
  return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
}

Digest ToDigest(const py::bytes& b) {
  const std::string s = b;
  if (s.size() != 32) throw py::value_error("a digest is 32 bytes");
  Digest d;
  std::copy(s.begin(), s.end(), d.begin());
  return d;
}

void DefineBlockHasher(py::module_& m) {
  m.attr("DEFAULT_HASH_SEED") = kDefaultHashSeed;
  py::class_<BlockHasher>(m, "BlockHasher",
                          "Tokens → the standard rolling block keys (XXH3-64, Mooncake RFC "
                          "#1403): the server's own hashing of token_ids. Thread-safe.")
      .def(py::init<uint64_t>(), py::arg("seed") = kDefaultHashSeed)
      .def_property_readonly("seed", &BlockHasher::seed)
      .def(
          "local_hash",
          [](const BlockHasher& h, const py::object& tokens) {
            return h.LocalHash(ToU32s(tokens, "tokens"));
          },
          py::arg("tokens"), "XXH3-64 of one block's tokens (little-endian u32 each).")
      .def("chain", &BlockHasher::Chain, py::arg("parent"), py::arg("local"),
           "The rolling combination of a parent sequence hash and a block's local hash.")
      .def(
          "sequence_hashes",
          [](const BlockHasher& h, const py::object& tokens, uint32_t block_size,
             std::optional<uint64_t> parent) {
            if (block_size == 0) throw py::value_error("block_size must be positive");
            const std::vector<uint32_t> t = ToU32s(tokens, "tokens");
            py::gil_scoped_release release;
            return h.SequenceHashes(t, block_size, parent);
          },
          py::arg("tokens"), py::arg("block_size"), py::arg("parent") = py::none(),
          "Block keys of the complete blocks of `tokens`, from `parent` or the root.")
      .def(
          "local_hashes",
          [](const BlockHasher& h, const py::object& tokens, uint32_t block_size) {
            if (block_size == 0) throw py::value_error("block_size must be positive");
            return h.LocalHashes(ToU32s(tokens, "tokens"), block_size);
          },
          py::arg("tokens"), py::arg("block_size"))
      .def(
          "chain_locals",
          [](const BlockHasher& h, const py::object& locals, std::optional<uint64_t> parent) {
            return h.ChainLocals(ToU64s(locals, "locals"), parent);
          },
          py::arg("locals"), py::arg("parent") = py::none());
}

void DefineVllmBlockHasher(py::module_& m) {
  py::class_<VllmBlockHasher>(m, "VllmBlockHasher",
                              "The block hashes a vLLM engine started with "
                              "--prefix-caching-hash-algo sha256_cbor publishes (docs/"
                              "hashing.md). Thread-safe.")
      .def(py::init<std::string_view>(), py::arg("python_hash_seed"),
           "python_hash_seed: the engine's PYTHONHASHSEED, as set in its environment.")
      .def_property_readonly("none_hash",
                             [](const VllmBlockHasher& h) { return DigestBytes(h.none_hash()); })
      .def(
          "hash_block",
          [](const VllmBlockHasher& h, const py::bytes& parent, const py::object& tokens,
             const py::object& extra) {
            const std::vector<ExtraItem> items =
                extra.is_none() ? std::vector<ExtraItem>{} : ToExtraItems(extra);
            return DigestBytes(h.HashBlock(ToDigest(parent), ToU32s(tokens, "tokens"), items));
          },
          py::arg("parent"), py::arg("tokens"), py::arg("extra") = py::none(),
          "One block's 32-byte digest from its parent's digest (none_hash for block 0).")
      .def(
          "block_digests",
          [](const VllmBlockHasher& h, const py::object& tokens, uint32_t block_size,
             std::string lora_name, std::string cache_salt, const py::object& mm_keys,
             const py::object& trailing_keys) {
            const auto extras =
                MakeExtras(std::move(lora_name), std::move(cache_salt), mm_keys, trailing_keys);
            py::list out;
            for (const Digest& d : h.BlockDigests(ToU32s(tokens, "tokens"), block_size, extras)) {
              out.append(DigestBytes(d));
            }
            return out;
          },
          py::arg("tokens"), py::arg("block_size"), py::kw_only(), py::arg("lora_name") = "",
          py::arg("cache_salt") = "", py::arg("mm_keys") = py::none(),
          py::arg("trailing_keys") = py::none())
      .def(
          "block_hashes",
          [](const VllmBlockHasher& h, const py::object& tokens, uint32_t block_size,
             std::string lora_name, std::string cache_salt, const py::object& mm_keys,
             const py::object& trailing_keys) {
            const auto extras =
                MakeExtras(std::move(lora_name), std::move(cache_salt), mm_keys, trailing_keys);
            const std::vector<uint32_t> t = ToU32s(tokens, "tokens");
            py::gil_scoped_release release;
            return h.BlockHashes(t, block_size, extras);
          },
          py::arg("tokens"), py::arg("block_size"), py::kw_only(), py::arg("lora_name") = "",
          py::arg("cache_salt") = "", py::arg("mm_keys") = py::none(),
          py::arg("trailing_keys") = py::none(),
          "The 64-bit event hashes of the complete blocks of `tokens`.")
      .def_static(
          "project",
          [](const py::bytes& digest) { return VllmBlockHasher::Project(ToDigest(digest)); },
          py::arg("digest"), "vLLM's event projection: the last 8 digest bytes, big-endian.");
}

void DefineScorer(py::module_& m) {
  py::class_<Scorer>(m, "Scorer",
                     "Routing decisions in the router's process with the server's route cost "
                     "(docs/routing.md). Thread-safe.")
      .def(py::init([](const std::optional<RoutingOptions>& options) {
             return ValueOrThrow(Scorer::Create(options.value_or(RoutingOptions{})));
           }),
           py::arg("options") = py::none())
      .def_property_readonly("options", &Scorer::options)
      .def(
          "score",
          [](const Scorer& s, uint32_t prompt_blocks, uint32_t block_size,
             const std::vector<RouteCandidate>& candidates,
             const std::vector<PrefixMatch>& matches) {
            return ValueOrThrow(s.Score(prompt_blocks, block_size, candidates, matches));
          },
          py::arg("prompt_blocks"), py::arg("block_size"), py::arg("candidates"),
          py::arg("matches"),
          "Ranks candidates given each one's PrefixMatch (parallel lists); the pick first.")
      .def(
          "rank",
          [](const Scorer& s, const LookupAnswer& lookup,
             const std::vector<RouteCandidate>& candidates, std::optional<size_t> prompt_tokens,
             std::optional<size_t> prompt_blocks) {
            LookupRequest request;
            request.context = lookup.context;
            if (prompt_tokens) {
              request.token_ids.resize(*prompt_tokens);
            } else {
              request.by_hash = true;
              request.seq_hashes.resize(prompt_blocks.value_or(lookup.blocks_queried));
            }
            return ValueOrThrow(s.Score(request, lookup, candidates));
          },
          py::arg("lookup"), py::arg("candidates"), py::kw_only(),
          py::arg("prompt_tokens") = py::none(), py::arg("prompt_blocks") = py::none(),
          "Ranks candidates from a lookup answer over every instance (Client.lookup or "
          "LocalIndex.lookup without instance_id), as the server's route does. The prompt's "
          "length: prompt_tokens (partial blocks count), else prompt_blocks, else the "
          "lookup's blocks_queried.");
  m.def(
      "matches_from_lookup",
      [](const LookupAnswer& lookup, const std::vector<RouteCandidate>& candidates) {
        return MatchesFromLookup(lookup, candidates);
      },
      py::arg("lookup"), py::arg("candidates"),
      "Each candidate's PrefixMatch in a lookup answer, in candidate order.");
}

}  // namespace

void DefineHashers(py::module_& m) {
  DefineBlockHasher(m);
  DefineVllmBlockHasher(m);
  DefineScorer(m);
}

}  // namespace kvatlas::python
