// SPDX-License-Identifier: Apache-2.0
// Bad input at every public entry point of the lock types, zklock::contenders and
// session::wait_for gives a clear typed error (or, where the contract says so, is a harmless no-op), leaves nothing behind on the server and leaves the
// session usable. One table drives it all.
//
// Covered elsewhere, not repeated here: malformed connect strings, chroots, non-positive or absurd
// session/connect timeouts and empty auth schemes (session_test.cpp, SessionBadInput), digest()
// user names (SessionAuth.DigestChecksTheUserName), timeout_throw_after<Ms> with Ms <= 0 (a
// compile-time constraint).
//
// Over-long node data (the server drops the connection at ~1 MiB) cannot come from a user: the
// only data zklock writes are its own contender data ("host=<hostname> pid=<pid> since=<ms>",
// hostname <= 255 bytes) and a semaphore's "leases=<n>" (n <= 1000000). Over-long paths are
// refused before any request (at most 1024 bytes), so no bad input can drop the connection.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// What a row must end in.
struct expectation {
  enum kind_t { invalid_argument, system_error, no_error } kind;
  std::error_code code{};   ///< system_error: the exact code
  std::string mention{};    ///< invalid_argument: a word the message must contain (e.g. the function)
};
expectation invalid(std::string mention = {}) { return {expectation::invalid_argument, {}, std::move(mention)}; }
expectation error(std::error_code c) { return {expectation::system_error, c, {}}; }
expectation error(zklock::errc e) { return error(zklock::make_error_code(e)); }
expectation no_error() { return {expectation::no_error, {}, {}}; }

/// One row: what to do with the session and the row's base path, and what must come of it.
struct row {
  std::string name;
  std::function<void(zklock::session&, const std::string& base)> run;
  expectation want;
  /// Nodes (relative to base) the row leaves on purpose: persistent semaphore nodes. They must
  /// have no children (no lease left).
  std::vector<std::string> remains{};
  /// A node outside base that must not exist afterwards (e.g. under /zookeeper).
  std::string outside{};
};

/// Shows control characters and NUL of a test input; shortens long ones.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 60)) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      out += "\\x" + std::to_string(static_cast<unsigned char>(c));
    else
      out += c;
  }
  if (s.size() > 60) out += "...(" + std::to_string(s.size()) + " bytes)";
  return "\"" + out + "\"";
}

/// Returns: every node below `path`, children before their parent.
std::vector<std::string> tree_below(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& kid : zkt::children(path)) {
    const std::string p = path + "/" + kid;
    for (auto& q : tree_below(p)) out.push_back(std::move(q));
    out.push_back(p);
  }
  return out;
}

/// Returns: a path of exactly `n` bytes below `base`.
std::string path_of_size(const std::string& base, std::size_t n) {
  return base + "/" + std::string(n - base.size() - 1, 'x');
}

// The constructors that take a lock path, by type.
using constructor = std::function<void(zklock::session&, const std::string& path)>;
struct entry_point {
  const char* type;
  constructor make;
};
const std::vector<entry_point>& path_entry_points() {
  static const std::vector<entry_point> all = {
      {"mutex", [](zklock::session& s, const std::string& p) { zklock::mutex m{s, p}; }},
      {"recursive_mutex", [](zklock::session& s, const std::string& p) { zklock::recursive_mutex m{s, p}; }},
      {"owner_mutex", [](zklock::session& s, const std::string& p) { zklock::owner_mutex m{s, p}; }},
      {"shared_mutex", [](zklock::session& s, const std::string& p) { zklock::shared_mutex m{s, p}; }},
      {"basic_mutex<{watch_children, wake_latch}>",
       [](zklock::session& s, const std::string& p) {
         zkt::combo<zklock::watch_children, zklock::wake_latch>::mutex m{s, p};
       }},
      {"counting_semaphore", [](zklock::session& s, const std::string& p) { zklock::counting_semaphore m{s, p, 1}; }},
      {"contenders", [](zklock::session& s, const std::string& p) { (void)zklock::contenders(s, p); }},
  };
  return all;
}

/// Every row of the table.
std::vector<row> table() {
  std::vector<row> rows;
  const std::string own = "/zookeeper/zklock-bad-input-" + std::to_string(steady::now().time_since_epoch().count());

  // ---- lock paths, at every constructor -------------------------------------------------------
  // Each is built from the row's base path where it can be, so that "nothing left behind" is
  // checked where a wrongly accepted path would have landed (e.g. "base/a" for "base/a\0b").
  struct bad_path {
    const char* what;
    std::function<std::string(const std::string& base)> make;
    std::string outside{};
  };
  const std::vector<bad_path> bad_paths = {
      {"empty", [](const std::string&) { return std::string{}; }},
      {"relative", [](const std::string&) { return std::string{"zklock-test/relative"}; }},
      {"relative, one component", [](const std::string&) { return std::string{"lock"}; }},
      {"the root", [](const std::string&) { return std::string{"/"}; }},
      {"trailing '/'", [](const std::string& b) { return b + "/"; }},
      {"'//'", [](const std::string& b) { return b + "//x"; }},
      {"'.' component", [](const std::string& b) { return b + "/./x"; }},
      {"'..' component", [](const std::string& b) { return b + "/../x"; }},
      {"trailing '.'", [](const std::string& b) { return b + "/."; }},
      {"trailing '..'", [](const std::string& b) { return b + "/.."; }},
      {"embedded NUL", [](const std::string& b) { return b + std::string{"/a\0b", 4}; }},
      {"newline", [](const std::string& b) { return b + "/a\nb"; }},
      {"DEL", [](const std::string& b) { return b + "/a\x7f"; }},
      {"/zookeeper", [](const std::string&) { return std::string{"/zookeeper"}; }},
      {"/zookeeper/quota", [](const std::string&) { return std::string{"/zookeeper/quota"}; }},
      {"under /zookeeper", [own](const std::string&) { return own; }, own},
      {"1025 bytes", [](const std::string& b) { return path_of_size(b, 1025); }},
      {"1 MiB", [](const std::string& b) { return path_of_size(b, std::size_t{1} << 20); }},
  };
  for (const auto& e : path_entry_points())
    for (const auto& p : bad_paths)
      rows.push_back({std::string{e.type} + "(path: " + p.what + ")",
                      [make = e.make, path = p.make](zklock::session& s, const std::string& base) {
                        make(s, path(base));
                      },
                      invalid("lock path"), {}, p.outside});

  // The longest path accepted works end to end with every node kind (contender names add ~60 bytes).
  rows.push_back({"mutex on a 1024-byte path", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, path_of_size(base, 1024)};
                    m.lock();
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"shared_mutex on a 1024-byte path", [](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, path_of_size(base, 1024)};
                    m.lock();
                    m.unlock();
                    m.lock_shared();
                    m.unlock_shared();
                  },
                  no_error()});
  {
    // Not a bad path, but the server refuses it (invalid UTF-8): a typed error all the same.
    rows.push_back({"mutex on an invalid UTF-8 path: the server's bad_arguments",
                    [](zklock::session& s, const std::string& base) {
                      zklock::mutex m{s, base + "/\xff\xfe"};
                      m.lock();
                    },
                    error(zklock::errc::bad_arguments)});
  }

  // ---- semaphore leases -----------------------------------------------------------------------
  for (const std::ptrdiff_t n : {std::ptrdiff_t{0}, std::ptrdiff_t{-1}, std::numeric_limits<std::ptrdiff_t>::min(),
                                 std::ptrdiff_t{1'000'001}, std::numeric_limits<std::ptrdiff_t>::max()})
    rows.push_back({"counting_semaphore(leases: " + std::to_string(n) + ")",
                    [n](zklock::session& s, const std::string& base) { zklock::counting_semaphore m{s, base + "/sem", n}; },
                    invalid("leases")});
  rows.push_back({"counting_semaphore(leases: other than stored)", [](zklock::session& s, const std::string& base) {
                    zklock::counting_semaphore a{s, base + "/sem", 2};
                    zklock::counting_semaphore b{s, base + "/sem", 3};
                  },
                  error(zklock::errc::lease_count_mismatch), {"sem"}});

  // ---- a wait that is no number: std::invalid_argument naming the function ----------------------
  // (A negative wait is no error: it makes one attempt, as the standard's try_lock_for does; see
  // standard_contract_test.cpp for every lock type and side.)
  rows.push_back({"mutex::try_lock_for(NaN s)",
                  [](zklock::session& s, const std::string& base) {
                    (void)zklock::mutex{s, base + "/m"}.try_lock_for(
                        std::chrono::duration<double>{std::numeric_limits<double>::quiet_NaN()});
                  },
                  invalid("try_lock_for")});
  rows.push_back({"session::wait_for(connected, -1 ms)",
                  [](zklock::session& s, const std::string&) { (void)s.wait_for(zklock::session_state::connected, -1ms); },
                  invalid("wait_for")});

  // ---- negative waits: one attempt, granted on a free lock --------------------------------------
  rows.push_back({"mutex::try_lock_for(milliseconds::min()) on a free lock", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_for(std::chrono::milliseconds::min()));
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"mutex::try_lock_for(-0.5 s as double) on a free lock", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_for(std::chrono::duration<double>{-0.5}));
                    m.unlock();
                  },
                  no_error()});

  // ---- waits that are not errors: zero, "forever", and a deadline in the past (one attempt) -----
  rows.push_back({"mutex::try_lock_for(0)", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_for(0ms));
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"mutex::try_lock_for(hours::max()) on a free lock", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_for(std::chrono::hours::max()));
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"mutex::try_lock_until(steady past)", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_until(steady::now() - 1s));
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"mutex::try_lock_until(system_clock past)", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_until(std::chrono::system_clock::now() - 1h));
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"mutex::try_lock_until(past) while held elsewhere", [](zklock::session& s, const std::string& base) {
                    zklock::session other{zkt::options()};
                    zklock::mutex holder{other, base + "/m"};
                    holder.lock();
                    zklock::mutex m{s, base + "/m"};
                    EXPECT_FALSE(m.try_lock_until(steady::now() - 1s));
                    EXPECT_EQ(zkt::children(base + "/m").size(), 1u) << "the failed attempt left its node";
                    holder.unlock();
                  },
                  no_error()});
  rows.push_back({"shared_mutex::try_lock_until / try_lock_shared_until(past)",
                  [](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, base + "/m"};
                    EXPECT_TRUE(m.try_lock_until(steady::now() - 1s));
                    m.unlock();
                    EXPECT_TRUE(m.try_lock_shared_until(std::chrono::system_clock::now() - 1s));
                    m.unlock_shared();
                  },
                  no_error()});
  rows.push_back({"counting_semaphore::try_acquire_until(past)", [](zklock::session& s, const std::string& base) {
                    zklock::counting_semaphore m{s, base + "/sem", 1};
                    EXPECT_TRUE(m.try_acquire_until(steady::now() - 1s));
                    m.release();
                  },
                  no_error(), {"sem"}});

  // ---- release of what is not held --------------------------------------------------------------
  // One rule for every lock type (the standard's precondition, checked): releasing what is not held
  // does nothing and never throws (std::lock_guard and friends release from destructors); the
  // error_code overloads report errc::not_held.
  rows.push_back({"counting_semaphore::release() without a lease", [](zklock::session& s, const std::string& base) {
                    zklock::counting_semaphore m{s, base + "/sem", 2};
                    m.release();
                    std::error_code ec;
                    m.release(ec);
                    EXPECT_EQ(ec, std::error_code{zklock::errc::not_held});
                  },
                  no_error(), {"sem"}});
  rows.push_back({"counting_semaphore::release() once more than acquired", [](zklock::session& s, const std::string& base) {
                    zklock::counting_semaphore m{s, base + "/sem", 2};
                    m.acquire();
                    m.release();
                    m.release();
                    EXPECT_EQ(m.held_leases(), 0);
                  },
                  no_error(), {"sem"}});
  rows.push_back({"mutex::unlock() not held", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    m.unlock();
                    EXPECT_FALSE(m.owns_lock());
                  },
                  no_error()});
  rows.push_back({"mutex::unlock() twice", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    m.lock();
                    m.unlock();
                    m.unlock();
                    EXPECT_FALSE(m.owns_lock());
                  },
                  no_error()});
  rows.push_back({"mutex::unlock() from a thread that does not hold", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    m.lock();
                    std::thread{[&] { m.unlock(); }}.join();
                    EXPECT_TRUE(m.owns_lock()) << "another thread's unlock() released our hold";
                    EXPECT_EQ(zkt::children(base + "/m").size(), 1u);
                    m.unlock();
                  },
                  no_error()});
  rows.push_back({"recursive_mutex::unlock() not held", [](zklock::session& s, const std::string& base) {
                    zklock::recursive_mutex m{s, base + "/m"};
                    m.unlock();
                    EXPECT_FALSE(m.owns_lock());
                  },
                  no_error()});
  rows.push_back({"owner_mutex::unlock() once more than locked", [](zklock::session& s, const std::string& base) {
                    zklock::owner_mutex m{s, base + "/m"};
                    m.lock();
                    m.unlock();
                    m.unlock();
                    EXPECT_FALSE(m.owns_lock());
                  },
                  no_error()});
  rows.push_back({"shared_mutex::unlock() / unlock_shared() not held", [](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, base + "/m"};
                    m.unlock();
                    m.unlock_shared();
                    m.lock_shared();
                    m.unlock();  // the write side is not held: the read hold stays
                    EXPECT_TRUE(m.owns_shared());
                    m.unlock_shared();
                  },
                  no_error()});
  // The std::error_code& overloads report it, as errc::not_held, and still never throw (the rows
  // turn a set code into an exception to compare it).
  auto check = [](const std::error_code& ec) {
    if (ec) throw std::system_error(ec);
  };
  rows.push_back({"mutex::unlock(ec) not held", [check](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    std::error_code ec;
                    static_assert(noexcept(m.unlock(ec)));
                    m.unlock(ec);
                    check(ec);
                  },
                  error(zklock::errc::not_held)});
  rows.push_back({"mutex::unlock(ec) from a thread that does not hold", [check](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    m.lock();
                    std::error_code ec;
                    std::thread{[&] { m.unlock(ec); }}.join();
                    EXPECT_TRUE(m.owns_lock()) << "another thread's unlock(ec) released our hold";
                    m.unlock();
                    check(ec);
                  },
                  error(zklock::errc::not_held)});
  rows.push_back({"mutex::unlock(ec) held: cleared", [check](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    m.lock();
                    std::error_code ec = zklock::errc::not_held;
                    m.unlock(ec);
                    EXPECT_FALSE(m.owns_lock());
                    check(ec);
                  },
                  no_error()});
  rows.push_back({"recursive_mutex::unlock(ec) once more than locked", [check](zklock::session& s, const std::string& base) {
                    zklock::recursive_mutex m{s, base + "/m"};
                    m.lock();
                    m.lock();
                    std::error_code ec;
                    m.unlock(ec);
                    check(ec);
                    m.unlock(ec);
                    check(ec);
                    m.unlock(ec);
                    check(ec);
                  },
                  error(zklock::errc::not_held)});
  rows.push_back({"owner_mutex::unlock(ec) once more than locked", [check](zklock::session& s, const std::string& base) {
                    zklock::owner_mutex m{s, base + "/m"};
                    m.lock();
                    std::error_code ec;
                    m.unlock(ec);
                    check(ec);
                    m.unlock(ec);
                    check(ec);
                  },
                  error(zklock::errc::not_held)});
  rows.push_back({"shared_mutex::unlock(ec) with only the read side", [check](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, base + "/m"};
                    m.lock_shared();
                    std::error_code ec;
                    m.unlock(ec);
                    EXPECT_TRUE(m.owns_shared()) << "the read hold must stay";
                    m.unlock_shared();
                    check(ec);
                  },
                  error(zklock::errc::not_held)});
  rows.push_back({"shared_mutex::unlock_shared(ec) not held", [check](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, base + "/m"};
                    std::error_code ec;
                    m.unlock_shared(ec);
                    check(ec);
                  },
                  error(zklock::errc::not_held)});
  rows.push_back({"counting_semaphore::release(ec) without a lease", [check](zklock::session& s, const std::string& base) {
                    zklock::counting_semaphore m{s, base + "/sem", 2};
                    std::error_code ec;
                    static_assert(noexcept(m.release(ec)));
                    m.release(ec);
                    check(ec);
                  },
                  error(zklock::errc::not_held), {"sem"}});
  rows.push_back({"mutex::fencing_token() not held",
                  [](zklock::session& s, const std::string& base) { (void)zklock::mutex{s, base + "/m"}.fencing_token(); },
                  error(zklock::errc::not_held)});
  rows.push_back({"mutex::lost_token() not held",
                  [](zklock::session& s, const std::string& base) { (void)zklock::mutex{s, base + "/m"}.lost_token(); },
                  error(zklock::errc::not_held)});
  rows.push_back({"shared_mutex::fencing_token() with only the read side", [](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, base + "/m"};
                    m.lock_shared();
                    (void)m.fencing_token();
                  },
                  error(zklock::errc::not_held)});

  // ---- self-deadlock -----------------------------------------------------------------------------
  rows.push_back({"mutex::lock() by its holder", [](zklock::session& s, const std::string& base) {
                    zklock::mutex m{s, base + "/m"};
                    m.lock();
                    m.lock();
                  },
                  error(std::make_error_code(std::errc::resource_deadlock_would_occur))});
  rows.push_back({"shared_mutex::lock() by a reader", [](zklock::session& s, const std::string& base) {
                    zklock::shared_mutex m{s, base + "/m"};
                    m.lock_shared();
                    m.lock();
                  },
                  error(std::make_error_code(std::errc::resource_deadlock_would_occur))});
  return rows;
}

/// Effects: runs `r`, checks the outcome against r.want.
void check_outcome(const row& r, zklock::session& s, const std::string& base) {
  try {
    r.run(s, base);
    if (r.want.kind != expectation::no_error) ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(r.want.kind, expectation::invalid_argument) << "std::invalid_argument: " << e.what();
    EXPECT_NE(std::string_view{e.what()}.find("zklock"), std::string_view::npos) << e.what();
    if (!r.want.mention.empty())
      EXPECT_NE(std::string_view{e.what()}.find(r.want.mention), std::string_view::npos)
          << "the message does not name \"" << r.want.mention << "\": " << e.what();
  } catch (const std::system_error& e) {
    EXPECT_EQ(r.want.kind, expectation::system_error) << "std::system_error: " << e.what();
    EXPECT_EQ(e.code(), r.want.code) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
  }
}

/// Effects: checks that `r` left nothing below `base` but r.remains (without children) and the
/// empty container nodes the server reaps; that a row refused before any request left nothing
/// at all; then deletes what is left so that the next row starts from nothing.
void check_leftovers(const row& r, const std::string& base) {
  const bool no_request = r.want.kind == expectation::invalid_argument && r.remains.empty();
  const auto tree = tree_below(base);
  if (no_request) {
    EXPECT_TRUE(tree.empty() && !zkt::exists(base)) << "refused input reached the server: " << tree.size() << " nodes";
  }
  for (const auto& path : tree) {
    const auto st = zkt::stat_node(path);
    if (!st.exists) continue;  // a container reaped meanwhile
    bool expected = false;
    for (const auto& keep : r.remains) expected = expected || path == base + "/" + keep;
    EXPECT_EQ(st.ephemeral_owner, 0) << "left behind: contender node " << printable(path);
    if (!expected) EXPECT_EQ(st.data, "") << "left behind: " << printable(path);
  }
  for (const auto& keep : r.remains) {
    // (a semaphore's node that had leases may be gone already: a container, reaped once idle)
    if (!zkt::exists(base + "/" + keep)) continue;
    EXPECT_EQ(zkt::children(base + "/" + keep), std::vector<std::string>{}) << "a lease was left under " << keep;
  }
  if (!r.outside.empty()) EXPECT_FALSE(zkt::exists(r.outside)) << "created " << r.outside;
  for (const auto& path : tree) zkt::remove(path);
  zkt::remove(base);
  EXPECT_EQ(tree_below(base), std::vector<std::string>{}) << "could not clean up";
}

TEST(BadInput, EveryEntryPointRefusesItCleanlyAndTheSessionStaysUsable) {
  zklock::session s{zkt::options()};
  const std::string probe = zkt::unique_path("bad-input-probe");
  const auto rows = table();
  ASSERT_GT(rows.size(), 100u);
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    const std::string base = zkt::unique_path("bad-input");
    check_outcome(r, s, base);
    check_leftovers(r, base);
    // The session is still usable: connected, and a mutex on a good path locks and unlocks.
    ASSERT_EQ(s.state(), zklock::session_state::connected);
    zklock::mutex ok{s, probe};
    ASSERT_TRUE(ok.try_lock_for(30s));
    EXPECT_EQ(zkt::children(probe).size(), 1u);
    ok.unlock();
    EXPECT_EQ(zkt::children(probe), std::vector<std::string>{});
  }
}

}  // namespace
