// How kvatlas-server and its subcommands (gen-token, backup, restore, verify-backup) treat
// their command lines alike: -h/--help anywhere prints the command's help (exit 0), and a
// usage error prints "kvatlas-server: <error>" and one line naming the help to read (exit
// 2), not the whole usage.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kvatlas::server {

// Exit code of a bad command line or config file.
inline constexpr int kUsageExitCode = 2;

// Whether `args` hold -h or --help.
[[nodiscard]] bool WantsHelp(std::span<const std::string> args);

// Prints `error` and "Run 'kvatlas-server[ SUBCOMMAND] --help' for usage." to stderr;
// returns kUsageExitCode. `subcommand` is "" for the server itself.
int UsageError(std::string_view subcommand, std::string_view error);

}  // namespace kvatlas::server
