#include "server/runtime/usage.h"

#include <algorithm>
#include <iostream>

namespace kvatlas::server {

bool WantsHelp(std::span<const std::string> args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "-h" || a == "--help"; });
}

int UsageError(std::string_view subcommand, std::string_view error) {
  const std::string command =
      subcommand.empty() ? "kvatlas-server" : "kvatlas-server " + std::string(subcommand);
  std::cerr << "kvatlas-server: " << error << "\nRun '" << command << " --help' for usage.\n";
  return kUsageExitCode;
}

}  // namespace kvatlas::server
