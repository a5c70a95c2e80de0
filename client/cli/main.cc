// kvatlas: the command-line client of a kvatlas server, over the binary protocol (lookup,
// blocks, ingest, stats, ping) and REST (cluster, watch). docs/cli.md describes it.
//
//   kvatlas [global flags] COMMAND [args]      kvatlas [COMMAND] --help
//
// Exit codes: 0 success; 1 the server could not be reached or refused the request;
// 2 bad command line ("kvatlas: <error>" and a pointer to the command's help).
#include <cstdio>
#include <exception>
#include <string>

#include "client/cli/args.h"
#include "client/cli/cluster_command.h"
#include "client/cli/help.h"
#include "client/cli/ingest_command.h"
#include "client/cli/lookup_command.h"
#include "client/cli/rpc_client.h"
#include "client/cli/stats_command.h"
#include "client/cli/watch_command.h"
#include "kvatlas_version.h"

namespace kvatlas::cli {
namespace {

// The command or `cluster` subcommand named by `words` (["cluster", "add", ...]): the
// longest known prefix; nullptr when the first word is no command.
const CommandHelp* Resolve(const std::string& command, const std::vector<std::string>& rest) {
  if (!rest.empty()) {
    if (const CommandHelp* sub = FindCommand(command + " " + rest[0])) return sub;
  }
  return FindCommand(command);
}

std::string CommandList() {
  std::string names;
  for (const CommandHelp& c : Commands()) {
    if (std::string_view(c.path).find(' ') != std::string_view::npos) continue;
    names += (names.empty() ? "" : ", ") + std::string(c.path);
  }
  return names;
}

int PrintHelp(const std::string& command, const std::vector<std::string>& rest) {
  if (command.empty()) {
    std::fputs(GlobalHelp().c_str(), stdout);
    return 0;
  }
  const CommandHelp* help = Resolve(command, rest);
  if (help == nullptr) {
    return UsageError("", "unknown command \"" + command + "\" (" + CommandList() + ")");
  }
  std::fputs(HelpOf(*help).c_str(), stdout);
  return 0;
}

int Main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  if (args.command == "help" && !args.positional.empty()) {  // help COMMAND [SUBCOMMAND]
    return PrintHelp(args.positional[0], {args.positional.begin() + 1, args.positional.end()});
  }
  if (args.Has("help")) return PrintHelp(args.command, args.positional);
  if (args.command == "help") return PrintHelp("", {});
  if (args.Has("version") || args.command == "version") {
    std::printf("%s\n", KVATLAS_VERSION_LINE("kvatlas"));
    return 0;
  }
  if (args.command.empty()) {
    if (Status s = args.CheckFlags({}); !s.ok()) return UsageError("", s.message());
    return UsageError("", "no command given (" + CommandList() + ")");
  }
  const CommandHelp* command = FindCommand(args.command);
  if (command == nullptr) {
    return UsageError("", "unknown command \"" + args.command + "\" (" + CommandList() + ")");
  }
  if (Status s = args.CheckFlags(FlagNames(*command)); !s.ok()) {
    return UsageError(Resolve(args.command, args.positional)->path, s.message());
  }
  Result<uint32_t> timeout_ms = ParseU32(args.Flag("timeout-ms").value_or("30000"), "--timeout-ms");
  if (!timeout_ms || *timeout_ms == 0) {
    return UsageError(args.command, "--timeout-ms must be a positive integer (milliseconds)");
  }
  const std::chrono::milliseconds timeout(*timeout_ms);
  if (args.command == "cluster") return RunCluster(args, timeout);
  if (args.command == "watch") return RunWatch(args, timeout);

  RpcTarget target;
  target.timeout = timeout;
  Result<std::string> server = ServerAddress(args);
  if (!server) return UsageError(args.command, server.error().message());
  target.server = *server;
  Result<TlsFlags> tls = ParseTlsFlags(args);
  if (!tls) return UsageError(args.command, tls.error().message());
  target.tls = *tls;
  target.token = TokenFrom(args);
  if (args.command == "lookup") return RunLookup(args, target);
  if (args.command == "blocks") return RunBlocks(args, target);
  if (args.command == "ingest") return RunIngest(args, target);
  if (args.command == "stats") return RunStats(args, target);
  return RunPing(args, target);
}

}  // namespace
}  // namespace kvatlas::cli

int main(int argc, char** argv) {
  try {
    return kvatlas::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvatlas: internal error: %s\n", e.what());
    return 1;
  }
}
