// ConnectionLimiter: admission of a listener's connections, at most `max_total` open at
// once and `max_per_peer` from one peer address, so that one client (or a few) opening
// connections cannot take every descriptor and buffer of the process (docs/limits.md). The
// REST and binary-protocol listeners each keep one.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace kvatlas {

class ConnectionLimiter {
 public:
  ConnectionLimiter(size_t max_total, size_t max_per_peer)
      : max_total_(max_total), max_per_peer_(max_per_peer) {}

  // Counts a new connection from `peer`; false (nothing counted) past either cap.
  bool Admit(const std::string& peer) {
    std::lock_guard lock(mu_);
    if (total_ >= max_total_) return false;
    auto [it, inserted] = per_peer_.try_emplace(peer, 0);
    if (it->second >= max_per_peer_) {
      if (inserted) per_peer_.erase(it);  // max_per_peer_ == 0
      return false;
    }
    ++it->second;
    ++total_;
    return true;
  }

  // Uncounts a connection Admit counted.
  void Release(const std::string& peer) {
    std::lock_guard lock(mu_);
    --total_;
    auto it = per_peer_.find(peer);
    if (it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
  }

  size_t open() const {
    std::lock_guard lock(mu_);
    return total_;
  }

 private:
  const size_t max_total_;
  const size_t max_per_peer_;
  mutable std::mutex mu_;
  size_t total_ = 0;
  std::map<std::string, size_t> per_peer_;
};

}  // namespace kvatlas
