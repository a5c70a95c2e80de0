#include "server/index/flat_table.h"

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <random>
#include <utility>

namespace kvatlas::server {
namespace {

TEST_SUITE("FlatTable") {
  TEST_CASE("matches a std::multimap under random inserts and erases") {
    FlatTable table;
    std::multimap<uint64_t, uint32_t> model;
    std::mt19937_64 rng(7);
    // Few distinct keys force duplicate keys and long probe runs across wrap-around.
    for (int step = 0; step < 200000; ++step) {
      const uint64_t key = rng() % 512 * 0x100000001ULL;
      const auto value = static_cast<uint32_t>(rng() % 4096);
      const bool present = [&] {
        auto [lo, hi] = model.equal_range(key);
        for (auto it = lo; it != hi; ++it) {
          if (it->second == value) return true;
        }
        return false;
      }();
      if (rng() % 3 != 0) {
        if (!present) {
          table.Insert(key, value);
          model.emplace(key, value);
        }
      } else {
        CHECK(table.Erase(key, value) == present);
        if (present) {
          auto [lo, hi] = model.equal_range(key);
          for (auto it = lo; it != hi; ++it) {
            if (it->second == value) {
              model.erase(it);
              break;
            }
          }
        }
      }
    }
    REQUIRE(table.size() == model.size());
    for (const auto& [key, value] : model) {
      const uint32_t v = value;
      CHECK(table.Find(key, [&](uint32_t x) { return x == v; }) == v);
    }
    CHECK(table.Find(12345, [](uint32_t) { return true; }) == FlatTable::kEmpty);
  }

  TEST_CASE("grows and keeps the load factor at most 7/8") {
    FlatTable table;
    for (uint32_t i = 0; i < 100000; ++i) table.Insert(i * 0x9e3779b97f4a7c15ULL, i);
    CHECK(table.size() == 100000);
    CHECK(table.size() * 8 <= table.capacity() * 7);
    // Slots keep 32-bit tags, so the predicate is what tells colliding keys apart.
    for (uint32_t i = 0; i < 100000; ++i) {
      REQUIRE(table.Find(i * 0x9e3779b97f4a7c15ULL, [&](uint32_t v) { return v == i; }) == i);
    }
  }

  TEST_CASE("keys whose tags collide are told apart by the predicate") {
    FlatTable table;
    // Insert the same key twice under two values: the worst case of a tag collision.
    table.Insert(42, 1);
    table.Insert(42, 2);
    CHECK(table.Find(42, [](uint32_t v) { return v == 2; }) == 2);
    CHECK(table.Erase(42, 1));
    CHECK(table.Find(42, [](uint32_t v) { return v == 1; }) == FlatTable::kEmpty);
    CHECK(table.Find(42, [](uint32_t v) { return v == 2; }) == 2);
  }

  TEST_CASE("Replace changes only the exact pair") {
    FlatTable table;
    table.Insert(5, 1);
    table.Insert(5, 2);
    CHECK(table.Replace(5, 2, 3));
    CHECK_FALSE(table.Replace(5, 2, 4));
    CHECK(table.Find(5, [](uint32_t v) { return v == 3; }) == 3);
    CHECK(table.Find(5, [](uint32_t v) { return v == 1; }) == 1);
  }

  TEST_CASE("a prepared and adopted growth equals the growth by inserts") {
    const auto key = [](uint32_t i) { return uint64_t{i} * 0x9e3779b97f4a7c15ULL; };
    FlatTable prepared, grown;
    for (uint32_t i = 0; i < 1000; ++i) {
      prepared.Insert(key(i), i);
      grown.Insert(key(i), i);
    }
    // An erase in the history: backward-shifted runs must survive the rehash too.
    REQUIRE(prepared.Erase(key(7), 7));
    REQUIRE(grown.Erase(key(7), 7));
    const size_t before = prepared.capacity();
    std::optional<FlatTable::Grown> growth = prepared.PrepareGrowth(20000);
    REQUIRE(growth.has_value());
    const size_t target = growth->capacity();
    CHECK(target > before);
    CHECK(prepared.capacity() == before);  // a prepare changes nothing
    REQUIRE(prepared.Adopt(std::move(*growth)));
    const size_t adopted = prepared.capacity();
    CHECK(adopted == target);
    for (uint32_t i = 1000; i < 21000; ++i) {
      prepared.Insert(key(i), i);
      grown.Insert(key(i), i);
      REQUIRE(prepared.capacity() == adopted);  // the 20000 inserts never grow it
    }
    // The smallest capacity the doublings reach, as Insert's own growth did.
    CHECK(prepared.capacity() == grown.capacity());
    CHECK(prepared.size() == grown.size());
    CHECK(prepared.size() == 20999);
    for (uint32_t i = 0; i < 21000; ++i) {
      const uint32_t want = i == 7 ? FlatTable::kEmpty : i;
      REQUIRE(prepared.Find(key(i), [&](uint32_t v) { return v == i; }) == want);
    }
    // One more insert past the prepared bound: Insert's own growth is still there.
    while ((prepared.size() + 1) * 8 <= prepared.capacity() * 7) {
      prepared.Insert(key(static_cast<uint32_t>(prepared.size() + 2)), 1);
    }
    const size_t full = prepared.capacity();
    prepared.Insert(1, 2);
    CHECK(prepared.capacity() == full * 2);
    CHECK(prepared.Find(1, [](uint32_t v) { return v == 2; }) == 2);
  }

  TEST_CASE("a spare is wanted past 3/4 load and taken by the next growth, by insert") {
    FlatTable table;  // 16 slots
    for (uint32_t i = 0; i < 12; ++i) table.Insert(i, i);
    CHECK(table.SpareWanted() == 0);  // 12/16 = 3/4: not past it
    table.Insert(12, 12);
    REQUIRE(table.SpareWanted() == 32);
    FlatTable::Spare spare = FlatTable::MakeSpare(32);
    const void* spare_slots = spare.data();
    table.ProvideSpare(std::move(spare));
    CHECK(table.spare_capacity() == 32);
    CHECK(table.SpareWanted() == 0);               // it has one
    CHECK(table.memory_bytes() == (16 + 32) * 8);  // and counts it
    table.Insert(13, 13);
    table.Insert(14, 14);  // 15 > 14 = 7/8 of 16: grows
    CHECK(table.capacity() == 32);
    CHECK(table.slots_data() == spare_slots);
    CHECK(table.spare_capacity() == 0);
    for (uint32_t i = 0; i < 15; ++i) {
      REQUIRE(table.Find(i, [&](uint32_t v) { return v == i; }) == i);
    }
    // A spare no larger than the table is of no use: dropped.
    table.ProvideSpare(FlatTable::MakeSpare(32));
    CHECK(table.spare_capacity() == 0);
  }

  TEST_CASE("a prepared growth takes a spare of its capacity and keeps a larger one") {
    const auto key = [](uint32_t i) { return uint64_t{i} * 0x9e3779b97f4a7c15ULL; };
    FlatTable table;
    for (uint32_t i = 0; i < 13; ++i) table.Insert(key(i), i);
    FlatTable::Spare spare = FlatTable::MakeSpare(32);
    const void* spare_slots = spare.data();
    table.ProvideSpare(std::move(spare));
    std::optional<FlatTable::Grown> growth = table.PrepareGrowth(5);
    REQUIRE(growth.has_value());
    REQUIRE(table.Adopt(std::move(*growth)));
    CHECK(table.slots_data() == spare_slots);
    // A spare for two doublings ahead waits through the first one.
    table.ProvideSpare(FlatTable::MakeSpare(128));
    for (uint32_t i = 13; i < 29; ++i) table.Insert(key(i), i);  // 29 > 28: grows to 64
    CHECK(table.capacity() == 64);
    CHECK(table.spare_capacity() == 128);
    for (uint32_t i = 29; i < 57; ++i) table.Insert(key(i), i);  // 57 > 56: grows to 128
    CHECK(table.capacity() == 128);
    CHECK(table.spare_capacity() == 0);
    for (uint32_t i = 0; i < 57; ++i) {
      REQUIRE(table.Find(key(i), [&](uint32_t v) { return v == i; }) == i);
    }
  }

  TEST_CASE("PrepareGrowth is nullopt while the extra inserts fit the load factor") {
    FlatTable table;  // 16 slots hold 14 at load 7/8
    CHECK_FALSE(table.PrepareGrowth(0).has_value());
    CHECK_FALSE(table.PrepareGrowth(14).has_value());
    std::optional<FlatTable::Grown> growth = table.PrepareGrowth(15);
    REQUIRE(growth.has_value());
    CHECK(growth->capacity() == 32);
    for (uint32_t i = 0; i < 10; ++i) table.Insert(i, i);
    CHECK_FALSE(table.PrepareGrowth(4).has_value());
    REQUIRE(table.PrepareGrowth(5).has_value());
    CHECK(table.PrepareGrowth(5)->capacity() == 32);
    CHECK(table.PrepareGrowth(100)->capacity() == 128);
  }

  TEST_CASE("Adopt refuses a growth prepared before a change, or by another table") {
    // Every mutation after the prepare makes the grown copy stale: adopting it would lose
    // the change. Adopt checks in every build and leaves the table as it was.
    for (int change = 0; change < 3; ++change) {
      CAPTURE(change);
      FlatTable table;
      for (uint32_t i = 0; i < 12; ++i) table.Insert(i, i);
      std::optional<FlatTable::Grown> growth = table.PrepareGrowth(100);
      REQUIRE(growth.has_value());
      if (change == 0) table.Insert(100, 100);
      if (change == 1) REQUIRE(table.Erase(3, 3));
      if (change == 2) REQUIRE(table.Replace(4, 4, 44));
      const size_t capacity = table.capacity();
      CHECK_FALSE(table.Adopt(std::move(*growth)));
      CHECK(table.capacity() == capacity);
      CHECK(table.Find(100, [](uint32_t v) { return v == 100; }) ==
            (change == 0 ? 100 : FlatTable::kEmpty));
      CHECK(table.Find(3, [](uint32_t v) { return v == 3; }) ==
            (change == 1 ? FlatTable::kEmpty : 3));
      CHECK(table.Find(4, [](uint32_t v) { return v == 44; }) ==
            (change == 2 ? 44 : FlatTable::kEmpty));
    }
    FlatTable a, b;
    std::optional<FlatTable::Grown> growth = a.PrepareGrowth(100);
    REQUIRE(growth.has_value());
    CHECK_FALSE(b.Adopt(std::move(*growth)));
    CHECK(b.capacity() == 16);
  }
}

}  // namespace
}  // namespace kvatlas::server
