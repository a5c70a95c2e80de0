// Result<T>: a T or a non-OK Status. Member names follow std::expected so a move to C++23
// is mechanical. Not thread-safe for concurrent mutation, like any value.
#pragma once

#include <cstdlib>
#include <utility>
#include <variant>

#include "kvatlas/common/status.h"

namespace kvatlas {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {  // NOLINT
    if (std::get<1>(v_).ok()) std::abort();  // an OK Status carries no value: a bug
  }

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The error; OK when the Result holds a value.
  Status status() const { return has_value() ? Status() : std::get<1>(v_); }
  const Status& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvatlas

#define KVATLAS_CONCAT_INNER_(a, b) a##b
#define KVATLAS_CONCAT_(a, b) KVATLAS_CONCAT_INNER_(a, b)

// KVATLAS_ASSIGN_OR_RETURN(auto x, Foo()): declares x from Foo()'s value, or returns its
// Status from the enclosing function.
#define KVATLAS_ASSIGN_OR_RETURN(lhs, expr) \
  KVATLAS_ASSIGN_OR_RETURN_IMPL_(KVATLAS_CONCAT_(kvatlas_result_, __LINE__), lhs, expr)
#define KVATLAS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.has_value()) return tmp.error();            \
  lhs = std::move(tmp).value()
