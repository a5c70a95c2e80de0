// RunConcurrently: a fixed number of tasks run on a bounded number of threads of their
// own, with the first failure deciding the result (a server opening its groups side by
// side, Server::OpenState and Server::StartRaft).
//
// Thread-safety: RunConcurrently from any thread; `task` is called from several threads at
// once (each index once), `stop` from one of them.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "kvatlas/common/status.h"

namespace kvatlas::server {

// Runs task(0) ... task(count - 1) on up to `threads` threads, named `thread_name`, and
// returns once every one has ended and every thread is joined (none is left behind).
//
// The first task to fail (the first to return an error, in time) decides the result:
// `stop` is called once at that moment, so that the tasks running end early (e.g. a
// RecoveryProgress::RequestStop for each), the tasks not begun yet are never begun, and
// that task's error is returned. Ok when every task succeeded.
//
// With `threads` <= 1 or `count` <= 1 the tasks run on the calling thread, in order, and
// no thread is started.
[[nodiscard]] Status RunConcurrently(size_t count, size_t threads, const std::string& thread_name,
                                     const std::function<Status(size_t index)>& task,
                                     const std::function<void()>& stop);

}  // namespace kvatlas::server
