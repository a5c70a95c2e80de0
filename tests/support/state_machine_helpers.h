// Shared by the unit tests that drive a real StateMachine: a batch of one store, a
// publisher's registration, applying one batch at the next revision, the state as a raft
// snapshot, and a RocksDB storage to keep it in.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/internal/chunked_bytes.h"
#include "server/state/state_machine.h"

namespace kvatlas::testing {

// One StoreCommand of `keys` (block keys, KeyMode::kSequence from the root).
inline server::CommandBatch StoreBatch(const ContextKey& context, const HolderKey& holder,
                                       std::vector<uint64_t> keys, Tier tier = Tier::kGpu,
                                       std::vector<std::string> locations = {}) {
  server::StoreCommand store;
  store.context = context;
  store.holder = holder;
  store.tier = tier;
  store.hashes = std::move(keys);
  store.locations = std::move(locations);
  server::CommandBatch batch;
  batch.commands.emplace_back(std::move(store));
  return batch;
}

// A followed publisher's registration for `instance` (model "m", block size 2, a fixed
// endpoint): what the registry and lease tests register.
inline server::Registration PublisherRegistration(const std::string& instance) {
  server::Registration r;
  r.endpoint = "tcp://127.0.0.1:5557";
  r.model = "m";
  r.instance_id = instance;
  r.block_size = 2;
  return r;
}

// Applies `batch` alone; the test fails unless it applies. Returns its revision.
inline Revision ApplyOne(server::StateMachine& machine, const server::CommandBatch& batch) {
  const server::CommandBatch* one[] = {&batch};
  Result<Revision> revision = machine.Apply(one);
  REQUIRE(revision.has_value());
  return *revision;
}

// The machine's state serialised as a raft snapshot, in chunks of `chunk_bytes` (records
// straddle chunks when they are small).
inline std::string SnapshotBytes(server::StateMachine& machine, size_t chunk_bytes) {
  auto capture = machine.CaptureState();
  REQUIRE(capture.has_value());
  ChunkedBytes chunks(chunk_bytes);
  REQUIRE((*capture)->SerializeInto(&chunks).ok());
  std::string snapshot;
  for (const ChunkedBytes::Chunk& chunk : chunks.chunks()) snapshot.append(chunk.data, chunk.size);
  return snapshot;
}

// A RocksDB storage at `path`, without fsyncs.
inline std::unique_ptr<server::Storage> OpenStorage(const std::string& path) {
  server::StorageOptions options;
  options.path = path;
  options.sync_writes = false;
  auto storage = server::Storage::Open(options);
  REQUIRE(storage.has_value());
  return std::move(*storage);
}

}  // namespace kvatlas::testing
