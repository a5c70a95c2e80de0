// The kvatlas CLI's help: one description per command and `cluster` subcommand, from which
// the help texts (`kvatlas --help`, `kvatlas COMMAND --help`) and the flags each command
// accepts are both derived, so that the two cannot disagree; and the one form of a usage
// error. The convention (docs/cli.md): -h/--help on every command prints its help (exit 0);
// a bad command line prints "kvatlas: <error>" and one line pointing at the help (exit 2).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvatlas::cli {

struct FlagHelp {
  const char* name;   // without the "--"
  const char* value;  // the value's placeholder ("N", "HOST:PORT"); "" for a switch
  const char* text;   // lines joined by "\n"
};

struct CommandHelp {
  const char* path;                   // "lookup", "cluster status"
  const char* synopsis;               // what follows "kvatlas <path>" in the usage line
  const char* summary;                // one line, for the list of commands
  const char* text;                   // what it does: lines joined by "\n"
  std::vector<FlagHelp> flags;        // the command's own flags (the global ones apart)
  std::vector<const char*> examples;  // command lines, shown under "examples:"
};

// Every command and `cluster` subcommand, commands first.
[[nodiscard]] const std::vector<CommandHelp>& Commands();
// The flags every command takes (--server, --timeout-ms, ...: GlobalFlags()).
[[nodiscard]] const std::vector<FlagHelp>& GlobalFlagHelp();
// The command or subcommand named `path` ("watch", "cluster add"); nullptr when unknown.
[[nodiscard]] const CommandHelp* FindCommand(std::string_view path);
// The names of `command`'s own flags (for Args::CheckFlags).
[[nodiscard]] std::vector<std::string> FlagNames(const CommandHelp& command);

// `kvatlas --help`: the commands, the global flags, the environment, the exit codes.
[[nodiscard]] std::string GlobalHelp();
// `kvatlas <path> --help`: usage line, description, flags, examples.
[[nodiscard]] std::string HelpOf(const CommandHelp& command);

// Prints "kvatlas: <problem>" and "Run 'kvatlas <path> --help' for usage." (path "" for
// the global help) to stderr; returns 2, the exit code of a bad command line.
int UsageError(std::string_view path, std::string_view problem);

}  // namespace kvatlas::cli
