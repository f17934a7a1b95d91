// SPDX-License-Identifier: Apache-2.0
// zklock:rules — the only place where the lock modes differ: given the queue of contenders and our
// place in it, "you hold it", or what to watch. Pure functions, unit-tested without a server.
module;
#include <cstddef>
#include <span>
export module zklock:rules;
import :detail;

export namespace zklock::detail {

/// What the rule answers for one contender.
struct verdict {
  enum class watch : unsigned char { none, node, any_change };
  bool held = false;
  watch what = watch::none;
  std::size_t index = 0;       ///< the contender to watch when what == node
  bool poke_successor = false; ///< on grant: touch our node so the waiter behind re-evaluates
};

constexpr unsigned kind_bit(contender_kind k) noexcept { return 1u << static_cast<unsigned>(k); }

/// Exclusive: held iff first.
struct exclusive_rule {
  static constexpr contender_kind own = contender_kind::lock;
  static constexpr unsigned kinds = kind_bit(contender_kind::lock);
  verdict operator()(std::span<const contender>, std::size_t self) const noexcept {
    if (self == 0) return {true};
    return {false, verdict::watch::node, self - 1};
  }
};

/// Write side of a read/write lock: held iff first among readers and writers.
struct write_rule {
  static constexpr contender_kind own = contender_kind::write;
  static constexpr unsigned kinds = kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
  verdict operator()(std::span<const contender> q, std::size_t self) const noexcept {
    return exclusive_rule{}(q, self);
  }
};

/// Read side: held iff no writer precedes us. (A write holder taking the read side never asks this
/// rule: its read hold shares its write node.)
struct read_rule {
  static constexpr contender_kind own = contender_kind::read;
  static constexpr unsigned kinds = kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
  verdict operator()(std::span<const contender> q, std::size_t self) const noexcept {
    for (std::size_t i = self; i-- > 0;)
      if (q[i].kind == contender_kind::write) return {false, verdict::watch::node, i};
    return {true};
  }
};

/// Semaphore with `leases` leases: held iff fewer than `leases` contenders precede us. The first
/// waiter watches any change (any release may be its turn); later waiters watch the one ahead,
/// which touches its node when granted so that the next waiter moves up to the first place.
struct semaphore_rule {
  static constexpr contender_kind own = contender_kind::lease;
  static constexpr unsigned kinds = kind_bit(contender_kind::lease);
  std::size_t leases = 1;
  verdict operator()(std::span<const contender> q, std::size_t self) const noexcept {
    if (self < leases) return {true, verdict::watch::none, 0, self + 1 < q.size()};
    if (self == leases) return {false, verdict::watch::any_change};
    return {false, verdict::watch::node, self - 1};
  }
};

}  // namespace zklock::detail
