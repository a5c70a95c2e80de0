// kvatlas::Client: the embeddable C++ client of the kvatlas binary protocol
// (docs/protocol.md). One Client keeps a few TCP connections to a server, pipelines
// concurrent calls over them (answers are matched by request id, in any order), enforces a
// deadline per call and reconnects after a connection is lost.
//
// Thread-safety: every method may be called from any number of threads at once. A call
// writes its request from the caller's thread when its connection is free (else the
// client's I/O thread sends it) and completes on the client's I/O thread (a call refused
// before it is sent completes at once); the futures they return may be waited on from
// anywhere. Errors are values: no method throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvatlas/common/events.h"
#include "kvatlas/common/export.h"
#include "kvatlas/common/feed.h"
#include "kvatlas/common/lookup.h"
#include "kvatlas/common/protocol.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/routing.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// The payload types of the protocol, under the names a client uses.
using protocol::BlockCopy;
using protocol::HeartbeatAnswer;
using protocol::LocateAnswer;
using protocol::LocateRequest;
using protocol::SnapshotCopy;  // {key, copy}; copy.context is empty (the snapshot's)
using protocol::StatsAnswer;

// TLS on the client's connections (docs/security.md §TLS): TLS 1.2 or later, the server's
// certificate verified against `ca_file` and required to name the host connected to.
struct ClientTlsOptions {
  bool enabled = false;
  // PEM file of the CA certificates the server's certificate must chain to; empty: the
  // system's default trust store.
  std::string ca_file;
  // This client's certificate chain and private key (PEM), for servers that require client
  // certificates (tls_client_ca); both or neither.
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry (a DNS name or an IP address), sent as
  // SNI when it is a name; empty: each endpoint's host.
  std::string server_name;
};

struct ClientOptions {
  // Servers to connect to, "host:port" or "[v6]:port", tried in order. Each connection
  // starts at the first endpoint and moves to the next one when a connect attempt fails,
  // so list the preferred server first.
  std::vector<std::string> endpoints;
  // Bound on one TCP connect attempt (resolution included), per endpoint. Short, because a
  // scheduler would rather fail over to its fallback than wait for a dead host.
  std::chrono::milliseconds connect_timeout{1000};
  // Deadline of a call that does not give its own. A call past its deadline fails with
  // kDeadlineExceeded and a late answer is dropped.
  std::chrono::milliseconds default_deadline{5000};
  // TCP connections to keep. One connection pipelines thousands of calls; more only help
  // when a single connection's I/O becomes the bottleneck.
  size_t connections = 1;
  // Calls sent and not yet answered, per connection. Further calls wait in order (under
  // their deadline) for a slot; this bounds the work one client can queue on a server.
  // The default matches the server's default rpc_max_in_flight: the server reads no
  // further ahead, so calls beyond it would only wait in socket buffers.
  size_t max_in_flight = 1024;
  // After every endpoint failed to connect, calls fail with kUnavailable without a new
  // attempt for this long; it doubles on each failed round up to reconnect_backoff_max,
  // so that a client hammering a dead server costs nothing. A connection lost while open
  // is retried at once by the next call.
  std::chrono::milliseconds reconnect_backoff_min{20};
  std::chrono::milliseconds reconnect_backoff_max{1000};
  // Largest request payload sent (at most protocol::kMaxPayloadBytes). Larger requests fail
  // with kPayloadTooLarge without being sent, since the server would close the connection
  // (failing the other calls on it). Match the server's rpc_max_frame_bytes.
  uint32_t max_request_bytes = protocol::kDefaultMaxPayloadBytes;
  // The access token (docs/security.md), sent as each connection's first frame (kAuth); a
  // connection's calls are pipelined behind it. Empty = none (a server with access control
  // off; one with it on refuses the first call with kUnauthenticated and closes the
  // connection). A token the server refuses fails Connect, and every call made on that
  // connection, with kUnauthenticated; a role that does not allow a call fails it with
  // kPermissionDenied. At most protocol::kMaxTokenBytes. With TLS it is sent after the
  // handshake, encrypted.
  std::string token;
  // Off by default. With TLS a failed handshake (an untrusted or expired certificate, a
  // name mismatch) counts as a failed connect attempt, and its reason is in the error
  // (e.g. "TLS handshake with 10.0.0.1:7071 failed: certificate has expired").
  ClientTlsOptions tls;
  // Reads of a context (lookups, routes, a context's locate, snapshot and watch) go to a
  // server that holds the context's raft group (docs/scaling.md §Clients that route by the
  // directory): the client fetches the directory at Connect, every directory_refresh, and
  // when a server answers wrong_group, and keeps a connection to each member it routes to.
  // Without it, a server that holds no replica of a group sends a lookup of it on to a
  // member (a second round trip) and refuses a watch or snapshot of it. Nothing changes
  // on a cluster whose every server holds every group. Linearizable reads and writes go
  // through `endpoints` either way.
  bool route_by_directory = true;
  std::chrono::milliseconds directory_refresh{5000};
};

// A watch of the change feed (Client::Watch; docs/feed.md §Binary watch).
struct WatchOptions {
  // The records after this revision; nullopt = after the revision current when the watch
  // starts.
  std::optional<Revision> from;
  FeedFilter filter;
  // Also receive predicted records (FeedOp::kPredicted, docs/feed.md §Predicted records):
  // the predictions the server applies after the watch starts. Sets filter.predicted. A
  // server that predates them refuses the watch (invalid_argument).
  bool predicted = false;
  // Block keys the stream may hold for Next. Past it (the application does not call Next
  // often enough) the stream ends with kWatchCut and the server's watch is cancelled.
  size_t max_queued_keys = 1'000'000;
};

// Every copy of one context at one revision (Client::Snapshot, GET /v1/snapshot).
struct ContextSnapshot {
  Revision revision = 0;
  ContextKey context;
  std::vector<SnapshotCopy> copies;  // blocks in creation order
};

// A server-push subscription to the change feed (Client::Watch). Records come in revision
// order, each revision whole. The stream ends for good with one terminal error, which Next
// returns once the records received before it have been returned:
//   kWatchCut     it fell behind (the server's queue of this watch, or this stream's own
//                 max_queued_keys, overflowed): watch again after ResumeFrom();
//   kUnavailable  the connection was lost, the server shut down or the client closed (it
//                 is not re-subscribed by itself: the caller decides where and when);
//   kCancelled    after Cancel();
//   kCorruption   the server sent a frame that could not be decoded.
// Thread-safe: Next, ResumeFrom and Cancel may be called from any thread. The stream may
// outlive its Client (it then ends with kUnavailable).
class KVATLAS_EXPORT WatchStream {
 public:
  ~WatchStream();  // Cancel()s
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // Waits up to `timeout` for records and returns every complete revision received since
  // the last call, or the terminal error. Empty on timeout, and as soon as revisions without
  // matching records were passed (ResumeFrom() advanced).
  [[nodiscard]] Result<std::vector<FeedRecord>> Next(std::chrono::milliseconds timeout);
  // The last revision fully returned by Next (it also passes revisions without matching
  // records): a new watch from it misses nothing and repeats nothing.
  [[nodiscard]] Revision ResumeFrom() const;
  // Ends the stream (Next returns kCancelled; records not yet returned are dropped) and
  // cancels the server's watch. Idempotent.
  void Cancel();
  // Pings the server the stream reads from (a member of its context's group when the
  // client routes by the directory: not necessarily an endpoint), waiting up to `timeout`:
  // OK, or why it did not answer (kUnavailable once the stream has ended). A quiet
  // feed says nothing of the server; this does (LocalIndex uses it).
  [[nodiscard]] Status Ping(std::chrono::milliseconds timeout);

  class State;

 private:
  friend class Client;
  explicit WatchStream(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

class KVATLAS_EXPORT Client {
 public:
  // A call's deadline, measured from when the call is made. Zero (the default argument)
  // means ClientOptions::default_deadline.
  using Timeout = std::chrono::microseconds;

  // Validates `options` and opens the connections, waiting for each one's first connect
  // round. Succeeds when at least one connection is up (the others retry on use).
  // Returns kInvalidArgument for bad options (no endpoints, a malformed endpoint, zero
  // connections or max_in_flight, non-positive timeouts, unreadable or malformed TLS
  // files), kUnavailable when no endpoint accepted a connection (the message names the
  // endpoint and the reason, e.g. a certificate the client does not trust),
  // kUnauthenticated when the server refused the token (or needs one).
  [[nodiscard]] static Result<std::unique_ptr<Client>> Connect(ClientOptions options);

  // Fails the calls still pending with kUnavailable, closes the connections and joins the
  // I/O thread. REQUIRES: no call is being made on this client concurrently.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Each call comes as XAsync, whose future is always made ready, at the latest at the
  // call's deadline, and as a blocking X that waits for it. Every call below fails with:
  //   kDeadlineExceeded  past its deadline (the server may still have executed it);
  //   kUnavailable       no connection, or the connection was lost before the answer
  //                      (an ingest may or may not have been applied);
  //   kPayloadTooLarge   the request is larger than max_request_bytes;
  //   kCorruption        the server's answer could not be decoded;
  // or with the Status of the server's error answer (docs/api.md §Errors).

  // Applies a batch of RFC #1527 events atomically (POST /v1/events). Each event is
  // validated here first (kInvalidArgument naming "events[i].field"). Not idempotent for
  // removed events after a lost answer; stored events are idempotent.
  std::future<Result<IngestAnswer>> IngestAsync(std::vector<BlockEvent> events,
                                                Timeout timeout = {});
  [[nodiscard]] Result<IngestAnswer> Ingest(std::vector<BlockEvent> events, Timeout timeout = {});
  // As above, applied at most once per (writer_id, sequence): a resent batch whose first
  // send was applied changes nothing (events.h WriterPosition; kvatlas::Writer in
  // writer.h numbers and resends batches for you).
  std::future<Result<IngestAnswer>> IngestAsync(std::vector<BlockEvent> events,
                                                WriterPosition writer, Timeout timeout = {});
  [[nodiscard]] Result<IngestAnswer> Ingest(std::vector<BlockEvent> events, WriterPosition writer,
                                            Timeout timeout = {});

  // The longest cached prefix per instance and tier (POST /v1/lookup). Read-only.
  std::future<Result<LookupAnswer>> LookupAsync(LookupRequest request, Timeout timeout = {});
  [[nodiscard]] Result<LookupAnswer> Lookup(LookupRequest request, Timeout timeout = {});

  // A routing decision (POST /v1/route, docs/routing.md): the candidates ranked by the
  // common cost over the server's index, with the per-candidate breakdown. Read-only.
  // kInvalidArgument without a model, block_size or candidates, or with invalid options.
  std::future<Result<RoutingAnswer>> RouteAsync(RoutingRequest request, Timeout timeout = {});
  [[nodiscard]] Result<RoutingAnswer> Route(RoutingRequest request, Timeout timeout = {});

  // Every copy of one block key (GET /v1/blocks/{key}). Read-only.
  std::future<Result<LocateAnswer>> LocateAsync(LocateRequest request, Timeout timeout = {});
  [[nodiscard]] Result<LocateAnswer> Locate(LocateRequest request, Timeout timeout = {});

  // The server's statistics as the JSON document of GET /v1/stats. Read-only.
  std::future<Result<StatsAnswer>> StatsAsync(Timeout timeout = {});
  [[nodiscard]] Result<StatsAnswer> Stats(Timeout timeout = {});

  // Keeps `holders` alive under holder leases (POST /v1/heartbeat, docs/leases.md): a holder
  // that sends no events must heartbeat at least once per the answer's ttl_seconds (0:
  // leases are off on the server). Sent to the leader (a follower's not_leader answer is
  // followed, as for ingests). kInvalidArgument for an empty holder id, kPayloadTooLarge
  // past protocol::kMaxHeartbeatHolders holders.
  std::future<Result<HeartbeatAnswer>> HeartbeatAsync(std::vector<HolderKey> holders,
                                                      Timeout timeout = {});
  [[nodiscard]] Result<HeartbeatAnswer> Heartbeat(std::vector<HolderKey> holders,
                                                  Timeout timeout = {});

  // Replaces this router's in-flight load report (POST /v1/load, docs/routing.md §Shared
  // load): committed by the leader (a follower's not_leader answer is followed). Errors of
  // ValidateLoadReport come back before anything is sent. kvatlas::LoadReporter keeps the
  // table and sends these for a router.
  std::future<Result<protocol::LoadReportAnswer>> ReportLoadAsync(LoadReport report,
                                                                  Timeout timeout = {});
  [[nodiscard]] Result<protocol::LoadReportAnswer> ReportLoad(LoadReport report,
                                                              Timeout timeout = {});

  // A decision this router made locally (approximate mode, docs/routing.md): it sent the
  // request of block keys `keys` (from block 0) to `holder`, so the cluster records them as
  // predicted there for the server's predicted_ttl_ms, as its own routes' picks are (binary
  // kPredict, POST /v1/predictions). Any server takes it (a follower forwards it to the
  // leader with its next round, within ~50 ms); a LocalIndex with predictions on sees it on
  // the change feed. Answers the keys queued (the server's max_lookup_blocks at most).
  // kInvalidArgument (checked before sending) for an empty model, block_size 0, an empty
  // holder id or no keys; kPayloadTooLarge past protocol::kMaxPredictKeys;
  // kFailedPrecondition when the server records no predictions; kResourceExhausted when its
  // queue is full. Writer role.
  std::future<Result<uint32_t>> RecordPredictionAsync(const ContextKey& context,
                                                      const HolderKey& holder,
                                                      std::vector<BlockKey> keys,
                                                      Timeout timeout = {});
  [[nodiscard]] Result<uint32_t> RecordPrediction(const ContextKey& context,
                                                  const HolderKey& holder,
                                                  std::vector<BlockKey> keys, Timeout timeout = {});

  // The live load reports as the answering server sees them (GET /v1/load's routers,
  // binary kLoadView). Read-only. A scheduler scoring in its own process (LocalIndex,
  // Scorer) loads them into a FleetLoadTable and fills its candidates as a server's route
  // does: FetchLoadsInto replaces `table`'s reports with the fetched ones, each expiring
  // when it does on the server (measured from this process's clock at the answer).
  std::future<Result<protocol::LoadViewAnswer>> FetchLoadsAsync(Timeout timeout = {});
  [[nodiscard]] Result<protocol::LoadViewAnswer> FetchLoads(Timeout timeout = {});
  [[nodiscard]] Status FetchLoadsInto(FleetLoadTable* table, Timeout timeout = {});

  // Every copy of `context` at one revision (GET /v1/snapshot), received in parts (docs/
  // protocol.md §kSnapshot). Read-only. kInvalidArgument without a model name or
  // block_size; kResourceExhausted when the server streams max_snapshot_streams snapshots
  // already; kPayloadTooLarge past max_snapshot_copies on an in-memory server. The
  // deadline is that of the whole answer. List, then Watch from `revision` to miss no
  // change. The whole list is held in memory: StreamSnapshotAsync does not.
  std::future<Result<ContextSnapshot>> SnapshotAsync(ContextKey context, Timeout timeout = {});
  [[nodiscard]] Result<ContextSnapshot> Snapshot(ContextKey context, Timeout timeout = {});
  // The same snapshot without assembling it: `on_part(revision, copies)` gets each part's
  // copies in order, on the client's I/O thread (the connection reads nothing else while it
  // runs, which also holds the server's sending back: keep it to a few ms per part). A
  // non-OK Status from it ends the call with that error. The future holds the snapshot's
  // revision once the last part was handed over. For contexts of any size: the server
  // streams them from a consistent image (docs/feed.md §Snapshots).
  using SnapshotPartFn = std::function<Status(Revision, std::vector<SnapshotCopy>&&)>;
  std::future<Result<Revision>> StreamSnapshotAsync(ContextKey context, SnapshotPartFn on_part,
                                                    Timeout timeout = {});

  // Watches the change feed (docs/feed.md §Binary watch): returns once the server has
  // started the watch (waiting up to `timeout` for that), so every change applied after
  // Watch returns is delivered. Fails with kCompacted (options.from is older than the
  // server's window: Snapshot, then watch from its revision), kInvalidArgument (a `from`
  // in the future), kResourceExhausted (too many watches on the server or the connection),
  // or the errors of every call. Each watch holds one of its connection's in-flight slots.
  [[nodiscard]] Result<std::unique_ptr<WatchStream>> Watch(const WatchOptions& options,
                                                           Timeout timeout = {});

  // A round trip that touches no state: liveness and latency checks.
  std::future<Status> PingAsync(Timeout timeout = {});
  [[nodiscard]] Status Ping(Timeout timeout = {});

  // Connections currently open, of ClientOptions::connections (health reporting, tests).
  [[nodiscard]] size_t OpenConnections() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvatlas
