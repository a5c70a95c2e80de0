// test_pki_tool DIR: writes a test CA and a certificate for 127.0.0.1 / localhost issued by
// it (TestPki) into DIR, for tests written in Python: DIR/test-ca.ca.pem, DIR/server.pem,
// DIR/server.key (valid for an hour before and a day after now, server and client auth).
// Exit code 0, or 1 with the reason on stderr.
#include <exception>
#include <iostream>

#include "tests/support/test_pki.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: test_pki_tool DIR\n";
    return 2;
  }
  try {
    kvatlas::testing::TestPki pki(argv[1]);
    const kvatlas::testing::PemFiles ca = pki.MakeCa("test-ca");
    (void)pki.Issue(ca, "server", {.common_name = "kvatlas test server"});
  } catch (const std::exception& e) {
    std::cerr << "test_pki_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
