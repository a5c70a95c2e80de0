// TLS on the REST and binary-protocol listeners, against the real server binary, with
// certificates made at test time (tests/support/test_pki.h): REST, the binary protocol
// (lookup, ingest, watch) and the C ABI over TLS; certificates from another CA, expired or
// naming another host refused by the client; client certificates (tls_client_ca) missing
// or from another CA refused; plaintext clients on a TLS port closed while the server keeps
// serving; a silent client closed by the handshake deadline; SIGHUP certificate rotation;
// the CLI's --ca/--cert/--key and KVATLAS_CA; config errors.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/client/c_api.h"
#include "kvatlas/client/client.h"
#include "tests/integration/auth_helpers.h"
#include "tests/integration/run_program.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_pki.h"

namespace kvatlas::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uint32_t kBlockSize = 4;

// The certificates of every case, made once per process.
struct Pki {
  TempDir dir;
  TestPki pki{dir.path()};
  PemFiles ca = pki.MakeCa("kvatlas-test");
  PemFiles other_ca = pki.MakeCa("other");
  PemFiles server = pki.Issue(ca, "server", {.common_name = "kvatlas server"});
  PemFiles expired = pki.Issue(
      ca, "expired", {.common_name = "expired server", .not_before = -48h, .not_after = -24h});
  PemFiles other_server = pki.Issue(other_ca, "other-server", {.common_name = "other server"});
  PemFiles client = pki.Issue(ca, "client", {.common_name = "scheduler", .alt_names = {}});
  PemFiles other_client =
      pki.Issue(other_ca, "other-client", {.common_name = "intruder", .alt_names = {}});
};

const Pki& Certs() {
  static const Pki pki;
  return pki;
}

std::vector<std::string> TlsArgs(const PemFiles& cert, std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--tls-cert", cert.cert.string(), "--tls-key",
                                   cert.key.string()};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string RpcEndpoint(const ServerProcess& server) {
  return server.host() + ":" + std::to_string(server.rpc_port());
}

std::string HttpEndpoint(const ServerProcess& server) {
  return server.host() + ":" + std::to_string(server.port());
}

ClientOptions TlsOptions(const ServerProcess& server, const fs::path& ca,
                         const PemFiles* cert = nullptr) {
  ClientOptions options;
  options.endpoints = {RpcEndpoint(server)};
  options.default_deadline = 20s;  // sanitizer builds are slow
  options.connect_timeout = 10s;
  options.tls.enabled = true;
  options.tls.ca_file = ca.string();
  if (cert != nullptr) {
    options.tls.cert_file = cert->cert.string();
    options.tls.key_file = cert->key.string();
  }
  return options;
}

std::unique_ptr<Client> MustConnect(ClientOptions options) {
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  REQUIRE_MESSAGE(client.has_value(), client.status().ToString());
  return std::move(client).value();
}

// Connects and pings: the first failure (the connect's, or the ping's when the server
// refuses the client after a TLS 1.3 handshake, which completes on the client's side
// before the server has checked its certificate).
Status ConnectAndPing(ClientOptions options) {
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  if (!client.has_value()) return client.error();
  return (*client)->Ping();
}

std::unique_ptr<httplib::SSLClient> RestClient(const ServerProcess& server, const fs::path& ca,
                                               const PemFiles* cert = nullptr) {
  auto client = cert == nullptr
                    ? std::make_unique<httplib::SSLClient>(server.host(), server.port())
                    : std::make_unique<httplib::SSLClient>(server.host(), server.port(),
                                                           cert->cert.string(), cert->key.string());
  client->set_ca_cert_path(ca.c_str());
  client->enable_server_certificate_verification(true);
  client->set_connection_timeout(10s);
  client->set_read_timeout(20s);
  return client;
}

BlockEvent Stored(const std::string& holder, std::vector<uint32_t> tokens) {
  BlockEvent event;
  event.type = EventType::kStored;
  event.context.model = "llama";
  event.context.block_size = kBlockSize;
  event.holder.id = holder;
  event.tier = Tier::kGpu;
  event.token_ids = std::move(tokens);
  return event;
}

// The next records of `watch`, waiting up to 20 s; the test fails on a stream error.
std::vector<FeedRecord> NextRecords(WatchStream& watch) {
  std::vector<FeedRecord> records;
  for (int i = 0; i < 100 && records.empty(); ++i) {
    Result<std::vector<FeedRecord>> next = watch.Next(200ms);
    REQUIRE_MESSAGE(next.has_value(), next.status().ToString());
    records = std::move(next).value();
  }
  return records;
}

// Waits (bounded) until the server's log contains `text`.
bool WaitForLog(const ServerProcess& server, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (server.Log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Connects a raw TCP socket to 127.0.0.1:`port`, sends `bytes`, and waits up to 20 s for
// the server to close the connection. What it received before closing, or nullopt when it
// did not close in time.
std::optional<std::string> SendAndWaitForClose(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
  if (!bytes.empty()) REQUIRE(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0);
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string received;
  std::optional<std::string> result;
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      received.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || errno == ECONNRESET) result = received;  // closed by the server
    break;                                                 // else: timed out
  }
  close(fd);
  return result;
}

void CopyPem(const PemFiles& from, const PemFiles& to) {
  fs::copy_file(from.cert, to.cert, fs::copy_options::overwrite_existing);
  fs::copy_file(from.key, to.key, fs::copy_options::overwrite_existing);
}

TEST_SUITE("Integration.Tls") {
  TEST_CASE("REST, the binary protocol (ingest, lookup, watch) and the C ABI over TLS") {
    const Pki& pki = Certs();
    TempDir dir;
    ServerProcess server(dir.path() / "data", TlsArgs(pki.server));

    const auto rest = RestClient(server, pki.ca.cert);
    const httplib::Result health = rest->Get("/healthz");
    REQUIRE_MESSAGE(health, httplib::to_string(health.error()));
    CHECK(health->status == 200);

    std::unique_ptr<Client> client = MustConnect(TlsOptions(server, pki.ca.cert));
    WatchOptions watch_options;
    Result<std::unique_ptr<WatchStream>> watch = client->Watch(watch_options);
    REQUIRE_MESSAGE(watch.has_value(), watch.status().ToString());
    const std::vector<uint32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    const Result<IngestAnswer> ack = client->Ingest({Stored("engine-a", prompt)});
    REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());
    LookupRequest lookup;
    lookup.context.model = "llama";
    lookup.context.block_size = kBlockSize;
    lookup.token_ids = prompt;
    const Result<LookupAnswer> found = client->Lookup(lookup);
    REQUIRE_MESSAGE(found.has_value(), found.status().ToString());
    CHECK(found->blocks_found == 2);
    const std::vector<FeedRecord> records = NextRecords(**watch);
    REQUIRE(!records.empty());
    CHECK(records.front().revision == ack->revision);

    // The same lookup over REST answers the same.
    const httplib::Result rest_lookup = rest->Post(
        "/v1/lookup", R"({"model_name": "llama", "block_size": 4, "token_ids": [1,2,3,4,5,6,7,8]})",
        "application/json");
    REQUIRE(rest_lookup);
    CHECK(rest_lookup->status == 200);
    CHECK(rest_lookup->body.find("\"blocks_found\":2") != std::string::npos);

    // The C ABI.
    kvatlas_tls_options tls{};
    const std::string ca = pki.ca.cert.string();
    tls.ca_file = ca.c_str();
    kvatlas_client* c = nullptr;
    kvatlas_error* err = nullptr;
    REQUIRE_MESSAGE(
        kvatlas_open_tls(RpcEndpoint(server).c_str(), 20'000, &tls, &c, &err) == KVATLAS_OK,
        (err ? kvatlas_error_message(err) : ""));
    CHECK(kvatlas_ping(c, nullptr) == KVATLAS_OK);
    kvatlas_close(c);
    tls.ca_file = pki.other_ca.cert.c_str();
    CHECK(kvatlas_open_tls(RpcEndpoint(server).c_str(), 20'000, &tls, &c, &err) ==
          KVATLAS_UNAVAILABLE);
    REQUIRE(err != nullptr);
    CHECK(std::string(kvatlas_error_message(err)).find("certificate") != std::string::npos);
    kvatlas_error_free(err);
  }

  TEST_CASE("tokens over TLS: kAuth after the handshake, Bearer over HTTPS, kvatlas_open_with") {
    const Pki& pki = Certs();
    TempDir dir;
    const fs::path tokens = dir.path() / "tokens";
    WriteTokenFile(tokens, {kReader, kWriter});
    ServerProcess server(dir.path() / "data",
                         TlsArgs(pki.server, {"--token-file", tokens.string()}));

    // The binary protocol: the login frame goes after the TLS handshake.
    ClientOptions writer = TlsOptions(server, pki.ca.cert);
    writer.token = kWriter.token;
    const Result<IngestAnswer> ack =
        MustConnect(writer)->Ingest({Stored("engine-a", {1, 2, 3, 4})});
    CHECK_MESSAGE(ack.has_value(), ack.status().ToString());
    ClientOptions reader = TlsOptions(server, pki.ca.cert);
    reader.token = kReader.token;
    std::unique_ptr<Client> read_client = MustConnect(reader);
    CHECK(read_client->Ping().ok());
    CHECK(read_client->Ingest({Stored("engine-b", {1, 2, 3, 4})}).status().code() ==
          StatusCode::kPermissionDenied);
    ClientOptions wrong = TlsOptions(server, pki.ca.cert);
    wrong.token = "kvt_not_configured";
    const Result<std::unique_ptr<Client>> refused = Client::Connect(wrong);
    CHECK((!refused.has_value() && refused.error().code() == StatusCode::kUnauthenticated));

    // REST over HTTPS with a Bearer token.
    const auto rest = RestClient(server, pki.ca.cert);
    const httplib::Result anonymous = rest->Get("/v1/stats");
    REQUIRE(anonymous);
    CHECK(anonymous->status == 401);
    const httplib::Result with_token =
        rest->Get("/v1/stats", {{"Authorization", "Bearer " + kReader.token}});
    REQUIRE(with_token);
    CHECK(with_token->status == 200);

    // The C ABI: one entry point carries the token and TLS.
    kvatlas_tls_options tls{};
    const std::string ca = pki.ca.cert.string();
    tls.ca_file = ca.c_str();
    const std::string endpoint = RpcEndpoint(server);
    kvatlas_open_options options{};
    options.endpoints = endpoint.c_str();
    options.timeout_ms = 20'000;
    options.token = kReader.token.c_str();
    options.tls = &tls;
    kvatlas_client* c = nullptr;
    kvatlas_error* err = nullptr;
    REQUIRE_MESSAGE(kvatlas_open_with(&options, &c, &err) == KVATLAS_OK,
                    (err ? kvatlas_error_message(err) : ""));
    CHECK(kvatlas_ping(c, nullptr) == KVATLAS_OK);
    kvatlas_close(c);
    options.token = "kvt_not_configured";
    CHECK(kvatlas_open_with(&options, &c, &err) == KVATLAS_UNAUTHENTICATED);
    kvatlas_error_free(err);
  }

  TEST_CASE("plaintext clients on a TLS port are closed; silent ones by the handshake deadline") {
    const Pki& pki = Certs();
    TempDir dir;
    ServerProcess server(
        dir.path() / "data",
        TlsArgs(pki.server, {"--http-request-timeout-ms", "300", "--rpc-frame-timeout-ms", "300"}));

    // Plain HTTP gets a plain 400 that says why, then the connection is closed.
    httplib::Client plain(server.host(), server.port());
    plain.set_read_timeout(20s);
    const httplib::Result answer = plain.Get("/healthz");
    REQUIRE(answer);
    CHECK(answer->status == 400);
    CHECK(answer->body.find("TLS") != std::string::npos);

    // A plaintext binary-protocol client: its first call fails, the connection is closed.
    ClientOptions options = TlsOptions(server, pki.ca.cert);
    options.tls = {};
    Result<std::unique_ptr<Client>> plain_client = Client::Connect(options);
    if (plain_client.has_value()) CHECK((*plain_client)->Ping().code() == StatusCode::kUnavailable);
    const std::optional<std::string> closed_rpc = SendAndWaitForClose(
        server.rpc_port(), std::string("\x20\x00\x00\x00kvat", 8) + std::string(40, 'x'));
    CHECK(closed_rpc.has_value());

    // Clients that send nothing are closed after the handshake deadline.
    CHECK(SendAndWaitForClose(server.port(), "").has_value());
    CHECK(SendAndWaitForClose(server.rpc_port(), "").has_value());
    // ... and so are those that start a handshake and stall.
    CHECK(SendAndWaitForClose(server.rpc_port(), std::string("\x16\x03\x01", 3)).has_value());

    // The server still serves TLS clients.
    CHECK(ConnectAndPing(TlsOptions(server, pki.ca.cert)).ok());
    const httplib::Result health = RestClient(server, pki.ca.cert)->Get("/healthz");
    REQUIRE(health);
    CHECK(health->status == 200);
  }

  TEST_CASE("the client refuses a certificate from another CA, an expired one, another name") {
    const Pki& pki = Certs();
    TempDir dir;
    {
      ServerProcess server(dir.path() / "other", TlsArgs(pki.other_server));
      const Status refused = ConnectAndPing(TlsOptions(server, pki.ca.cert));
      CHECK(refused.code() == StatusCode::kUnavailable);
      CHECK_MESSAGE(
          refused.message().find("unable to get local issuer certificate") != std::string::npos,
          refused.ToString());
      CHECK_FALSE(RestClient(server, pki.ca.cert)->Get("/healthz"));
      // Trusting that CA instead works.
      CHECK(ConnectAndPing(TlsOptions(server, pki.other_ca.cert)).ok());
    }
    {
      ServerProcess server(dir.path() / "expired", TlsArgs(pki.expired));
      const Status refused = ConnectAndPing(TlsOptions(server, pki.ca.cert));
      CHECK(refused.code() == StatusCode::kUnavailable);
      CHECK_MESSAGE(refused.message().find("certificate has expired") != std::string::npos,
                    refused.ToString());
      CHECK_FALSE(RestClient(server, pki.ca.cert)->Get("/healthz"));
      CHECK(WaitForLog(server, "has expired"));  // the server warned at startup
    }
    {
      ServerProcess server(dir.path() / "name", TlsArgs(pki.server));
      ClientOptions options = TlsOptions(server, pki.ca.cert);
      options.tls.server_name = "kvatlas.example.com";
      const Status refused = ConnectAndPing(options);
      CHECK(refused.code() == StatusCode::kUnavailable);
      CHECK_MESSAGE(refused.message().find("hostname mismatch") != std::string::npos,
                    refused.ToString());
      options.tls.server_name = "localhost";  // in the certificate's names
      CHECK(ConnectAndPing(options).ok());
    }
  }

  TEST_CASE("tls_client_ca: a client certificate from that CA is required") {
    const Pki& pki = Certs();
    TempDir dir;
    ServerProcess server(dir.path() / "data",
                         TlsArgs(pki.server, {"--tls-client-ca", pki.ca.cert.string()}));
    CHECK(ConnectAndPing(TlsOptions(server, pki.ca.cert)).code() == StatusCode::kUnavailable);
    CHECK(ConnectAndPing(TlsOptions(server, pki.ca.cert, &pki.other_client)).code() ==
          StatusCode::kUnavailable);
    const Status accepted = ConnectAndPing(TlsOptions(server, pki.ca.cert, &pki.client));
    CHECK_MESSAGE(accepted.ok(), accepted.ToString());

    CHECK_FALSE(RestClient(server, pki.ca.cert)->Get("/healthz"));
    CHECK_FALSE(RestClient(server, pki.ca.cert, &pki.other_client)->Get("/healthz"));
    const httplib::Result health = RestClient(server, pki.ca.cert, &pki.client)->Get("/healthz");
    REQUIRE(health);
    CHECK(health->status == 200);
    // Still serving after the refusals.
    CHECK(ConnectAndPing(TlsOptions(server, pki.ca.cert, &pki.client)).ok());
  }

  TEST_CASE("SIGHUP reloads the certificate: new connections get it, open ones carry on") {
    const Pki& pki = Certs();
    TempDir dir;
    const PemFiles live{dir.path() / "live.pem", dir.path() / "live.key"};
    CopyPem(pki.server, live);
    ServerProcess server(dir.path() / "data", TlsArgs(live));

    std::unique_ptr<Client> old_client = MustConnect(TlsOptions(server, pki.ca.cert));
    REQUIRE(old_client->Ping().ok());
    auto old_rest = RestClient(server, pki.ca.cert);
    old_rest->set_keep_alive(true);
    REQUIRE(old_rest->Get("/healthz"));
    WatchOptions watch_options;
    Result<std::unique_ptr<WatchStream>> watch = old_client->Watch(watch_options);
    REQUIRE_MESSAGE(watch.has_value(), watch.status().ToString());

    CopyPem(pki.other_server, live);
    REQUIRE(kill(server.pid(), SIGHUP) == 0);
    REQUIRE(WaitForLog(server, "TLS certificate reloaded"));

    CHECK(ConnectAndPing(TlsOptions(server, pki.ca.cert)).code() == StatusCode::kUnavailable);
    CHECK(ConnectAndPing(TlsOptions(server, pki.other_ca.cert)).ok());
    CHECK_FALSE(RestClient(server, pki.ca.cert)->Get("/healthz"));
    CHECK(RestClient(server, pki.other_ca.cert)->Get("/healthz"));
    // The connections opened before keep their session: a ping, an ingest and its record
    // on the open watch (a reconnect would have failed: the client trusts the old CA only).
    CHECK(old_client->Ping().ok());
    const Result<IngestAnswer> ack = old_client->Ingest({Stored("engine-a", {1, 2, 3, 4})});
    REQUIRE_MESSAGE(ack.has_value(), ack.status().ToString());
    const std::vector<FeedRecord> records = NextRecords(**watch);
    CHECK(!records.empty());
    const httplib::Result again = old_rest->Get("/healthz");
    REQUIRE(again);
    CHECK(again->status == 200);

    // A broken certificate file is refused and logged; the current certificate stays.
    {
      std::ofstream broken(live.cert, std::ios::trunc);
      broken << "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n";
    }
    REQUIRE(kill(server.pid(), SIGHUP) == 0);
    CHECK(WaitForLog(server, "keeping the current certificate"));
    CHECK(ConnectAndPing(TlsOptions(server, pki.other_ca.cert)).ok());
    CHECK(server.Terminate() == 0);
  }

  TEST_CASE("CLI: --ca, --cert, --key and KVATLAS_CA over TLS with client certificates") {
    const Pki& pki = Certs();
    TempDir dir;
    ServerProcess server(dir.path() / "data",
                         TlsArgs(pki.server, {"--tls-client-ca", pki.ca.cert.string()}));
    const std::string cli = KVATLAS_CLI;
    const std::vector<std::string> tls = {"--ca",   pki.ca.cert.string(),
                                          "--cert", pki.client.cert.string(),
                                          "--key",  pki.client.key.string()};
    const auto with = [&](std::vector<std::string> args) {
      std::vector<std::string> line = {cli};
      line.insert(line.end(), tls.begin(), tls.end());
      line.insert(line.end(), args.begin(), args.end());
      return RunProgram(line);
    };
    Run run = with({"--server", RpcEndpoint(server), "ping"});
    CHECK_MESSAGE(run.exit_code == 0, run.output);
    run = with({"--http", HttpEndpoint(server), "cluster", "status", "--json"});
    CHECK_MESSAGE(run.exit_code == 0, run.output);
    CHECK(run.output.find("\"members\"") != std::string::npos);

    std::unique_ptr<Client> client = MustConnect(TlsOptions(server, pki.ca.cert, &pki.client));
    REQUIRE(client->Ingest({Stored("engine-a", {1, 2, 3, 4})}).has_value());
    run = with({"watch", "--http", HttpEndpoint(server), "--from", "0", "--count", "1", "--json"});
    CHECK_MESSAGE(run.exit_code == 0, run.output);
    CHECK(run.output.find("engine-a") != std::string::npos);

    // The environment, as for KVATLAS_SERVER.
    run = RunProgram(
        {"env", "KVATLAS_CA=" + pki.ca.cert.string(), "KVATLAS_CERT=" + pki.client.cert.string(),
         "KVATLAS_KEY=" + pki.client.key.string(), cli, "--server", RpcEndpoint(server), "stats"});
    CHECK_MESSAGE(run.exit_code == 0, run.output);

    // Without TLS, or without the client certificate: a clear failure.
    run = RunProgram({cli, "--server", RpcEndpoint(server), "ping"});
    CHECK(run.exit_code == 1);
    CHECK_MESSAGE(run.output.find("--ca") != std::string::npos, run.output);
    run = RunProgram(
        {cli, "--ca", pki.ca.cert.string(), "--http", HttpEndpoint(server), "cluster", "status"});
    CHECK(run.exit_code == 1);
    run = RunProgram(
        {cli, "--cert", pki.client.cert.string(), "--server", RpcEndpoint(server), "ping"});
    CHECK(run.exit_code == 2);  // --cert without --key
  }

  TEST_CASE("config: TLS keys are checked at startup") {
    const Pki& pki = Certs();
    TempDir dir;
    const auto run = [&](std::vector<std::string> args) {
      args.insert(args.begin(), {"--data-dir", (dir.path() / "data").string(), "--http-listen",
                                 "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0"});
      return RunServerToExit(args, dir.path());
    };
    RunResult r = run({"--tls-cert", pki.server.cert.string()});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find("tls_key") != std::string::npos, r.err);
    r = run({"--tls-cert", (dir.path() / "missing.pem").string(), "--tls-key",
             pki.server.key.string()});
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find("missing.pem") != std::string::npos, r.err);
    // A key that is not the certificate's.
    r = run({"--tls-cert", pki.server.cert.string(), "--tls-key", pki.client.key.string()});
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find("does not match") != std::string::npos, r.err);
    r = run({"--tls-cert", pki.server.cert.string(), "--tls-key", pki.server.key.string(),
             "--tls-listeners", "http,ftp"});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find("tls_listeners") != std::string::npos, r.err);
    r = RunServerToExit({"--help"}, dir.path());
    CHECK(r.out.find("--tls-client-ca") != std::string::npos);
  }

  TEST_CASE("tls_listeners: TLS on the binary protocol only") {
    const Pki& pki = Certs();
    TempDir dir;
    ServerProcess server(dir.path() / "data", TlsArgs(pki.server, {"--tls-listeners", "rpc"}));
    const httplib::Result health = server.Client().Get("/healthz");  // plain HTTP
    REQUIRE(health);
    CHECK(health->status == 200);
    CHECK(ConnectAndPing(TlsOptions(server, pki.ca.cert)).ok());
  }
}

}  // namespace
}  // namespace kvatlas::testing
