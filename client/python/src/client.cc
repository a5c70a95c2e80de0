// kvatlas.Client, kvatlas.Writer and kvatlas.WatchStream: kvatlas::Client (client.h) over
// the binary protocol. Each call drops the GIL while it waits for its answer, so Python
// threads (and AsyncClient's executor) overlap their calls on the client's pipelined
// connections.
#include "kvatlas/client/client.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/python/src/bindings.h"
#include "kvatlas/client/load_reporter.h"
#include "kvatlas/client/writer.h"

namespace kvatlas::python {
namespace {

// A Client shared by its Python object and the Writers made from it; Close() drops the
// Python object's reference (calls already running keep theirs until they return).
class PyClient {
 public:
  explicit PyClient(ClientOptions options) {
    Result<std::unique_ptr<Client>> client = [&] {
      py::gil_scoped_release release;
      return Client::Connect(std::move(options));
    }();
    client_ = std::shared_ptr<Client>(ValueOrThrow(std::move(client)));
  }
  ~PyClient() { Close(); }

  std::shared_ptr<Client> Get() const {
    if (!client_) throw StatusError(Status::Unavailable("the client is closed"));
    return client_;
  }
  void Close() {
    std::shared_ptr<Client> client = std::move(client_);
    py::gil_scoped_release release;  // joining the I/O thread must not hold the GIL
    client.reset();
  }

 private:
  std::shared_ptr<Client> client_;
};

// Runs `call` on the client with the GIL released and returns its value, or raises.
template <typename F>
auto Call(const PyClient& self, F&& call) {
  const std::shared_ptr<Client> client = self.Get();
  auto result = [&] {
    py::gil_scoped_release release;
    return call(*client);
  }();
  if constexpr (std::is_same_v<decltype(result), Status>) {
    ThrowIfError(result);
  } else {
    return ValueOrThrow(std::move(result));
  }
}

LookupRequest MakeLookup(ContextKey context, const py::object& tokens, const py::object& hashes) {
  if (tokens.is_none() == hashes.is_none()) {
    throw py::value_error("give exactly one of tokens= and hashes=");
  }
  LookupRequest request;
  request.context = std::move(context);
  if (hashes.is_none()) {
    request.token_ids = ToU32s(tokens, "tokens");
  } else {
    request.by_hash = true;
    request.seq_hashes = ToU64s(hashes, "hashes");
  }
  return request;
}

// A watch of the change feed: Next() with the GIL released, and the iterator protocol over
// its records one at a time (waiting in short slices so that Ctrl-C interrupts it).
class PyWatch {
 public:
  explicit PyWatch(std::unique_ptr<WatchStream> stream) : stream_(std::move(stream)) {}

  std::vector<FeedRecord> Next(double timeout_seconds) {
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(std::max(0.0, timeout_seconds)));
    Result<std::vector<FeedRecord>> records = [&] {
      py::gil_scoped_release release;
      return stream_->Next(timeout);
    }();
    return ValueOrThrow(std::move(records));
  }

  FeedRecord NextRecord() {
    while (pending_.empty()) {
      Result<std::vector<FeedRecord>> records = [&] {
        py::gil_scoped_release release;
        return stream_->Next(std::chrono::milliseconds(200));
      }();
      if (!records.has_value()) {
        if (records.error().code() == StatusCode::kCancelled) throw py::stop_iteration();
        throw StatusError(records.error());
      }
      for (FeedRecord& r : *records) pending_.push_back(std::move(r));
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    FeedRecord record = std::move(pending_.front());
    pending_.pop_front();
    return record;
  }

  Revision ResumeFrom() const { return stream_->ResumeFrom(); }
  void Cancel() {
    py::gil_scoped_release release;
    stream_->Cancel();
  }

 private:
  std::unique_ptr<WatchStream> stream_;
  std::deque<FeedRecord> pending_;
};

// A Writer owning a reference to its Client, so that the Client outlives it.
class PyWriter {
 public:
  PyWriter(const PyClient& client, std::string writer_id, uint64_t next_sequence,
           WriterOptions options)
      : client_(client.Get()),
        writer_(std::make_unique<Writer>(client_.get(), std::move(writer_id), next_sequence,
                                         options)) {}
  Writer& writer() { return *writer_; }

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<Writer> writer_;
};

void DefineTls(py::module_& m) {
  py::class_<ClientTlsOptions>(m, "TlsOptions",
                               "TLS on the client's connections (docs/security.md §TLS).")
      .def(py::init([](std::string ca_file, std::string cert_file, std::string key_file,
                       std::string server_name) {
             ClientTlsOptions tls;
             tls.enabled = true;
             tls.ca_file = std::move(ca_file);
             tls.cert_file = std::move(cert_file);
             tls.key_file = std::move(key_file);
             tls.server_name = std::move(server_name);
             return tls;
           }),
           py::kw_only(), py::arg("ca_file") = "", py::arg("cert_file") = "",
           py::arg("key_file") = "", py::arg("server_name") = "")
      .def_readwrite("enabled", &ClientTlsOptions::enabled)
      .def_readwrite("ca_file", &ClientTlsOptions::ca_file)
      .def_readwrite("cert_file", &ClientTlsOptions::cert_file)
      .def_readwrite("key_file", &ClientTlsOptions::key_file)
      .def_readwrite("server_name", &ClientTlsOptions::server_name);
}

void DefineWatch(py::module_& m) {
  py::class_<PyWatch>(m, "WatchStream",
                      "A server-push subscription to the change feed. Iterating yields "
                      "FeedRecords and raises Error (watch_cut, unavailable, ...) when the "
                      "stream ends; it stops after cancel().")
      .def("next", &PyWatch::Next, py::arg("timeout") = 1.0,
           "Every complete revision's records received so far (waits up to `timeout` s).")
      .def_property_readonly("resume_from", &PyWatch::ResumeFrom,
                             "The last revision fully returned: watch again from it.")
      .def("cancel", &PyWatch::Cancel)
      .def("__iter__", [](PyWatch& w) -> PyWatch& { return w; })
      .def("__next__", &PyWatch::NextRecord)
      .def("__enter__", [](PyWatch& w) -> PyWatch& { return w; })
      .def("__exit__", [](PyWatch& w, const py::args&) { w.Cancel(); });
}

// A router's LoadReporter over a client (docs/routing.md §Shared load). Its reports go
// through the client it was made with, which it keeps alive.
class PyLoadReporter {
 public:
  PyLoadReporter(const PyClient& client, std::string router_id, double interval_s,
                 uint32_t ttl_ms) {
    LoadReporterOptions options;
    options.router_id = std::move(router_id);
    options.interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000));
    options.ttl_ms = ttl_ms;
    std::shared_ptr<Client> c = client.Get();
    reporter_ = ValueOrThrow(LoadReporter::Create(
        [c](const LoadReport& report) { return c->ReportLoad(report).status(); },
        std::move(options)));
  }
  ~PyLoadReporter() { Close(); }
  LoadReporter& Get() const {
    if (!reporter_) throw StatusError(Status::Unavailable("the load reporter is closed"));
    return *reporter_;
  }
  // Stops the background thread and sends the empty report (the router leaves at once).
  void Close() {
    std::unique_ptr<LoadReporter> reporter = std::move(reporter_);
    py::gil_scoped_release release;
    reporter.reset();
  }

 private:
  std::unique_ptr<LoadReporter> reporter_;
};

void DefineLoadReporter(py::module_& m) {
  py::class_<PyLoadReporter>(m, "LoadReporter",
                             "A router's in-flight table, reported to the cluster as absolute "
                             "summaries (docs/routing.md §Shared load).")
      .def(py::init<const PyClient&, std::string, double, uint32_t>(), py::arg("client"),
           py::arg("router_id"), py::kw_only(), py::arg("interval_s") = 0.01,
           py::arg("ttl_ms") = 2'000)
      .def(
          "route_started",
          [](const PyLoadReporter& self, const std::string& instance, uint32_t dp_rank,
             uint64_t prompt_blocks, uint64_t decode_blocks) {
            return self.Get().RouteStarted(instance, dp_rank, prompt_blocks, decode_blocks);
          },
          py::arg("instance_id"), py::arg("dp_rank"), py::arg("prompt_blocks"),
          py::arg("decode_blocks"), "Counts a request sent to an instance; returns its token.")
      .def(
          "prefill_done", [](const PyLoadReporter& self, uint64_t t) { self.Get().PrefillDone(t); },
          py::arg("token"))
      .def(
          "route_finished",
          [](const PyLoadReporter& self, uint64_t t) { self.Get().RouteFinished(t); },
          py::arg("token"))
      .def("flush",
           [](const PyLoadReporter& self) {
             LoadReporter& reporter = self.Get();
             py::gil_scoped_release release;
             ThrowIfError(reporter.Flush());
           })
      .def("summary",
           [](const PyLoadReporter& self) {
             py::list out;
             for (const InstanceLoad& load : self.Get().Summary().loads) {
               out.append(py::dict(py::arg("instance_id") = load.instance_id,
                                   py::arg("dp_rank") = load.dp_rank,
                                   py::arg("prefill_blocks") = load.prefill_blocks,
                                   py::arg("decode_blocks") = load.decode_blocks));
             }
             return out;
           })
      .def_property_readonly("reports_sent",
                             [](const PyLoadReporter& self) { return self.Get().reports_sent(); })
      .def("close", &PyLoadReporter::Close)
      .def(
          "__enter__", [](PyLoadReporter& self) -> PyLoadReporter& { return self; },
          py::return_value_policy::reference)
      .def("__exit__", [](PyLoadReporter& self, py::args) { self.Close(); });
}

void DefineWriter(py::module_& m) {
  py::class_<PyWriter>(m, "Writer",
                       "Exactly-once ingestion (docs/api.md §Idempotent writes): numbers its "
                       "batches and resends one whose outcome is unknown with the same "
                       "sequence, so each batch is applied once.")
      .def(py::init([](const PyClient& client, std::string writer_id, uint64_t next_sequence,
                       double retry_for, double call_deadline, double backoff_min,
                       double backoff_max) {
             WriterOptions options;
             options.retry_for = ToMillis(retry_for, "retry_for");
             options.call_deadline = ToMillis(call_deadline, "call_deadline");
             options.backoff_min = ToMillis(backoff_min, "backoff_min");
             options.backoff_max = ToMillis(backoff_max, "backoff_max");
             return std::make_unique<PyWriter>(client, std::move(writer_id), next_sequence,
                                               options);
           }),
           py::arg("client"), py::arg("writer_id"), py::arg("next_sequence") = 1, py::kw_only(),
           py::arg("retry_for") = 10.0, py::arg("call_deadline") = 2.0,
           py::arg("backoff_min") = 0.01, py::arg("backoff_max") = 0.5)
      .def(
          "write",
          [](PyWriter& w, std::vector<BlockEvent> events) {
            Result<IngestAnswer> answer = [&] {
              py::gil_scoped_release release;
              return w.writer().Write(std::move(events));
            }();
            return ValueOrThrow(std::move(answer));
          },
          py::arg("events"), "Sends the next batch (after settling a pending one).")
      .def(
          "settle",
          [](PyWriter& w) {
            const Status status = [&] {
              py::gil_scoped_release release;
              return w.writer().Settle();
            }();
            ThrowIfError(status);
          },
          "Resends the pending batch, if any, until acknowledged.")
      .def_property_readonly("writer_id", [](PyWriter& w) { return w.writer().writer_id(); })
      .def_property_readonly("next_sequence",
                             [](PyWriter& w) { return w.writer().next_sequence(); })
      .def_property_readonly("has_pending", [](PyWriter& w) { return w.writer().has_pending(); });
}

void DefineClientClass(py::module_& m) {
  using T = std::optional<double>;
  py::class_<PyClient>(m, "Client",
                       "A connection to kvatlas servers over the binary protocol "
                       "(docs/protocol.md). Thread-safe; every call drops the GIL while it "
                       "waits. Errors raise kvatlas.Error with the server's code.")
      .def(py::init([](std::vector<std::string> endpoints, std::string token, const py::object& tls,
                       double connect_timeout, double deadline, size_t connections,
                       size_t max_in_flight, std::optional<uint32_t> max_request_bytes,
                       bool route_by_directory) {
             ClientOptions options =
                 MakeClientOptions(std::move(endpoints), std::move(token), tls, connect_timeout,
                                   deadline, connections, max_in_flight, max_request_bytes);
             options.route_by_directory = route_by_directory;
             return std::make_unique<PyClient>(std::move(options));
           }),
           py::arg("endpoints"), py::kw_only(), py::arg("token") = "", py::arg("tls") = py::none(),
           py::arg("connect_timeout") = 1.0, py::arg("deadline") = 5.0, py::arg("connections") = 1,
           py::arg("max_in_flight") = 1024, py::arg("max_request_bytes") = py::none(),
           py::arg("route_by_directory") = true)
      .def("close", &PyClient::Close, "Closes the connections; later calls raise unavailable.")
      .def(
          "lookup",
          [](const PyClient& self, ContextKey context, const py::object& tokens,
             const py::object& hashes, std::string instance_id, bool include_locations,
             std::optional<uint64_t> min_revision, bool linearizable, T timeout) {
            LookupRequest request = MakeLookup(std::move(context), tokens, hashes);
            request.instance_id = std::move(instance_id);
            request.include_locations = include_locations;
            request.min_revision = min_revision;
            request.linearizable = linearizable;
            return Call(
                self, [&](Client& c) { return c.Lookup(std::move(request), ToTimeout(timeout)); });
          },
          py::arg("context"), py::kw_only(), py::arg("tokens") = py::none(),
          py::arg("hashes") = py::none(), py::arg("instance_id") = "",
          py::arg("include_locations") = true, py::arg("min_revision") = py::none(),
          py::arg("linearizable") = false, py::arg("timeout") = py::none(),
          "The longest cached prefix per instance and tier, by tokens or block keys.")
      .def(
          "route",
          [](const PyClient& self, ContextKey context, std::vector<RouteCandidate> candidates,
             const py::object& tokens, const py::object& hashes,
             std::optional<RoutingOptions> options, T timeout) {
            RoutingRequest request;
            request.lookup = MakeLookup(std::move(context), tokens, hashes);
            request.candidates = std::move(candidates);
            if (options) request.options = *options;
            return Call(self,
                        [&](Client& c) { return c.Route(std::move(request), ToTimeout(timeout)); });
          },
          py::arg("context"), py::arg("candidates"), py::kw_only(), py::arg("tokens") = py::none(),
          py::arg("hashes") = py::none(), py::arg("options") = py::none(),
          py::arg("timeout") = py::none(),
          "The server's routing decision: candidates ranked by the route cost.")
      .def(
          "ingest",
          [](const PyClient& self, std::vector<BlockEvent> events,
             std::optional<std::string> writer_id, std::optional<uint64_t> sequence, T timeout) {
            if (writer_id.has_value() != sequence.has_value()) {
              throw py::value_error("give both writer_id= and sequence=, or neither");
            }
            return Call(self, [&](Client& c) {
              if (writer_id) {
                return c.Ingest(std::move(events), WriterPosition{*writer_id, *sequence},
                                ToTimeout(timeout));
              }
              return c.Ingest(std::move(events), ToTimeout(timeout));
            });
          },
          py::arg("events"), py::kw_only(), py::arg("writer_id") = py::none(),
          py::arg("sequence") = py::none(), py::arg("timeout") = py::none(),
          "Applies a batch of events atomically; with writer_id and sequence at most once.")
      .def(
          "heartbeat",
          [](const PyClient& self, std::vector<HolderKey> holders, T timeout) {
            return Call(self, [&](Client& c) {
              return c.Heartbeat(std::move(holders), ToTimeout(timeout));
            });
          },
          py::arg("holders"), py::kw_only(), py::arg("timeout") = py::none(),
          "Keeps the holders' leases alive (docs/leases.md).")
      .def(
          "record_prediction",
          [](const PyClient& self, ContextKey context, HolderKey holder, const py::object& hashes,
             T timeout) {
            std::vector<BlockKey> keys = ToU64s(hashes, "hashes");
            return Call(self, [&](Client& c) {
              return c.RecordPrediction(context, holder, std::move(keys), ToTimeout(timeout));
            });
          },
          py::arg("context"), py::arg("holder"), py::arg("hashes"), py::kw_only(),
          py::arg("timeout") = py::none(),
          "Records a local routing decision: the block keys `hashes` were sent to `holder` "
          "(approximate mode). Returns the keys queued.")
      .def(
          "stats_json",
          [](const PyClient& self, T timeout) {
            return Call(self, [&](Client& c) { return c.Stats(ToTimeout(timeout)); }).json;
          },
          py::kw_only(), py::arg("timeout") = py::none(),
          "The server's statistics: the JSON text of GET /v1/stats.")
      .def(
          "fetch_loads",
          [](const PyClient& self, T timeout) {
            const protocol::LoadViewAnswer view =
                Call(self, [&](Client& c) { return c.FetchLoads(ToTimeout(timeout)); });
            py::list routers;
            for (const protocol::LoadViewRouter& router : view.routers) {
              py::list loads;
              for (const InstanceLoad& load : router.loads) {
                loads.append(py::dict(py::arg("instance_id") = load.instance_id,
                                      py::arg("dp_rank") = load.dp_rank,
                                      py::arg("prefill_blocks") = load.prefill_blocks,
                                      py::arg("decode_blocks") = load.decode_blocks));
              }
              routers.append(py::dict(py::arg("router_id") = router.router_id,
                                      py::arg("expires_in_ms") = router.expires_in_ms,
                                      py::arg("loads") = std::move(loads)));
            }
            return py::dict(py::arg("revision") = view.revision,
                            py::arg("routers") = std::move(routers));
          },
          py::kw_only(), py::arg("timeout") = py::none(),
          "The live load reports (GET /v1/load's routers, binary kLoadView).")
      .def(
          "fill_loads",
          [](const PyClient& self, std::vector<RouteCandidate> candidates, uint32_t block_size,
             T timeout) {
            const protocol::LoadViewAnswer view =
                Call(self, [&](Client& c) { return c.FetchLoads(ToTimeout(timeout)); });
            FleetLoadTable table;
            const auto now = FleetLoadTable::Clock::now();
            view.FillTable(&table, now);
            (void)table.FillCandidates(candidates, block_size, now);
            return candidates;
          },
          py::arg("candidates"), py::arg("block_size"), py::kw_only(),
          py::arg("timeout") = py::none(),
          "The candidates, those that give no load filled with the fleet's summed load (as a "
          "server's route does): for a Scorer in this process.")
      .def(
          "snapshot",
          [](const PyClient& self, ContextKey context, T timeout) {
            return Call(self, [&](Client& c) {
              return c.Snapshot(std::move(context), ToTimeout(timeout));
            });
          },
          py::arg("context"), py::kw_only(), py::arg("timeout") = py::none(),
          "Every copy of one context at one revision; watch from its revision to miss nothing.")
      .def(
          "locate",
          [](const PyClient& self, uint64_t key, std::optional<ContextKey> context, T timeout) {
            return Call(self, [&](Client& c) {
              return c.Locate(LocateRequest{key, std::move(context)}, ToTimeout(timeout));
            });
          },
          py::arg("key"), py::arg("context") = py::none(), py::kw_only(),
          py::arg("timeout") = py::none(), "Every copy of one block key.")
      .def(
          "ping",
          [](const PyClient& self, T timeout) {
            Call(self, [&](Client& c) { return c.Ping(ToTimeout(timeout)); });
          },
          py::kw_only(), py::arg("timeout") = py::none())
      .def(
          "watch_stream",
          [](const PyClient& self, std::optional<Revision> from_revision,
             std::optional<FeedFilter> filter, size_t max_queued_keys, T timeout) {
            WatchOptions options;
            options.from = from_revision;
            if (filter) options.filter = std::move(*filter);
            options.max_queued_keys = max_queued_keys;
            return std::make_unique<PyWatch>(
                Call(self, [&](Client& c) { return c.Watch(options, ToTimeout(timeout)); }));
          },
          py::kw_only(), py::arg("from_revision") = py::none(), py::arg("filter") = py::none(),
          py::arg("max_queued_keys") = 1'000'000, py::arg("timeout") = py::none(),
          "Starts a watch of the change feed (records after from_revision, or from now).")
      .def_property_readonly("open_connections",
                             [](const PyClient& self) { return self.Get()->OpenConnections(); });
}

}  // namespace

void DefineClient(py::module_& m) {
  DefineTls(m);
  DefineWatch(m);
  DefineClientClass(m);
  DefineWriter(m);
  DefineLoadReporter(m);
}

}  // namespace kvatlas::python
