// Tokens and roles (server/service/auth.h) and the audit log's counters (audit.h).
#include "server/service/auth.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/internal/log.h"
#include "server/service/audit.h"

namespace kvatlas::server {
namespace {

TEST_SUITE("Auth") {
  TEST_CASE("Auth: a token is kept as its SHA-256, in hex") {
    CHECK(DigestHex(DigestOfToken("abc")) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const Result<TokenDigest> parsed =
        ParseDigestHex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD");
    REQUIRE(parsed.has_value());
    CHECK(*parsed == DigestOfToken("abc"));
    CHECK_FALSE(ParseDigestHex("ba78").has_value());
    CHECK_FALSE(ParseDigestHex(std::string(63, 'a') + "g").has_value());
  }

  TEST_CASE("Auth: new tokens are random, prefixed and 256 bits") {
    const Result<std::string> a = NewToken();
    const Result<std::string> b = NewToken();
    REQUIRE(a.has_value());
    REQUIRE(b.has_value());
    CHECK(a->starts_with("kvt_"));
    CHECK(a->size() == 4 + 64);
    CHECK(*a != *b);
  }

  TEST_CASE("Auth: roles are ordered") {
    CHECK(RoleAllows(Role::kAdmin, Role::kWrite));
    CHECK(RoleAllows(Role::kWrite, Role::kRead));
    CHECK_FALSE(RoleAllows(Role::kRead, Role::kWrite));
    CHECK_FALSE(RoleAllows(Role::kWrite, Role::kAdmin));
    CHECK(ParseRole("admin") == Role::kAdmin);
    CHECK_FALSE(ParseRole("Admin").has_value());
  }

  TEST_CASE("Auth: token files, line by line") {
    const std::string hash = DigestHex(DigestOfToken("t"));
    const Result<std::vector<TokenEntry>> parsed =
        ParseTokenLines("# engines\n\nvllm-0:write:" + hash +
                            "\n  ops : admin : " + DigestHex(DigestOfToken("u")) + "\r\n",
                        "tokens.txt");
    REQUIRE(parsed.has_value());
    REQUIRE(parsed->size() == 2);
    CHECK((*parsed)[0] == TokenEntry{"vllm-0", Role::kWrite, DigestOfToken("t")});
    CHECK((*parsed)[1].name == "ops");
    CHECK(TokenLine((*parsed)[0]) == "vllm-0:write:" + hash);
    for (const auto& [text, problem] : std::vector<std::pair<std::string, std::string>>{
             {"a:read", "tokens.txt:1: not three fields"},
             {"\na b:read:" + hash, "tokens.txt:2: name: only letters"},
             {"a:root:" + hash, "role must be read, write or admin"},
             {"a:read:xyz", "sha256: must be 64 hex digits"},
             {std::string(65, 'n') + ":read:" + hash, "name: must be 1 to 64 bytes"}}) {
      CAPTURE(text);
      const Result<std::vector<TokenEntry>> bad = ParseTokenLines(text, "tokens.txt");
      REQUIRE_FALSE(bad.has_value());
      CHECK(bad.error().code() == StatusCode::kInvalidArgument);
      CHECK(bad.error().message().find(problem) != std::string::npos);
    }
  }

  TEST_CASE("Auth: a token set has unique names and unique tokens") {
    const TokenEntry a{"a", Role::kRead, DigestOfToken("1")};
    const TokenEntry b{"b", Role::kRead, DigestOfToken("2")};
    CHECK(CheckTokenSet({a, b}).ok());
    CHECK(CheckTokenSet({a, TokenEntry{"a", Role::kWrite, DigestOfToken("3")}})
              .message()
              .find("configured twice") != std::string::npos);
    CHECK(CheckTokenSet({a, TokenEntry{"c", Role::kWrite, DigestOfToken("1")}})
              .message()
              .find("same sha256") != std::string::npos);
  }

  TEST_CASE("Authenticator: authenticates, authorizes by role, and rechecks after a reload") {
    Authenticator auth(true, {{"reader", Role::kRead, DigestOfToken("r")},
                              {"writer", Role::kWrite, DigestOfToken("w")}});
    CHECK(auth.enabled());
    CHECK(auth.Authenticate(std::nullopt).status().code() == StatusCode::kUnauthenticated);
    CHECK(auth.Authenticate("").status().code() == StatusCode::kUnauthenticated);
    CHECK(auth.Authenticate("x").status().code() == StatusCode::kUnauthenticated);
    CHECK(auth.Authenticate(std::string(2000, 'r')).status().code() ==
          StatusCode::kUnauthenticated);
    const Result<Principal> reader = auth.Authenticate("r");
    REQUIRE(reader.has_value());
    CHECK(reader->name == "reader");
    CHECK(reader->role == Role::kRead);
    CHECK(Authenticator::Authorize(*reader, Role::kRead, "lookup").ok());
    const Status denied = Authenticator::Authorize(*reader, Role::kWrite, "ingest");
    CHECK(denied.code() == StatusCode::kPermissionDenied);
    CHECK(denied.message() == "ingest needs the write role; the token \"reader\" has read");

    // A reload: the reader's token stays (now with the write role), the writer's goes.
    const Result<Principal> writer = auth.Authenticate("w");
    REQUIRE(writer.has_value());
    const uint64_t before = auth.generation();
    auth.Replace({{"reader", Role::kWrite, DigestOfToken("r")}});
    CHECK(auth.generation() == before + 1);
    const Result<Principal> kept = auth.Recheck(*reader);
    REQUIRE(kept.has_value());
    CHECK(kept->role == Role::kWrite);
    CHECK(kept->generation == auth.generation());
    const Result<Principal> gone = auth.Recheck(*writer);
    REQUIRE_FALSE(gone.has_value());
    CHECK(gone.error().code() == StatusCode::kUnauthenticated);
    CHECK(gone.error().message().find("\"writer\" was removed") != std::string::npos);
    CHECK(auth.Authenticate("w").status().code() == StatusCode::kUnauthenticated);
  }

  TEST_CASE("Authenticator: with access control off everyone is the anonymous admin") {
    Authenticator auth(false, {{"reader", Role::kRead, DigestOfToken("r")}});
    const Result<Principal> anyone = auth.Authenticate(std::nullopt);
    REQUIRE(anyone.has_value());
    CHECK(anyone->anonymous);
    CHECK(Authenticator::Authorize(*anyone, Role::kAdmin, "POST /register").ok());
  }

  TEST_CASE("AuditLog: every refusal counts, and lines past the rate are left out, not counts") {
    SetLogLevel(LogLevel::kError);  // the lines themselves are not checked here
    Metrics metrics;
    AuditLog audit(&metrics);
    const AuditSource source{"rest", "10.0.0.9", "POST /v1/events\nforged line"};
    for (uint32_t i = 0; i < AuditLog::kFailureLinesPerSecond + 50; ++i) {
      audit.Refused(source, AuthFailure::kInvalidToken, "", Status::Unauthenticated("bad"));
    }
    audit.AdminAction(source, "ops", "POST /register", "ok");
    SetLogLevel(LogLevel::kInfo);
    const std::string text = metrics.Render({});
    CHECK(text.find("kvatlas_auth_failures_total{reason=\"invalid_token\"} 150") !=
          std::string::npos);
    CHECK(text.find("kvatlas_admin_actions_total{action=\"POST /register\",outcome=\"ok\"} 1") !=
          std::string::npos);
  }
}

}  // namespace
}  // namespace kvatlas::server
