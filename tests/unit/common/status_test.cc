#include "kvatlas/common/status.h"

#include <doctest/doctest.h>

#include <set>

#include "kvatlas/common/result.h"

namespace kvatlas {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  KVATLAS_ASSIGN_OR_RETURN(int h, Half(x));
  KVATLAS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  KVATLAS_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST_SUITE("Status") {
  TEST_CASE("the code table maps to HTTP statuses and stable wire names") {
    CHECK(HttpStatusOf(StatusCode::kOk) == 200);
    CHECK(HttpStatusOf(StatusCode::kInvalidArgument) == 400);
    CHECK(HttpStatusOf(StatusCode::kNotFound) == 404);
    CHECK(HttpStatusOf(StatusCode::kResourceExhausted) == 429);
    CHECK(HttpStatusOf(StatusCode::kPayloadTooLarge) == 413);
    CHECK(HttpStatusOf(StatusCode::kUnavailable) == 503);
    CHECK(WireNameOf(StatusCode::kInvalidArgument) == "invalid_argument");
    CHECK(StatusCodeFromWireName("not_leader") == StatusCode::kNotLeader);
    CHECK(StatusCodeFromNumber(12) == StatusCode::kPayloadTooLarge);
    CHECK(StatusCodeFromNumber(9999) == StatusCode::kInternal);
  }

  TEST_CASE("numbers and wire names are unique") {
    std::set<int> numbers;
    std::set<std::string_view> names;
    int count = 0;
#define KVATLAS_STATUS_CODE(name, number, http, wire) \
  numbers.insert(number);                             \
  names.insert(wire);                                 \
  ++count;
#include "kvatlas/common/status_codes.def"
#undef KVATLAS_STATUS_CODE
    CHECK(static_cast<int>(numbers.size()) == count);
    CHECK(static_cast<int>(names.size()) == count);
  }

  TEST_CASE("ToString and WithContext") {
    Status s = Status::InvalidArgument("block_size must be > 0");
    CHECK(s.ToString() == "invalid_argument: block_size must be > 0");
    CHECK(s.WithContext("events[2]").message() == "events[2]: block_size must be > 0");
    CHECK(Status::Ok().WithContext("x").ok());
  }

  TEST_CASE("Result and the propagation macros") {
    CHECK(Quarter(8).value() == 2);
    Result<int> r = Quarter(6);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kInvalidArgument);
    CHECK(r.error().message() == "odd: 3");
    CHECK(CheckEven(4).ok());
    CHECK_FALSE(CheckEven(5).ok());
  }
}

}  // namespace
}  // namespace kvatlas
