#include "client/cli/ingest_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "client/cli/help.h"

namespace kvatlas::cli {
namespace {

constexpr size_t kIngestBatchEvents = 1000;
constexpr size_t kIngestBatchesInFlight = 4;

// The size of the regular file open as `fd` from its current offset on, or 0 (a pipe, a
// terminal: unknown).
uint64_t RemainingBytes(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const off_t at = lseek(fd, 0, SEEK_CUR);
  return st.st_size > at && at >= 0 ? static_cast<uint64_t>(st.st_size - at) : 0;
}

// Sends events in batches, a few batches in flight. The progress counts what the server
// has applied: a batch's share of the input is counted when its answer comes, not when it
// is read (reading runs ahead by the batches in flight, the whole of a small file).
class Ingester {
 public:
  Ingester(Client& client, uint64_t total_bytes, bool progress)
      : client_(client), total_bytes_(total_bytes), progress_(progress) {}

  // `events` come from the input up to byte `bytes_read`.
  void Add(std::vector<BlockEvent> events, uint64_t bytes_read) {
    bytes_read_ = bytes_read;
    for (BlockEvent& e : events) batch_.push_back(std::move(e));
    if (batch_.size() >= kIngestBatchEvents) Flush();
  }

  // Sends the last batch and waits for every answer; ends the progress line. The first
  // failure, if any.
  Status Finish() {
    Flush();
    while (!in_flight_.empty()) Wait();
    if (progress_) {
      if (first_error_.ok()) applied_bytes_ = bytes_read_;  // blank lines at the end
      ShowProgress();
      std::fputc('\n', stderr);
    }
    return first_error_;
  }

  bool failed() const { return !first_error_.ok(); }
  uint64_t events() const { return events_; }
  uint64_t blocks() const { return blocks_; }
  Revision revision() const { return revision_; }

 private:
  struct InFlight {
    std::future<Result<IngestAnswer>> answer;
    uint64_t end_bytes;  // the input's offset after the batch's last line
  };

  void Flush() {
    if (batch_.empty()) return;
    while (in_flight_.size() >= kIngestBatchesInFlight) Wait();
    in_flight_.push_back({client_.IngestAsync(std::exchange(batch_, {})), bytes_read_});
  }

  void Wait() {
    InFlight next = std::move(in_flight_.front());
    in_flight_.pop_front();
    Result<IngestAnswer> ack = next.answer.get();
    if (!ack) {
      if (first_error_.ok()) first_error_ = ack.error();
      return;
    }
    events_ += ack->events;
    blocks_ += ack->blocks;
    revision_ = std::max(revision_, ack->revision);
    applied_bytes_ = std::max(applied_bytes_, next.end_bytes);
    if (progress_) ShowProgress();
  }

  // Redraws the line in place ("\r"): it only grows, so nothing of the last one is left.
  void ShowProgress() const {
    std::fprintf(stderr, "\r%s",
                 ProgressLine(applied_bytes_, total_bytes_, events_, blocks_).c_str());
    std::fflush(stderr);
  }

  Client& client_;
  const uint64_t total_bytes_;
  const bool progress_;
  uint64_t bytes_read_ = 0;
  uint64_t applied_bytes_ = 0;
  std::vector<BlockEvent> batch_;
  std::deque<InFlight> in_flight_;
  Status first_error_;
  uint64_t events_ = 0;
  uint64_t blocks_ = 0;
  Revision revision_ = 0;
};

}  // namespace

std::string ProgressLine(uint64_t applied_bytes, uint64_t total_bytes, uint64_t events,
                         uint64_t blocks) {
  char counts[64];
  std::snprintf(counts, sizeof counts, "%llu events, %llu blocks",
                static_cast<unsigned long long>(events), static_cast<unsigned long long>(blocks));
  if (total_bytes == 0) return counts;
  const auto percent =
      static_cast<int>(100 * static_cast<double>(std::min(applied_bytes, total_bytes)) /
                       static_cast<double>(total_bytes));
  const int filled = percent / 5;
  char line[160];
  std::snprintf(line, sizeof line, "[%.*s%.*s] %3d%%  %s", filled, "####################",
                20 - filled, "--------------------", percent, counts);
  return line;
}

int RunIngest(const Args& args, const RpcTarget& target) {
  if (args.positional.size() > 1) return UsageError("ingest", "ingest: give at most one FILE");
  const std::string path = args.positional.empty() ? "-" : args.positional[0];
  std::ifstream file;
  uint64_t total_bytes = 0;  // unknown
  if (path == "-") {
    total_bytes = RemainingBytes(STDIN_FILENO);
  } else {
    file.open(path, std::ios::binary);
    if (!file) return Failed(Status::NotFound("cannot open " + path), target);
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total_bytes = static_cast<uint64_t>(st.st_size);
    }
  }
  std::unique_ptr<Client> client = ConnectOrExplain(target);
  if (client == nullptr) return 1;
  std::istream& in = path == "-" ? std::cin : file;
  Ingester ingester(*client, total_bytes, args.Has("progress") || isatty(STDERR_FILENO) == 1);
  std::string line;
  uint64_t line_no = 0;
  uint64_t bytes_read = 0;
  Status bad_line;
  while (!ingester.failed() && std::getline(in, line)) {
    ++line_no;
    bytes_read += line.size() + 1;
    Result<std::vector<BlockEvent>> events = DecodeEventLine(line);
    if (!events) {
      bad_line = events.error().WithContext(path + ":" + std::to_string(line_no));
      break;
    }
    ingester.Add(std::move(*events), bytes_read);
  }
  Status sent = ingester.Finish();
  const Status& error = !bad_line.ok() ? bad_line : sent;
  if (!error.ok()) {
    std::fprintf(stderr,
                 "kvatlas: %s\n  stopped: %llu events were applied before it (each batch is "
                 "atomic)\n",
                 error.ToString().c_str(), static_cast<unsigned long long>(ingester.events()));
    return 1;
  }
  if (args.Has("json")) {
    std::printf("%s\n", nlohmann::json{{"events", ingester.events()},
                                       {"blocks", ingester.blocks()},
                                       {"revision", ingester.revision()}}
                            .dump()
                            .c_str());
  } else {
    std::printf("ingested %llu events, %llu blocks (revision %llu)\n",
                static_cast<unsigned long long>(ingester.events()),
                static_cast<unsigned long long>(ingester.blocks()),
                static_cast<unsigned long long>(ingester.revision()));
  }
  return 0;
}

}  // namespace kvatlas::cli
