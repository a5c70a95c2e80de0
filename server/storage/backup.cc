// Backups: writing, verifying and restoring (backup.h, docs/storage.md §Backups).
#include "server/storage/backup.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/internal/bytes.h"
#include "server/storage/key_codec.h"

namespace kvatlas::server {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kManifestFormat = "kvatlas-backup";
constexpr size_t kWriteChunk = 1 << 20;

std::string Hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

// Incremental SHA-256 (OpenSSL EVP).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  }
  void Update(std::string_view bytes) { EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()); }
  std::string HexDigest() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(ctx_.get(), out, &size);
    return Hex(out, size);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

Status Errno(const std::string& what) {
  return Status::IOError(what + ": " + std::strerror(errno));
}

std::string MetaKeyOf(std::string_view name) {
  std::string key(1, static_cast<char>(RecordType::kMeta));
  key.append(name);
  return key;
}

// Records the state digest leaves out: the revision, which a restore resets, and the
// members' addresses, which belong to one cluster.
bool OutsideDigest(std::string_view key) {
  static const std::string applied_key = MetaKeyOf(kMetaAppliedIndex);
  return key == applied_key ||
         (!key.empty() && key[0] == static_cast<char>(RecordType::kServerAddresses));
}

// Accumulates the digest and the meta values of an image's records, in order.
class RecordSummer {
 public:
  // `encoded` is the record as the snapshot encodes it (length-prefixed key and value).
  Status Add(std::string_view key, std::string_view value, std::string_view encoded) {
    if (key == applied_key_) {
      KVATLAS_ASSIGN_OR_RETURN(result_.applied_index, DecodeMetaFixed64(key, value));
    } else if (key == version_key_) {
      KVATLAS_ASSIGN_OR_RETURN(format_version_, DecodeMetaFixed32(key, value));
    } else if (key == seed_key_) {
      KVATLAS_ASSIGN_OR_RETURN(hash_seed_, DecodeMetaFixed64(key, value));
    }
    if (!OutsideDigest(key)) digest_.Update(encoded);
    ++result_.records;
    return Status::Ok();
  }
  StateDigest Finish() {
    result_.digest = digest_.HexDigest();
    return result_;
  }
  Revision applied_index() const { return result_.applied_index; }
  uint32_t format_version() const { return format_version_; }
  uint64_t hash_seed() const { return hash_seed_; }

 private:
  const std::string applied_key_ = MetaKeyOf(kMetaAppliedIndex);
  const std::string version_key_ = MetaKeyOf(kMetaFormatVersion);
  const std::string seed_key_ = MetaKeyOf(kMetaHashSeed);
  Sha256 digest_;
  StateDigest result_;
  uint32_t format_version_ = 0;
  uint64_t hash_seed_ = 0;
};

std::string EncodeRecord(std::string_view key, std::string_view value) {
  std::string out;
  PutLengthPrefixed(&out, key);
  PutLengthPrefixed(&out, value);
  return out;
}

// A file written in large chunks, hashed as written, fsynced at Finish.
class HashedFileWriter {
 public:
  ~HashedFileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    // Owner only: a backup holds the whole state (names, locations).
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    return fd_ < 0 ? Errno("cannot create " + path) : Status::Ok();
  }
  Status Append(std::string_view bytes) {
    hash_.Update(bytes);
    bytes_ += bytes.size();
    buffer_.append(bytes);
    return buffer_.size() >= kWriteChunk ? Drain() : Status::Ok();
  }
  Result<BackupFile> Finish(std::string name) {
    KVATLAS_RETURN_IF_ERROR(Drain());
    if (::fsync(fd_) != 0) return Errno("cannot fsync " + path_);
    if (::close(fd_) != 0) {
      fd_ = -1;
      return Errno("cannot close " + path_);
    }
    fd_ = -1;
    return BackupFile{std::move(name), bytes_, hash_.HexDigest()};
  }

 private:
  Status Drain() {
    size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("cannot write " + path_);
      done += static_cast<size_t>(n);
    }
    buffer_.clear();
    return Status::Ok();
  }

  std::string path_;
  int fd_ = -1;
  Sha256 hash_;
  std::string buffer_;
  uint64_t bytes_ = 0;
};

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open " + path);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc != 0 ? Errno("cannot fsync " + path) : Status::Ok();
}

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

Result<std::string> ReadWholeFile(const std::string& path, uint64_t limit) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return Status::IOError("cannot read " + path + ": " + ec.message());
  if (size > limit) {
    return Status::Corruption(path + " is " + std::to_string(size) + " bytes, more than " +
                              std::to_string(limit));
  }
  std::ifstream in(path, std::ios::binary);
  std::string out(size, '\0');
  if (!in.read(out.data(), static_cast<std::streamsize>(size))) {
    return Status::IOError("cannot read " + path);
  }
  return out;
}

Status Corrupt(const std::string& dir, const std::string& what) {
  return Status::Corruption("backup " + dir + ": " + what);
}

// Writes `manifest` into `dir` last, through a rename (a directory holding one is a whole
// part), and fsyncs the directory.
Status WriteManifestLast(const std::string& dir, const BackupManifest& manifest) {
  const fs::path root(dir);
  HashedFileWriter manifest_writer;
  const std::string temporary = (root / (std::string(kBackupManifestFile) + ".tmp")).string();
  KVATLAS_RETURN_IF_ERROR(manifest_writer.Open(temporary));
  KVATLAS_RETURN_IF_ERROR(manifest_writer.Append(ManifestToJson(manifest)));
  KVATLAS_RETURN_IF_ERROR(manifest_writer.Finish(kBackupManifestFile).status());
  if (::rename(temporary.c_str(), (root / kBackupManifestFile).c_str()) != 0) {
    return Errno("cannot rename " + temporary);
  }
  return FsyncPath(dir);
}

}  // namespace

std::string ManifestToJson(const BackupManifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const BackupFile& f : m.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  }
  nlohmann::json out = {{"format", kManifestFormat},
                        {"format_version", m.format_version},
                        {"created_at", m.created_at},
                        {"source",
                         {{"cluster_id", m.source.cluster_id},
                          {"server_id", m.source.server_id},
                          {"online", m.source.online},
                          {"group", m.source.group},
                          {"groups", m.source.groups}}},
                        {"applied_index", m.applied_index},
                        {"storage_format_version", m.storage_format_version},
                        {"hash_seed", m.hash_seed},
                        {"records", m.records},
                        {"state_digest", m.state_digest},
                        {"files", std::move(files)}};
  if (m.source.replicas) out["source"]["replicas"] = *m.source.replicas;
  return out.dump(2) + "\n";
}

Result<BackupManifest> ParseManifest(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto bad = [](const std::string& what) { return Status::Corruption("manifest: " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  // Every field is type-checked before it is read: nlohmann's typed reads throw.
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kManifestFormat) {
    return bad("\"format\" is not \"kvatlas-backup\"");
  }
  const auto number = [&](const nlohmann::json& object,
                          std::string_view field) -> Result<uint64_t> {
    const auto it = object.find(field);
    if (it == object.end() || !it->is_number_unsigned()) {
      return bad("\"" + std::string(field) + "\" is missing or not an unsigned integer");
    }
    return it->get<uint64_t>();
  };
  const auto text_of = [&](const nlohmann::json& object,
                           std::string_view field) -> Result<std::string> {
    const auto it = object.find(field);
    if (it == object.end() || !it->is_string()) {
      return bad("\"" + std::string(field) + "\" is missing or not a string");
    }
    return it->get<std::string>();
  };
  BackupManifest m;
  KVATLAS_ASSIGN_OR_RETURN(uint64_t version, number(j, "format_version"));
  if (version != kBackupFormatVersion) {
    return bad("format_version " + std::to_string(version) + "; this build reads version " +
               std::to_string(kBackupFormatVersion));
  }
  m.format_version = kBackupFormatVersion;
  KVATLAS_ASSIGN_OR_RETURN(m.created_at, text_of(j, "created_at"));
  const auto source = j.find("source");
  if (source == j.end() || !source->is_object()) return bad("\"source\" is not an object");
  KVATLAS_ASSIGN_OR_RETURN(m.source.cluster_id, text_of(*source, "cluster_id"));
  KVATLAS_ASSIGN_OR_RETURN(m.source.server_id, number(*source, "server_id"));
  const auto online = source->find("online");
  if (online == source->end() || !online->is_boolean()) {
    return bad("\"online\" is missing or not a boolean");
  }
  m.source.online = online->get<bool>();
  // A manifest from before several groups holds one group's whole state: group 1 of 1.
  if (source->contains("groups") || source->contains("group")) {
    KVATLAS_ASSIGN_OR_RETURN(uint64_t groups, number(*source, "groups"));
    KVATLAS_ASSIGN_OR_RETURN(uint64_t group, number(*source, "group"));
    if (groups < 1 || groups > kMaxGroupId || group < 1 || group > groups) {
      return bad("\"group\" " + std::to_string(group) + " of \"groups\" " + std::to_string(groups) +
                 " is not a group of 1.." + std::to_string(kMaxGroupId) + " groups");
    }
    m.source.group = static_cast<GroupId>(group);
    m.source.groups = static_cast<uint32_t>(groups);
  }
  if (source->contains("replicas")) {
    KVATLAS_ASSIGN_OR_RETURN(uint64_t replicas, number(*source, "replicas"));
    if (replicas > kMaxGroupMembers) {
      return bad("\"replicas\" " + std::to_string(replicas) + " is more than " +
                 std::to_string(kMaxGroupMembers));
    }
    m.source.replicas = static_cast<uint32_t>(replicas);
  }
  KVATLAS_ASSIGN_OR_RETURN(m.applied_index, number(j, "applied_index"));
  KVATLAS_ASSIGN_OR_RETURN(uint64_t storage_version, number(j, "storage_format_version"));
  m.storage_format_version = static_cast<uint32_t>(storage_version);
  KVATLAS_ASSIGN_OR_RETURN(m.hash_seed, number(j, "hash_seed"));
  KVATLAS_ASSIGN_OR_RETURN(m.records, number(j, "records"));
  KVATLAS_ASSIGN_OR_RETURN(m.state_digest, text_of(j, "state_digest"));
  const auto files = j.find("files");
  if (files == j.end() || !files->is_array()) return bad("\"files\" is not an array");
  for (const nlohmann::json& f : *files) {
    if (!f.is_object()) return bad("a \"files\" element is not an object");
    BackupFile file;
    KVATLAS_ASSIGN_OR_RETURN(file.name, text_of(f, "name"));
    KVATLAS_ASSIGN_OR_RETURN(file.bytes, number(f, "bytes"));
    KVATLAS_ASSIGN_OR_RETURN(file.sha256, text_of(f, "sha256"));
    m.files.push_back(std::move(file));
  }
  return m;
}

Result<StateDigest> DigestOf(const Storage::Capture& capture) {
  RecordSummer summer;
  KVATLAS_RETURN_IF_ERROR(capture.ForEachRecord([&](std::string_view key, std::string_view value) {
    return summer.Add(key, value, EncodeRecord(key, value));
  }));
  return summer.Finish();
}

Status PrepareEmptyDirectory(const std::string& dir, std::string_view what) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dir, ec);
  if (fs::is_symlink(status)) {
    return Status::InvalidArgument(std::string(what) + " " + dir + " is a symbolic link");
  }
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) {
      return Status::InvalidArgument(std::string(what) + " " + dir + " is not a directory");
    }
    if (!fs::is_empty(dir, ec) || ec) {
      return Status(StatusCode::kAlreadyExists, std::string(what) + " " + dir + " is not empty");
    }
    return Status::Ok();
  }
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  return Status::Ok();
}

Result<BackupManifest> WriteBackup(const Storage::Capture& capture, const std::string& dir,
                                   const BackupSource& source) {
  const fs::path root(dir);
  HashedFileWriter writer;
  KVATLAS_RETURN_IF_ERROR(writer.Open((root / kBackupStateFile).string()));
  RecordSummer summer;
  // The header carries the applied index, which the default family's `M` records hold:
  // those records (everything but the entries; small) wait in `pending` until the first
  // entry record or the end, then the header and they are written; entries stream.
  std::string pending;
  bool header_written = false;
  const auto write_header = [&]() -> Status {
    std::string header = "KVSN";
    header.push_back(static_cast<char>(1));
    PutFixed64(&header, summer.applied_index());
    KVATLAS_RETURN_IF_ERROR(writer.Append(header));
    KVATLAS_RETURN_IF_ERROR(writer.Append(pending));
    std::string().swap(pending);
    header_written = true;
    return Status::Ok();
  };
  KVATLAS_RETURN_IF_ERROR(capture.ForEachRecord([&](std::string_view key, std::string_view value) {
    const std::string encoded = EncodeRecord(key, value);
    KVATLAS_RETURN_IF_ERROR(summer.Add(key, value, encoded));
    if (!header_written && !key.empty() && key[0] == static_cast<char>(RecordType::kEntry)) {
      KVATLAS_RETURN_IF_ERROR(write_header());  // every default-family record came first
    }
    if (!header_written) {
      pending += encoded;
      return Status::Ok();
    }
    return writer.Append(encoded);
  }));
  if (!header_written) KVATLAS_RETURN_IF_ERROR(write_header());
  const uint32_t format_version = summer.format_version();
  const uint64_t hash_seed = summer.hash_seed();
  const StateDigest digest = summer.Finish();
  std::string trailer;
  PutFixed64(&trailer, digest.records);
  KVATLAS_RETURN_IF_ERROR(writer.Append(trailer));
  KVATLAS_ASSIGN_OR_RETURN(BackupFile file, writer.Finish(kBackupStateFile));

  BackupManifest manifest;
  manifest.created_at = UtcNow();
  manifest.source = source;
  manifest.applied_index = digest.applied_index;
  manifest.storage_format_version = format_version;
  manifest.hash_seed = hash_seed;
  manifest.records = digest.records;
  manifest.state_digest = digest.digest;
  manifest.files.push_back(std::move(file));
  KVATLAS_RETURN_IF_ERROR(WriteManifestLast(dir, manifest));
  return manifest;
}

Result<BackupManifest> WriteReceivedPart(
    const std::string& dir, const BackupManifest& manifest,
    const std::function<Result<std::string>(uint64_t offset)>& read_at) {
  if (manifest.files.size() != 1 || manifest.files[0].name != kBackupStateFile) {
    return Corrupt(dir,
                   "the part's manifest lists files other than " + std::string(kBackupStateFile));
  }
  const BackupFile& listed = manifest.files[0];
  HashedFileWriter writer;
  KVATLAS_RETURN_IF_ERROR(writer.Open((fs::path(dir) / kBackupStateFile).string()));
  for (uint64_t offset = 0; offset < listed.bytes;) {
    KVATLAS_ASSIGN_OR_RETURN(std::string chunk, read_at(offset));
    if (chunk.empty() || chunk.size() > listed.bytes - offset) {
      return Corrupt(dir, std::string(kBackupStateFile) + ": the sender's file is not the " +
                              std::to_string(listed.bytes) + " bytes its manifest lists (at byte " +
                              std::to_string(offset) + ")");
    }
    KVATLAS_RETURN_IF_ERROR(writer.Append(chunk));
    offset += chunk.size();
  }
  KVATLAS_ASSIGN_OR_RETURN(BackupFile file, writer.Finish(kBackupStateFile));
  if (file.sha256 != listed.sha256) {
    return Corrupt(dir, std::string(kBackupStateFile) +
                            ": SHA-256 differs from the manifest's (damaged in transfer)");
  }
  KVATLAS_RETURN_IF_ERROR(WriteManifestLast(dir, manifest));
  return manifest;
}

Result<BackupManifest> VerifyBackup(const std::string& dir, std::string* state) {
  const fs::path root(dir);
  const std::string manifest_path = (root / kBackupManifestFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(manifest_path, ec)) {
    return Status::NotFound("backup " + dir + ": no " + kBackupManifestFile +
                            " (not a backup, or an unfinished one)");
  }
  KVATLAS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(manifest_path, kMaxBackupManifestBytes));
  Result<BackupManifest> parsed = ParseManifest(text);
  if (!parsed) return Corrupt(dir, parsed.error().message());
  BackupManifest manifest = std::move(*parsed);
  if (manifest.files.size() != 1 || manifest.files[0].name != kBackupStateFile) {
    return Corrupt(dir,
                   std::string("the manifest must list exactly one file, ") + kBackupStateFile);
  }
  // The top of a backup of several groups holds the other groups' parts in groups/.
  const bool holds_groups = manifest.source.group == 1 && manifest.source.groups > 1;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (holds_groups && name == kBackupGroupsDir) continue;  // VerifyWholeBackup checks it
    if (name != kBackupManifestFile && name != kBackupStateFile) {
      return Corrupt(dir, "unexpected file " + name);
    }
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  const BackupFile& listed = manifest.files[0];
  const std::string path = (root / listed.name).string();
  if (fs::is_symlink(fs::symlink_status(path, ec)) || !fs::is_regular_file(path, ec)) {
    return Corrupt(dir, listed.name + " is missing or not a regular file");
  }
  KVATLAS_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path, listed.bytes));
  if (bytes.size() != listed.bytes) {
    return Corrupt(dir, listed.name + " has " + std::to_string(bytes.size()) +
                            " bytes, the manifest says " + std::to_string(listed.bytes));
  }
  Sha256 file_hash;
  file_hash.Update(bytes);
  if (file_hash.HexDigest() != listed.sha256) {
    return Corrupt(dir, listed.name + ": SHA-256 differs from the manifest's (damaged file)");
  }
  RecordSummer summer;
  Result<Revision> walked =
      Storage::WalkSnapshot(bytes, [&](std::string_view key, std::string_view value) {
        return summer.Add(key, value, EncodeRecord(key, value));
      });
  if (!walked) return Corrupt(dir, walked.error().message());
  const StateDigest digest = summer.Finish();
  if (*walked != manifest.applied_index || digest.applied_index != manifest.applied_index ||
      digest.records != manifest.records || digest.digest != manifest.state_digest) {
    return Corrupt(dir,
                   "the state file does not match the manifest's applied index, record "
                   "count or state digest");
  }
  if (state != nullptr) *state = std::move(bytes);
  return manifest;
}

std::string GroupPartDir(const std::string& dir, GroupId group) {
  if (group == 1) return dir;
  return (fs::path(dir) / kBackupGroupsDir / std::to_string(group)).string();
}

uint32_t GroupsInDataDir(const std::string& data_dir) {
  std::error_code ec;
  if (!fs::exists(fs::path(data_dir) / "db", ec)) return 0;
  uint32_t found = 1;
  while (found < kMaxGroupId &&
         fs::exists(fs::path(GroupPartDir(data_dir, found + 1)) / "db", ec)) {
    ++found;
  }
  return found;
}

Result<std::optional<uint32_t>> ReadReplicasRecord(const std::string& data_dir) {
  const std::string path = (fs::path(data_dir) / kReplicasRecordFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<uint32_t>();
  KVATLAS_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path, 16));
  uint32_t replicas = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, replicas);
  if (error != std::errc() || ptr + 1 != end || *ptr != '\n' || replicas > kMaxGroupMembers) {
    return Status::Corruption(path + ": not a replication factor (0.." +
                              std::to_string(kMaxGroupMembers) + " and a newline)");
  }
  return std::optional<uint32_t>(replicas);
}

Status WriteReplicasRecord(const std::string& data_dir, uint32_t replicas) {
  const fs::path root(data_dir);
  const std::string path = (root / kReplicasRecordFile).string();
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << replicas << '\n';
    if (!out.flush()) return Status::IOError("cannot write " + temporary);
  }
  KVATLAS_RETURN_IF_ERROR(FsyncPath(temporary));
  if (::rename(temporary.c_str(), path.c_str()) != 0) return Errno("cannot rename " + temporary);
  return FsyncPath(data_dir);
}

Result<Captures> CaptureEach(std::span<const Storage* const> storages) {
  Captures captures;
  for (const Storage* storage : storages) {
    KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage::Capture> capture, storage->CaptureAll());
    captures.images.push_back(capture.get());
    captures.owned.push_back(std::move(capture));
  }
  return captures;
}

Result<std::vector<BackupManifest>> WriteWholeBackup(
    std::span<const Storage::Capture* const> captures, const std::string& dir,
    BackupSource source) {
  return WriteWholeBackupWith(
      static_cast<uint32_t>(captures.size()),
      [captures](GroupId g, const std::string& part_dir, const BackupSource& part_source) {
        return WriteBackup(*captures[g - 1], part_dir, part_source);
      },
      dir, std::move(source));
}

Result<std::vector<BackupManifest>> WriteWholeBackupWith(uint32_t groups,
                                                         const BackupPartWriter& write,
                                                         const std::string& dir,
                                                         BackupSource source) {
  if (groups < 1 || groups > kMaxGroupId) {
    return Status::InvalidArgument("a backup holds 1.." + std::to_string(kMaxGroupId) +
                                   " groups, not " + std::to_string(groups));
  }
  std::vector<BackupManifest> parts(groups);
  source.groups = groups;
  // Group 1's part last: its manifest, written last, makes `dir` a whole backup.
  for (GroupId g = groups; g >= 1; --g) {
    source.group = g;
    const std::string part_dir = GroupPartDir(dir, g);
    // `dir` is empty but for groups/ written just before.
    Status prepared = g == 1 ? Status::Ok() : PrepareEmptyDirectory(part_dir, "backup directory");
    Result<BackupManifest> part =
        prepared.ok() ? write(g, part_dir, source) : Result<BackupManifest>(prepared);
    if (!part) {
      // Leave no half-written files behind: `dir` was empty, and without group 1's
      // manifest nothing in it would restore.
      std::error_code ec;
      fs::remove_all(fs::path(dir) / kBackupGroupsDir, ec);
      fs::remove(fs::path(dir) / kBackupStateFile, ec);
      fs::remove(fs::path(dir) / (std::string(kBackupManifestFile) + ".tmp"), ec);
      if (groups == 1) return part.status();
      return Status(part.error().code(),
                    "group " + std::to_string(g) + ": " + part.error().message());
    }
    parts[g - 1] = std::move(*part);
  }
  if (groups > 1) KVATLAS_RETURN_IF_ERROR(FsyncPath((fs::path(dir) / kBackupGroupsDir).string()));
  return parts;
}

Result<std::vector<BackupManifest>> VerifyWholeBackup(const std::string& dir) {
  KVATLAS_ASSIGN_OR_RETURN(BackupManifest first, VerifyBackup(dir, nullptr));
  if (first.source.group != 1) {
    return Corrupt(dir, "holds group " + std::to_string(first.source.group) + "'s part of a " +
                            std::to_string(first.source.groups) +
                            "-group backup, not a whole backup (give the directory above " +
                            kBackupGroupsDir + "/)");
  }
  const uint32_t groups = first.source.groups;
  std::vector<BackupManifest> parts;
  parts.push_back(std::move(first));
  if (groups == 1) return parts;
  const fs::path groups_dir = fs::path(dir) / kBackupGroupsDir;
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(groups_dir, ec);
  if (fs::is_symlink(status) || !fs::is_directory(status)) {
    return Corrupt(dir, "a backup of " + std::to_string(groups) + " groups, but " +
                            kBackupGroupsDir + "/ is missing or not a directory");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(groups_dir, ec)) {
    const std::string name = entry.path().filename().string();
    bool known = false;
    for (GroupId g = 2; g <= groups && !known; ++g) known = name == std::to_string(g);
    if (!known) {
      return Corrupt(dir, std::string("unexpected file ") + kBackupGroupsDir + "/" + name +
                              " (the backup holds groups 1.." + std::to_string(groups) + ")");
    }
  }
  if (ec) return Status::IOError("cannot list " + groups_dir.string() + ": " + ec.message());
  for (GroupId g = 2; g <= groups; ++g) {
    const std::string group = "group " + std::to_string(g) + ": ";
    Result<BackupManifest> part = VerifyBackup(GroupPartDir(dir, g), nullptr);
    if (!part) return Status(part.error().code(), group + part.error().message());
    if (part->source.group != g || part->source.groups != groups) {
      return Status::Corruption(group + "backup " + GroupPartDir(dir, g) + " holds group " +
                                std::to_string(part->source.group) + " of " +
                                std::to_string(part->source.groups) + "'s part");
    }
    if (part->hash_seed != parts[0].hash_seed) {
      return Status::Corruption(group + "backup " + GroupPartDir(dir, g) + ": hash seed " +
                                std::to_string(part->hash_seed) + " differs from group 1's " +
                                std::to_string(parts[0].hash_seed));
    }
    parts.push_back(std::move(*part));
  }
  return parts;
}

namespace {

// Restores one group's part `from` into `group_dir` (absent or empty): RestoreBackup.
Result<RestoreResult> RestorePart(const std::string& from, const std::string& group_dir) {
  std::string state;
  KVATLAS_ASSIGN_OR_RETURN(BackupManifest manifest, VerifyBackup(from, &state));
  KVATLAS_RETURN_IF_ERROR(PrepareEmptyDirectory(group_dir, "data directory"));
  RestoreResult result;
  result.manifest = std::move(manifest);
  result.db_path = (fs::path(group_dir) / "db").string();
  StorageOptions options;
  options.path = result.db_path;
  options.sync_writes = true;
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage, Storage::Open(options));
  KVATLAS_RETURN_IF_ERROR(storage->ReplaceAll(state));
  std::string().swap(state);
  // The old members' addresses name another cluster's servers; the new members announce
  // theirs. Revision 0: the new raft log's entries apply from 1 on top of this state.
  Registry registry;
  KVATLAS_RETURN_IF_ERROR(storage->LoadRegistry(&registry));
  MutationList drop;
  for (const auto& [id, addresses] : registry.servers) {
    Mutation m;
    m.kind = MutationKind::kDeleteServerAddresses;
    m.stamp = id;
    drop.push_back(std::move(m));
  }
  result.dropped_members = drop.size();
  KVATLAS_RETURN_IF_ERROR(storage->Write(0, drop));
  KVATLAS_RETURN_IF_ERROR(storage->Flush());
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage::Capture> capture, storage->CaptureAll());
  KVATLAS_ASSIGN_OR_RETURN(StateDigest restored, DigestOf(*capture));
  if (restored.digest != result.manifest.state_digest) {
    return Status::Corruption("restored database " + result.db_path + " has state digest " +
                              restored.digest + ", the backup " + result.manifest.state_digest);
  }
  HashedFileWriter marker;
  KVATLAS_RETURN_IF_ERROR(marker.Open((fs::path(group_dir) / kRestoredMarker).string()));
  KVATLAS_RETURN_IF_ERROR(
      marker.Append("restored from " + from + " (state digest " + restored.digest +
                    "); removed by the server once its first raft snapshot holds the state\n"));
  KVATLAS_RETURN_IF_ERROR(marker.Finish(kRestoredMarker).status());
  KVATLAS_RETURN_IF_ERROR(FsyncPath(group_dir));
  return result;
}

}  // namespace

Result<RestoreResult> RestoreBackup(const std::string& from, const std::string& data_dir) {
  // Every part is checked before anything is created.
  KVATLAS_ASSIGN_OR_RETURN(std::vector<BackupManifest> parts, VerifyWholeBackup(from));
  KVATLAS_RETURN_IF_ERROR(PrepareEmptyDirectory(data_dir, "data directory"));
  RestoreResult result;
  for (GroupId g = 1; g <= parts.size(); ++g) {
    Result<RestoreResult> part = RestorePart(GroupPartDir(from, g), GroupPartDir(data_dir, g));
    if (!part) {
      if (g == 1) return part.status();
      return Status(part.error().code(),
                    "group " + std::to_string(g) + ": " + part.error().message());
    }
    if (g == 1) {
      result.manifest = part->manifest;
      result.db_path = part->db_path;
    }
    result.dropped_members += part->dropped_members;
    result.groups.push_back(std::move(part->manifest));
  }
  if (parts.size() > 1) {
    KVATLAS_RETURN_IF_ERROR(FsyncPath((fs::path(data_dir) / kBackupGroupsDir).string()));
    if (result.manifest.source.replicas) {
      KVATLAS_RETURN_IF_ERROR(WriteReplicasRecord(data_dir, *result.manifest.source.replicas));
    }
    KVATLAS_RETURN_IF_ERROR(FsyncPath(data_dir));
  }
  return result;
}

}  // namespace kvatlas::server
