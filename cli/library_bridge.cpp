// SPDX-License-Identifier: Apache-2.0
// The only file of the tool that uses zklock::detail: what the public API does not offer yet (a
// read hold's or a lease's fencing token, a lease's loss signal, waiting until a path is free,
// raw nodes for the acquire records, path checks). Porting the tool to public API touches this file.
#include <stdexcept>
#include "cli.hpp"

namespace zkcli::bridge {
namespace d = zklock::detail;

namespace {

constexpr unsigned all_kinds = 0xf;

/// Returns: the contender kinds a lock of mode `m` queues with.
unsigned kinds_of(lock_mode m) {
  switch (m) {
    case lock_mode::mutex: return d::exclusive_rule::kinds;
    case lock_mode::shared: return d::read_rule::kinds;
    case lock_mode::write: return d::write_rule::kinds;
    case lock_mode::permits: return d::semaphore_rule::kinds;
  }
  return all_kinds;
}

node_kind kind_of(d::contender_kind k) {
  switch (k) {
    case d::contender_kind::lock: return node_kind::lock;
    case d::contender_kind::read: return node_kind::read;
    case d::contender_kind::write: return node_kind::write;
    case d::contender_kind::lease: return node_kind::lease;
  }
  return node_kind::lock;
}

/// The wake-up target of a lease's watch: stops `lost` unless released.
class lease_watch final : public d::wake_target {
 public:
  void wake() noexcept override {
    if (!released_.load()) lost_.request_stop();
  }
  void release() noexcept { released_.store(true); }
  std::stop_token token() const noexcept { return lost_.get_token(); }

 private:
  std::stop_source lost_;
  std::atomic<bool> released_{false};
};

struct lose_lease {
  std::shared_ptr<lease_watch> w;
  void operator()() const noexcept { w->wake(); }
};

}  // namespace

void validate_lock_path(const std::string& path) { d::validate_path(path, "lock path"); }

bool await_next_session(zklock::session& s, std::uint64_t generation, steady::time_point deadline) {
  return d::await_next_session(s, generation, deadline);
}

std::optional<std::vector<node_kind>> ignored_kinds(zklock::session& s, const std::string& path, lock_mode m,
                                                    steady::time_point deadline) {
  const auto listing = d::list_children(s, path, nullptr, deadline);
  if (!listing) return std::nullopt;
  std::vector<node_kind> out;
  unsigned seen = 0;
  for (const auto& c : d::sorted_contenders(*listing, all_kinds & ~kinds_of(m))) {
    if (seen & d::kind_bit(c.kind)) continue;
    seen |= d::kind_bit(c.kind);
    out.push_back(kind_of(c.kind));
  }
  return out;
}

std::optional<own_node> find_own_node(zklock::session& s, const std::string& path, lock_mode m) {
  const auto listing = d::list_children(s, path, nullptr, steady::now() + s.options().connect_timeout);
  if (!listing) throw exit_error{exit_code::unavailable, "timed out listing " + path};
  const unsigned kinds = d::kind_bit(m == lock_mode::shared ? d::read_rule::own : d::semaphore_rule::own);
  const std::int64_t me = s.id();
  for (const auto& c : d::sorted_contenders(*listing, kinds)) {
    const std::string full = path + "/" + c.name;
    if (auto info = d::read_node(s, full); info && info->ephemeral_owner == me) return own_node{full, info->czxid};
  }
  return std::nullopt;
}

struct lease_loss::impl {
  zklock::session& s;
  std::string node;
  std::shared_ptr<lease_watch> watch;
  std::optional<std::stop_callback<lose_lease>> session_loss;
};

lease_loss::lease_loss(zklock::session& s, const std::string& node, std::uint64_t generation,
                       steady::time_point deadline)
    : impl_(new impl{s, node, std::make_shared<lease_watch>(), std::nullopt}) {
  impl_->session_loss.emplace(d::loss_token(s, generation), lose_lease{impl_->watch});
  const auto seen = d::watch_node(s, node, impl_->watch, deadline);
  if (!seen || *seen == d::node_seen::gone) impl_->watch->wake();
}

lease_loss::~lease_loss() = default;

std::stop_token lease_loss::token() const noexcept { return impl_->watch->token(); }

void lease_loss::release() noexcept {
  impl_->watch->release();  // our own delete is no loss
  d::drop_watch(impl_->s, impl_->node, false, impl_->watch.get());
}

std::optional<std::vector<std::string>> children(zklock::session& s, const std::string& path,
                                                 steady::time_point deadline) {
  return d::list_children(s, path, nullptr, deadline);
}

std::optional<std::string> node_data(zklock::session& s, const std::string& path) {
  if (auto info = d::read_node(s, path)) return std::move(info->data);
  return std::nullopt;
}

bool create_ephemeral(zklock::session& s, const std::string& path, std::string_view data) {
  return d::create_ephemeral(s, path, data);
}

void delete_node(zklock::session& s, const std::string& path, std::uint64_t generation) noexcept {
  d::release_node(s, d::held_node{path, 0, generation});
}

bool wait_until_free(zklock::session& s, const std::string& path, steady::time_point deadline,
                     const std::function<void(std::size_t)>& busy) {
  // The library's own condition-variable waiter, woken by a children watch (or the session's end:
  // the next listing then throws session_expired).
  using waiter = zklock::wake_condition_variable::waiter;
  for (;;) {
    auto w = std::make_shared<waiter>();
    struct unwatch {  // removes the watch on every way out (a no-op once it fired)
      zklock::session& s;
      const std::string& path;
      const waiter* w;
      ~unwatch() { d::drop_watch(s, path, true, w); }
    } guard{s, path, w.get()};
    const auto listing = d::list_children(s, path, w, deadline);
    if (!listing) return false;
    const auto queue = d::sorted_contenders(*listing, all_kinds);
    if (queue.empty()) return true;
    busy(queue.size());
    if (!w->wait_until(deadline)) return false;
  }
}

}  // namespace zkcli::bridge
