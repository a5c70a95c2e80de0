// Shared helpers of the kvatlas Python extension (kvatlas._kvatlas): the error bridge
// (a kvatlas Status becomes a kvatlas.Error carrying its wire code), argument conversions
// and the Define* functions that register each part of the module.
//
// Threading: every call that can block (a network round trip, a wait) drops the GIL while
// it runs C++ code; conversions to and from Python objects happen with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"

namespace kvatlas::python {

namespace py = pybind11;

// Thrown by the bindings for a non-OK Status; translated to kvatlas.Error (kvatlas/_errors.py)
// with .code = the wire name ("unavailable"), .number and .message.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(Result<T>&& result) {
  if (!result.has_value()) throw StatusError(result.error());
  return std::move(result).value();
}

// Seconds (a Python float; None = the default) as a call timeout; 0 means the default.
inline Client::Timeout ToTimeout(std::optional<double> seconds) {
  if (!seconds) return Client::Timeout{0};
  if (!(*seconds > 0)) throw py::value_error("timeout must be a positive number of seconds");
  return std::chrono::duration_cast<Client::Timeout>(std::chrono::duration<double>(*seconds));
}
inline std::chrono::milliseconds ToMillis(double seconds, const char* what) {
  if (!(seconds > 0)) throw py::value_error(std::string(what) + " must be positive");
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(seconds));
}

// A sequence of non-negative ints, or any object with the buffer protocol holding unsigned
// integers of that width (array.array('Q'), a numpy uint64 array, ...). `what` names the
// argument in a TypeError / OverflowError.
std::vector<uint64_t> ToU64s(const py::handle& values, const char* what);
std::vector<uint32_t> ToU32s(const py::handle& values, const char* what);

// ClientOptions from the keyword arguments Client and LocalIndex share.
ClientOptions MakeClientOptions(std::vector<std::string> endpoints, std::string token,
                                const py::object& tls, double connect_timeout, double deadline,
                                size_t connections, size_t max_in_flight,
                                std::optional<uint32_t> max_request_bytes);

void DefineTypes(py::module_& m);       // value types (types.cc)
void DefineHashers(py::module_& m);     // BlockHasher, VllmBlockHasher, Scorer (hashers.cc)
void DefineClient(py::module_& m);      // Client, Writer, WatchStream (client.cc)
void DefineLocalIndex(py::module_& m);  // LocalIndex (local_index.cc)

}  // namespace kvatlas::python
