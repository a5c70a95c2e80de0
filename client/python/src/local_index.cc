// kvatlas.LocalIndex: the in-process replica of chosen contexts (client/local_index.h),
// kept by snapshot + watch in the C++ library's background thread; lookups answer in
// microseconds without a round trip. The lookup by block keys is the router's hot path: it
// converts the keys, drops the GIL for the C++ lookup and returns the C++ answer object.
#include "kvatlas/client/local_index.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "client/python/src/bindings.h"

namespace kvatlas::python {
namespace {

// A LocalIndex that close() can stop before the Python object is collected.
class PyLocalIndex {
 public:
  explicit PyLocalIndex(std::unique_ptr<LocalIndex> index) : index_(std::move(index)) {}
  ~PyLocalIndex() { Close(); }
  // Calls running when close() is called keep the index alive until they return.
  std::shared_ptr<const LocalIndex> Get() const {
    if (!index_) throw StatusError(Status::Unavailable("the LocalIndex is closed"));
    return index_;
  }
  // Stopping joins the background thread: without the GIL, since it may be waiting.
  void Close() {
    std::shared_ptr<const LocalIndex> index = std::move(index_);
    py::gil_scoped_release release;
    index.reset();
  }

 private:
  std::shared_ptr<const LocalIndex> index_;
};

// The GIL is dropped only for waits: a lookup of a few hundred keys takes about as long as
// dropping and retaking it, and holding it keeps the call's cost predictable.
void DefineLocalIndexClass(py::module_& m) {
  py::class_<PyLocalIndex>(m, "LocalIndex",
                           "An in-process replica of chosen contexts of the kvatlas map, kept "
                           "current by snapshot + watch (docs/feed.md §LocalIndex). Lookups "
                           "answer what Client.lookup answers, at the replica's revision.")
      .def(py::init([](std::vector<std::string> endpoints, std::vector<ContextKey> contexts,
                       std::string token, const py::object& tls, double connect_timeout,
                       double deadline, double retry_backoff_min, double retry_backoff_max,
                       uint32_t max_lookup_blocks, bool predictions, size_t max_predicted_entries) {
             LocalIndexOptions options;
             options.client = MakeClientOptions(std::move(endpoints), std::move(token), tls,
                                                connect_timeout, deadline, 1, 1024, std::nullopt);
             options.contexts = std::move(contexts);
             options.retry_backoff_min = ToMillis(retry_backoff_min, "retry_backoff_min");
             options.retry_backoff_max = ToMillis(retry_backoff_max, "retry_backoff_max");
             options.max_lookup_blocks = max_lookup_blocks;
             options.predictions = predictions;
             options.max_predicted_entries = max_predicted_entries;
             return std::make_unique<PyLocalIndex>(
                 ValueOrThrow(LocalIndex::Start(std::move(options))));
           }),
           py::arg("endpoints"), py::arg("contexts"), py::kw_only(), py::arg("token") = "",
           py::arg("tls") = py::none(), py::arg("connect_timeout") = 1.0, py::arg("deadline") = 5.0,
           py::arg("retry_backoff_min") = 0.05, py::arg("retry_backoff_max") = 2.0,
           py::arg("max_lookup_blocks") = 8192, py::arg("predictions") = false,
           py::arg("max_predicted_entries") = 1'000'000,
           "Starts following the servers in the background (see wait_synced).")
      .def(
          "wait_synced",
          [](const PyLocalIndex& self, double timeout) {
            const std::shared_ptr<const LocalIndex> index = self.Get();
            const Status status = [&] {
              py::gil_scoped_release release;
              return index->WaitSynced(ToMillis(timeout, "timeout"));
            }();
            ThrowIfError(status);
          },
          py::arg("timeout") = 10.0,
          "Waits until every context is loaded and follows a live watch (deadline_exceeded).")
      .def(
          "wait_for_revision",
          [](const PyLocalIndex& self, Revision revision, double timeout) {
            const std::shared_ptr<const LocalIndex> index = self.Get();
            const Status status = [&] {
              py::gil_scoped_release release;
              return index->WaitForRevision(revision, ToMillis(timeout, "timeout"));
            }();
            ThrowIfError(status);
          },
          py::arg("revision"), py::arg("timeout") = 10.0,
          "Waits until the replica has reached `revision` (e.g. an ingest's answer).")
      .def(
          "lookup",
          [](const PyLocalIndex& self, const ContextKey& context, const py::object& hashes,
             const py::object& tokens, const std::string& instance_id) {
            const std::shared_ptr<const LocalIndex> index = self.Get();
            if (tokens.is_none() == hashes.is_none()) {
              throw py::value_error("give exactly one of hashes and tokens=");
            }
            if (!hashes.is_none()) {
              const std::vector<uint64_t> keys = ToU64s(hashes, "hashes");
              return ValueOrThrow(index->Lookup(context, keys, instance_id));
            }
            LookupRequest request;
            request.context = context;
            request.token_ids = ToU32s(tokens, "tokens");
            request.instance_id = instance_id;
            return ValueOrThrow(index->Lookup(request));
          },
          py::arg("context"), py::arg("hashes") = py::none(), py::kw_only(),
          py::arg("tokens") = py::none(), py::arg("instance_id") = "",
          "The prefix lookup over the replica, by block keys or by tokens (hashed with the "
          "server's seed). not_found for a context not replicated; unavailable before its "
          "first snapshot.")
      .def_property_readonly("revision",
                             [](const PyLocalIndex& self) { return self.Get()->revision(); })
      .def(
          "stats", [](const PyLocalIndex& self) { return self.Get()->Stats(); },
          "Revision, sync state, staleness, sizes and counters of the replica.")
      .def(
          "context_status", [](const PyLocalIndex& self) { return self.Get()->ContextStatus(); },
          "Each replicated context's sync state: state, the snapshot loading or last loaded "
          "(revision, copies), the feed buffered meanwhile, the last error and failures.")
      .def("close", &PyLocalIndex::Close, "Stops following; later calls raise unavailable.")
      .def("__enter__", [](PyLocalIndex& self) -> PyLocalIndex& { return self; })
      .def("__exit__", [](PyLocalIndex& self, const py::args&) { self.Close(); });
}

}  // namespace

void DefineLocalIndex(py::module_& m) { DefineLocalIndexClass(m); }

}  // namespace kvatlas::python
