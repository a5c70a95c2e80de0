// The allocator libraft uses (raft_heap_set): the standard one, except that a growing
// realloc reserves room to grow again.
//
// libraft 0.15 loads its log by growing one array with realloc once per stored batch
// (uv_segment.c extendEntries), so a start copies the array once per entry: quadratic.
// glibc mostly grows large blocks in place and hides it (8k entries: ~0.1 s), but an
// allocator that copies on every realloc -- AddressSanitizer's always does -- took over
// 30 s to start a server with 8k entries in its log. Doubling on growth makes the load
// linear under any allocator.
//
// Every block is still plain malloc memory (only its size is rounded up), so memory
// allocated before InstallRaftHeap, or freed with free() rather than raft_free(), stays
// valid: installing it is safe at any time.
#pragma once

namespace kvatlas::server {

// Idempotent and thread-safe; RaftLog::Start calls it.
void InstallRaftHeap();

}  // namespace kvatlas::server
