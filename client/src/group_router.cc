#include "client/src/group_router.h"

#include <algorithm>
#include <charconv>
#include <future>
#include <optional>
#include <utility>

#include "client/src/endpoint.h"
#include "common/internal/thread_name.h"
#include "kvatlas/common/protocol.h"

namespace kvatlas::client {
namespace {

// Between two fetches at least this long: a burst of wrong_group answers (every watch of a
// moved group at once) costs one fetch, not one each.
constexpr std::chrono::milliseconds kMinRefreshGap{50};

// What is left until `deadline`, at least 1 µs (a call's timeout must be positive; one
// that has passed fails without a round trip).
Client::Timeout TimeoutUntil(GroupRouter::Clock::time_point deadline) {
  return std::max(std::chrono::duration_cast<Client::Timeout>(deadline - GroupRouter::Clock::now()),
                  Client::Timeout(1));
}

// Spreads contexts over a group's members; any stable mix of the fields does.
size_t ContextHash(const ContextKey& context) {
  const std::hash<std::string_view> hash;
  size_t h = hash(context.tenant);
  for (const std::string_view part :
       {std::string_view(context.model), std::string_view(context.lora_name),
        std::string_view(context.salt)}) {
    h = h * 1'000'003 ^ hash(part);
  }
  return h * 1'000'003 ^ context.block_size;
}

std::optional<uint64_t> ServerId(std::string_view member) {
  uint64_t id = 0;
  const auto [end, error] = std::from_chars(member.data(), member.data() + member.size(), id);
  if (error != std::errc() || end != member.data() + member.size() || id == 0) return std::nullopt;
  return id;
}

}  // namespace

GroupRouter::GroupRouter(ClientOptions options, Client::Impl* origin)
    : options_(std::move(options)), origin_(origin) {}

GroupRouter::~GroupRouter() { Stop(); }

void GroupRouter::Start() {
  // Bounded as a connect is: a server that accepts but does not answer delays Connect by
  // no more than connecting to it could.
  Refresh(options_.connect_timeout);
  std::lock_guard lock(mu_);
  if (stopping_) return;
  worker_ = std::thread([this] {
    SetCurrentThreadName("kvatlas-route");
    Run();
  });
}

void GroupRouter::Stop() {
  std::vector<std::function<void(bool)>> tasks;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !worker_.joinable() && connections_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::map<std::string, std::unique_ptr<Client::Impl>> connections;
  {
    std::lock_guard lock(mu_);
    tasks.swap(after_refresh_);
    table_.reset();
    connections = std::move(connections_);
  }
  for (auto& task : tasks) task(false);
  connections.clear();  // unlocked: closing completes their calls, whose hooks may call here
}

std::shared_ptr<const GroupRouter::Table> GroupRouter::Current() const {
  std::lock_guard lock(mu_);
  return table_;
}

Client::Impl& GroupRouter::For(const ContextKey& context) { return Pick(Current().get(), context); }

Client::Impl& GroupRouter::Pick(const Table* table, const ContextKey& context) {
  if (!Routes(table)) return *origin_;
  const auto group = table->members.find(GroupOfContext(table->directory, context, table->groups));
  if (group == table->members.end()) return *origin_;
  const std::vector<Client::Impl*>& members = group->second;
  const size_t first = ContextHash(context) % members.size();
  for (size_t i = 0; i < members.size(); ++i) {
    Client::Impl* member = members[(first + i) % members.size()];
    if (member->OpenConnections() > 0) return *member;
  }
  return *origin_;
}

void GroupRouter::Call(const ContextKey& context, protocol::MessageType type,
                       std::string_view payload, Clock::time_point deadline,
                       Client::Impl::Done done) {
  const std::shared_ptr<const Table> table = Current();
  Client::Impl& to = Pick(table.get(), context);
  if (&to == origin_ && !Routes(table.get())) {
    // Nothing routes (one group, no members recorded, no table): the plain call, without
    // the copy of the payload a resend needs.
    origin_->Call(type, payload, TimeoutUntil(deadline), std::move(done));
    return;
  }
  auto retry = [this, context, type, payload = std::string(payload), deadline,
                done](Result<protocol::Frame> frame) mutable {
    if (frame.has_value() || frame.error().code() != StatusCode::kWrongGroup ||
        Clock::now() >= deadline) {
      done(std::move(frame));
      return;
    }
    AfterRefresh([this, context = std::move(context), type, payload = std::move(payload), deadline,
                  done = std::move(done), refused = frame.error()](bool run) mutable {
      if (!run || Clock::now() >= deadline) {
        done(std::move(refused));
        return;
      }
      For(context).Call(type, payload, TimeoutUntil(deadline), std::move(done));
    });
  };
  to.Call(type, payload, TimeoutUntil(deadline), std::move(retry));
}

bool GroupRouter::Routes(const Table* table) { return table != nullptr && !table->members.empty(); }

void GroupRouter::RefreshSoon() {
  {
    std::lock_guard lock(mu_);
    refresh_asked_ = true;
  }
  cv_.notify_all();
}

void GroupRouter::AfterRefresh(std::function<void(bool run)> task) {
  {
    std::unique_lock lock(mu_);
    if (!stopping_) {
      after_refresh_.push_back(std::move(task));
      refresh_asked_ = true;
      lock.unlock();
      cv_.notify_all();
      return;
    }
  }
  task(false);
}

void GroupRouter::Refresh(Client::Timeout timeout) {
  std::vector<std::function<void(bool)>> waiting;
  {
    std::lock_guard lock(mu_);
    waiting.swap(after_refresh_);
    refresh_asked_ = false;
  }
  // Through the client's own connections.
  auto promise = std::make_shared<std::promise<Result<protocol::Frame>>>();
  std::future<Result<protocol::Frame>> answered = promise->get_future();
  origin_->Call(protocol::MessageType::kDirectory, {}, timeout,
                [promise](Result<protocol::Frame> frame) { promise->set_value(std::move(frame)); });
  // Polled, so that Stop need not wait for a server that does not answer.
  while (answered.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    std::lock_guard lock(mu_);
    if (stopping_) {
      for (auto& task : waiting) task(false);
      return;
    }
  }
  Result<protocol::Frame> frame = answered.get();
  Result<protocol::DirectoryAnswer> answer = frame.has_value()
                                                 ? protocol::DecodeDirectoryAnswer(frame->payload)
                                                 : Result<protocol::DirectoryAnswer>(frame.error());
  if (answer.has_value()) {
    auto table = std::make_shared<Table>();
    table->groups = answer->groups;
    std::map<uint64_t, std::string> addresses;
    for (protocol::ServerRpcAddress& server : answer->servers) {
      addresses.emplace(server.id, std::move(server.rpc_address));
    }
    for (const auto& [id, group] : answer->directory.groups()) {
      std::vector<Client::Impl*> members;
      for (const std::string& member : group.members) {
        const std::optional<uint64_t> server = ServerId(member);
        const auto address = server ? addresses.find(*server) : addresses.end();
        if (address == addresses.end()) continue;  // not announced yet: not routed to
        Client::Impl* connection = nullptr;
        {
          std::lock_guard lock(mu_);
          if (stopping_) break;
          if (const auto known = connections_.find(address->second); known != connections_.end()) {
            connection = known->second.get();
          }
        }
        if (connection == nullptr) {
          Result<Endpoint> endpoint = ParseEndpoint(address->second);
          if (!endpoint.has_value()) continue;
          ClientOptions options = options_;
          options.endpoints = {address->second};
          auto opened = std::make_unique<Client::Impl>(std::move(options),
                                                       std::vector<Endpoint>{std::move(*endpoint)},
                                                       origin_->tls_context());
          opened->OnWrongGroup([this] { RefreshSoon(); });
          // Connects (blocking, up to connect_timeout); one that fails is kept, and pinged
          // at each later refresh so that it reconnects once its server is back.
          (void)opened->Start();
          connection = opened.get();
          std::lock_guard lock(mu_);
          connections_.emplace(address->second, std::move(opened));
        } else if (connection->OpenConnections() == 0) {
          connection->Call(protocol::MessageType::kPing, {}, Client::Timeout(0),
                           [](Result<protocol::Frame>) {});
        }
        members.push_back(connection);
      }
      if (!members.empty()) table->members.emplace(id, std::move(members));
    }
    table->directory = std::move(answer->directory);
    std::lock_guard lock(mu_);
    table_ = std::move(table);
  }
  for (auto& task : waiting) task(true);
}

void GroupRouter::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.directory_refresh, [this] { return stopping_ || refresh_asked_; });
    if (stopping_) break;
    lock.unlock();
    Refresh(std::chrono::duration_cast<Client::Timeout>(options_.default_deadline));
    lock.lock();
    cv_.wait_for(lock, kMinRefreshGap, [this] { return stopping_; });
  }
}

}  // namespace kvatlas::client
