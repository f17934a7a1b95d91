// SPDX-License-Identifier: Apache-2.0
// zklock.detail:rules — the only place where the lock modes differ: which contenders ahead of a waiter
// count for its mode, and how many of them may remain ahead while it holds. Plus what a waiter may
// conclude from the deletions it saw since its last listing. Pure functions, unit-tested without a
// server.
module;
#include <cstddef>
#include <span>
#include <vector>
export module zklock.detail:rules;
import :queue;

export namespace zklock::detail {

/// Where one contender stands in the queue.
struct standing {
  /// Queue indices of the contenders ahead that its mode counts, in queue order (nearest last).
  std::vector<std::size_t> ahead;
  /// It holds while fewer than `limit` counted contenders are ahead (1 for a mutex or a side of a
  /// read/write lock, the lease count for a semaphore).
  std::size_t limit = 1;
  /// Returns: whether it holds.
  bool held() const noexcept { return ahead.size() < limit; }
};

/// Returns: the bit of `k` in a rule's `kinds` mask (bit i = contender_kind i).
constexpr unsigned kind_bit(contender_kind k) noexcept { return 1u << static_cast<unsigned>(k); }

// Every rule: `own` is the kind of node it queues, `kinds` the kinds it queues among (the queue it
// is given holds only those, in order), counts(c) whether a contender c ahead keeps it waiting,
// and limit() how many counted contenders may be ahead while it holds.

/// Exclusive: held iff first.
struct exclusive_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::lock;
  /// The kinds it queues among: plain locks only.
  static constexpr unsigned kinds = kind_bit(contender_kind::lock);
  /// Returns: true: every contender ahead counts.
  static constexpr bool counts(const contender&) noexcept { return true; }
  /// Returns: 1: held with nobody ahead.
  static constexpr std::size_t limit() noexcept { return 1; }
};

/// Write side of a read/write lock: held iff first among readers and writers.
struct write_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::write;
  /// The kinds it queues among: readers and writers.
  static constexpr unsigned kinds = kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
  /// Returns: true: readers and writers ahead both count.
  static constexpr bool counts(const contender&) noexcept { return true; }
  /// Returns: 1: held with nobody ahead.
  static constexpr std::size_t limit() noexcept { return 1; }
};

/// Read side: held iff no writer precedes us. (A write holder taking the read side never asks this
/// rule: its read hold shares its write node.)
struct read_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::read;
  /// The kinds it queues among: readers and writers.
  static constexpr unsigned kinds = kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
  /// Returns: whether `c` is a writer (readers ahead share the lock with us).
  static constexpr bool counts(const contender& c) noexcept { return c.kind == contender_kind::write; }
  /// Returns: 1: held with no writer ahead.
  static constexpr std::size_t limit() noexcept { return 1; }
};

/// Semaphore with `leases` leases: held iff fewer than `leases` contenders precede us.
struct semaphore_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::lease;
  /// The kinds it queues among: leases only.
  static constexpr unsigned kinds = kind_bit(contender_kind::lease);
  /// How many contenders may hold at once (at least 1).
  std::size_t leases = 1;
  /// Returns: true: every lease ahead counts.
  static constexpr bool counts(const contender&) noexcept { return true; }
  /// Returns: the lease count.
  constexpr std::size_t limit() const noexcept { return leases; }
};

/// Returns: where q[self] stands by `rule` (self < q.size()).
template <class Rule>
standing stand(const Rule& rule, std::span<const contender> q, std::size_t self) {
  standing s;
  s.limit = rule.limit();
  for (std::size_t i = 0; i < self; ++i)
    if (rule.counts(q[i])) s.ahead.push_back(i);
  return s;
}

/// What a waiter watching contenders ahead (not the lock node's children) knows between two
/// listings. At the listing `ahead` counted contenders were ahead of it; it watches the `watched`
/// nearest of them, and has seen `gone` of those deleted since (a watch that found its node gone
/// already counts too). Nobody can join ahead of it (sequence numbers only grow), so at most
/// ahead - gone counted contenders are ahead now: the only grant a deletion may cause is one this
/// bound proves.
struct tally {
  std::size_t ahead = 0;    ///< counted contenders ahead at the listing
  std::size_t limit = 1;    ///< held while fewer than this are ahead
  std::size_t watched = 0;  ///< the nearest this many of them are watched
  std::size_t gone = 0;     ///< watched ones seen deleted since the listing

  /// Returns: whether the deletions seen prove that fewer than `limit` are ahead now.
  constexpr bool proves_held() const noexcept { return ahead - gone < limit; }
  /// Returns: whether to list again: a watched contender went, and contenders beyond the watched
  /// ones may have gone unseen (so the bound proves too little, and the watches must move up).
  /// Watching more than `limit` of them makes this happen before the turn: with 2 * limit, the
  /// first watched one to go leaves `limit` more deletions (for a mutex: the hold of the one
  /// just ahead) to list in, so that the deletion that makes the turn finds the waiter counting.
  constexpr bool must_relist() const noexcept { return gone > 0 && watched < ahead && !proves_held(); }
};

}  // namespace zklock::detail
