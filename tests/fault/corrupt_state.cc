// corrupt_state DB_DIR: damages a stopped server's RocksDB state the way a lost write or a
// bad disk would, for audit_test.py: deletes the first entry record (`T`, the `entries`
// column family, docs/storage.md) and nothing else — the applied index stays, so the
// restarted server neither replays the log over it nor restores a snapshot. Prints the
// deleted key in hex. Exit 0 on success, 1 with a message otherwise.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: corrupt_state DB_DIR\n");
    return 1;
  }
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"entries", rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(), argv[1], families, &handles, &raw);
  if (!s.ok()) {
    std::fprintf(stderr, "corrupt_state: opening %s: %s\n", argv[1], s.ToString().c_str());
    return 1;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string key;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[1]));
    it->SeekToFirst();
    if (it->Valid()) key = it->key().ToString();
  }
  int code = 0;
  if (key.empty()) {
    std::fprintf(stderr, "corrupt_state: %s holds no entry record\n", argv[1]);
    code = 1;
  } else {
    s = db->Delete(rocksdb::WriteOptions(), handles[1], key);
    if (s.ok()) s = db->Flush(rocksdb::FlushOptions(), handles);
    if (!s.ok()) {
      std::fprintf(stderr, "corrupt_state: deleting: %s\n", s.ToString().c_str());
      code = 1;
    } else {
      std::printf("deleted entry record ");
      for (const unsigned char c : key) std::printf("%02x", c);
      std::printf("\n");
    }
  }
  for (rocksdb::ColumnFamilyHandle* handle : handles) db->DestroyColumnFamilyHandle(handle);
  return code;
}
