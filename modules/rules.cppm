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
  /// What a waiter watches before it asks the rule again.
  enum class watch : unsigned char {
    none,       ///< nothing: the contender holds
    node,       ///< the contender at `index` (an exists watch; its deletion or change wakes us)
    any_change  ///< the lock node's children: any join or leave may be our turn
  };
  bool held = false;            ///< whether the contender holds now
  watch what = watch::none;     ///< what to watch while not held
  std::size_t index = 0;        ///< the contender to watch when what == node (an index into the queue)
  bool poke_successor = false;  ///< on grant: touch our node so the waiter behind re-evaluates
};

/// Returns: the bit of `k` in a rule's `kinds` mask (bit i = contender_kind i).
constexpr unsigned kind_bit(contender_kind k) noexcept { return 1u << static_cast<unsigned>(k); }

// Every rule: `own` is the kind of node it queues, `kinds` the kinds it queues among (the queue it
// is given holds only those, in order), and operator()(q, self) answers for q[self] (self < q.size()).

/// Exclusive: held iff first.
struct exclusive_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::lock;
  /// The kinds it queues among: plain locks only.
  static constexpr unsigned kinds = kind_bit(contender_kind::lock);
  /// Returns: held if `self` is first; else watch the contender just ahead.
  verdict operator()(std::span<const contender>, std::size_t self) const noexcept {
    if (self == 0) return {true};
    return {false, verdict::watch::node, self - 1};
  }
};

/// Write side of a read/write lock: held iff first among readers and writers.
struct write_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::write;
  /// The kinds it queues among: readers and writers.
  static constexpr unsigned kinds = kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
  /// Returns: held if `self` is first; else watch the contender (reader or writer) just ahead.
  verdict operator()(std::span<const contender> q, std::size_t self) const noexcept {
    return exclusive_rule{}(q, self);
  }
};

/// Read side: held iff no writer precedes us. (A write holder taking the read side never asks this
/// rule: its read hold shares its write node.)
struct read_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::read;
  /// The kinds it queues among: readers and writers.
  static constexpr unsigned kinds = kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
  /// Returns: held if no writer is ahead of `self`; else watch the nearest writer ahead.
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
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::lease;
  /// The kinds it queues among: leases only.
  static constexpr unsigned kinds = kind_bit(contender_kind::lease);
  /// How many contenders may hold at once (at least 1).
  std::size_t leases = 1;
  /// Returns: held (poking the successor if there is one) if fewer than `leases` are ahead of
  /// `self`; the first waiter watches any change, later ones the contender just ahead.
  verdict operator()(std::span<const contender> q, std::size_t self) const noexcept {
    if (self < leases) return {true, verdict::watch::none, 0, self + 1 < q.size()};
    if (self == leases) return {false, verdict::watch::any_change};
    return {false, verdict::watch::node, self - 1};
  }
};

}  // namespace zklock::detail
