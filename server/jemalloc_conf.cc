// jemalloc's options for kvatlas-server, read by jemalloc at its first allocation (its
// `malloc_conf` symbol; the MALLOC_CONF environment variable is applied after it and wins
// where both set an option). Compiled only into a server linked with jemalloc.
//
// A server's heap churns at a constant size for days: raft log entries, feed batches and
// RocksDB memtables are freed as fast as they are made. What matters is that freed pages go
// back to the system instead of accumulating, so:
// - background_thread: jemalloc's own threads purge on time, also in a quiet process (the
//   decay otherwise advances only as threads allocate);
// - dirty_decay_ms 1000: freed pages are given back within about a second (default 10 s);
// - muzzy_decay_ms 0: given back with MADV_DONTNEED at once, so RSS drops with them
//   (lazily freed pages would still count in RSS until the kernel wants them).
// docs/operations.md §Sizing has what this gave in the soak.
extern "C" {
// NOLINTNEXTLINE: the name is jemalloc's.
const char* malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";
}
