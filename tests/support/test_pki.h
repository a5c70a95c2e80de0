// TestPki: certificates made at test time with libcrypto (no files committed, nothing that
// expires in the repository, no openssl CLI or its config file). A TestPki is a directory of
// PEM files: certificate authorities and the certificates they issue, each with its own EC
// P-256 key. For tests only; any failure throws std::runtime_error.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace kvatlas::testing {

// The PEM files of one issued certificate (or of a CA: its own self-signed certificate).
struct PemFiles {
  std::filesystem::path cert;
  std::filesystem::path key;
};

struct CertSpec {
  std::string common_name;
  // subjectAltName entries, "IP:127.0.0.1" or "DNS:localhost".
  std::vector<std::string> alt_names = {"IP:127.0.0.1", "DNS:localhost"};
  // Validity relative to now: the default is an hour ago to a day from now. An expired
  // certificate: not_before -2 days, not_after -1 day.
  std::chrono::seconds not_before{-3600};
  std::chrono::seconds not_after{86400};
};

class TestPki {
 public:
  explicit TestPki(std::filesystem::path dir);

  // A self-signed CA named `name`, written as DIR/<name>.ca.pem and DIR/<name>.ca.key.
  PemFiles MakeCa(const std::string& name);
  // A certificate for `spec` issued by `ca` (both serverAuth and clientAuth), written as
  // DIR/<file_stem>.pem and DIR/<file_stem>.key.
  PemFiles Issue(const PemFiles& ca, const std::string& file_stem, const CertSpec& spec);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  long serial_ = 1;
};

}  // namespace kvatlas::testing
