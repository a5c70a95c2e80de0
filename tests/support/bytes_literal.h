// Bytes("\x01\x00..."): the bytes of a string literal, embedded NULs included, without the
// terminator — for golden-byte codec tests.
#pragma once

#include <cstddef>
#include <string>

namespace kvatlas::testing {

template <size_t N>
std::string Bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

}  // namespace kvatlas::testing
