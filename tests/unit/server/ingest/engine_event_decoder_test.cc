// Golden-byte tests for DecodeEngineBatch. Every payload below was produced once with
// Debian's python3-msgpack 1.0.3 (`/usr/bin/python3 -c 'import msgpack; ...'`); the comment
// above each array is the Python expression, so the bytes are independent of the decoder.
#include "server/ingest/engine_event_decoder.h"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/server/ingest/engine_batch_builder.h"

namespace kvatlas::server {
namespace {

// msgpack.packb([1700000000.5, [["BlockStored", [1, 2], None, [1, 2, 3, 4, 5, 6, 7, 8], 4, None,
// "GPU", None, None, 0, "full_attention", None], ["BlockRemoved", [1], "GPU", 0]], 0],
// use_bin_type=True)
constexpr uint8_t kVllmPositional3[] = {
    0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x20, 0x00, 0x00, 0x92, 0x9c, 0xab, 0x42,
    0x6c, 0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0x01, 0x02, 0xc0,
    0x98, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x04, 0xc0, 0xa3, 0x47, 0x50,
    0x55, 0xc0, 0xc0, 0x00, 0xae, 0x66, 0x75, 0x6c, 0x6c, 0x5f, 0x61, 0x74, 0x74, 0x65,
    0x6e, 0x74, 0x69, 0x6f, 0x6e, 0xc0, 0x94, 0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x52,
    0x65, 0x6d, 0x6f, 0x76, 0x65, 0x64, 0x91, 0x01, 0xa3, 0x47, 0x50, 0x55, 0x00, 0x00};

// msgpack.packb([1.0, [["BlockStored", [7], 6, [1, 2, 3, 4], 4, None]]], use_bin_type=True)
constexpr uint8_t kVllmPositional2[] = {0x92, 0xcb, 0x3f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00,
                                        0x00, 0x91, 0x96, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b,
                                        0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0x07, 0x06,
                                        0x94, 0x01, 0x02, 0x03, 0x04, 0x04, 0xc0};

// msgpack.packb([1.25, [{"type": "BlockStored", "block_hashes": [0xF000000000000001, 5],
// "parent_block_hash": None, "token_ids": [1, 2, 3, 4], "block_size": 2, "lora_id": None, "medium":
// "GPU", "lora_name": None, "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind":
// "full_attention"}, {"block_hashes": [0xFFFFFFFFFFFFFFFF], "type": "BlockRemoved", "medium":
// "CPU"}], 0], use_bin_type=True)
constexpr uint8_t kVllmTaggedMap[] = {
    0x93, 0xcb, 0x3f, 0xf4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x92, 0x8b, 0xa4, 0x74, 0x79, 0x70,
    0x65, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0xac, 0x62, 0x6c,
    0x6f, 0x63, 0x6b, 0x5f, 0x68, 0x61, 0x73, 0x68, 0x65, 0x73, 0x92, 0xcf, 0xf0, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01, 0x05, 0xb1, 0x70, 0x61, 0x72, 0x65, 0x6e, 0x74, 0x5f, 0x62, 0x6c, 0x6f,
    0x63, 0x6b, 0x5f, 0x68, 0x61, 0x73, 0x68, 0xc0, 0xa9, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x5f, 0x69,
    0x64, 0x73, 0x94, 0x01, 0x02, 0x03, 0x04, 0xaa, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x73, 0x69,
    0x7a, 0x65, 0x02, 0xa7, 0x6c, 0x6f, 0x72, 0x61, 0x5f, 0x69, 0x64, 0xc0, 0xa6, 0x6d, 0x65, 0x64,
    0x69, 0x75, 0x6d, 0xa3, 0x47, 0x50, 0x55, 0xa9, 0x6c, 0x6f, 0x72, 0x61, 0x5f, 0x6e, 0x61, 0x6d,
    0x65, 0xc0, 0xaa, 0x65, 0x78, 0x74, 0x72, 0x61, 0x5f, 0x6b, 0x65, 0x79, 0x73, 0x92, 0xc0, 0xc0,
    0xa9, 0x67, 0x72, 0x6f, 0x75, 0x70, 0x5f, 0x69, 0x64, 0x78, 0x00, 0xb2, 0x6b, 0x76, 0x5f, 0x63,
    0x61, 0x63, 0x68, 0x65, 0x5f, 0x73, 0x70, 0x65, 0x63, 0x5f, 0x6b, 0x69, 0x6e, 0x64, 0xae, 0x66,
    0x75, 0x6c, 0x6c, 0x5f, 0x61, 0x74, 0x74, 0x65, 0x6e, 0x74, 0x69, 0x6f, 0x6e, 0x83, 0xac, 0x62,
    0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x68, 0x61, 0x73, 0x68, 0x65, 0x73, 0x91, 0xcf, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xa4, 0x74, 0x79, 0x70, 0x65, 0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b,
    0x52, 0x65, 0x6d, 0x6f, 0x76, 0x65, 0x64, 0xa6, 0x6d, 0x65, 0x64, 0x69, 0x75, 0x6d, 0xa3, 0x43,
    0x50, 0x55, 0x00};

// msgpack.packb({"ts": 2.5, "events": [["AllBlocksCleared"]], "data_parallel_rank": 3, "extra": 1},
// use_bin_type=True)
constexpr uint8_t kOuterMap[] = {0x84, 0xa2, 0x74, 0x73, 0xcb, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0xa6, 0x65, 0x76, 0x65, 0x6e, 0x74, 0x73, 0x91, 0x91,
                                 0xb0, 0x41, 0x6c, 0x6c, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x43,
                                 0x6c, 0x65, 0x61, 0x72, 0x65, 0x64, 0xb2, 0x64, 0x61, 0x74, 0x61,
                                 0x5f, 0x70, 0x61, 0x72, 0x61, 0x6c, 0x6c, 0x65, 0x6c, 0x5f, 0x72,
                                 0x61, 0x6e, 0x6b, 0x03, 0xa5, 0x65, 0x78, 0x74, 0x72, 0x61, 0x01};

// msgpack.packb([0.0, [["BlockStored", [bytes(range(32)), b"\x01\x02\x03\x04"], bytes(range(32,
// 64)), [], 0, None, "CPU", None]]], use_bin_type=True)
constexpr uint8_t kBinHashes[] = {
    0x92, 0xcb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x91, 0x98, 0xab, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0xc4, 0x20, 0x00, 0x01, 0x02, 0x03, 0x04,
    0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14,
    0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0xc4, 0x04, 0x01, 0x02, 0x03,
    0x04, 0xc4, 0x20, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c,
    0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c,
    0x3d, 0x3e, 0x3f, 0x90, 0x00, 0xc0, 0xa3, 0x43, 0x50, 0x55, 0xc0};

// msgpack.packb([3.0, [["BlockStored", [-1, -9223372036854775808], 12345, [1, 2], 2, None, "GPU",
// {"cache_salt": "s1", "session_id": "x"}], ["BlockRemoved", [-2], "CPU_PINNED"]], 1],
// use_bin_type=True)
constexpr uint8_t kSglang[] = {
    0x93, 0xcb, 0x40, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x92, 0x98, 0xab, 0x42, 0x6c,
    0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0xff, 0xd3, 0x80, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0xcd, 0x30, 0x39, 0x92, 0x01, 0x02, 0x02, 0xc0, 0xa3, 0x47,
    0x50, 0x55, 0x82, 0xaa, 0x63, 0x61, 0x63, 0x68, 0x65, 0x5f, 0x73, 0x61, 0x6c, 0x74, 0xa2,
    0x73, 0x31, 0xaa, 0x73, 0x65, 0x73, 0x73, 0x69, 0x6f, 0x6e, 0x5f, 0x69, 0x64, 0xa1, 0x78,
    0x93, 0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x52, 0x65, 0x6d, 0x6f, 0x76, 0x65, 0x64, 0x91,
    0xfe, 0xaa, 0x43, 0x50, 0x55, 0x5f, 0x50, 0x49, 0x4e, 0x4e, 0x45, 0x44, 0x01};

// msgpack.packb([1700000000000, [{"event_id": 7, "timestamp": 1700000000000, "event_type":
// "stored", "model_name": "llama", "block_size": 4, "tenant_id": "t1", "backend_id": "mc",
// "medium": "cpu", "dp_rank": 0, "seq_hashes": [11, 12], "base_block_idx": 3, "parent_hash": 10,
// "token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "object_key": "obj-1", "additional_salt": "", "lora_name":
// None}, {"event_type": "REMOVED", "type": "BlockStored", "block_hashes": [11], "location":
// ["loc-a"]}, {"event_type": "cleared", "model_name": "llama"}, {"type": "stored", "seq_hashes":
// [5]}], None], use_bin_type=True)
constexpr uint8_t kMooncake[] = {
    0x93, 0xcf, 0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, 0x94, 0xde, 0x00, 0x10, 0xa8, 0x65,
    0x76, 0x65, 0x6e, 0x74, 0x5f, 0x69, 0x64, 0x07, 0xa9, 0x74, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61,
    0x6d, 0x70, 0xcf, 0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, 0xaa, 0x65, 0x76, 0x65, 0x6e,
    0x74, 0x5f, 0x74, 0x79, 0x70, 0x65, 0xa6, 0x73, 0x74, 0x6f, 0x72, 0x65, 0x64, 0xaa, 0x6d, 0x6f,
    0x64, 0x65, 0x6c, 0x5f, 0x6e, 0x61, 0x6d, 0x65, 0xa5, 0x6c, 0x6c, 0x61, 0x6d, 0x61, 0xaa, 0x62,
    0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x73, 0x69, 0x7a, 0x65, 0x04, 0xa9, 0x74, 0x65, 0x6e, 0x61, 0x6e,
    0x74, 0x5f, 0x69, 0x64, 0xa2, 0x74, 0x31, 0xaa, 0x62, 0x61, 0x63, 0x6b, 0x65, 0x6e, 0x64, 0x5f,
    0x69, 0x64, 0xa2, 0x6d, 0x63, 0xa6, 0x6d, 0x65, 0x64, 0x69, 0x75, 0x6d, 0xa3, 0x63, 0x70, 0x75,
    0xa7, 0x64, 0x70, 0x5f, 0x72, 0x61, 0x6e, 0x6b, 0x00, 0xaa, 0x73, 0x65, 0x71, 0x5f, 0x68, 0x61,
    0x73, 0x68, 0x65, 0x73, 0x92, 0x0b, 0x0c, 0xae, 0x62, 0x61, 0x73, 0x65, 0x5f, 0x62, 0x6c, 0x6f,
    0x63, 0x6b, 0x5f, 0x69, 0x64, 0x78, 0x03, 0xab, 0x70, 0x61, 0x72, 0x65, 0x6e, 0x74, 0x5f, 0x68,
    0x61, 0x73, 0x68, 0x0a, 0xa9, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x5f, 0x69, 0x64, 0x73, 0x98, 0x01,
    0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xaa, 0x6f, 0x62, 0x6a, 0x65, 0x63, 0x74, 0x5f, 0x6b,
    0x65, 0x79, 0xa5, 0x6f, 0x62, 0x6a, 0x2d, 0x31, 0xaf, 0x61, 0x64, 0x64, 0x69, 0x74, 0x69, 0x6f,
    0x6e, 0x61, 0x6c, 0x5f, 0x73, 0x61, 0x6c, 0x74, 0xa0, 0xa9, 0x6c, 0x6f, 0x72, 0x61, 0x5f, 0x6e,
    0x61, 0x6d, 0x65, 0xc0, 0x84, 0xaa, 0x65, 0x76, 0x65, 0x6e, 0x74, 0x5f, 0x74, 0x79, 0x70, 0x65,
    0xa7, 0x52, 0x45, 0x4d, 0x4f, 0x56, 0x45, 0x44, 0xa4, 0x74, 0x79, 0x70, 0x65, 0xab, 0x42, 0x6c,
    0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0xac, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x5f,
    0x68, 0x61, 0x73, 0x68, 0x65, 0x73, 0x91, 0x0b, 0xa8, 0x6c, 0x6f, 0x63, 0x61, 0x74, 0x69, 0x6f,
    0x6e, 0x91, 0xa5, 0x6c, 0x6f, 0x63, 0x2d, 0x61, 0x82, 0xaa, 0x65, 0x76, 0x65, 0x6e, 0x74, 0x5f,
    0x74, 0x79, 0x70, 0x65, 0xa7, 0x63, 0x6c, 0x65, 0x61, 0x72, 0x65, 0x64, 0xaa, 0x6d, 0x6f, 0x64,
    0x65, 0x6c, 0x5f, 0x6e, 0x61, 0x6d, 0x65, 0xa5, 0x6c, 0x6c, 0x61, 0x6d, 0x61, 0x82, 0xa4, 0x74,
    0x79, 0x70, 0x65, 0xa6, 0x73, 0x74, 0x6f, 0x72, 0x65, 0x64, 0xaa, 0x73, 0x65, 0x71, 0x5f, 0x68,
    0x61, 0x73, 0x68, 0x65, 0x73, 0x91, 0x05, 0xc0};

// msgpack.packb([0.0, [["BlockUpdated", [1]], {"type": "Mystery"}, ["BlockStored", [1], None,
// [-1]], ["BlockStored", [1], None, [], 0, None, "GPU", None, None, 0, "full_attention", 128,
// "local", "extra1", "extra2"], {"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU",
// "foo": 1, "token_ids": [1]}, 5, ["BlockStored", ["abc"]], ["AllBlocksCleared", 1]], None],
// use_bin_type=True)
constexpr uint8_t kSkipsAndUnknowns[] = {
    0x93, 0xcb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x98, 0x92, 0xac, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x55, 0x70, 0x64, 0x61, 0x74, 0x65, 0x64, 0x91, 0x01, 0x81, 0xa4, 0x74, 0x79, 0x70,
    0x65, 0xa7, 0x4d, 0x79, 0x73, 0x74, 0x65, 0x72, 0x79, 0x94, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b,
    0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0x01, 0xc0, 0x91, 0xff, 0x9f, 0xab, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0x01, 0xc0, 0x90, 0x00, 0xc0, 0xa3, 0x47,
    0x50, 0x55, 0xc0, 0xc0, 0x00, 0xae, 0x66, 0x75, 0x6c, 0x6c, 0x5f, 0x61, 0x74, 0x74, 0x65, 0x6e,
    0x74, 0x69, 0x6f, 0x6e, 0xcc, 0x80, 0xa5, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0xa6, 0x65, 0x78, 0x74,
    0x72, 0x61, 0x31, 0xa6, 0x65, 0x78, 0x74, 0x72, 0x61, 0x32, 0x85, 0xa4, 0x74, 0x79, 0x70, 0x65,
    0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x52, 0x65, 0x6d, 0x6f, 0x76, 0x65, 0x64, 0xac, 0x62, 0x6c,
    0x6f, 0x63, 0x6b, 0x5f, 0x68, 0x61, 0x73, 0x68, 0x65, 0x73, 0x91, 0x03, 0xa6, 0x6d, 0x65, 0x64,
    0x69, 0x75, 0x6d, 0xa3, 0x47, 0x50, 0x55, 0xa3, 0x66, 0x6f, 0x6f, 0x01, 0xa9, 0x74, 0x6f, 0x6b,
    0x65, 0x6e, 0x5f, 0x69, 0x64, 0x73, 0x91, 0x01, 0x05, 0x92, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b,
    0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0xa3, 0x61, 0x62, 0x63, 0x92, 0xb0, 0x41, 0x6c, 0x6c,
    0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x43, 0x6c, 0x65, 0x61, 0x72, 0x65, 0x64, 0x01, 0xc0};

// msgpack.packb([0.0, [["BlockStored", [1, 2], None, [1, 2, 3, 4], 2, 1, "GPU", "my-lora",
// [["my-lora", "salt-1"], ["my-lora"]], 0], ["BlockStored", [3], 2, [5, 6], 2, None, "GPU", None,
// [["img-1"]]]]], use_bin_type=True)
constexpr uint8_t kExtraKeysLoraSalt[] = {
    0x92, 0xcb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x92, 0x9a, 0xab, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0x01, 0x02, 0xc0, 0x94, 0x01, 0x02, 0x03,
    0x04, 0x02, 0x01, 0xa3, 0x47, 0x50, 0x55, 0xa7, 0x6d, 0x79, 0x2d, 0x6c, 0x6f, 0x72, 0x61, 0x92,
    0x92, 0xa7, 0x6d, 0x79, 0x2d, 0x6c, 0x6f, 0x72, 0x61, 0xa6, 0x73, 0x61, 0x6c, 0x74, 0x2d, 0x31,
    0x91, 0xa7, 0x6d, 0x79, 0x2d, 0x6c, 0x6f, 0x72, 0x61, 0x00, 0x99, 0xab, 0x42, 0x6c, 0x6f, 0x63,
    0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0x03, 0x02, 0x92, 0x05, 0x06, 0x02, 0xc0, 0xa3,
    0x47, 0x50, 0x55, 0xc0, 0x91, 0x91, 0xa5, 0x69, 0x6d, 0x67, 0x2d, 0x31};

// msgpack.packb([0.0, [["BlockStored", [1, 2], None, [1, 2, 3, 4], 2, None, "GPU", None,
// [[["img-a", 0], "salt-2"], [["img-a", -2]]]], ["BlockStored", [1, 2], None, [1, 2, 3, 4], 2,
// None, "GPU", None, [["img-b"], ["img-b"]]], ["BlockStored", [1], None, [1, 2], 2, None, "GPU",
// None, [[bytes(32)]]]]], use_bin_type=True)
constexpr uint8_t kExtraKeysMultimodal[] = {
    0x92, 0xcb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x99, 0xab, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0x01, 0x02, 0xc0, 0x94, 0x01, 0x02, 0x03,
    0x04, 0x02, 0xc0, 0xa3, 0x47, 0x50, 0x55, 0xc0, 0x92, 0x92, 0x92, 0xa5, 0x69, 0x6d, 0x67, 0x2d,
    0x61, 0x00, 0xa6, 0x73, 0x61, 0x6c, 0x74, 0x2d, 0x32, 0x91, 0x92, 0xa5, 0x69, 0x6d, 0x67, 0x2d,
    0x61, 0xfe, 0x99, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92,
    0x01, 0x02, 0xc0, 0x94, 0x01, 0x02, 0x03, 0x04, 0x02, 0xc0, 0xa3, 0x47, 0x50, 0x55, 0xc0, 0x92,
    0x91, 0xa5, 0x69, 0x6d, 0x67, 0x2d, 0x62, 0x91, 0xa5, 0x69, 0x6d, 0x67, 0x2d, 0x62, 0x99, 0xab,
    0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0x01, 0xc0, 0x92, 0x01,
    0x02, 0x02, 0xc0, 0xa3, 0x47, 0x50, 0x55, 0xc0, 0x91, 0x91, 0xc4, 0x20, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

// msgpack.packb([1.5, []], use_single_float=True)
constexpr uint8_t kFloat32Ts[] = {0x92, 0xca, 0x3f, 0xc0, 0x00, 0x00, 0x90};

Result<EngineBatch> Decode(std::span<const uint8_t> bytes) { return DecodeEngineBatch(bytes); }

Result<EngineBatch> Decode(const std::vector<uint8_t>& bytes) {
  return DecodeEngineBatch(std::span<const uint8_t>(bytes));
}

// Decodes `bytes`, which must be a batch, and returns it.
EngineBatch MustDecode(std::span<const uint8_t> bytes) {
  Result<EngineBatch> batch = Decode(bytes);
  REQUIRE_MESSAGE(batch.has_value(), batch.status().ToString());
  return std::move(batch).value();
}

std::string ErrorOf(const std::vector<uint8_t>& bytes) {
  const Result<EngineBatch> batch = Decode(bytes);
  REQUIRE(!batch.has_value());
  CHECK(batch.error().code() == StatusCode::kInvalidArgument);
  return batch.error().message();
}

using namespace test;  // NOLINT(build/namespaces): the payload builders

using Hashes = std::vector<uint64_t>;
using Tokens = std::vector<uint32_t>;
using Strings = std::vector<std::string>;

TEST_SUITE("EngineEventDecoder") {
  TEST_CASE("EngineEventDecoder: vLLM positional batch of 3 with stored and removed") {
    const EngineBatch batch = MustDecode(kVllmPositional3);
    CHECK(batch.timestamp == 1700000000.5);
    CHECK(batch.dp_rank == 0);
    CHECK(batch.skipped_events == 0);
    CHECK(batch.unknown_fields == 0);
    REQUIRE(batch.events.size() == 2);
    const EngineEvent& stored = batch.events[0];
    CHECK(stored.kind == EngineEventKind::kStored);
    CHECK(stored.block_hashes == Hashes{1, 2});
    CHECK(!stored.parent_hash.has_value());
    CHECK(stored.token_ids == Tokens{1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(stored.block_size == 4);
    CHECK(!stored.lora_id.has_value());
    CHECK(stored.medium == "GPU");
    CHECK(!stored.lora_name.has_value());
    CHECK(!stored.cache_salt.has_value());
    CHECK(!stored.has_multimodal_extra_keys);
    CHECK(stored.group_idx == 0);
    CHECK(stored.kv_cache_spec_kind == "full_attention");
    CHECK(!stored.kv_cache_spec_sliding_window.has_value());
    CHECK(!stored.standard_hashes);
    CHECK(stored.locations.empty());
    const EngineEvent& removed = batch.events[1];
    CHECK(removed.kind == EngineEventKind::kRemoved);
    CHECK(removed.block_hashes == Hashes{1});
    CHECK(removed.medium == "GPU");
    CHECK(removed.group_idx == 0);
  }

  TEST_CASE("EngineEventDecoder: 2-element batch and omitted trailing fields") {
    const EngineBatch batch = MustDecode(kVllmPositional2);
    CHECK(batch.timestamp == 1.0);
    CHECK(!batch.dp_rank.has_value());
    REQUIRE(batch.events.size() == 1);
    const EngineEvent& e = batch.events[0];
    CHECK(e.block_hashes == Hashes{7});
    CHECK(e.parent_hash == 6u);
    CHECK(e.token_ids == Tokens{1, 2, 3, 4});
    CHECK(e.block_size == 4);
    CHECK(!e.medium.has_value());
    CHECK(!e.lora_name.has_value());
    CHECK(!e.group_idx.has_value());
    CHECK(batch.unknown_fields == 0);
  }

  TEST_CASE("EngineEventDecoder: type-tagged map events (vLLM >= PR #42892, kthena capture)") {
    const EngineBatch batch = MustDecode(kVllmTaggedMap);
    CHECK(batch.timestamp == 1.25);
    CHECK(batch.dp_rank == 0);
    CHECK(batch.unknown_fields == 0);
    REQUIRE(batch.events.size() == 2);
    const EngineEvent& stored = batch.events[0];
    CHECK(stored.kind == EngineEventKind::kStored);
    // 0xF000000000000001 >= 2^63 travels as uint64 (0xcf).
    CHECK(stored.block_hashes == Hashes{0xF000000000000001ull, 5});
    CHECK(!stored.parent_hash.has_value());
    CHECK(stored.token_ids == Tokens{1, 2, 3, 4});
    CHECK(stored.block_size == 2);
    CHECK(stored.medium == "GPU");
    CHECK(stored.group_idx == 0);
    CHECK(stored.kv_cache_spec_kind == "full_attention");
    CHECK(!stored.has_multimodal_extra_keys);
    CHECK(!stored.cache_salt.has_value());
    const EngineEvent& removed = batch.events[1];  // "type" is not the first key here
    CHECK(removed.kind == EngineEventKind::kRemoved);
    CHECK(removed.block_hashes == Hashes{0xFFFFFFFFFFFFFFFFull});
    CHECK(removed.medium == "CPU");
    CHECK(!removed.group_idx.has_value());
  }

  TEST_CASE("EngineEventDecoder: outer map batch, unknown outer field counted") {
    const EngineBatch batch = MustDecode(kOuterMap);
    CHECK(batch.timestamp == 2.5);
    CHECK(batch.dp_rank == 3);
    CHECK(batch.unknown_fields == 1);
    REQUIRE(batch.events.size() == 1);
    CHECK(batch.events[0].kind == EngineEventKind::kCleared);
    CHECK(batch.events[0].block_hashes.empty());
  }

  TEST_CASE("EngineEventDecoder: float32 timestamp and an empty events array") {
    const EngineBatch batch = MustDecode(kFloat32Ts);
    CHECK(batch.timestamp == 1.5);
    CHECK(batch.events.empty());
  }

  TEST_CASE("EngineEventDecoder: bin hashes fold to their last 8 bytes, big-endian") {
    const EngineBatch batch = MustDecode(kBinHashes);
    REQUIRE(batch.events.size() == 1);
    const EngineEvent& e = batch.events[0];
    // bytes(range(32)) ends in 0x18..0x1f; a 4-byte string is left-padded with zeros.
    CHECK(e.block_hashes == Hashes{0x18191a1b1c1d1e1full, 0x01020304ull});
    CHECK(e.parent_hash == 0x38393a3b3c3d3e3full);
    CHECK(e.token_ids.empty());
    CHECK(e.block_size == 0);
    CHECK(e.medium == "CPU");
  }

  TEST_CASE("EngineEventDecoder: SGLang metadata map gives cache_salt; signed hashes") {
    const EngineBatch batch = MustDecode(kSglang);
    CHECK(batch.dp_rank == 1);
    CHECK(batch.unknown_fields == 0);
    REQUIRE(batch.events.size() == 2);
    const EngineEvent& stored = batch.events[0];
    CHECK(stored.block_hashes == Hashes{0xFFFFFFFFFFFFFFFFull, 0x8000000000000000ull});
    CHECK(stored.parent_hash == 12345u);
    CHECK(stored.cache_salt == "s1");
    CHECK(!stored.lora_name.has_value());
    CHECK(stored.medium == "GPU");
    const EngineEvent& removed = batch.events[1];
    CHECK(removed.kind == EngineEventKind::kRemoved);
    CHECK(removed.block_hashes == Hashes{0xFFFFFFFFFFFFFFFEull});
    CHECK(removed.medium == "CPU_PINNED");
  }

  TEST_CASE("EngineEventDecoder: Mooncake RFC #1527 stored, removed and cleared maps") {
    const EngineBatch batch = MustDecode(kMooncake);
    CHECK(batch.timestamp == 1700000000000.0);
    CHECK(!batch.dp_rank.has_value());
    CHECK(batch.unknown_fields == 0);  // envelope fields are known even when ignored
    CHECK(batch.skipped_events == 0);
    REQUIRE(batch.events.size() == 4);
    const EngineEvent& stored = batch.events[0];
    CHECK(stored.kind == EngineEventKind::kStored);
    CHECK(stored.standard_hashes);
    CHECK(stored.block_hashes == Hashes{11, 12});
    CHECK(stored.base_block_idx == 3u);
    CHECK(stored.parent_hash == 10u);
    CHECK(stored.token_ids == Tokens{1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(stored.block_size == 4);
    CHECK(stored.model_name == "llama");
    CHECK(stored.tenant_id == "t1");
    CHECK(stored.medium == "cpu");
    CHECK(!stored.lora_name.has_value());
    CHECK(stored.locations == Strings{"obj-1", "obj-1"});  // one string, repeated per block
    const EngineEvent& removed = batch.events[1];          // event_type wins over "type"
    CHECK(removed.kind == EngineEventKind::kRemoved);
    CHECK(removed.standard_hashes);
    CHECK(removed.block_hashes == Hashes{11});  // the block_hashes alias
    CHECK(removed.locations == Strings{"loc-a"});
    const EngineEvent& cleared = batch.events[2];
    CHECK(cleared.kind == EngineEventKind::kCleared);
    CHECK(cleared.model_name == "llama");
    CHECK(cleared.block_hashes.empty());
    const EngineEvent& lower_type = batch.events[3];  // "type": "stored" without event_type
    CHECK(lower_type.kind == EngineEventKind::kStored);
    CHECK(lower_type.standard_hashes);
    CHECK(lower_type.block_hashes == Hashes{5});
  }

  TEST_CASE("EngineEventDecoder: unknown tags and malformed events skipped, unknown fields") {
    const EngineBatch batch = MustDecode(kSkipsAndUnknowns);
    // Skipped: "BlockUpdated", "Mystery", token -1, the bare 5, a str hash.
    CHECK(batch.skipped_events == 5);
    // "foo" and "token_ids" in a removed map, the extra position of AllBlocksCleared.
    // `locality`, `ownership` and `session_id` (str at positions 12-14) are not counted.
    CHECK(batch.unknown_fields == 3);
    REQUIRE(batch.events.size() == 3);
    CHECK(batch.events[0].kind == EngineEventKind::kStored);
    CHECK(batch.events[0].kv_cache_spec_sliding_window == 128);
    CHECK(batch.events[1].kind == EngineEventKind::kRemoved);
    CHECK(batch.events[1].block_hashes == Hashes{3});
    CHECK(batch.events[1].token_ids.empty());
    CHECK(batch.events[2].kind == EngineEventKind::kCleared);
  }

  TEST_CASE("EngineEventDecoder: extra_keys with a LoRA name and a cache salt") {
    const EngineBatch batch = MustDecode(kExtraKeysLoraSalt);
    REQUIRE(batch.events.size() == 2);
    const EngineEvent& root = batch.events[0];
    CHECK(root.lora_id == 1);
    CHECK(root.lora_name == "my-lora");
    CHECK(root.cache_salt == "salt-1");
    CHECK(!root.has_multimodal_extra_keys);
    // A continuation run (parent set) has no salt: its bare string is a multimodal id.
    const EngineEvent& next = batch.events[1];
    CHECK(next.parent_hash == 2u);
    CHECK(!next.cache_salt.has_value());
    CHECK(next.has_multimodal_extra_keys);
  }

  TEST_CASE("EngineEventDecoder: extra_keys with multimodal tuples, spanning ids, embeds") {
    const EngineBatch batch = MustDecode(kExtraKeysMultimodal);
    REQUIRE(batch.events.size() == 3);
    CHECK(batch.events[0].cache_salt == "salt-2");
    CHECK(batch.events[0].has_multimodal_extra_keys);
    // "img-b" also appears in block 1: a multimodal id spanning blocks, not a salt.
    CHECK(!batch.events[1].cache_salt.has_value());
    CHECK(batch.events[1].has_multimodal_extra_keys);
    // A 32-byte prompt-embeds hash.
    CHECK(!batch.events[2].cache_salt.has_value());
    CHECK(batch.events[2].has_multimodal_extra_keys);
  }

  TEST_CASE("EngineEventDecoder: errors name the problem") {
    CHECK(ErrorOf({}).find("empty") != std::string::npos);
    const std::vector<uint8_t> full(std::begin(kVllmPositional3), std::end(kVllmPositional3));
    const std::vector<uint8_t> truncated(full.begin(), full.end() - 1);
    CHECK(ErrorOf(truncated).find("truncated") != std::string::npos);
    std::vector<uint8_t> trailing = full;
    trailing.push_back(0xc0);
    CHECK(ErrorOf(trailing).find("trailing") != std::string::npos);
    CHECK(ErrorOf({0xc1}).find("invalid msgpack at byte 0") != std::string::npos);
    // msgpack.packb(5)
    CHECK(ErrorOf({0x05}) == "batch: expected an array [ts, events, dp_rank] or a map, got int");
    // msgpack.packb([1.0, 5])
    CHECK(ErrorOf({0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x05}) ==
          "batch[1]: expected an array of events, got int");
    // msgpack.packb(["x", []])
    CHECK(ErrorOf({0x92, 0xa1, 0x78, 0x90}) == "batch[0]: expected a number (timestamp), got str");
    // msgpack.packb([1, [], "r"])
    CHECK(ErrorOf({0x93, 0x01, 0x90, 0xa1, 0x72}) ==
          "batch[2]: expected an int64 or nil (dp rank), got str");
    // msgpack.packb([1, [], None, None])
    CHECK(ErrorOf({0x94, 0x01, 0x90, 0xc0, 0xc0}) ==
          "batch: expected an array of 2 or 3 elements, got 4");
    // msgpack.packb({"ts": 1})
    CHECK(ErrorOf({0x81, 0xa2, 0x74, 0x73, 0x01}) == "batch: map without \"events\"");
    // msgpack.packb({"events": 1})
    CHECK(ErrorOf({0x81, 0xa6, 0x65, 0x76, 0x65, 0x6e, 0x74, 0x73, 0x01}) ==
          "batch.events: expected an array of events, got int");
  }

  TEST_CASE("EngineEventDecoder: hostile sizes and nesting are rejected cheaply") {
    // A 1000-deep nesting bomb: [[[[...nil...]]]].
    std::vector<uint8_t> bomb(1000, 0x91);
    bomb.push_back(0xc0);
    CHECK(ErrorOf(bomb).find("nested deeper") != std::string::npos);
    // Nesting just within the limit passes the guard (and then is not a batch).
    std::vector<uint8_t> deep(kMaxEngineBatchDepth, 0x91);
    deep.push_back(0xc0);
    CHECK(ErrorOf(deep).find("batch: expected an array of 2 or 3") != std::string::npos);
    // An array header declaring 2^32-1 elements (array32) must not allocate them.
    CHECK(ErrorOf({0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}).find("truncated") != std::string::npos);
    CHECK(ErrorOf({0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}).find("truncated") !=
          std::string::npos);
    // A str32 header declaring 4 GiB.
    CHECK(ErrorOf({0xdb, 0xff, 0xff, 0xff, 0xff, 0x61}).find("truncated") != std::string::npos);
  }

  TEST_CASE("EngineEventDecoder: one location string repeated for many blocks is bounded") {
    // {"event_type": "stored", "seq_hashes": [0] * 200000, "object_key": "k" * 4096}
    // built by hand: the location budget (16 x payload + 1 MiB) refuses ~800 MiB of copies.
    std::vector<uint8_t> bytes = {0x92, 0x00, 0x91, 0x83};
    const auto str = [&](const std::string& s) {
      bytes.push_back(0xda);  // str16
      bytes.push_back(static_cast<uint8_t>(s.size() >> 8));
      bytes.push_back(static_cast<uint8_t>(s.size()));
      bytes.insert(bytes.end(), s.begin(), s.end());
    };
    str("event_type");
    str("stored");
    str("seq_hashes");
    bytes.insert(bytes.end(), {0xdd, 0x00, 0x03, 0x0d, 0x40});  // array32 of 200000
    bytes.insert(bytes.end(), 200000, 0x00);
    str("object_key");
    str(std::string(4096, 'k'));
    const EngineBatch batch = MustDecode(bytes);
    CHECK(batch.events.empty());
    CHECK(batch.skipped_events == 1);
  }

  TEST_CASE("EngineEventDecoder: random mutations of valid payloads never crash") {
    const std::vector<std::span<const uint8_t>> seeds = {kVllmPositional3,   kVllmPositional2,
                                                         kVllmTaggedMap,     kOuterMap,
                                                         kBinHashes,         kSglang,
                                                         kMooncake,          kSkipsAndUnknowns,
                                                         kExtraKeysLoraSalt, kExtraKeysMultimodal,
                                                         kFloat32Ts};
    std::mt19937_64 rng(20261130);
    size_t decoded = 0;
    for (int round = 0; round < 20000; ++round) {
      const std::span<const uint8_t> seed = seeds[rng() % seeds.size()];
      std::vector<uint8_t> bytes(seed.begin(), seed.end());
      const int mutations = 1 + static_cast<int>(rng() % 4);
      for (int m = 0; m < mutations && !bytes.empty(); ++m) {
        const size_t at = rng() % bytes.size();
        switch (rng() % 4) {
          case 0:
            bytes[at] = static_cast<uint8_t>(rng());
            break;
          case 1:
            bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
            break;
          case 2:
            bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at));
            break;
          default:
            bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                         static_cast<uint8_t>(rng()));
        }
      }
      const Result<EngineBatch> batch = Decode(bytes);
      if (!batch.has_value()) {
        CHECK(batch.error().code() == StatusCode::kInvalidArgument);
        continue;
      }
      ++decoded;
      CHECK(batch->events.size() + batch->skipped_events <= bytes.size());
      for (const EngineEvent& e : batch->events) {
        CHECK(e.block_hashes.size() <= bytes.size());
        CHECK(e.token_ids.size() <= bytes.size());
        if (e.kind == EngineEventKind::kCleared) CHECK(e.block_hashes.empty());
      }
    }
    CHECK(decoded > 0);
  }

  TEST_CASE("EngineEventDecoder: SGLang tagged map with cache_salt and session_id fields") {
    const EngineBatch batch = MustDecode(PackBatch({StoredMap(-5, 2, [](Packer& pk) {
      Pair(pk, "cache_salt", std::string("tenant-a"));
      Pair(pk, "session_id", std::string("sess-1"));
    })}));
    REQUIRE(batch.events.size() == 1);
    CHECK(batch.events[0].block_hashes == Hashes{0xFFFFFFFFFFFFFFFBull});
    CHECK(batch.events[0].cache_salt == "tenant-a");
    CHECK(batch.unknown_fields == 0);
    CHECK(batch.skipped_events == 0);
    CHECK(batch.skipped_namespace_events == 0);
  }

  TEST_CASE("EngineEventDecoder: a nested metadata map holds the salt (map and array forms)") {
    const EngineBatch batch = MustDecode(PackBatch({
        StoredMap(1, 1,
                  [](Packer& pk) {
                    pk.pack(std::string("metadata"));
                    SaltMetadata(pk, "tenant-b");
                  }),
        StoredArray(2, 1, [](Packer& pk) { SaltMetadata(pk, "tenant-c"); }),
    }));
    REQUIRE(batch.events.size() == 2);
    CHECK(batch.events[0].cache_salt == "tenant-b");
    CHECK(!batch.events[0].lora_name.has_value());
    CHECK(batch.events[1].cache_salt == "tenant-c");
    CHECK(batch.unknown_fields == 0);
    CHECK(batch.skipped_namespace_events == 0);
  }

  TEST_CASE("EngineEventDecoder: vLLM's newer BlockStored fields in array and map form") {
    // Positions 12-14: locality, ownership, session_id; the salt from the extra keys.
    const PackFn array = StoredArray(3, 8, [](Packer& pk) {
      pk.pack(std::string("adapter"));
      pk.pack_array(1);
      pk.pack_array(2);
      pk.pack(std::string("adapter"));
      pk.pack(std::string("tenant-d"));
      pk.pack(0);
      pk.pack(std::string("full_attention"));
      pk.pack_nil();
      pk.pack(std::string("LOCAL"));
      pk.pack(std::string("cpu-offload"));
      pk.pack(std::string("sess-2"));
    });
    // The map form names the salt itself.
    const PackFn map = StoredMap(4, 5, [](Packer& pk) {
      NilPair(pk, "lora_name");
      Pair(pk, "locality", std::string("LOCAL"));
      Pair(pk, "ownership", std::string("cpu-offload"));
      Pair(pk, "session_id", std::string("sess-2"));
      Pair(pk, "cache_salt", std::string("tenant-e"));
    });
    // Typed extra keys (vLLM event_version 1) name the salt explicitly, even after a parent.
    const PackFn typed = StoredMap(5, 2, [](Packer& pk) {
      Pair(pk, "parent_block_hash", 4);
      pk.pack(std::string("extra_keys"));
      pk.pack_array(1);
      pk.pack_array(1);
      pk.pack_map(2);
      Pair(pk, "type", std::string("CacheSaltKey"));
      Pair(pk, "salt", std::string("tenant-f"));
    });
    const EngineBatch batch = MustDecode(PackBatch({array, map, typed}));
    REQUIRE(batch.events.size() == 3);
    CHECK(batch.events[0].cache_salt == "tenant-d");
    CHECK(batch.events[0].lora_name == "adapter");
    CHECK(batch.events[1].cache_salt == "tenant-e");
    CHECK(batch.events[2].cache_salt == "tenant-f");
    CHECK(!batch.events[2].has_multimodal_extra_keys);
    CHECK(batch.unknown_fields == 0);
    CHECK(batch.skipped_namespace_events == 0);
  }

  TEST_CASE("EngineEventDecoder: Mooncake additional_salt is the event's salt") {
    const EngineBatch batch = MustDecode(PackBatch({
        MooncakeStored(5, 1, [](Packer& pk) { Pair(pk, "additional_salt", std::string("t1")); }),
        MooncakeStored(6, 1, [](Packer& pk) { Pair(pk, "additional_salt", std::string()); }),
    }));
    REQUIRE(batch.events.size() == 2);
    CHECK(batch.events[0].cache_salt == "t1");
    CHECK(batch.events[1].cache_salt.value_or("") == "");
    CHECK(batch.skipped_namespace_events == 0);
  }

  TEST_CASE("EngineEventDecoder: a salt that cannot be read skips the event and counts it") {
    const std::vector<std::pair<const char*, PackFn>> cases = {
        {"cache_salt of type int", StoredMap(7, 1, [](Packer& pk) { Pair(pk, "cache_salt", 42); })},
        {"metadata of type str",
         StoredMap(7, 1, [](Packer& pk) { Pair(pk, "metadata", std::string("salt=x")); })},
        {"metadata.cache_salt of type array", StoredMap(7, 1,
                                                        [](Packer& pk) {
                                                          pk.pack(std::string("metadata"));
                                                          pk.pack_map(1);
                                                          Pair(pk, "cache_salt",
                                                               std::vector<int>{1});
                                                        })},
        {"an unknown field named *salt*",
         StoredMap(7, 1, [](Packer& pk) { Pair(pk, "tenant_salt", std::string("x")); })},
        {"an unknown field named *Salt* in metadata", StoredMap(7, 1,
                                                                [](Packer& pk) {
                                                                  pk.pack(std::string("metadata"));
                                                                  pk.pack_map(2);
                                                                  Pair(pk, "cache_salt",
                                                                       std::string("a"));
                                                                  Pair(pk, "Salt_Version", 2);
                                                                })},
        {"cache_salt and metadata.cache_salt disagree",
         StoredMap(7, 2,
                   [](Packer& pk) {
                     Pair(pk, "cache_salt", std::string("a"));
                     pk.pack(std::string("metadata"));
                     SaltMetadata(pk, "b");
                   })},
        {"array index 7 metadata with an int salt", StoredArray(7, 1,
                                                                [](Packer& pk) {
                                                                  pk.pack_map(1);
                                                                  Pair(pk, "cache_salt", 5);
                                                                })},
        {"array index 7 metadata with an unknown *salt* key",
         StoredArray(7, 1,
                     [](Packer& pk) {
                       pk.pack_map(2);
                       Pair(pk, "cache_salt", std::string("a"));
                       Pair(pk, "salt_scope", std::string("b"));
                     })},
        {"a typed extra key CacheSaltKey with an int salt",
         StoredMap(7, 1,
                   [](Packer& pk) {
                     pk.pack(std::string("extra_keys"));
                     pk.pack_array(1);
                     pk.pack_array(1);
                     pk.pack_map(2);
                     Pair(pk, "type", std::string("CacheSaltKey"));
                     Pair(pk, "salt", 5);
                   })},
        {"Mooncake additional_salt of type int",
         MooncakeStored(7, 1, [](Packer& pk) { Pair(pk, "additional_salt", 5); })},
        {"Mooncake unknown *salt* field",
         MooncakeStored(7, 1, [](Packer& pk) { Pair(pk, "cache_salt", std::string("x")); })},
    };
    for (const auto& [name, event] : cases) {
      CAPTURE(name);
      // The unreadable event is left out; the unsalted one after it is kept.
      const EngineBatch batch = MustDecode(PackBatch({event, StoredMap(8, 0, nullptr)}));
      CHECK(batch.skipped_namespace_events == 1);
      CHECK(batch.skipped_events == 0);
      REQUIRE(batch.events.size() == 1);
      CHECK(batch.events[0].block_hashes == Hashes{8});
      CHECK(!batch.events[0].cache_salt.has_value());
    }
  }

  TEST_CASE("EngineEventDecoder: events without a salt field are unchanged") {
    const EngineBatch batch = MustDecode(PackBatch({
        StoredMap(9, 0, nullptr),
        StoredArray(10, 1, [](Packer& pk) { pk.pack_nil(); }),  // lora_name nil
        StoredMap(11, 1, [](Packer& pk) { NilPair(pk, "cache_salt"); }),
    }));
    REQUIRE(batch.events.size() == 3);
    for (const EngineEvent& e : batch.events) {
      CHECK(!e.cache_salt.has_value());
      CHECK(!e.lora_name.has_value());
      CHECK(e.token_ids == Tokens{1, 2});
      CHECK(e.block_size == 2);
    }
    CHECK(batch.unknown_fields == 0);
    CHECK(batch.skipped_events == 0);
    CHECK(batch.skipped_namespace_events == 0);
  }

  TEST_CASE("EngineEventDecoder: vLLM's origin says new or reused; an unknown value is counted") {
    const EngineBatch batch = MustDecode(PackBatch({
        StoredMap(1, 1, [](Packer& pk) { Pair(pk, "origin", std::string("REUSED")); }),
        StoredMap(2, 1, [](Packer& pk) { Pair(pk, "origin", std::string("NEW")); }),
        StoredMap(3, 1, [](Packer& pk) { NilPair(pk, "origin"); }),
        StoredMap(4, 1, [](Packer& pk) { Pair(pk, "origin", std::string("COPIED")); }),
        StoredMap(5, 1, [](Packer& pk) { Pair(pk, "origin", 2); }),
    }));
    REQUIRE(batch.events.size() == 5);
    CHECK(batch.events[0].origin == BlockOrigin::kReused);
    CHECK(batch.events[1].origin == BlockOrigin::kNew);
    CHECK_FALSE(batch.events[2].origin.has_value());
    CHECK_FALSE(batch.events[3].origin.has_value());  // never read as a value it is not
    CHECK_FALSE(batch.events[4].origin.has_value());
    CHECK(batch.unknown_fields == 2);
    CHECK(batch.skipped_events == 0);
  }

  TEST_CASE("EngineEventDecoder: SGLang's namespaced hashes and component type (map form)") {
    const EngineBatch batch = MustDecode(PackBatch({
        StoredMap(1, 4,
                  [](Packer& pk) {
                    Pair(pk, "lora_name", std::string("adapter"));
                    Pair(pk, "namespaced_block_hashes", std::vector<int64_t>{-9});
                    Pair(pk, "namespaced_parent_block_hash", -8);
                    Pair(pk, "component_type", std::string("full"));
                  }),
        StoredMap(2, 1, [](Packer& pk) { Pair(pk, "component_type", std::string("swa")); }),
        StoredMap(3, 1, [](Packer& pk) { Pair(pk, "namespaced_block_hashes", std::string("x")); }),
        [](Packer& pk) {
          pk.pack_map(3);
          Pair(pk, "type", std::string("BlockRemoved"));
          Pair(pk, "block_hashes", std::vector<int64_t>{1});
          Pair(pk, "namespaced_block_hashes", std::vector<int64_t>{-9});
        },
    }));
    REQUIRE(batch.events.size() == 4);
    // The block hashes stay the engine's keys; the namespaced ones are only checked.
    CHECK(batch.events[0].block_hashes == Hashes{1});
    CHECK(batch.events[0].lora_name == "adapter");
    CHECK_FALSE(batch.events[0].kv_cache_spec_kind.has_value());  // full attention
    CHECK(batch.events[1].kv_cache_spec_kind == "swa");           // not full: the mapper skips it
    CHECK(batch.events[3].kind == EngineEventKind::kRemoved);
    CHECK(batch.unknown_fields == 1);  // the namespaced hashes that are not hashes
  }
}

}  // namespace
}  // namespace kvatlas::server
