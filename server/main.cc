// kvatlas-server: one kvatlas server process. See `kvatlas-server --help` and docs/api.md.
//
// Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT, also one that stopped the start),
// 1 when the server fails to start or a storage write fails while running, 2 for a bad
// command line or config file, 128 + the signal's number after a second SIGTERM/SIGINT
// (signal_watcher.h). SIGHUP reloads the TLS certificate and the access tokens.
// `kvatlas-server gen-token --name N --role R` prints a new token and the lines that
// configure it. `backup`, `restore` and `verify-backup` work on data and backup directories
// (backup_command.h). Every command answers -h/--help (usage.h).
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
#include "server/runtime/memory_trimmer.h"
#include "server/runtime/server.h"
#include "server/runtime/signal_watcher.h"
#include "server/runtime/usage.h"

namespace {

using kvatlas::server::Server;
using kvatlas::server::SignalWatcher;

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

// Waits for a stop signal, polling the applier's health meanwhile and reloading on SIGHUP.
// Returns the exit code.
int WaitForShutdown(Server& server, SignalWatcher& signals, const std::vector<std::string>& args) {
  while (true) {
    switch (signals.Wait(std::chrono::milliseconds(200))) {
      case SignalWatcher::Event::kStop:
        return 0;
      case SignalWatcher::Event::kReload:
        Reload(server, args);
        continue;
      case SignalWatcher::Event::kNone:
        break;
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
  // Blocked before any thread exists, so every thread inherits the mask and only the
  // SignalWatcher's thread receives them.
  const sigset_t signals = kvatlas::server::BlockServerSignals();

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
  kvatlas::server::LimitMallocArenas(config.malloc_arena_max);

  // From here SIGINT/SIGTERM stop the start as well as the running server.
  kvatlas::server::RecoveryProgress progress;
  SignalWatcher watcher(signals, &progress);
  auto server = Server::Start(config, &progress);
  if (!server.has_value()) {
    if (server.error().code() == kvatlas::StatusCode::kCancelled && progress.stop_requested()) {
      kvatlas::LogInfo(server.error().message() +
                       "; the next start recovers from the data directory");
      return 0;
    }
    kvatlas::LogError("cannot start: " + server.error().ToString());
    return 1;
  }
  watcher.MarkStarted();
  const kvatlas::server::TlsListeners tls = kvatlas::server::TlsListenersOf(config);
  std::cout << "kvatlas listening on " << (tls.http ? "https://" : "http://")
            << (*server)->listen_address() << " (data dir " << config.data_dir << ")" << std::endl;
  std::cout << "kvatlas rpc listening on " << (*server)->rpc_listen_address()
            << (tls.rpc ? " (TLS)" : "") << std::endl;
  const int code = WaitForShutdown(**server, watcher, args);
  if (kvatlas::Status s = (*server)->Shutdown(); !s.ok()) {
    kvatlas::LogError("shutdown: " + s.ToString());
    return 1;
  }
  kvatlas::LogInfo("stopped");
  return code;
}
