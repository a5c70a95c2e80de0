#include "client/cli/help.h"

#include <algorithm>
#include <cstdio>

namespace kvatlas::cli {
namespace {

// The flags of several commands.
const FlagHelp kModel{"model", "M", "the context's model name (required with --block-size)"};
const FlagHelp kBlockSize{"block-size", "N", "the context's block size, in tokens"};
const FlagHelp kTenant{"tenant", "T", "the context's tenant (default: default)"};
const FlagHelp kLora{"lora", "L", "the context's LoRA adapter name (default: none)"};
const FlagHelp kSalt{"salt", "S", "the context's additional salt (default: none)"};
const FlagHelp kHttp{"http", "HOST:PORT",
                     "the REST API (kvatlas-server --http-listen);\n"
                     "default $KVATLAS_HTTP, else 127.0.0.1:7070"};
const FlagHelp kJson{"json", "", "print the server's JSON document instead of the summary"};

const FlagHelp kClusterFlags[] = {kHttp, kJson};

// `before`, the flags of a context (--model, --block-size, --tenant, --lora, --salt), `after`.
std::vector<FlagHelp> WithContext(std::vector<FlagHelp> before,
                                  const std::vector<FlagHelp>& after) {
  before.insert(before.end(), {kModel, kBlockSize, kTenant, kLora, kSalt});
  before.insert(before.end(), after.begin(), after.end());
  return before;
}

CommandHelp Cluster(const char* sub, const char* synopsis, const char* summary, const char* text,
                    std::vector<const char*> examples) {
  return {sub,
          synopsis,
          summary,
          text,
          {std::begin(kClusterFlags), std::end(kClusterFlags)},
          std::move(examples)};
}

std::vector<CommandHelp> MakeCommands() {
  std::vector<CommandHelp> commands;
  commands.push_back(
      {"lookup",
       "--model M --block-size N\n"
       "       (--tokens 1,2,3 | --hashes H,H) [--tenant T] [--lora L] [--salt S]\n"
       "       [--instance ID] [--json | --conductor]",
       "the longest cached prefix of a prompt, per instance",
       "Looks the prompt up in one context (model, block size, tenant, LoRA, salt) and prints,\n"
       "per instance, how many of its leading blocks are cached in each tier. When nothing is\n"
       "found, says whether the server has blocks in that context at all, and which contexts\n"
       "it knows.",
       WithContext(
           {}, {{"tokens", "1,2,3", "the prompt's token ids (hashed here, as the engines do)"},
                {"hashes", "H,H",
                 "the prompt's block hashes instead: decimal, negative\n"
                 "decimal or 0x-hex"},
                {"instance", "ID", "only this instance's match"},
                {"json", "", "print the REST POST /v1/lookup answer"},
                {"conductor", "", "print the Mooncake Conductor POST /query answer (in tokens)"}}),
       {"kvatlas lookup --model llama --block-size 16 --tokens 1,2,3,4,5,6,7,8"}});
  commands.push_back(
      {"blocks",
       "KEY [--model M --block-size N [--tenant T] [--lora L] [--salt S]]\n"
       "       [--json]",
       "every copy of one block key",
       "Prints every copy of the block KEY (decimal or 0x-hex): holder, rank, tier, depth,\n"
       "references, context and location; in one context, or in all of them.",
       WithContext({}, {{"json", "", "print the REST GET /v1/blocks/{key} answer"}}),
       {"kvatlas blocks 0x1f2e3d4c5b6a7988"}});
  commands.push_back(
      {"ingest",
       "[FILE | -] [--progress] [--json]",
       "applies engine events (JSON lines) from a file or stdin",
       "Applies the block events of FILE (or stdin: \"-\", the default), one JSON event object\n"
       "or array of them per line (the REST POST /v1/events format), in batches of 1,000\n"
       "events with a few batches in flight. On a terminal, a progress line on stderr shows\n"
       "the share of the file applied (of a pipe: the events applied), redrawn in place.\n"
       "A bad line or a refused batch stops it (each batch is atomic).",
       {{"progress", "", "show the progress line even when stderr is not a terminal"},
        {"json", "", "print the totals as {\"events\", \"blocks\", \"revision\"}"}},
       {"kvatlas ingest events.jsonl", "zcat events.jsonl.gz | kvatlas ingest -"}});
  commands.push_back({"stats",
                      "[--json]",
                      "the server's statistics: a summary, or --json the document",
                      "Prints a summary of the server's statistics: its role, revision and\n"
                      "uptime; the index (blocks, entries, contexts, instances); the events\n"
                      "applied since it started and their average rates. --json prints the\n"
                      "whole document (the REST GET /v1/stats) on one line.",
                      {{"json", "", "print the statistics document (one line)"}},
                      {"kvatlas stats", "kvatlas stats --json"}});
  commands.push_back({"ping",
                      "[--json]",
                      "round-trip time to the server",
                      "Sends one ping over the binary protocol and prints the round trip.",
                      {{"json", "", "print {\"round_trip_us\": N}"}},
                      {"kvatlas ping"}});
  commands.push_back(
      {"watch",
       "[--from REV|now|snapshot] [--model M] [--block-size N]\n"
       "       [--tenant T] [--lora L] [--salt S] [--backend ID] [--dp-rank R]\n"
       "       [--medium MEDIUM] [--count N] [--json] [--http HOST:PORT]",
       "follows the change feed (after listing a context, with --from snapshot)",
       "Follows the change feed (REST GET /v1/watch): one line per record (revision, op,\n"
       "holder/rank, medium, model, number of keys and the first key), or --json each record\n"
       "as the server sent it. The filters combine with AND. Reconnects by itself when the\n"
       "server cuts a slow watcher.\n"
       "\n"
       "--from snapshot lists the context's blocks first (REST GET /v1/snapshot: one line per\n"
       "copy, or --json the snapshot document as one line) and then follows the changes from\n"
       "the snapshot's revision: nothing is missed or repeated. It needs --model and\n"
       "--block-size. The server keeps only recent changes, and none from before its last\n"
       "restart: a --from REV older than that is refused (compacted); list with --from\n"
       "snapshot instead.",
       WithContext(
           {{"from", "REV|now|snapshot",
             "the records after revision REV; now (the default): the\n"
             "records from now on; snapshot: the context's current\n"
             "blocks, then the records after them"}},
           {{"backend", "ID", "only records (and snapshot copies) of this holder"},
            {"dp-rank", "R", "only this data-parallel rank"},
            {"medium", "MEDIUM", "only this tier (GPU, CPU, DISK, SHARED or a medium name)"},
            {"count", "N", "exit (0) after N records (snapshot copies are not counted)"},
            {"json", "", "print each record's JSON line as sent"},
            kHttp}),
       {"kvatlas watch --from snapshot --model llama --block-size 16",
        "kvatlas watch --json --count 2 --backend vllm-0 --medium GPU"}});
  commands.push_back(
      {"cluster",
       "<status | groups | directory | ready | add ID RAFT_ADDRESS |\n"
       "       remove ID | transfer [ID] | drain ID | undrain ID | backup DIR | digest>\n"
       "       [--http HOST:PORT] [--json]",
       "the raft cluster: status, groups, add, remove, transfer, drain, backup, ...",
       "The raft cluster over the REST admin API (not the binary protocol). Any server will\n"
       "do for the changes: followers forward them to the leader. Run\n"
       "'kvatlas cluster SUBCOMMAND --help' for one subcommand.\n"
       "\n"
       "subcommands:\n"
       "  status              members, roles, states, lag and last contact\n"
       "  groups              the raft groups: leader, members, contexts, entries, snapshot\n"
       "  directory           the contexts placed off their home groups, and the epoch\n"
       "  ready               whether this server takes writes now (a health check)\n"
       "  add ID RAFT_ADDRESS add a server as a voter\n"
       "  remove ID           remove a server\n"
       "  transfer [ID]       hand leadership to server ID (or any up-to-date voter)\n"
       "  drain ID            move every group's leadership off server ID\n"
       "  undrain ID          let server ID lead its share of the groups again\n"
       "  backup DIR          write a backup of the server asked under its backup_dir\n"
       "  digest              the server's state digest",
       {std::begin(kClusterFlags), std::end(kClusterFlags)},
       {"kvatlas cluster status", "kvatlas cluster transfer"}});
  commands.push_back(Cluster(
      "cluster status", "[--http HOST:PORT] [--json]",
      "members, roles, states, lag and last contact",
      "The answering server's view of the cluster (GET /v1/cluster): the leader, the term,\n"
      "and one row per member: role, STATE (leader, follower, ...; on the leader,\n"
      "unreachable for a member it has not heard from within an election timeout), raft,\n"
      "REST and binary-protocol addresses, APPLIED index, LAG (log entries behind the\n"
      "leader) and CONTACT (time since the leader last heard from it). LAG and CONTACT are\n"
      "known on the leader only: \"-\" elsewhere.",
      {"kvatlas cluster status", "kvatlas cluster status --json"}));
  commands.push_back(Cluster(
      "cluster groups", "[--http HOST:PORT] [--json]",
      "the raft groups: leader, members, contexts, entries, snapshot",
      "The cluster's raft groups (GET /v1/groups; docs/scaling.md), as the answering server\n"
      "knows them: the placement directory's epoch, and per group its id, LEADER, the\n"
      "PREFERRED leader, MEMBERS (as the directory records them with replicas on some\n"
      "servers), CONTEXTS, ENTRIES, the last raft SNAPSHOT's bytes taken on\n"
      "this server (0 before the first), APPLIED index, whether it takes new contexts and\n"
      "how many contexts the directory PLACED on it.",
      {"kvatlas cluster groups", "kvatlas cluster groups --json"}));
  commands.push_back(Cluster(
      "cluster directory", "[--http HOST:PORT] [--json]",
      "the contexts placed off their home groups, and the epoch",
      "The placement directory as the answering server has applied it (GET /v1/directory;\n"
      "docs/scaling.md §Placed contexts): its epoch, the groups that take no new contexts,\n"
      "and one row per context placed off its HOME_GROUP (a new context whose home group\n"
      "took no new contexts) with the GROUP it lives in.",
      {"kvatlas cluster directory", "kvatlas cluster directory --json"}));
  commands.push_back(Cluster(
      "cluster ready", "[--http HOST:PORT] [--json]",
      "whether this server takes writes now (a health check)",
      "GET /readyz (no token needed): exit 0 when the server takes writes, else exit 1 with\n"
      "the reason. For container health checks.",
      {"kvatlas cluster ready"}));
  commands.push_back(Cluster(
      "cluster add", "ID RAFT_ADDRESS [--http HOST:PORT] [--json]", "add a server as a voter",
      "Adds server ID, started with --id ID --raft-listen RAFT_ADDRESS and the other\n"
      "servers' --peers, as a spare, then promotes it to voter once it has caught up.",
      {"kvatlas cluster add 4 10.0.0.4:7072"}));
  commands.push_back(Cluster("cluster remove", "ID [--http HOST:PORT] [--json]", "remove a server",
                             "Removes server ID from the configuration.",
                             {"kvatlas cluster remove 4"}));
  commands.push_back(
      Cluster("cluster transfer", "[ID] [--http HOST:PORT] [--json]",
              "hand leadership to server ID (or any up-to-date voter)",
              "Hands leadership to server ID, or without one to any up-to-date voter, and prints\n"
              "which server leads now.",
              {"kvatlas cluster transfer", "kvatlas cluster transfer 2"}));
  commands.push_back(Cluster(
      "cluster drain", "ID [--http HOST:PORT] [--json]",
      "move every group's leadership off server ID",
      "Marks server ID draining in the replicated state: it is no group's preferred leader,\n"
      "so the groups it leads are handed to other servers within a few hundred milliseconds\n"
      "while it keeps serving as a follower (kvatlas cluster groups shows the leaders). The\n"
      "drain ends with 'kvatlas cluster undrain ID' or when the server starts again. A\n"
      "server asked to stop drains itself first (shutdown_drain_ms).",
      {"kvatlas cluster drain 2"}));
  commands.push_back(Cluster("cluster undrain", "ID [--http HOST:PORT] [--json]",
                             "let server ID lead its share of the groups again",
                             "Ends server ID's drain: the groups whose preferred leader it is\n"
                             "are handed back to it once it has caught up.",
                             {"kvatlas cluster undrain 2"}));
  commands.push_back(
      Cluster("cluster backup", "DIR [--http HOST:PORT] [--json]",
              "write a backup of the server asked under its backup_dir",
              "Writes a backup of the server asked into DIR under its backup_dir (ask the leader:\n"
              "docs/operations.md, Backup and restore).",
              {"kvatlas cluster backup nightly-1"}));
  commands.push_back(Cluster("cluster digest", "[--http HOST:PORT] [--json]",
                             "the server's state digest",
                             "Prints the answering server's applied index and state digest\n"
                             "(equal on servers at the same index).",
                             {"kvatlas cluster digest"}));
  commands.push_back({"version",
                      "",
                      "this program's version (also --version)",
                      "Prints the version, the commit it was built from and the build type.",
                      {},
                      {"kvatlas --version"}});
  commands.push_back({"help",
                      "[COMMAND [SUBCOMMAND]]",
                      "help on a command (also COMMAND --help)",
                      "Prints the help of COMMAND (or of all of kvatlas).",
                      {},
                      {"kvatlas help watch"}});
  return commands;
}

// Appends `text` with each line after the first indented by `indent` spaces.
void AppendIndented(std::string* out, std::string_view text, size_t indent) {
  for (const char c : text) {
    out->push_back(c);
    if (c == '\n') out->append(indent, ' ');
  }
}

void AppendFlags(std::string* out, const std::vector<FlagHelp>& flags) {
  constexpr size_t kColumn = 26;
  for (const FlagHelp& flag : flags) {
    std::string left = "  --" + std::string(flag.name);
    if (std::string_view(flag.name) == "help") left = "  -h, --help";
    if (flag.value[0] != '\0') left += " " + std::string(flag.value);
    out->append(left);
    if (left.size() + 2 > kColumn) {
      out->append("\n");
      out->append(kColumn, ' ');
    } else {
      out->append(kColumn - left.size(), ' ');
    }
    AppendIndented(out, flag.text, kColumn);
    out->append("\n");
  }
}

}  // namespace

const std::vector<CommandHelp>& Commands() {
  static const std::vector<CommandHelp> commands = MakeCommands();
  return commands;
}

const std::vector<FlagHelp>& GlobalFlagHelp() {
  static const std::vector<FlagHelp> flags = {
      {"server", "HOST:PORT",
       "the binary protocol port of a server (kvatlas-server\n"
       "--rpc-listen); default $KVATLAS_SERVER, else 127.0.0.1:7071"},
      {"timeout-ms", "N", "the deadline of each request (default 30000)"},
      {"token", "T",
       "the access token (default $KVATLAS_TOKEN; prefer the\n"
       "variable: a command line is visible to other users)"},
      {"ca", "FILE",
       "TLS (both protocols): the CA certificates (PEM) the\n"
       "server's certificate must chain to (default $KVATLAS_CA;\n"
       "without one, the system's trust store)"},
      {"cert", "FILE", "this client's certificate (PEM), with --key\n(default $KVATLAS_CERT)"},
      {"key", "FILE", "its private key (PEM) (default $KVATLAS_KEY)"},
      {"tls", "", "TLS with the system's trust store (on too with --ca or --cert)"},
      {"help", "", "help; after a command, that command's help"},
      {"version", "", "the version"}};
  return flags;
}

const CommandHelp* FindCommand(std::string_view path) {
  const auto& commands = Commands();
  const auto it = std::find_if(commands.begin(), commands.end(),
                               [&](const CommandHelp& c) { return c.path == path; });
  return it == commands.end() ? nullptr : &*it;
}

std::vector<std::string> FlagNames(const CommandHelp& command) {
  std::vector<std::string> names;
  for (const FlagHelp& flag : command.flags) names.emplace_back(flag.name);
  return names;
}

std::string GlobalHelp() {
  std::string out =
      "usage: kvatlas [global flags] COMMAND [args]\n"
      "\n"
      "The command-line client of a kvatlas server: lookups, blocks, ingest, stats and ping\n"
      "over the binary protocol (--server); the change feed and the cluster over REST\n"
      "(--http).\n"
      "\n"
      "commands:\n";
  for (const CommandHelp& command : Commands()) {
    if (std::string_view(command.path).find(' ') != std::string_view::npos) continue;
    char line[128];
    std::snprintf(line, sizeof line, "  %-10s %s\n", command.path, command.summary);
    out += line;
  }
  out += "\nglobal flags (before or after the command):\n";
  AppendFlags(&out, GlobalFlagHelp());
  out +=
      "\n"
      "Exit codes: 0 done; 1 failed, refused or unreachable; 2 bad command line.\n"
      "Run 'kvatlas COMMAND --help' for a command's flags and examples (docs/cli.md).\n";
  return out;
}

std::string HelpOf(const CommandHelp& command) {
  std::string out = "usage: kvatlas " + std::string(command.path);
  if (command.synopsis[0] != '\0') out += " " + std::string(command.synopsis);
  out += "\n\n" + std::string(command.text) + "\n";
  if (!command.flags.empty()) {
    out += "\nflags:\n";
    AppendFlags(&out, command.flags);
  }
  if (!command.examples.empty()) {
    out += "\nexamples:\n";
    for (const char* example : command.examples) out += "  " + std::string(example) + "\n";
  }
  out += "\nThe global flags (--server, --token, TLS, ...): kvatlas --help.\n";
  return out;
}

int UsageError(std::string_view path, std::string_view problem) {
  const std::string command = path.empty() ? "kvatlas" : "kvatlas " + std::string(path);
  std::fprintf(stderr, "kvatlas: %.*s\nRun '%s --help' for usage.\n",
               static_cast<int>(problem.size()), problem.data(), command.c_str());
  return 2;
}

}  // namespace kvatlas::cli
