// kvatlas-server: one kvatlas server process. See `kvatlas-server --help` and docs/api.md.
//
// SIGHUP reloads the TLS certificate (Server::ReloadTls).
//
// Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 1 when the server fails to start
// or a storage write fails while running, 2 for a bad command line or config file.
// SIGHUP reloads the access tokens. `kvatlas-server gen-token --name N --role R` prints a
// new token and the lines that configure it. `backup`, `restore` and `verify-backup` work on
// data and backup directories (backup_command.h). Every command answers -h/--help
// (usage.h).
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "common/internal/log.h"
#include "kvatlas_version.h"
#include "server/runtime/access_config.h"
#include "server/runtime/backup_command.h"
#include "server/runtime/config.h"
#include "server/runtime/fd_limit.h"
#include "server/runtime/server.h"
#include "server/runtime/usage.h"

namespace {

using kvatlas::server::Server;

// SIGHUP: the TLS certificate is read again, and the command line is parsed again (the
// config file and the token file are read again) and the server takes the new token set;
// other settings need a restart.
void Reload(Server& server, const std::vector<std::string>& args) {
  kvatlas::LogInfo("received SIGHUP, reloading the TLS certificate and the tokens");
  server.ReloadTls();
  auto command = kvatlas::server::ParseCommandLine(args);
  if (!command.has_value()) {
    kvatlas::LogError("SIGHUP: the configuration is not valid, tokens not reloaded: " +
                      command.error().ToString());
    return;
  }
  server.ReloadTokens(command->config);
}

// Waits for SIGTERM/SIGINT, polling the applier's health meanwhile and reloading on SIGHUP.
// Returns the exit code.
int WaitForShutdown(Server& server, const sigset_t& signals, const std::vector<std::string>& args) {
  const timespec poll{0, 200'000'000};
  while (true) {
    const int sig = sigtimedwait(&signals, nullptr, &poll);
    if (sig == SIGHUP) {
      Reload(server, args);
      continue;
    }
    if (sig > 0) {
      kvatlas::LogInfo(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                       ", shutting down");
      return 0;
    }
    if (server.failed()) {
      kvatlas::LogError(
          "a storage write or the raft log failed; stopping (restart to recover from disk)");
      return 1;
    }
  }
}

int GenToken(std::span<const std::string> args) {
  if (kvatlas::server::WantsHelp(args)) {
    std::cout << kvatlas::server::GenTokenUsage();
    return 0;
  }
  auto text = kvatlas::server::GenTokenText(args);
  if (!text.has_value()) {
    if (text.error().code() == kvatlas::StatusCode::kInvalidArgument) {
      return kvatlas::server::UsageError("gen-token", text.error().message());
    }
    std::cerr << "kvatlas-server gen-token: " << text.error().ToString() << "\n";
    return 1;
  }
  std::cout << *text;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A client closing its socket mid-answer must not kill the process.
  signal(SIGPIPE, SIG_IGN);
  // Block the shutdown and reload signals before any thread exists, so every thread inherits the
  // mask and only sigtimedwait() in this thread receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "gen-token") return GenToken(std::span(args).subspan(1));
  if (!args.empty() && kvatlas::server::IsBackupCommand(args[0])) {
    return kvatlas::server::RunBackupCommand(args);
  }
  if (kvatlas::server::WantsHelp(args)) {
    std::cout << kvatlas::server::UsageText();
    return 0;
  }
  if (args.size() == 1 && args[0] == "--version") {
    std::cout << KVATLAS_VERSION_LINE("kvatlas-server") << "\n";
    return 0;
  }
  auto command = kvatlas::server::ParseCommandLine(args);
  if (!command.has_value()) return kvatlas::server::UsageError("", command.error().message());
  switch (command->action) {
    case kvatlas::server::CommandAction::kHelp:
      std::cout << kvatlas::server::UsageText();
      return 0;
    case kvatlas::server::CommandAction::kPrintConfig:
      std::cout << kvatlas::server::ConfigToJson(command->config);
      return 0;
    case kvatlas::server::CommandAction::kRun:
      break;
  }
  const kvatlas::server::Config& config = command->config;
  kvatlas::SetLogLevel(*kvatlas::ParseLogLevel(config.log_level));
  kvatlas::server::RaiseOpenFileLimit(config);

  auto server = Server::Start(config);
  if (!server.has_value()) {
    kvatlas::LogError("cannot start: " + server.error().ToString());
    return 1;
  }
  const kvatlas::server::TlsListeners tls = kvatlas::server::TlsListenersOf(config);
  std::cout << "kvatlas listening on " << (tls.http ? "https://" : "http://")
            << (*server)->listen_address() << " (data dir " << config.data_dir << ")" << std::endl;
  std::cout << "kvatlas rpc listening on " << (*server)->rpc_listen_address()
            << (tls.rpc ? " (TLS)" : "") << std::endl;
  const int code = WaitForShutdown(**server, signals, args);
  if (kvatlas::Status s = (*server)->Shutdown(); !s.ok()) {
    kvatlas::LogError("shutdown: " + s.ToString());
    return 1;
  }
  kvatlas::LogInfo("stopped");
  return code;
}
