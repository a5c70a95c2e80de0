// Test harness: runs the real kvatlas-server binary as a child process. A ServerProcess
// starts it on 127.0.0.1:0 with a data directory, waits (with a deadline) for the address
// it writes to DATA_DIR/http.addr, reads the binary protocol's DATA_DIR/rpc.addr (written
// before http.addr), and always reaps the child: the destructor SIGKILLs a server that is
// still running. stdout/stderr are appended to files next to the data dir.
//
// The binary protocol is bound to 127.0.0.1:0 too (--rpc-listen, whatever the placement)
// unless the arguments name --rpc-listen themselves: tests run in parallel and must not
// contend for the default port 7071.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace kvatlas::testing {

// The kvatlas-server binary under test (from the build).
std::string ServerBinary();

class ServerProcess {
 public:
  // Whether the harness passes --data-dir and --http-listen 127.0.0.1:0 itself, or the
  // extra arguments (e.g. a config file) must place the server in data_dir.
  enum class Placement { kFlags, kFromArgs };

  // Starts the server with `extra_args` and waits until it serves. Throws
  // std::runtime_error (with the server's stderr) if it exits or does not publish its
  // address within the deadline.
  explicit ServerProcess(std::filesystem::path data_dir, std::vector<std::string> extra_args = {},
                         Placement placement = Placement::kFlags);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // The binary protocol's port, from DATA_DIR/rpc.addr (on host()).
  int rpc_port() const { return rpc_port_; }
  // A client with short timeouts (a hung server fails the test instead of hanging it).
  httplib::Client Client() const;

  // SIGTERM, then waits for the exit. Returns the exit code (-1 if it had to be killed).
  int Terminate();
  // SIGKILL, then waits: a crash.
  void Kill();
  // SIGSTOP / SIGCONT: a server that hangs with its connections open (no FIN, no RST).
  void Pause();
  void Resume();
  bool running() const { return pid_ > 0; }
  // The child's process id (for /proc/<pid>/status), -1 once reaped.
  pid_t pid() const { return pid_; }

  // What the server wrote to stderr so far (all runs on this data dir).
  std::string Log() const;

 private:
  // Waits up to `timeout` for the child to exit; returns its exit code, or nullopt.
  bool WaitForExit(std::chrono::milliseconds timeout, int* code);

  std::filesystem::path data_dir_;
  pid_t pid_ = -1;
  std::string host_;
  int port_ = 0;
  int rpc_port_ = 0;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the server binary with `args` to completion (for --help, bad configs); kills it after
// `timeout`. Output goes through files in `scratch_dir`.
RunResult RunServerToExit(const std::vector<std::string>& args,
                          const std::filesystem::path& scratch_dir,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace kvatlas::testing
