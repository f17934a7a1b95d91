// SPDX-License-Identifier: Apache-2.0
// zklock.detail:rules — the only place where the lock modes differ: which contenders ahead of a waiter
// count for its mode, and how many of them may remain ahead while it holds. Plus what a waiter may
// conclude from the deletions it saw since its last listing. Pure functions, unit-tested without a
// server.
//
// One path, one meaning: a path is a lock or a semaphore. A lock's queue holds mutex ("lock-"),
// read ("__READ__") and write ("__WRIT__") contenders, zklock's and Curator's names alike, and every
// rule of a lock reads all three: a mutex contender is a writer. A semaphore's queue holds leases. A
// listing that shows the other family's nodes is a path used as both (errc::path_kind_mismatch).
module;
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <string_view>
#include <vector>
export module zklock.detail:rules;
import :queue;

export namespace zklock::detail {

/// Where one contender stands in the queue.
struct standing {
  /// Queue indices of the contenders ahead that its mode counts, in queue order (nearest last).
  std::vector<std::size_t> ahead;
  /// The permits they stand for (each lock contender and each one-permit lease: 1).
  std::size_t weight = 0;
  /// It holds while fewer than `limit` permits are taken ahead of it (1 for a mutex or a side of a
  /// read/write lock; for a semaphore with N leases, N - n + 1 for a lease of n permits: the n fit
  /// beside those ahead; 0 if n exceeds N).
  std::size_t limit = 1;
  /// Returns: whether it holds.
  bool held() const noexcept { return weight < limit; }
};

/// Returns: the bit of `k` in a rule's `kinds` mask (bit i = contender_kind i).
constexpr unsigned kind_bit(contender_kind k) noexcept { return 1u << static_cast<unsigned>(k); }

// Every rule: `own` is the kind of node it queues, `kinds` the kinds it queues among (the queue it
// is given holds only those, in order), counts(c) whether a contender c ahead keeps it waiting,
// and limit() how many counted contenders may be ahead while it holds.

/// The kinds a lock's queue holds: mutex, read and write contenders.
inline constexpr unsigned lock_kinds =
    kind_bit(contender_kind::lock) | kind_bit(contender_kind::read) | kind_bit(contender_kind::write);
/// The kinds a semaphore's queue holds: leases.
inline constexpr unsigned lease_kinds = kind_bit(contender_kind::lease);

/// Exclusive (a mutex): held iff first among every contender of the lock. A mutex contender is a
/// writer to the read and write sides, so a mutex and a read/write lock on one path exclude each
/// other as a read/write lock's sides do.
struct exclusive_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::lock;
  /// The kinds it queues among: mutex, read and write contenders.
  static constexpr unsigned kinds = lock_kinds;
  /// The kinds that say the path is not a lock: leases.
  static constexpr unsigned foreign = lease_kinds;
  /// Returns: true: every contender ahead counts.
  static constexpr bool counts(const contender&) noexcept { return true; }
  /// Returns: 1: held with nobody ahead.
  static constexpr std::size_t limit() noexcept { return 1; }
};

/// Write side of a read/write lock: held iff first among every contender of the lock (as a mutex).
struct write_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::write;
  /// The kinds it queues among: mutex, read and write contenders.
  static constexpr unsigned kinds = lock_kinds;
  /// The kinds that say the path is not a lock: leases.
  static constexpr unsigned foreign = lease_kinds;
  /// Returns: true: readers, writers and mutex contenders ahead all count.
  static constexpr bool counts(const contender&) noexcept { return true; }
  /// Returns: 1: held with nobody ahead.
  static constexpr std::size_t limit() noexcept { return 1; }
};

/// Read side: held iff no writer (a write or a mutex contender) precedes us. (A write holder taking
/// the read side never asks this rule: its read hold shares its write node.)
struct read_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::read;
  /// The kinds it queues among: mutex, read and write contenders.
  static constexpr unsigned kinds = lock_kinds;
  /// The kinds that say the path is not a lock: leases.
  static constexpr unsigned foreign = lease_kinds;
  /// Returns: whether `c` is a writer: a write or a mutex contender (readers ahead share the lock).
  static constexpr bool counts(const contender& c) noexcept { return c.kind != contender_kind::read; }
  /// Returns: 1: held with no writer ahead.
  static constexpr std::size_t limit() noexcept { return 1; }
};

/// What a semaphore object knows of its node's lease count: N and the data version it was read at,
/// updated by any of its acquires that reads a newer one. Lock-free, shared with its acquires.
class lease_limit {
 public:
  /// Effects: knows `leases` at data version `version`.
  lease_limit(std::size_t leases, std::int32_t version) noexcept { store(leases, version); }
  /// Effects: knows `leases` (at most 2^32 - 1) at data version `version`.
  void store(std::size_t leases, std::int32_t version) noexcept {
    v_.store((static_cast<std::uint64_t>(static_cast<std::uint32_t>(version)) << 32) | (leases & 0xffffffffu),
             std::memory_order_relaxed);
  }
  /// Returns: N and its data version, as stored last.
  std::pair<std::size_t, std::int32_t> load() const noexcept {
    const std::uint64_t v = v_.load(std::memory_order_relaxed);
    return {static_cast<std::size_t>(v & 0xffffffffu), static_cast<std::int32_t>(static_cast<std::uint32_t>(v >> 32))};
  }

 private:
  std::atomic<std::uint64_t> v_{0};
};

/// Semaphore with `leases` leases (permits): a lease of n permits is held iff the permits of the
/// leases ahead of it and its own n fit in `leases`. Leases are granted in queue order, all of a
/// lease's permits at once: the holders are always a prefix of the queue, so they never take more
/// than `leases` permits, and a lease of many permits is never passed by later smaller ones (no
/// partial holds, no starvation).
struct semaphore_rule {
  /// The kind of node this rule's contenders create.
  static constexpr contender_kind own = contender_kind::lease;
  /// The kinds it queues among: leases only.
  static constexpr unsigned kinds = lease_kinds;
  /// The kinds that say the path is not a semaphore: mutex, read and write contenders.
  static constexpr unsigned foreign = lock_kinds;
  /// How many permits may be held at once (at least 1).
  std::size_t leases = 1;
  /// The permits this rule's contender takes (1..leases).
  std::uint32_t permits = 1;
  /// What its semaphore object knows of N (the node's count may change: set_max), read and updated
  /// by each acquire; none: N is `leases`, read again from the node at the first listing.
  std::shared_ptr<lease_limit> live = nullptr;
  /// Returns: true: every lease ahead counts.
  static constexpr bool counts(const contender&) noexcept { return true; }
  /// Returns: the lease count.
  constexpr std::size_t limit() const noexcept { return leases; }
};

/// Returns: whether a node whose data is `length` bytes long may be a semaphore's node: the lease
/// count it stores, "leases=N" with N in 1..1,000,000, is 8 to 14 bytes long. (A lock's queue
/// reads the data of its lock node only then.)
constexpr bool may_store_lease_count(std::int64_t length) noexcept { return length >= 8 && length <= 14; }

/// Returns: whether `data` is a semaphore node's lease count ("leases=" and a number).
constexpr bool stores_lease_count(std::string_view data) noexcept {
  constexpr std::string_view key = "leases=";
  if (!data.starts_with(key) || data.size() == key.size()) return false;
  for (const char c : data.substr(key.size()))
    if (c < '0' || c > '9') return false;
  return true;
}

/// Returns: the lease count N in a semaphore node's data ("leases=N", N in 1..1,000,000), if it
/// stores one.
constexpr std::optional<std::size_t> leases_stored(std::string_view data) noexcept {
  if (!stores_lease_count(data) || data.size() > 14) return std::nullopt;
  std::size_t n = 0;
  for (const char c : data.substr(7)) n = n * 10 + static_cast<std::size_t>(c - '0');
  if (n < 1 || n > 1'000'000) return std::nullopt;
  return n;
}

/// Returns: what a semaphore node with `leases` leases stores: "leases=N".
inline std::string lease_count_text(std::size_t leases) { return "leases=" + std::to_string(leases); }

/// Returns: where q[self] stands by `rule` (self < q.size()), each contender weighing the permits
/// its name says (zklock.detail:queue, weight_of: 1 but for a lease of many permits).
template <class Rule>
standing stand(const Rule& rule, std::span<const contender> q, std::size_t self) {
  standing s;
  const std::size_t own = q[self].weight;
  s.limit = own > rule.limit() ? 0 : rule.limit() - own + 1;
  for (std::size_t i = 0; i < self; ++i)
    if (rule.counts(q[i])) {
      s.ahead.push_back(i);
      s.weight += q[i].weight;
    }
  return s;
}

/// Where one contender stands in a listing, found without sorting the listing (the algorithm's
/// question on every wake-up: a long queue's listing is long).
struct place {
  /// Contenders of the rule's kinds ahead of it: its index in the sorted queue.
  std::size_t position = 0;
  /// The counted contenders ahead of it, in no particular order: the front of the listing that
  /// locate() was given, moved there (nearest_first picks the ones to watch).
  std::span<contender> ahead;
  /// The permits they stand for.
  std::size_t weight = 0;
  /// As standing::limit.
  std::size_t limit = 1;
  /// Returns: whether it holds.
  bool held() const noexcept { return weight < limit; }
};

/// Returns: where the contender named `self` stands by `rule` among `listed` (a listing's
/// contenders of the rule's kinds, in any order), or nullopt if it is not among them. Agrees with
/// stand() on the sorted queue, in time linear in the listing. Effects: moves the counted
/// contenders ahead of `self` to the front of `listed` (the place's `ahead` views them there).
template <class Rule>
std::optional<place> locate(const Rule& rule, std::span<contender> listed, std::string_view self) {
  const auto mine = std::ranges::find(listed, self, &contender::name);
  if (mine == listed.end()) return std::nullopt;
  const contender me = *mine;
  const auto counted_ahead = [&](const contender& c) { return seq_before(c.seq, me.seq) && rule.counts(c); };
  place p;
  p.limit = me.weight > rule.limit() ? 0 : rule.limit() - me.weight + 1;
  for (const contender& c : listed) {
    p.position += seq_before(c.seq, me.seq);
    if (counted_ahead(c)) p.weight += c.weight;
  }
  p.ahead = {listed.begin(), std::ranges::partition(listed, counted_ahead).begin()};
  return p;
}

/// Effects: moves the nearest of `ahead` (a place's counted contenders) to its front, nearest
/// first, as many as it takes for the permits they stand for to reach `budget` (all of them if
/// they never do); the rest stay behind them in no order. Returns: how many. With `budget` at
/// least the place's limit, no grant can come before one of them goes, however many of the others
/// go unseen (for one-permit contenders: `budget` contenders). Time: linear in `ahead`, times
/// log(budget).
std::size_t nearest_first(std::span<contender> ahead, std::size_t budget);

/// What a waiter watching contenders ahead (not the lock node's children) knows between two
/// listings, counted in permits (a lock contender and a one-permit lease weigh 1). At the listing
/// counted contenders of `ahead` permits were ahead of it; it watches the nearest of them, of
/// `watched` permits, and has seen those of `gone` permits deleted since (a watch that found its
/// node gone already counts too). Nobody can join ahead of it (sequence numbers only grow), so at
/// most ahead - gone permits are ahead now: the only grant a deletion may cause is one this bound
/// proves.
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
