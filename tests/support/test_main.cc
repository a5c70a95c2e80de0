// The main of every doctest binary. SIGPIPE is ignored, as the server ignores it
// (server/main.cc): a socket write to a peer that has closed — libuv's and libraft's
// among them, in the raft tests whose peers hang up mid-handshake — must fail with EPIPE,
// not kill the test process (seen under emulation, where the timing makes it frequent).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  doctest::Context context(argc, argv);
  return context.run();
}
