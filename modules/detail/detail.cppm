// SPDX-License-Identifier: Apache-2.0
// zklock.detail — INTERNAL: zklock's own implementation, not part of its API; do not import it (its
// names change without notice; docs/install.md). The pure logic of the lock algorithm: path and
// connect-string checks, contender names and their queue order, the mode rules
// (zklock.detail:rules), ACL judgement, the round-trip meter. A module of its own, which zklock
// imports but does not re-export: importers of zklock never see these names; the unit tests
// (tests/unit) import it to test them without a server.
module;
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module zklock.detail;
export import :queue;  // contender names and their queue order
export import :rules;  // the mode rules: which contenders ahead count, and how many may remain

export namespace zklock::detail {

/// The clock of every deadline in zklock (try_lock_until converts other clocks to it once).
using clock = std::chrono::steady_clock;

/// A session's round trip, as its reads measure it: the lowest latency among the current and the
/// previous run of 16 reads (a minimum, so that a busy server's queueing hardly moves it; two runs,
/// so that it follows a network that became slower within 32 reads). Thread-safe.
class round_trip_meter {
 public:
  /// Effects: counts one read's latency.
  void note(clock::duration d) noexcept {
    std::lock_guard lk{mu_};
    if (d < now_) now_ = d;
    if (++n_ == 16) {
      before_ = now_;
      now_ = clock::duration::max();
      n_ = 0;
    }
  }
  /// Returns: the estimate, or nullopt before the first read.
  std::optional<clock::duration> estimate() const noexcept {
    std::lock_guard lk{mu_};
    const auto e = now_ < before_ ? now_ : before_;
    if (e == clock::duration::max()) return std::nullopt;
    return e;
  }

 private:
  mutable std::mutex mu_;
  clock::duration now_ = clock::duration::max();
  clock::duration before_ = clock::duration::max();
  int n_ = 0;
};

/// Returns: whether a session's next acquire of a lock should wait for the reply to the delete
/// that released its last hold there (session_options::background_release) before it queues
/// again. Yes only when the round trip `rtt` is far (longer than `far`; zero: any measured round
/// trip is far; microseconds::max(): never), the released hold had to wait for its grant
/// (`contended`), so others queue on this lock, and it lasted `held_for` of at least one round
/// trip, so they likely hold as long: then the waiting costs the releaser nothing (it will queue
/// behind them anyway), and its create, listing and watches stay off the wire and the server while
/// the delete hands the lock over. No without a measured round trip.
constexpr bool settle_before_requeue(bool contended, clock::duration held_for, std::optional<clock::duration> rtt,
                                     std::chrono::microseconds far) noexcept {
  if (!contended || !rtt || far == std::chrono::microseconds::max()) return false;
  return *rtt > far && held_for >= *rtt;
}

// ---- what a ZooKeeper C-client return code means to the call that got it --------------------------

/// What a return code of the ZooKeeper C client tells the call that got it (meaning_of).
enum class rc_meaning {
  answered,         ///< the server answered: ZOK, or a refusal that the caller judges by its code
  unknown_outcome,  ///< ZCONNECTIONLOSS, ZOPERATIONTIMEOUT: it may or may not have been served
  session_expired,  ///< ZSESSIONEXPIRED, ZINVALIDSTATE, UNKNOWNSESSION: the session (its handle) is over
  session_closed    ///< ZCLOSING: the handle is being closed
};

/// Returns: what `rc`, a C-client return code, means (the numbers are the C client's, which
/// zklock::errc mirrors; the session layer checks them against its header).
constexpr rc_meaning meaning_of(int rc) noexcept {
  switch (rc) {
    case -4:  // ZCONNECTIONLOSS
    case -7:  // ZOPERATIONTIMEOUT
      return rc_meaning::unknown_outcome;
    case -112:  // ZSESSIONEXPIRED
    case -9:    // ZINVALIDSTATE
    case -12:   // the server's UNKNOWNSESSION (not in the C client's codes): a transaction's
                // ephemeral create from a session the server is ending
      return rc_meaning::session_expired;
    case -116:  // ZCLOSING
      return rc_meaning::session_closed;
    default:
      return rc_meaning::answered;
  }
}

// ---- waiters to wake once -----------------------------------------------------------------------

/// Waiters to wake once and then forget: the waiters of a session's next change of state, of a
/// settling release, of one watch. Weak references, so that a waiter that gave up is not kept
/// alive by the list; T has `void wake() noexcept`. Not thread-safe: its owner's lock guards it.
/// To wake outside that lock, take() the waiters under it and wake_all() them after.
template <class T>
class waiter_list {
 public:
  /// Effects: adds `w`. Throws: std::bad_alloc.
  void add(std::weak_ptr<T> w) { waiters_.push_back(std::move(w)); }
  /// Effects: forgets `t` and every waiter that is gone. Returns: whether none is left.
  bool remove(const T* t) noexcept {
    std::erase_if(waiters_, [t](const std::weak_ptr<T>& w) {
      const auto p = w.lock();
      return !p || p.get() == t;
    });
    return waiters_.empty();
  }
  /// Returns: the waiters still alive, which this list keeps. Throws: std::bad_alloc.
  std::vector<std::shared_ptr<T>> live() const {
    std::vector<std::shared_ptr<T>> out;
    for (const auto& w : waiters_)
      if (auto t = w.lock()) out.push_back(std::move(t));
    return out;
  }
  /// Returns: whether the list is empty (waiters that are gone count until woken or removed).
  bool empty() const noexcept { return waiters_.empty(); }
  /// Returns: the waiters, which this list forgets.
  waiter_list take() noexcept {
    waiter_list out;
    out.waiters_.swap(waiters_);
    return out;
  }
  /// Effects: calls `wake(t)` on every waiter t still alive, in the order they were added, then
  /// forgets them all. `wake` must not throw.
  template <class Wake>
  void wake_all(Wake wake) noexcept {
    for (auto& w : waiters_)
      if (const auto t = w.lock()) wake(*t);
    waiters_.clear();
  }
  /// Effects: wakes every waiter still alive (t.wake()), then forgets them all.
  void wake_all() noexcept {
    wake_all([](T& t) noexcept { t.wake(); });
  }

 private:
  std::vector<std::weak_ptr<T>> waiters_;
};

// ---- checks of what users pass in ---------------------------------------------------------------

/// Effects: checks that `path` is an absolute ZooKeeper path zklock may use (no empty, relative,
/// trailing '/', '//', '.', '..', NUL or control characters, nothing under /zookeeper, at most
/// 1024 bytes, not "/"). Throws: std::invalid_argument naming `what` and the problem.
void validate_path(std::string_view path, std::string_view what);

/// Effects: checks a connect string, "host:port[,host:port...][/chroot]": each host non-empty, of
/// letters, digits, '.', '-', '_' and ':' (IPv6 in brackets: "[addr]:port"), each port in 1..65535,
/// the chroot a valid path. Returns: the chroot ("" if none). Throws: std::invalid_argument.
std::string validate_connect(std::string_view connect);

// ---- ACLs: refuse to queue where we could not delete our node again ----------------------------

/// One entry of a node's ACL.
struct acl_entry {
  int perms = 0;       ///< ZooKeeper permission bits (read 1, write 2, create 4, delete 8, admin 16)
  std::string scheme;  ///< "world", "digest", "ip", ...
  std::string id;      ///< "anyone", "user:base64(sha1(user:password))", an address, ...
};

/// The DELETE permission bit.
inline constexpr int acl_delete = 8;

/// Returns: the id ZooKeeper's digest scheme stores for `user:password`:
/// "user:" + base64(sha1("user:password")). Throws: std::invalid_argument if there is no ':'.
std::string digest_identity(std::string_view user_colon_password);

/// Returns: whether `acl` may let a session whose digest identity is `digest_id` (empty: none)
/// delete children of the node: world:anyone or that digest id holds DELETE, or an entry of a
/// scheme that zklock cannot judge from the client side (ip, sasl, x509, ...) does.
bool acl_may_delete(const std::vector<acl_entry>& acl, std::string_view digest_id) noexcept;

/// What a revoker writes into a holder's node to ask it to let go: Curator's revocation marker, so
/// that zklock and Curator (Revoker.attemptRevoke, makeRevocable) ask each other.
inline constexpr std::string_view revocation_marker = "__REVOKE__";

/// Returns: whether a contender node's data is a revocation request (exactly the marker).
constexpr bool is_revocation_request(std::string_view data) noexcept { return data == revocation_marker; }

/// Returns: the data stored for a contender: "host=<host> pid=<pid> since=<unix ms>".
std::string contender_data();

/// Who a contender is, read back from its node's data (zklock::contender_identity's fields).
struct identity_fields {
  std::string host;                                            ///< control characters as '?'
  std::optional<long long> pid;                                ///< if zklock's
  std::optional<std::chrono::system_clock::time_point> since;  ///< if zklock's
};

/// Returns: the identity in a contender node's `data`: zklock's own "host=... pid=... since=..."
/// (a damaged field is left out), or another library's text as the host (Curator stores the
/// client's IP address). Never throws anything but std::bad_alloc.
identity_fields parse_identity(std::string_view data);

/// Returns: the whole decimal number `v` is, or nullopt (empty, a sign only, other characters).
std::optional<long long> whole_number(std::string_view v) noexcept;

/// Returns: `s` with every control character shown as '?'.
std::string printable(std::string_view s);

}  // namespace zklock::detail
