#include "server/index/flat_table.h"

#include <doctest/doctest.h>

#include <map>
#include <random>

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
}

}  // namespace
}  // namespace kvatlas::server
