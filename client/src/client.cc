// kvatlas::Client: option checks, payload encoding (on the caller's thread) and answer
// decoding; the transport is Client::Impl (client_impl.cc).
#include "kvatlas/client/client.h"

#include <utility>

#include "client/src/client_impl.h"
#include "client/src/endpoint.h"

namespace kvatlas {
namespace {

using protocol::MessageType;

// Decodes an answer payload with `decode`, or passes the call's failure on. A payload the
// codec rejects is the server's fault: kCorruption, whatever code the codec chose.
template <typename T, typename Decode>
Result<T> DecodeAnswer(Result<protocol::Frame> frame, Decode decode, const char* what) {
  if (!frame) return frame.error();
  Result<T> answer = decode(std::string_view(frame->payload));
  if (!answer) {
    return Status::Corruption(std::string("malformed ") + what +
                              " answer from the server: " + answer.error().message());
  }
  return answer;
}

// A `done` that fulfils a promise of Result<T> through `decode`, and the promise's future.
template <typename T, typename Decode>
std::pair<Client::Impl::Done, std::future<Result<T>>> Answering(Decode decode, const char* what) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  std::future<Result<T>> future = promise->get_future();
  return {[promise, decode, what](Result<protocol::Frame> frame) {
            promise->set_value(DecodeAnswer<T>(std::move(frame), decode, what));
          },
          std::move(future)};
}

template <typename T, typename Decode>
std::future<Result<T>> CallFor(Client::Impl& impl, MessageType type, std::string_view payload,
                               Client::Timeout timeout, Decode decode, const char* what,
                               bool to_leader = false) {
  auto [done, future] = Answering<T>(decode, what);
  impl.Call(type, payload, timeout, std::move(done), to_leader);
  return std::move(future);
}

// A read of `context`, sent to a server that holds its group when the client routes by the
// directory. A linearizable one goes through the client's own connections, which follow
// not_leader answers to the leader.
template <typename T, typename Decode>
std::future<Result<T>> ReadFor(Client::Impl& impl, const ContextKey& context, MessageType type,
                               std::string_view payload, Client::Timeout timeout, Decode decode,
                               const char* what, bool linearizable = false) {
  if (linearizable) return CallFor<T>(impl, type, payload, timeout, decode, what, true);
  auto [done, future] = Answering<T>(decode, what);
  impl.CallInGroup(context, type, payload, timeout, std::move(done));
  return std::move(future);
}

template <typename T>
std::future<Result<T>> Ready(Status status) {
  std::promise<Result<T>> promise;
  promise.set_value(std::move(status));
  return promise.get_future();
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.endpoints.empty()) {
    return Status::InvalidArgument("ClientOptions.endpoints: at least one endpoint is needed");
  }
  if (options.connections == 0) {
    return Status::InvalidArgument("ClientOptions.connections: must be at least 1");
  }
  if (options.max_in_flight == 0) {
    return Status::InvalidArgument("ClientOptions.max_in_flight: must be at least 1");
  }
  if (options.connect_timeout.count() <= 0 || options.default_deadline.count() <= 0) {
    return Status::InvalidArgument(
        "ClientOptions: connect_timeout and default_deadline must be positive");
  }
  if (options.reconnect_backoff_min.count() < 0 ||
      options.reconnect_backoff_max < options.reconnect_backoff_min) {
    return Status::InvalidArgument(
        "ClientOptions: need 0 <= reconnect_backoff_min <= reconnect_backoff_max");
  }
  if (options.max_request_bytes > protocol::kMaxPayloadBytes) {
    return Status::InvalidArgument("ClientOptions.max_request_bytes: at most " +
                                   std::to_string(protocol::kMaxPayloadBytes) +
                                   " (the protocol's frame limit)");
  }
  if (options.route_by_directory && options.directory_refresh.count() <= 0) {
    return Status::InvalidArgument("ClientOptions.directory_refresh: must be positive");
  }
  if (options.token.size() > protocol::kMaxTokenBytes) {
    return Status::InvalidArgument("ClientOptions.token: at most " +
                                   std::to_string(protocol::kMaxTokenBytes) + " bytes");
  }
  std::vector<client::Endpoint> endpoints;
  for (const std::string& text : options.endpoints) {
    KVATLAS_ASSIGN_OR_RETURN(client::Endpoint endpoint, client::ParseEndpoint(text));
    endpoints.push_back(std::move(endpoint));
  }
  KVATLAS_ASSIGN_OR_RETURN(TlsContextPtr tls, Impl::MakeTlsContext(options.tls));
  const bool route = options.route_by_directory;
  auto impl = std::make_unique<Impl>(std::move(options), std::move(endpoints), std::move(tls));
  impl->FollowLeaders();
  if (route) impl->RouteByDirectory();
  KVATLAS_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

namespace {

std::future<Result<IngestAnswer>> IngestCall(Client::Impl& impl, protocol::IngestRequest request,
                                             Client::Timeout timeout) {
  for (size_t i = 0; i < request.events.size(); ++i) {
    Status valid = ValidateBlockEvent(request.events[i], "events[" + std::to_string(i) + "]");
    if (!valid.ok()) return Ready<IngestAnswer>(std::move(valid));
  }
  return CallFor<IngestAnswer>(impl, MessageType::kIngest, protocol::EncodeIngestRequest(request),
                               timeout, protocol::DecodeIngestAnswerBinary, "ingest");
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

std::future<Result<IngestAnswer>> Client::IngestAsync(std::vector<BlockEvent> events,
                                                      Timeout timeout) {
  return IngestCall(*impl_, protocol::IngestRequest{std::move(events), std::nullopt}, timeout);
}

Result<IngestAnswer> Client::Ingest(std::vector<BlockEvent> events, Timeout timeout) {
  return IngestAsync(std::move(events), timeout).get();
}

std::future<Result<IngestAnswer>> Client::IngestAsync(std::vector<BlockEvent> events,
                                                      WriterPosition writer, Timeout timeout) {
  Status valid = ValidateWriterPosition(writer, "");
  if (!valid.ok()) return Ready<IngestAnswer>(std::move(valid));
  return IngestCall(*impl_, protocol::IngestRequest{std::move(events), std::move(writer)}, timeout);
}

Result<IngestAnswer> Client::Ingest(std::vector<BlockEvent> events, WriterPosition writer,
                                    Timeout timeout) {
  return IngestAsync(std::move(events), std::move(writer), timeout).get();
}

std::future<Result<LookupAnswer>> Client::LookupAsync(LookupRequest request, Timeout timeout) {
  if (request.context.model.empty() || request.context.block_size == 0) {
    return Ready<LookupAnswer>(Status::InvalidArgument(
        "lookup: the context needs a model name and a positive block_size"));
  }
  return ReadFor<LookupAnswer>(*impl_, request.context, MessageType::kLookup,
                               protocol::EncodeLookupRequestBinary(request), timeout,
                               protocol::DecodeLookupAnswerBinary, "lookup", request.linearizable);
}

Result<LookupAnswer> Client::Lookup(LookupRequest request, Timeout timeout) {
  return LookupAsync(std::move(request), timeout).get();
}

std::future<Result<RoutingAnswer>> Client::RouteAsync(RoutingRequest request, Timeout timeout) {
  if (request.lookup.context.model.empty() || request.lookup.context.block_size == 0) {
    return Ready<RoutingAnswer>(
        Status::InvalidArgument("route: the context needs a model name and a positive block_size"));
  }
  if (request.candidates.empty()) {
    return Ready<RoutingAnswer>(Status::InvalidArgument("candidates: at least one is needed"));
  }
  if (Status valid = ValidateRoutingOptions(request.options); !valid.ok()) {
    return Ready<RoutingAnswer>(std::move(valid));
  }
  return ReadFor<RoutingAnswer>(*impl_, request.lookup.context, MessageType::kRoute,
                                protocol::EncodeRouteRequestBinary(request), timeout,
                                protocol::DecodeRouteAnswerBinary, "route",
                                request.lookup.linearizable);
}

Result<RoutingAnswer> Client::Route(RoutingRequest request, Timeout timeout) {
  return RouteAsync(std::move(request), timeout).get();
}

std::future<Result<LocateAnswer>> Client::LocateAsync(LocateRequest request, Timeout timeout) {
  if (!request.context) {
    return CallFor<LocateAnswer>(*impl_, MessageType::kLocate,
                                 protocol::EncodeLocateRequest(request), timeout,
                                 protocol::DecodeLocateAnswer, "locate");
  }
  return ReadFor<LocateAnswer>(*impl_, *request.context, MessageType::kLocate,
                               protocol::EncodeLocateRequest(request), timeout,
                               protocol::DecodeLocateAnswer, "locate");
}

Result<LocateAnswer> Client::Locate(LocateRequest request, Timeout timeout) {
  return LocateAsync(std::move(request), timeout).get();
}

std::future<Result<StatsAnswer>> Client::StatsAsync(Timeout timeout) {
  return CallFor<StatsAnswer>(*impl_, MessageType::kStats, {}, timeout, protocol::DecodeStatsAnswer,
                              "stats");
}

Result<StatsAnswer> Client::Stats(Timeout timeout) { return StatsAsync(timeout).get(); }

std::future<Result<HeartbeatAnswer>> Client::HeartbeatAsync(std::vector<HolderKey> holders,
                                                            Timeout timeout) {
  if (holders.size() > protocol::kMaxHeartbeatHolders) {
    return Ready<HeartbeatAnswer>(Status::PayloadTooLarge(
        "holders: " + std::to_string(holders.size()) + " holders; one heartbeat names at most " +
        std::to_string(protocol::kMaxHeartbeatHolders)));
  }
  for (size_t i = 0; i < holders.size(); ++i) {
    if (holders[i].id.empty()) {
      return Ready<HeartbeatAnswer>(Status::InvalidArgument("holders[" + std::to_string(i) +
                                                            "].backend_id: must not be empty"));
    }
  }
  return CallFor<HeartbeatAnswer>(*impl_, MessageType::kHeartbeat,
                                  protocol::EncodeHeartbeatRequest({std::move(holders)}), timeout,
                                  protocol::DecodeHeartbeatAnswer, "heartbeat");
}

std::future<Result<protocol::LoadReportAnswer>> Client::ReportLoadAsync(LoadReport report,
                                                                        Timeout timeout) {
  if (Status valid = ValidateLoadReport(report); !valid.ok()) {
    return Ready<protocol::LoadReportAnswer>(std::move(valid));
  }
  return CallFor<protocol::LoadReportAnswer>(*impl_, MessageType::kLoadReport,
                                             protocol::EncodeLoadReportRequest(report), timeout,
                                             protocol::DecodeLoadReportAnswer, "load report");
}

Result<protocol::LoadReportAnswer> Client::ReportLoad(LoadReport report, Timeout timeout) {
  return ReportLoadAsync(std::move(report), timeout).get();
}

std::future<Result<uint32_t>> Client::RecordPredictionAsync(const ContextKey& context,
                                                            const HolderKey& holder,
                                                            std::vector<BlockKey> keys,
                                                            Timeout timeout) {
  protocol::PredictRequest request{context, holder, std::move(keys)};
  if (request.context.tenant.empty()) request.context.tenant = "default";
  const std::string payload = protocol::EncodePredictRequest(request);
  // The server's checks, before anything is sent (the decoder's own messages).
  if (Result<protocol::PredictRequest> valid = protocol::DecodePredictRequest(payload);
      !valid.has_value()) {
    return Ready<uint32_t>(valid.error());
  }
  return CallFor<uint32_t>(
      *impl_, MessageType::kPredict, payload, timeout,
      [](std::string_view answer_payload) -> Result<uint32_t> {
        KVATLAS_ASSIGN_OR_RETURN(protocol::PredictAnswer answer,
                                 protocol::DecodePredictAnswer(answer_payload));
        return answer.queued;
      },
      "prediction");
}

Result<uint32_t> Client::RecordPrediction(const ContextKey& context, const HolderKey& holder,
                                          std::vector<BlockKey> keys, Timeout timeout) {
  return RecordPredictionAsync(context, holder, std::move(keys), timeout).get();
}

std::future<Result<protocol::LoadViewAnswer>> Client::FetchLoadsAsync(Timeout timeout) {
  return CallFor<protocol::LoadViewAnswer>(*impl_, MessageType::kLoadView, {}, timeout,
                                           protocol::DecodeLoadViewAnswer, "load view");
}

Result<protocol::LoadViewAnswer> Client::FetchLoads(Timeout timeout) {
  return FetchLoadsAsync(timeout).get();
}

Status Client::FetchLoadsInto(FleetLoadTable* table, Timeout timeout) {
  KVATLAS_ASSIGN_OR_RETURN(protocol::LoadViewAnswer view, FetchLoads(timeout));
  view.FillTable(table, FleetLoadTable::Clock::now());
  return Status::Ok();
}

Result<HeartbeatAnswer> Client::Heartbeat(std::vector<HolderKey> holders, Timeout timeout) {
  return HeartbeatAsync(std::move(holders), timeout).get();
}

std::future<Status> Client::PingAsync(Timeout timeout) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  impl_->Call(MessageType::kPing, {}, timeout,
              [promise](Result<protocol::Frame> frame) { promise->set_value(frame.status()); });
  return future;
}

Status Client::Ping(Timeout timeout) { return PingAsync(timeout).get(); }

size_t Client::OpenConnections() const { return impl_->OpenConnections(); }

}  // namespace kvatlas
