// kvatlas._kvatlas: the Python binding of the C++ client library (docs/python.md). The
// package kvatlas (client/python/kvatlas/) re-exports it and adds the pure-Python parts
// (kvatlas.Error, the reconnecting watch iterator, AsyncClient).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <string_view>

#include "client/python/src/bindings.h"
#include "kvatlas_version.h"

namespace kvatlas::python {
namespace {

// Whether a buffer's struct format describes unsigned integers of `bytes` bytes in native
// order ("Q", "<Q", "=Q", "L" on LP64, "I"...).
bool IsUnsignedFormat(std::string_view format, size_t itemsize, size_t bytes) {
  if (itemsize != bytes || format.empty()) return false;
  if (format.size() == 2 && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
    format.remove_prefix(1);
  }
  if (format.size() != 1) return false;
  const char c = format[0];
  return c == 'Q' || c == 'L' || c == 'I' || c == 'H' || c == 'B';
}

template <typename T>
std::vector<T> ToUnsigned(const py::handle& values, const char* what) {
  std::vector<T> out;
  if (PyObject_CheckBuffer(values.ptr()) && !PyBytes_Check(values.ptr())) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(values).request();
    if (info.ndim != 1 || !IsUnsignedFormat(info.format, size_t(info.itemsize), sizeof(T))) {
      throw py::type_error(std::string(what) + ": a buffer must be 1-dimensional unsigned " +
                           std::to_string(8 * sizeof(T)) + "-bit integers, got format '" +
                           info.format + "'");
    }
    out.resize(size_t(info.shape[0]));
    const auto* base = static_cast<const char*>(info.ptr);
    for (size_t i = 0; i < out.size(); ++i) {
      std::memcpy(&out[i], base + ssize_t(i) * info.strides[0], sizeof(T));
    }
    return out;
  }
  if (PyUnicode_Check(values.ptr()) || PyBytes_Check(values.ptr())) {
    throw py::type_error(std::string(what) + ": expected a sequence of ints, got a string");
  }
  // PySequence_Fast: lists and tuples without a copy, other iterables into a list.
  PyObject* seq = PySequence_Fast(values.ptr(), what);
  if (seq == nullptr) throw py::error_already_set();
  const py::object owner = py::reinterpret_steal<py::object>(seq);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  out.resize(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(items[i]);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      throw py::type_error(std::string(what) + "[" + std::to_string(i) +
                           "]: must be an int from 0 to " +
                           std::to_string(std::numeric_limits<T>::max()));
    }
    if (v > std::numeric_limits<T>::max()) {
      throw py::type_error(std::string(what) + "[" + std::to_string(i) +
                           "]: must be an int from 0 to " +
                           std::to_string(std::numeric_limits<T>::max()));
    }
    out[size_t(i)] = static_cast<T>(v);
  }
  return out;
}

}  // namespace

std::vector<uint64_t> ToU64s(const py::handle& values, const char* what) {
  return ToUnsigned<uint64_t>(values, what);
}
std::vector<uint32_t> ToU32s(const py::handle& values, const char* what) {
  return ToUnsigned<uint32_t>(values, what);
}

ClientOptions MakeClientOptions(std::vector<std::string> endpoints, std::string token,
                                const py::object& tls, double connect_timeout, double deadline,
                                size_t connections, size_t max_in_flight,
                                std::optional<uint32_t> max_request_bytes) {
  ClientOptions options;
  options.endpoints = std::move(endpoints);
  options.token = std::move(token);
  if (!tls.is_none()) options.tls = tls.cast<ClientTlsOptions>();
  options.connect_timeout = ToMillis(connect_timeout, "connect_timeout");
  options.default_deadline = ToMillis(deadline, "deadline");
  options.connections = connections;
  options.max_in_flight = max_in_flight;
  if (max_request_bytes) options.max_request_bytes = *max_request_bytes;
  return options;
}

}  // namespace kvatlas::python

PYBIND11_MODULE(_kvatlas, m) {
  namespace py = pybind11;
  using kvatlas::python::StatusError;
  m.doc() = "The kvatlas C++ client library (binary protocol, LocalIndex, Scorer, hashers).";
  m.attr("__version__") = KVATLAS_VERSION;

  // kvatlas.Error is a plain Python class (kvatlas/_errors.py): imported once, kept alive by
  // the module for the translator.
  static py::handle error_class;
  error_class = py::object(py::module_::import("kvatlas._errors").attr("Error")).release();
  m.attr("Error") = error_class;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const kvatlas::Status& s = e.status();
      py::object error = error_class(std::string(kvatlas::WireNameOf(s.code())),
                                     static_cast<int>(s.code()), s.message());
      PyErr_SetObject(error_class.ptr(), error.ptr());
    }
  });

  kvatlas::python::DefineTypes(m);
  kvatlas::python::DefineHashers(m);
  kvatlas::python::DefineClient(m);
  kvatlas::python::DefineLocalIndex(m);
}
