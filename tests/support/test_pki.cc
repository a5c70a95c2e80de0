#include "tests/support/test_pki.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <stdexcept>

namespace kvatlas::testing {
namespace {

namespace fs = std::filesystem;

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

[[noreturn]] void Fail(const std::string& what) {
  char detail[256] = "";
  ERR_error_string_n(ERR_get_error(), detail, sizeof(detail));
  throw std::runtime_error("test PKI: " + what + ": " + detail);
}

Key NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) Fail("EC key generation");
  return key;
}

template <typename T, typename Read>
std::unique_ptr<T, Free> ReadPem(const fs::path& path, Read read) {
  std::unique_ptr<BIO, Free> bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) Fail("open " + path.string());
  std::unique_ptr<T, Free> out(read(bio.get(), nullptr, nullptr, nullptr));
  if (!out) Fail("read " + path.string());
  return out;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) Fail("extension " + value);
}

void WritePem(const fs::path& path, X509* cert, EVP_PKEY* key) {
  std::unique_ptr<BIO, Free> bio(BIO_new_file(path.c_str(), "w"));
  if (!bio) Fail("create " + path.string());
  const bool ok = cert != nullptr ? PEM_write_bio_X509(bio.get(), cert) == 1
                                  : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0,
                                                             nullptr, nullptr) == 1;
  if (!ok) Fail("write " + path.string());
}

// An unsigned certificate for `key` named `cn`, issued by `issuer` (self-issued when null).
Cert Build(const std::string& cn, long serial, EVP_PKEY* key, X509* issuer,
           std::chrono::seconds not_before, std::chrono::seconds not_after) {
  Cert cert(X509_new());
  if (!cert) Fail("X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before.count());
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after.count());
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
  return cert;
}

void Sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) == 0) Fail("sign");
}

}  // namespace

TestPki::TestPki(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }

PemFiles TestPki::MakeCa(const std::string& name) {
  Key key = NewKey();
  Cert cert = Build(name, serial_++, key.get(), nullptr, std::chrono::hours(-1),
                    std::chrono::hours(24 * 30));
  AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  Sign(cert.get(), key.get());
  const PemFiles files{dir_ / (name + ".ca.pem"), dir_ / (name + ".ca.key")};
  WritePem(files.cert, cert.get(), nullptr);
  WritePem(files.key, nullptr, key.get());
  return files;
}

PemFiles TestPki::Issue(const PemFiles& ca, const std::string& file_stem, const CertSpec& spec) {
  const auto ca_cert = ReadPem<X509>(ca.cert, PEM_read_bio_X509);
  const auto ca_key = ReadPem<EVP_PKEY>(ca.key, PEM_read_bio_PrivateKey);
  Key key = NewKey();
  Cert cert =
      Build(spec.common_name, serial_++, key.get(), ca_cert.get(), spec.not_before, spec.not_after);
  AddExtension(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature");
  AddExtension(cert.get(), ca_cert.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  AddExtension(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always");
  if (!spec.alt_names.empty()) {
    std::string sans;
    for (const std::string& san : spec.alt_names) sans += (sans.empty() ? "" : ",") + san;
    AddExtension(cert.get(), ca_cert.get(), NID_subject_alt_name, sans);
  }
  Sign(cert.get(), ca_key.get());
  const PemFiles files{dir_ / (file_stem + ".pem"), dir_ / (file_stem + ".key")};
  WritePem(files.cert, cert.get(), nullptr);
  WritePem(files.key, nullptr, key.get());
  return files;
}

}  // namespace kvatlas::testing
