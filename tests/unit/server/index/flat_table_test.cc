#include "server/index/flat_table.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <utility>

#include "common/internal/huge_buffer.h"

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

  TEST_CASE("a growth moves the old slots a few per insert, and every pair stays found") {
    const auto key = [](uint32_t i) { return uint64_t{i} * 0x9e3779b97f4a7c15ULL; };
    FlatTable table;
    uint32_t inserted = 0;
    // Up to a table large enough that its migration takes many inserts, full to 7/8.
    while (table.capacity() < 64 * FlatTable::kMigrateStep || table.migrating() ||
           (table.size() + 1) * 8 <= table.capacity() * 7) {
      table.Insert(key(inserted), inserted);
      ++inserted;
    }
    const size_t old_capacity = table.capacity();
    CHECK_FALSE(table.migrating());
    table.Insert(key(inserted), inserted);  // past 7/8: grows
    ++inserted;
    CHECK(table.capacity() == old_capacity * 2);
    CHECK(table.migrating());
    CHECK(table.memory_bytes() ==
          HugeAllocatedBytes(old_capacity * 8) + HugeAllocatedBytes(old_capacity * 2 * 8));
    // An erase and a replace of pairs still in the old table, and of moved ones.
    REQUIRE(table.Erase(key(inserted - 2), inserted - 2));
    REQUIRE(table.Replace(key(inserted - 3), inserted - 3, 1'000'000));
    REQUIRE(table.Erase(key(0), 0));
    size_t inserts = 0;
    while (table.migrating()) {
      for (uint32_t i = 1; i < inserted; ++i) {
        const uint32_t want =
            i == inserted - 2 ? FlatTable::kEmpty : (i == inserted - 3 ? 1'000'000 : i);
        REQUIRE(table.Find(key(i), [&](uint32_t v) { return v == want; }) == want);
      }
      table.Insert(key(1'000'000 + inserted), 2'000'000 + inserted);
      ++inserts;
    }
    // Done within capacity / kMigrateStep inserts, the old slots freed.
    CHECK(inserts <= old_capacity / FlatTable::kMigrateStep);
    CHECK(table.memory_bytes() == HugeAllocatedBytes(old_capacity * 2 * 8));
    CHECK(table.size() == inserted - 2 + inserts);
    CHECK(table.Find(key(inserted - 2), [](uint32_t) { return true; }) == FlatTable::kEmpty);
    CHECK(table.Find(key(inserted - 3), [](uint32_t v) { return v == 1'000'000; }) == 1'000'000);
  }

  TEST_CASE("matches a std::multimap through many growths, checked while they migrate") {
    // Long probe runs (few distinct keys) across growths: erases of moved and unmoved
    // pairs, replaces, and lookups that must pass over the old table's moved slots.
    FlatTable table;
    std::multimap<uint64_t, uint32_t> model;
    std::mt19937_64 rng(13);
    uint32_t next_value = 0;
    size_t checks_while_migrating = 0;
    auto erase_from_model = [&](uint64_t key, uint32_t value) {
      auto [lo, hi] = model.equal_range(key);
      for (auto it = lo; it != hi; ++it) {
        if (it->second == value) {
          model.erase(it);
          return true;
        }
      }
      return false;
    };
    for (int step = 0; step < 60000; ++step) {
      const uint64_t key = rng() % 2048 * 0x100000001ULL;
      const uint64_t roll = rng() % 10;
      if (roll < 6 || model.empty()) {
        table.Insert(key, next_value);
        model.emplace(key, next_value++);
      } else {
        auto it = model.begin();
        std::advance(it, static_cast<long>(rng() % std::min<size_t>(model.size(), 64)));
        const uint64_t k = it->first;
        const uint32_t v = it->second;
        if (roll < 9) {
          REQUIRE(table.Erase(k, v));
          REQUIRE(erase_from_model(k, v));
          CHECK_FALSE(table.Erase(k, v));
        } else {
          REQUIRE(table.Replace(k, v, next_value));
          it->second = next_value++;
        }
      }
      if (table.migrating() && step % 7 == 0) {
        ++checks_while_migrating;
        REQUIRE(table.size() == model.size());
        for (const auto& [k, v] : model) {
          const uint32_t want = v;
          REQUIRE(table.Find(k, [&](uint32_t x) { return x == want; }) == want);
        }
      }
    }
    CHECK(checks_while_migrating > 10);
    REQUIRE(table.size() == model.size());
    for (const auto& [k, v] : model) {
      const uint32_t want = v;
      REQUIRE(table.Find(k, [&](uint32_t x) { return x == want; }) == want);
    }
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

  TEST_CASE("a growth takes a spare of its capacity and keeps a larger one") {
    const auto key = [](uint32_t i) { return uint64_t{i} * 0x9e3779b97f4a7c15ULL; };
    FlatTable table;
    for (uint32_t i = 0; i < 13; ++i) table.Insert(key(i), i);
    // A spare for two doublings ahead waits through the first one.
    table.ProvideSpare(FlatTable::MakeSpare(64));
    for (uint32_t i = 13; i < 15; ++i) table.Insert(key(i), i);  // 15 > 14: grows to 32
    CHECK(table.capacity() == 32);
    CHECK(table.spare_capacity() == 64);
    for (uint32_t i = 15; i < 29; ++i) table.Insert(key(i), i);  // 29 > 28: grows to 64
    CHECK(table.capacity() == 64);
    CHECK(table.spare_capacity() == 0);
    for (uint32_t i = 0; i < 29; ++i) {
      REQUIRE(table.Find(key(i), [&](uint32_t v) { return v == i; }) == i);
    }
  }
}

}  // namespace
}  // namespace kvatlas::server
