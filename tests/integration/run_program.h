// RunProgram: runs a command-line program (the kvatlas CLI, the C ABI test program) to
// completion from an integration test and captures its output. For tests only.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace kvatlas::testing {

struct Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr, interleaved
};

// Runs `args` through the shell (each argument single-quoted), with stdin from `input`
// when given.
inline Run RunProgram(const std::vector<std::string>& args, const std::string& input = "") {
  std::string command;
  for (const std::string& a : args) command += "'" + a + "' ";
  command += input.empty() ? "</dev/null" : "<'" + input + "'";
  command += " 2>&1";
  Run run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace kvatlas::testing
