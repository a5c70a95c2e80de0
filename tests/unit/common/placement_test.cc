// The placement directory: its changes and their errors, epochs, the choice of a group for a
// new context, key partitioning and the binary encoding (round trip, and every corruption
// refused).
#include "kvatlas/common/placement.h"

#include <doctest/doctest.h>
#include <xxhash.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvatlas/common/feed.h"

namespace kvatlas {
namespace {

const ContextKey kA{"default", "llama", "", 16, ""};
const ContextKey kB{"acme", "llama", "lora-1", 32, "salt"};

PlacementDirectory ThreeGroups() {
  PlacementDirectory dir;
  for (GroupId g = 1; g <= 3; ++g) {
    REQUIRE(dir.AddGroup({g, {"s" + std::to_string(g), "s" + std::to_string(g + 1)}, true}).ok());
  }
  return dir;
}

TEST_CASE("every change advances the epoch by one; a refused change leaves all as it was") {
  PlacementDirectory dir = ThreeGroups();
  CHECK(dir.epoch() == 3);
  REQUIRE(dir.Assign(kA, 2).ok());
  CHECK(dir.epoch() == 4);
  CHECK(dir.Find(kA)->ranges == std::vector<KeyRange>{{0, 2}});
  CHECK(dir.Find(kB) == nullptr);

  const PlacementDirectory before = dir;
  CHECK(dir.Assign(kA, 1).code() == StatusCode::kAlreadyExists);
  CHECK(dir.Assign(kB, 9).code() == StatusCode::kNotFound);
  CHECK(dir.AddGroup({2, {"x"}, true}).code() == StatusCode::kAlreadyExists);
  CHECK(dir.AddGroup({0, {"x"}, true}).code() == StatusCode::kInvalidArgument);
  CHECK(dir.AddGroup({kMaxGroupId + 1, {"x"}, true}).code() == StatusCode::kInvalidArgument);
  std::vector<std::string> sixteen;
  for (int i = 0; i < 16; ++i) sixteen.push_back("m" + std::to_string(i));
  CHECK(dir.AddGroup({4, sixteen, true}).code() == StatusCode::kInvalidArgument);
  CHECK(dir.AddGroup({4, {"x", "x"}, true}).code() == StatusCode::kInvalidArgument);
  CHECK(dir.AddGroup({4, {""}, true}).code() == StatusCode::kInvalidArgument);
  CHECK(dir.SetMembers(9, {"x"}).code() == StatusCode::kNotFound);
  CHECK(dir.SplitAt(kB, 5, 1).code() == StatusCode::kNotFound);
  CHECK(dir.SplitAt(kA, 5, 9).code() == StatusCode::kNotFound);
  CHECK(dir.MoveRange(kA, 5, 1).code() == StatusCode::kNotFound);         // no range starts at 5
  CHECK(dir.MoveRange(kA, 0, 2).code() == StatusCode::kInvalidArgument);  // already there
  CHECK(dir == before);
}

TEST_CASE("a group with no members is one every server hosts") {
  PlacementDirectory dir;
  REQUIRE(dir.AddGroup({2, {}, true}).ok());
  CHECK(dir.epoch() == 1);
  CHECK(dir.FindGroup(2)->members.empty());
  REQUIRE(dir.Assign(kA, 2).ok());
  REQUIRE(dir.AddGroup({3, {"a", "b"}, false}).ok());
  REQUIRE(dir.SetMembers(3, {}).ok());
  CHECK(dir.FindGroup(3)->members.empty());
  CHECK(dir.SetMembers(2, {"a", ""}).code() == StatusCode::kInvalidArgument);
  CHECK(ValidateGroupMembers({}).ok());
  // Encoded with a member count of 0, and decoded back.
  const std::string bytes = EncodePlacementDirectory(dir);
  Result<PlacementDirectory> back = DecodePlacementDirectory(bytes);
  REQUIRE(back.has_value());
  CHECK(*back == dir);
}

TEST_CASE("a group that takes no new contexts keeps its own and gets no new ones") {
  PlacementDirectory dir = ThreeGroups();
  REQUIRE(dir.Assign(kA, 1).ok());
  REQUIRE(dir.SetAccepting(1, false).ok());
  CHECK(dir.Assign(kB, 1).code() == StatusCode::kFailedPrecondition);
  CHECK(dir.Find(kA)->ranges[0].group == 1);
  // The emptiest accepting group, lowest id on ties; a group not reported counts 0.
  CHECK(dir.PickGroupForNewContext({{1, 0}, {2, 50}, {3, 40}}).value() == 3);
  CHECK(dir.PickGroupForNewContext({{2, 50}}).value() == 3);
  CHECK(dir.PickGroupForNewContext({}).value() == 2);
  REQUIRE(dir.SetAccepting(2, false).ok());
  REQUIRE(dir.SetAccepting(3, false).ok());
  CHECK(dir.PickGroupForNewContext({}).status().code() == StatusCode::kResourceExhausted);
}

TEST_CASE("splits cut ranges, moves reassign them, and equal neighbours merge") {
  PlacementDirectory dir = ThreeGroups();
  REQUIRE(dir.Assign(kA, 1).ok());
  REQUIRE(dir.SplitAt(kA, 1000, 2).ok());
  REQUIRE(dir.SplitAt(kA, 5000, 3).ok());
  CHECK(dir.Find(kA)->ranges == std::vector<KeyRange>{{0, 1}, {1000, 2}, {5000, 3}});
  const ContextPlacement& p = *dir.Find(kA);
  CHECK(p.split());
  CHECK(p.GroupOf(0) == 1);
  CHECK(p.GroupOf(999) == 1);
  CHECK(p.GroupOf(1000) == 2);
  CHECK(p.GroupOf(4999) == 2);
  CHECK(p.GroupOf(UINT64_MAX) == 3);
  CHECK(p.Groups() == std::vector<GroupId>{1, 2, 3});
  // A cut inside the last range hands only its upper part over.
  REQUIRE(dir.SplitAt(kA, 9000, 1).ok());
  CHECK(dir.Find(kA)->ranges == std::vector<KeyRange>{{0, 1}, {1000, 2}, {5000, 3}, {9000, 1}});
  // Moving the middle range onto its neighbour's group merges them.
  REQUIRE(dir.MoveRange(kA, 1000, 1).ok());
  CHECK(dir.Find(kA)->ranges == std::vector<KeyRange>{{0, 1}, {5000, 3}, {9000, 1}});
  REQUIRE(dir.MoveRange(kA, 5000, 1).ok());
  CHECK(dir.Find(kA)->ranges == std::vector<KeyRange>{{0, 1}});
  CHECK_FALSE(dir.Find(kA)->split());
  // A cut at a range's own start moves that whole range.
  REQUIRE(dir.SplitAt(kA, 0, 2).ok());
  CHECK(dir.Find(kA)->ranges == std::vector<KeyRange>{{0, 2}});
}

TEST_CASE("a context has at most kMaxRangesPerContext ranges") {
  PlacementDirectory dir = ThreeGroups();
  REQUIRE(dir.Assign(kA, 1).ok());
  for (size_t i = 1; i < kMaxRangesPerContext; ++i) {
    REQUIRE(dir.SplitAt(kA, i * 1000, static_cast<GroupId>(1 + i % 2)).ok());
  }
  CHECK(dir.Find(kA)->ranges.size() == kMaxRangesPerContext);
  const Epoch epoch = dir.epoch();
  CHECK(dir.SplitAt(kA, 1'000'000'000, 3).code() == StatusCode::kInvalidArgument);
  CHECK(dir.epoch() == epoch);
}

TEST_CASE("PartitionKeys gives each group the positions of the keys it owns") {
  ContextPlacement whole{{{0, 4}}};
  const std::vector<BlockKey> keys = {7, 100, 3, 5000};
  CHECK(PartitionKeys(whole, keys) == std::vector<GroupShare>{{4, {0, 1, 2, 3}}});
  ContextPlacement split{{{0, 2}, {50, 1}, {1000, 2}}};
  CHECK(PartitionKeys(split, keys) == std::vector<GroupShare>{{1, {1}}, {2, {0, 2, 3}}});
  CHECK(PartitionKeys(split, {}).empty());
}

TEST_CASE("the encoding round-trips and refuses every truncation and broken invariant") {
  PlacementDirectory dir = ThreeGroups();
  REQUIRE(dir.Assign(kA, 1).ok());
  REQUIRE(dir.Assign(kB, 3).ok());
  REQUIRE(dir.SplitAt(kB, 1ull << 63, 2).ok());
  REQUIRE(dir.SetAccepting(2, false).ok());
  const std::string bytes = EncodePlacementDirectory(dir);
  Result<PlacementDirectory> back = DecodePlacementDirectory(bytes);
  REQUIRE(back.has_value());
  CHECK(*back == dir);
  CHECK(EncodePlacementDirectory(*back) == bytes);
  CHECK(DecodePlacementDirectory(EncodePlacementDirectory(PlacementDirectory())).has_value());

  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK(DecodePlacementDirectory(bytes.substr(0, n)).status().code() == StatusCode::kCorruption);
  }
  CHECK(DecodePlacementDirectory(bytes + "x").status().code() == StatusCode::kCorruption);
  std::string version = bytes;
  version[0] = 2;
  CHECK(DecodePlacementDirectory(version).status().code() == StatusCode::kCorruption);

  // Every single-byte change either decodes to a directory that re-encodes to itself (a
  // valid directory) or is refused: a decoded directory always keeps the invariants.
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int delta : {1, 0x80}) {
      std::string changed = bytes;
      changed[i] = static_cast<char>(changed[i] ^ delta);
      Result<PlacementDirectory> d = DecodePlacementDirectory(changed);
      if (!d.has_value()) continue;
      CAPTURE(i);
      CHECK(EncodePlacementDirectory(*d) == changed);
      for (const auto& [context, placement] : d->contexts()) {
        REQUIRE_FALSE(placement.ranges.empty());
        CHECK(placement.ranges[0].start == 0);
        for (const KeyRange& r : placement.ranges) CHECK(d->FindGroup(r.group) != nullptr);
      }
    }
  }
}

}  // namespace
}  // namespace kvatlas

namespace kvatlas {
namespace {

TEST_CASE("a context's home group is a stable hash of its tenant, model and block size") {
  const ContextKey base{"default", "llama", "", 16, ""};
  CHECK(HomeGroup(base, 0) == 1);
  CHECK(HomeGroup(base, 1) == 1);
  // Fixed by the encoding and XXH3-64 (seed 0): clients in other languages compute it too.
  std::string bytes;
  bytes += '\x07';
  bytes += "default";
  bytes += '\x05';
  bytes += "llama";
  bytes += '\x00';
  bytes += '\x10';
  bytes += '\x00';
  CHECK(HomeGroup(base, 1'000) == 1 + XXH3_64bits(bytes.data(), bytes.size()) % 1'000);
  // A model's adapters and salts share its home; another model, tenant or block size may not.
  for (uint32_t groups : {2u, 3u, 7u, 64u}) {
    const GroupId home = HomeGroup(base, groups);
    CHECK(home >= 1);
    CHECK(home <= groups);
    CHECK(HomeGroup({"default", "llama", "adapter-1", 16, ""}, groups) == home);
    CHECK(HomeGroup({"default", "llama", "", 16, "user-9"}, groups) == home);
  }
  // Spread: 3,000 models over 3 groups, each within 10% of a third.
  size_t count[3] = {};
  for (int m = 0; m < 3'000; ++m) {
    ++count[HomeGroup({"default", "model-" + std::to_string(m), "", 16, ""}, 3) - 1];
  }
  for (size_t c : count) {
    CHECK(c > 900);
    CHECK(c < 1'100);
  }
}

TEST_CASE("ChooseMembers picks each group's replicas by rendezvous hashing") {
  const std::vector<uint64_t> six = {6, 2, 5, 1, 4, 3};
  // 0 replicas, or as many as there are servers: all of them, ascending.
  CHECK(ChooseMembers(7, six, 0) == std::vector<uint64_t>{1, 2, 3, 4, 5, 6});
  CHECK(ChooseMembers(7, six, 9) == std::vector<uint64_t>{1, 2, 3, 4, 5, 6});
  CHECK(ChooseMembers(7, {}, 3).empty());
  // The pinned hash: the 3 of 6 with the highest XXH3 of (u32 group, u64 id) little-endian.
  const auto score = [](GroupId group, uint64_t id) {
    std::string bytes;
    for (int i = 0; i < 4; ++i) bytes += static_cast<char>((group >> (8 * i)) & 0xff);
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>((id >> (8 * i)) & 0xff);
    return XXH3_64bits(bytes.data(), bytes.size());
  };
  for (GroupId group = 1; group <= 40; ++group) {
    const std::vector<uint64_t> chosen = ChooseMembers(group, six, 3);
    REQUIRE(chosen.size() == 3);
    CHECK(std::is_sorted(chosen.begin(), chosen.end()));
    for (const uint64_t out : six) {
      if (std::find(chosen.begin(), chosen.end(), out) != chosen.end()) continue;
      for (const uint64_t in : chosen) CHECK(score(group, in) > score(group, out));
    }
    // The order the servers are listed in changes nothing.
    const std::vector<uint64_t> reversed(six.rbegin(), six.rend());
    CHECK(ChooseMembers(group, reversed, 3) == chosen);
  }
  // Adding a seventh server moves replicas only onto it, about 3/7 of them; removing one
  // moves only the replicas it held.
  const std::vector<uint64_t> seven = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> five = {1, 2, 3, 5, 6};
  size_t onto_new = 0;
  constexpr GroupId kGroups = 700;
  for (GroupId group = 1; group <= kGroups; ++group) {
    const std::vector<uint64_t> before = ChooseMembers(group, six, 3);
    const std::vector<uint64_t> after = ChooseMembers(group, seven, 3);
    size_t kept = 0;
    for (const uint64_t id : after) {
      if (std::find(before.begin(), before.end(), id) != before.end()) {
        ++kept;
      } else {
        CHECK(id == 7);
        ++onto_new;
      }
    }
    CHECK(kept >= 2);
    const std::vector<uint64_t> without_4 = ChooseMembers(group, five, 3);
    for (const uint64_t id : before) {
      if (id != 4) CHECK(std::find(without_4.begin(), without_4.end(), id) != without_4.end());
    }
  }
  CHECK(onto_new > kGroups * 3 / 7 * 8 / 10);
  CHECK(onto_new < kGroups * 3 / 7 * 12 / 10);
  // Spread: over 600 groups each of 6 servers holds about half of them.
  size_t held[6] = {};
  for (GroupId group = 1; group <= 600; ++group) {
    for (const uint64_t id : ChooseMembers(group, six, 3)) ++held[id - 1];
  }
  for (const size_t h : held) {
    CHECK(h > 260);
    CHECK(h < 340);
  }
}

TEST_CASE("a context's group is where the directory places it, else its home") {
  const ContextKey base{"default", "llama", "", 16, ""};
  const ContextKey adapter{"default", "llama", "adapter-1", 16, ""};
  PlacementDirectory directory;
  CHECK(GroupOfContext(directory, adapter, 1) == 1);
  CHECK(GroupOfContext(directory, adapter, 8) == HomeGroup(adapter, 8));
  const GroupId elsewhere = HomeGroup(adapter, 8) % 8 + 1;
  REQUIRE(directory.AddGroup({elsewhere, {}, true}).ok());
  REQUIRE(directory.Assign(adapter, elsewhere).ok());
  CHECK(GroupOfContext(directory, adapter, 8) == elsewhere);
  CHECK(GroupOfContext(directory, base, 8) == HomeGroup(base, 8));
  // A placement on a group past the server's count (a directory from a larger cluster) is
  // not followed; one group means group 1 whatever the directory says.
  CHECK(GroupOfContext(directory, adapter, elsewhere - 1) == HomeGroup(adapter, elsewhere - 1));
  CHECK(GroupOfContext(directory, adapter, 1) == 1);
}

TEST_CASE("a watch follows the group of the context its filter names, else its model's") {
  CHECK_FALSE(FeedFilter{}.GroupContext().has_value());
  FeedFilter model_only;
  model_only.model = "llama";
  CHECK_FALSE(model_only.GroupContext().has_value());  // no block size: spans groups
  model_only.block_size = 16;
  CHECK(model_only.GroupContext() == ContextKey{"default", "llama", "", 16, ""});
  const ContextKey adapter{"acme", "llama", "adapter-1", 16, "user-9"};
  CHECK(FeedFilter::ForContext(adapter).GroupContext() == adapter);
  FeedFilter lora_only = FeedFilter::ForContext(adapter);
  lora_only.salt.reset();  // every salt of the adapter: its model's group
  CHECK(lora_only.GroupContext() == ContextKey{"acme", "llama", "", 16, ""});
}

}  // namespace
}  // namespace kvatlas
