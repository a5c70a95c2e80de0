#include "tests/integration/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace kvatlas::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Startup includes RocksDB recovery and, in sanitizer builds, slow instrumented code.
constexpr auto kStartDeadline = std::chrono::seconds(30);
constexpr auto kStopDeadline = std::chrono::seconds(30);

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// posix_spawn (not fork): the test process has threads (httplib clients, doctest).
pid_t Spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw std::runtime_error("posix_spawn " + args[0] + " failed: " + std::to_string(rc));
  return pid;
}

// Reaps `pid` if it exited within `timeout`.
bool Reap(pid_t pid, std::chrono::milliseconds timeout, int* code) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

// KVATLAS_TEST_SERVER overrides the built server: e.g. a wrapper that adds --groups 3, to
// run the suite against servers hosting several raft groups.
std::string ServerBinary() {
  const char* override_binary = std::getenv("KVATLAS_TEST_SERVER");
  return override_binary != nullptr && *override_binary != '\0' ? override_binary
                                                                : KVATLAS_SERVER_BINARY;
}

ServerProcess::ServerProcess(fs::path data_dir, std::vector<std::string> extra_args,
                             Placement placement)
    : data_dir_(std::move(data_dir)) {
  fs::create_directories(data_dir_);
  const fs::path addr_file = data_dir_ / "http.addr";
  const fs::path rpc_addr_file = data_dir_ / "rpc.addr";
  fs::remove(addr_file);  // a crashed run leaves its addresses behind
  fs::remove(rpc_addr_file);
  std::vector<std::string> args = {ServerBinary()};
  if (placement == Placement::kFlags) {
    args.insert(args.end(), {"--data-dir", data_dir_.string(), "--http-listen", "127.0.0.1:0"});
  }
  const bool names_rpc = std::any_of(extra_args.begin(), extra_args.end(), [](const auto& arg) {
    return arg.starts_with("--rpc-listen");
  });
  if (!names_rpc) args.insert(args.end(), {"--rpc-listen", "127.0.0.1:0"});
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = Spawn(args, data_dir_.string() + ".out", data_dir_.string() + ".err");

  const auto deadline = Clock::now() + kStartDeadline;
  while (true) {
    int code = 0;
    if (WaitForExit(std::chrono::milliseconds(0), &code)) {
      throw std::runtime_error("kvatlas-server exited with " + std::to_string(code) +
                               " before serving:\n" + Log());
    }
    // The server writes the file atomically (rename), so a present file is complete.
    const std::string addr = ReadFile(addr_file);
    if (const size_t colon = addr.rfind(':'); !addr.empty() && colon != std::string::npos) {
      host_ = addr.substr(0, colon);
      port_ = std::stoi(addr.substr(colon + 1));
      // Written before http.addr, so it is complete by now.
      const std::string rpc_addr = ReadFile(rpc_addr_file);
      if (const size_t c = rpc_addr.rfind(':'); c != std::string::npos) {
        rpc_port_ = std::stoi(rpc_addr.substr(c + 1));
      }
      return;
    }
    if (Clock::now() > deadline) {
      Kill();
      throw std::runtime_error("kvatlas-server did not publish http.addr in time:\n" + Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

ServerProcess::~ServerProcess() {
  if (running()) Kill();
}

httplib::Client ServerProcess::Client() const {
  httplib::Client client(host_, port_);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(30));
  client.set_write_timeout(std::chrono::seconds(30));
  return client;
}

bool ServerProcess::WaitForExit(std::chrono::milliseconds timeout, int* code) {
  if (!running()) return false;
  if (!Reap(pid_, timeout, code)) return false;
  pid_ = -1;
  return true;
}

int ServerProcess::Terminate() {
  if (!running()) return -1;
  kill(pid_, SIGTERM);
  int code = 0;
  if (WaitForExit(kStopDeadline, &code)) return code;
  Kill();
  return -1;
}

void ServerProcess::Kill() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  int code = 0;
  (void)WaitForExit(kStopDeadline, &code);
}

void ServerProcess::Pause() {
  if (running()) kill(pid_, SIGSTOP);
}

void ServerProcess::Resume() {
  if (running()) kill(pid_, SIGCONT);
}

std::string ServerProcess::Log() const { return ReadFile(data_dir_.string() + ".err"); }

RunResult RunServerToExit(const std::vector<std::string>& args, const fs::path& scratch_dir,
                          std::chrono::milliseconds timeout) {
  const fs::path out = scratch_dir / "run.out";
  const fs::path err = scratch_dir / "run.err";
  fs::remove(out);
  fs::remove(err);
  std::vector<std::string> argv = {ServerBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = Spawn(argv, out, err);
  RunResult result;
  if (!Reap(pid, timeout, &result.exit_code)) {
    kill(pid, SIGKILL);
    (void)Reap(pid, kStopDeadline, &result.exit_code);
    result.exit_code = -1;
  }
  result.out = ReadFile(out);
  result.err = ReadFile(err);
  return result;
}

}  // namespace kvatlas::testing
