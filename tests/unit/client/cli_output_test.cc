// What the kvatlas CLI prints for the server's documents, including fields a server of
// another version does or does not send (the integration tests drive the binary against
// the server of this tree).
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/cluster_command.h"
#include "client/cli/ingest_command.h"
#include "client/cli/lookup_command.h"
#include "client/cli/stats_command.h"

namespace kvatlas::cli {
namespace {

using nlohmann::json;

// The line of `text` that starts with `start`, "" when none does.
std::string LineStarting(const std::string& text, const std::string& start) {
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.starts_with(start)) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

// The whitespace-separated words of `line`.
std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

json Member(int id, const char* state, json lag, json reachable, json last_contact_ms) {
  return {{"id", id},
          {"role", "voter"},
          {"state", state},
          {"raft_address", "10.0.0." + std::to_string(id) + ":7072"},
          {"http_address", "10.0.0." + std::to_string(id) + ":7070"},
          {"rpc_address", "10.0.0." + std::to_string(id) + ":7071"},
          {"applied_index", id == 1 ? json(120) : json()},
          {"match_index", lag.is_null() ? json() : json(120 - lag.get<int>())},
          {"lag_entries", lag},
          {"reachable", reachable},
          {"last_contact_ms", last_contact_ms}};
}

TEST_SUITE("CliOutput") {
  TEST_CASE("CliOutput: cluster status on the leader shows LAG, STATE and CONTACT per member") {
    const json doc = {
        {"id", 1},
        {"state", "leader"},
        {"leader_id", 1},
        {"term", 3},
        {"commit_index", 120},
        {"applied_index", 120},
        {"leader_http_address", "10.0.0.1:7070"},
        {"members",
         {Member(1, "leader", 0, nullptr, nullptr), Member(2, "follower", 3, true, 120),
          Member(3, "unreachable", 42, false, 9500),
          Member(4, "unreachable", 120, false, nullptr)}}};
    const std::string out = FormatClusterAnswer("status", doc.dump());
    CHECK(out.starts_with("server 1 (leader) answered: leader 1, term 3"));
    CHECK(Words(LineStarting(out, "ID ")) == std::vector<std::string>{"ID", "ROLE", "STATE", "RAFT",
                                                                      "HTTP", "RPC", "APPLIED",
                                                                      "LAG", "CONTACT"});
    CHECK(Words(LineStarting(out, "1 ")) ==
          std::vector<std::string>{"1", "voter", "leader", "10.0.0.1:7072", "10.0.0.1:7070",
                                   "10.0.0.1:7071", "120", "0", "-"});
    CHECK(Words(LineStarting(out, "2 ")) ==
          std::vector<std::string>{"2", "voter", "follower", "10.0.0.2:7072", "10.0.0.2:7070",
                                   "10.0.0.2:7071", "-", "3", "120ms"});
    CHECK(Words(LineStarting(out, "3 ")).at(2) == "unreachable");
    CHECK(Words(LineStarting(out, "3 ")).at(7) == "42");
    CHECK(Words(LineStarting(out, "3 ")).at(8) == "9500ms");
    CHECK(Words(LineStarting(out, "4 ")).at(8) == "never");
    CHECK(LineStarting(out, "unreachable").ends_with(": 3, 4"));
    // The columns line up: every row's CONTACT starts where the header's does.
    const size_t column = LineStarting(out, "ID ").find("CONTACT");
    CHECK(LineStarting(out, "2 ").substr(column) == "120ms");
    CHECK(LineStarting(out, "4 ").substr(column) == "never");
  }

  TEST_CASE(
      "CliOutput: cluster status from an older server, or a follower, prints - and says "
      "where to ask") {
    json old_member = Member(2, "follower", nullptr, nullptr, nullptr);
    old_member.erase("reachable");
    old_member.erase("last_contact_ms");
    old_member.erase("lag_entries");
    const json doc = {{"id", 2},
                      {"state", "follower"},
                      {"leader_id", 1},
                      {"leader_http_address", "10.0.0.1:7070"},
                      {"members", {old_member}}};
    const std::string out = FormatClusterAnswer("status", doc.dump());
    const std::vector<std::string> row = Words(LineStarting(out, "2 "));
    REQUIRE(row.size() == 9);
    CHECK(row[7] == "-");
    CHECK(row[8] == "-");
    CHECK(out.find("LAG and CONTACT are known on the leader only: kvatlas cluster status --http "
                   "10.0.0.1:7070") != std::string::npos);
    CHECK(out.find("unreachable") == std::string::npos);
    // Longer silences in seconds and minutes.
    const json slow = {{"id", 1},
                       {"state", "leader"},
                       {"members",
                        {Member(2, "unreachable", 5, false, 12'345),
                         Member(3, "unreachable", 5, false, 190'000)}}};
    const std::string out2 = FormatClusterAnswer("status", slow.dump());
    CHECK(Words(LineStarting(out2, "2 ")).at(8) == "12.3s");
    CHECK(Words(LineStarting(out2, "3 ")).at(8) == "3m10s");
  }

  TEST_CASE("CliOutput: cluster backup: one line, or a line per raft group") {
    const json one = {{"status", "ok"},       {"path", "/b/n1"},        {"server_id", 1},
                      {"applied_index", 12},  {"records", 30},          {"bytes", 900},
                      {"state_digest", "ab"}, {"groups", json::array()}};
    CHECK(FormatClusterAnswer("backup", one.dump()) ==
          "server 1 backed up to /b/n1: applied index 12, 30 records, 900 bytes, state digest "
          "ab\n");
    json three = one;
    three["records"] = 60;
    three["bytes"] = 1800;
    for (int g = 1; g <= 3; ++g) {
      three["groups"].push_back({{"group", g},
                                 {"applied_index", 10 + g},
                                 {"records", 20},
                                 {"bytes", 600},
                                 {"state_digest", "d" + std::to_string(g)}});
    }
    const std::string out = FormatClusterAnswer("backup", three.dump());
    CHECK(out.starts_with("server 1 backed up to /b/n1: 3 raft groups, 60 records, 1800 bytes\n"));
    CHECK(out.find("  group 2: applied index 12, 20 records, 600 bytes, state digest d2\n") !=
          std::string::npos);
  }

  TEST_CASE("CliOutput: cluster digest: one line, or a line per raft group") {
    json doc = {{"server_id", 2}, {"applied_index", 7}, {"records", 3}, {"state_digest", "ab"}};
    CHECK(FormatClusterAnswer("digest", doc.dump()) ==
          "server 2 at applied index 7: state digest ab\n");
    doc["groups"] = json::array();
    for (int g = 1; g <= 2; ++g) {
      doc["groups"].push_back(
          {{"group", g}, {"applied_index", 6 + g}, {"state_digest", "d" + std::to_string(g)}});
    }
    CHECK(FormatClusterAnswer("digest", doc.dump()) ==
          "server 2: 2 raft groups\n  group 1 at applied index 7: state digest d1\n  group 2 at "
          "applied index 8: state digest d2\n");
  }

  TEST_CASE("CliOutput: cluster directory lists the placed contexts and the refusing groups") {
    const std::string doc = R"({"epoch": 4, "revision": 9,
        "groups": [{"id": 1, "accepting": true}, {"id": 2, "accepting": false}],
        "contexts": [{"tenant_id": "default", "model_name": "llama", "lora_name": "",
                      "block_size": 16, "additional_salt": "", "home_group": 2,
                      "ranges": [{"start": 0, "group": 3}]}]})";
    const std::string out = FormatClusterAnswer("directory", doc);
    CHECK(out.starts_with("directory epoch 4; groups taking no new contexts: 2\nTENANT"));
    CHECK(out.find("default  llama  -     16          -     2           3\n") != std::string::npos);
    CHECK(FormatClusterAnswer("directory", R"({"epoch": 0, "groups": [], "contexts": []})") ==
          "directory epoch 0; every group takes new contexts\nno context is placed off its home "
          "group\n");
  }

  TEST_CASE("CliOutput: cluster drain and undrain, and the draining members in status") {
    CHECK(FormatClusterAnswer("drain", R"({"status": "ok", "id": 2, "draining": true})")
              .starts_with("server 2 drains: its groups go to other servers"));
    CHECK(FormatClusterAnswer("undrain", R"({"status": "ok", "id": 2, "draining": false})")
              .starts_with("server 2 no longer drains"));
    json two = Member(2, "follower", 3, true, 120);
    two["draining"] = true;
    json three = Member(3, "follower", 3, true, 120);
    three["draining"] = false;
    const json doc = {{"id", 1}, {"state", "leader"}, {"members", {two, three}}};
    const std::string out = FormatClusterAnswer("status", doc.dump());
    CHECK(LineStarting(out, "draining") == "draining (leads no group once handed over): 2");
    three["draining"] = nullptr;  // an older server: no such field
    CHECK(FormatClusterAnswer("status", json({{"members", {three}}}).dump()).find("draining") ==
          std::string::npos);
  }

  TEST_CASE("CliOutput: cluster transfer says who leads now") {
    CHECK(FormatClusterAnswer("transfer", R"({"status": "ok", "leader_id": 3})") ==
          "leadership transferred: server 3 leads now\n");
    CHECK(FormatClusterAnswer("transfer", R"({"status": "ok", "transfer_to": 3, "leader_id": 0})")
              .starts_with("leadership transferred: the new leader is not known yet"));
    // A server from before leader_id.
    CHECK(FormatClusterAnswer("transfer", R"({"status": "ok", "transfer_to": 2})") ==
          "leadership transferred to server 2\n");
  }

  TEST_CASE("CliOutput: stats summary: the key numbers and the average rates") {
    const json doc = {{"revision", 17},
                      {"uptime_seconds", 10.0},
                      {"index",
                       {{"contexts", 2},
                        {"holders", 4},
                        {"blocks", 5},
                        {"entries", 12},
                        {"aliases", 0},
                        {"locations", 4},
                        {"evicted_blocks", 1},
                        {"memory_bytes", 3 * 1024 * 1024}}},
                      {"storage", {{"approximate_bytes", 2048}}},
                      {"applier", {{"queue_depth", 0}, {"failed", false}}},
                      {"applied",
                       {{"stored", 40},
                        {"removed", 8},
                        {"cleared", 2},
                        {"entries_added", 30},
                        {"entries_removed", 18},
                        {"entries_evicted", 0}}},
                      {"cluster", {{"id", 1}, {"state", "leader"}, {"term", 2}}}};
    const std::string out = FormatStats(doc.dump());
    CHECK(LineStarting(out, "server") == "server      1 (leader, term 2), up 10.0s");
    CHECK(LineStarting(out, "revision") == "revision    17");
    CHECK(LineStarting(out, "entries").starts_with("entries     12 (5 blocks, 4 locations"));
    CHECK(LineStarting(out, "contexts") == "contexts    2");
    CHECK(LineStarting(out, "instances").starts_with("instances   4 "));
    CHECK(LineStarting(out, "memory") == "memory      3.0 MiB index; storage ~2.0 KiB");
    CHECK(LineStarting(out, "rates").starts_with("rates       5.0 events/s, 3.0 entries added/s"));
    CHECK(LineStarting(out, "applier") == "applier     0 write batches queued");
    // Fields an older or newer server does (not) send.
    const std::string sparse = FormatStats(R"({"revision": 3})");
    CHECK(LineStarting(sparse, "revision") == "revision    3");
    CHECK(LineStarting(sparse, "rates").starts_with("rates       - events/s"));
  }

  TEST_CASE("CliOutput: a lookup that found nothing names the contexts the server knows") {
    const std::string llama16 = R"({"tenant_id": "default", "model_name": "llama",
        "lora_name": "", "block_size": 16, "additional_salt": ""})";
    const json contexts = {{"revision", 9},
                           {"contexts",
                            {{{"id", 0},
                              {"tenant_id", "default"},
                              {"model_name", "qwen"},
                              {"lora_name", ""},
                              {"block_size", 16},
                              {"additional_salt", ""},
                              {"blocks", 7}},
                             {{"id", 1},
                              {"tenant_id", "acme"},
                              {"model_name", "llama"},
                              {"lora_name", "sql"},
                              {"block_size", 4},
                              {"additional_salt", "s1"},
                              {"blocks", 1}}}}};
    const std::string hint = NothingFoundHint(llama16, contexts.dump());
    CHECK(hint ==
          "no blocks stored in context model llama, block size 16; known contexts:\n"
          "  model llama, block size 4, tenant acme, LoRA sql, salt s1 (1 block)\n"
          "  model qwen, block size 16 (7 blocks)\n");
    // The context is known: the prompt is not in it.
    json known = contexts;
    known["contexts"][0]["model_name"] = "llama";
    CHECK(NothingFoundHint(llama16, known.dump())
              .starts_with("context model llama, block size 16 holds 7 blocks, but not the "
                           "first block of this prompt"));
    // A bounded list.
    json many = {{"contexts", json::array()}};
    for (int i = 0; i < 25; ++i) {
      many["contexts"].push_back(contexts["contexts"][0]);
      many["contexts"].back()["block_size"] = 100 + i;
    }
    const std::string bounded = NothingFoundHint(llama16, many.dump(), 10);
    CHECK(std::count(bounded.begin(), bounded.end(), '\n') == 12);
    CHECK(bounded.find("... and 15 more") != std::string::npos);
  }

  TEST_CASE("CliOutput: ingest progress is the share of the input, or counts without a size") {
    CHECK(ProgressLine(250, 1000, 1000, 1000) ==
          "[#####---------------]  25%  1000 events, 1000 blocks");
    CHECK(ProgressLine(1000, 1000, 4000, 4000) ==
          "[####################] 100%  4000 events, 4000 blocks");
    CHECK(ProgressLine(0, 1000, 0, 0).starts_with("[--------------------]   0%"));
    CHECK(ProgressLine(500, 0, 1000, 2000) == "1000 events, 2000 blocks");
  }
}

}  // namespace
}  // namespace kvatlas::cli
