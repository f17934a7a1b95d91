// SPDX-License-Identifier: Apache-2.0
// Interop with Apache Curator: zklock contenders and real Curator contenders (Debian's Curator jars
// running tests/interop/CuratorContender.java) on one lock path exclude each other, queue in one
// order and agree on the read/write rule (docs/interop.md).
//
// Race tests: two Curator JVMs and three zklock threads (a session each) contend on one lock path
// and hold one shared resource whose protocol catches overlapping holds (CuratorContender.java).
// Step tests: one interactive Curator JVM and zklock objects take turns in a fixed script, so each
// "may hold now / must wait" of the mutex and of the read/write rule is checked in both directions.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <shared_mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "child_process.hpp"
#include "posix_io.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr auto step_limit = 20s;  // bound of any one step that should happen promptly

using zkt::throw_errno;

// ---- one Java contender process ---------------------------------------------------------------

/// An owned file descriptor.
class fd_guard {
 public:
  explicit fd_guard(int fd = -1) noexcept : fd_(fd) {}
  ~fd_guard() { reset(); }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

/// Returns: the time left until `deadline` (zero once it passed).
std::chrono::milliseconds until(steady_clock::time_point deadline) {
  return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - steady_clock::now()), std::chrono::milliseconds{0});
}

/// One CuratorContender JVM (a zkt::child_process), its stdin and stdout piped to us, its stderr to
/// a file. The destructor kills and reaps it if it still runs; PR_SET_PDEATHSIG kills it if this
/// test process dies first.
class java_contender {
 public:
  /// Effects: starts the JVM with `args` after the class name. Throws: std::system_error.
  java_contender(const std::vector<std::string>& args, fs::path stderr_file)
      : err_path_(std::move(stderr_file)), proc_(command(args), options(err_path_)) {}

  /// Effects: writes `line` and a newline to the JVM's stdin (ignored if it is gone: its exit
  /// status tells why).
  void send(std::string_view line) { (void)proc_.send(line); }

  /// Returns: the next stdout line, or nullopt if none came before `deadline` or stdout ended.
  std::optional<std::string> read_line(steady_clock::time_point deadline) { return proc_.read_line(until(deadline)); }

  /// Returns: the exit code (128 + signal if killed by one), or nullopt if it still ran at `deadline`.
  std::optional<int> wait(steady_clock::time_point deadline) {
    const auto status = proc_.wait(until(deadline));
    if (!status) return std::nullopt;
    return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
  }

  /// Returns: what the JVM wrote to stderr so far (for failure messages).
  std::string stderr_text() const { return zkt::read_file(err_path_); }

 private:
  static std::vector<std::string> command(const std::vector<std::string>& args) {
    std::vector<std::string> argv{ZKLOCK_JAVA, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                                  "-cp", ZKLOCK_CURATOR_CLASSPATH, "CuratorContender"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  static zkt::spawn_options options(const fs::path& err) {
    std::signal(SIGPIPE, SIG_IGN);  // a dead JVM must not take the test down through its stdin
    zkt::spawn_options o;
    o.err_file = err;
    o.die_with_parent = true;
    return o;
  }

  fs::path err_path_;
  zkt::child_process proc_;
};

/// A fresh scratch directory for one test under the build tree.
fs::path work_dir(std::string_view name) {
  const fs::path d = fs::path{ZKLOCK_INTEROP_WORK} / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// Effects: starts a contender and waits for its READY. Throws: std::runtime_error if it does not
/// come within 60 s (JVM start, connect and warm-up).
std::unique_ptr<java_contender> start_java(const std::vector<std::string>& args, const fs::path& err) {
  auto j = std::make_unique<java_contender>(args, err);
  const auto line = j->read_line(steady_clock::now() + 60s);
  if (line != "READY")
    throw std::runtime_error("Curator contender not ready (got \"" + line.value_or("<nothing>") +
                             "\"); stderr:\n" + j->stderr_text());
  return j;
}

/// Returns: the next answer line of an interactive contender, or a description of its absence.
std::string answer(java_contender& j) {
  const auto line = j.read_line(steady_clock::now() + step_limit);
  return line ? *line : "<no answer within 20 s; stderr: " + j.stderr_text() + ">";
}

/// Effects: sends `command` to an interactive contender. Returns: its answer (see answer()).
std::string ask(java_contender& j, std::string_view command) {
  j.send(command);
  return answer(j);
}

// ---- the shared resource (protocol: see CuratorContender.java; this side's origin is C) -------

struct overlap : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void write_text(const fs::path& p, std::string_view text) {
  fd_guard fd{::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (fd.get() < 0) throw_errno("open " + p.string());
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) throw_errno("write " + p.string());
}

std::string read_text(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class shared_resource {
 public:
  /// Effects: creates the resource file `file` with the count 0.
  explicit shared_resource(const fs::path& file)
      : count_(fs::absolute(file)),
        dir_(count_.parent_path()),
        holder_(dir_ / (count_.filename().string() + ".holder")),
        log_(dir_ / (count_.filename().string() + ".log")),
        reader_prefix_(count_.filename().string() + ".r.") {
    write_text(count_, "0");
  }

  /// Effects: one exclusive hold. Throws: overlap if another holder is inside.
  void hold_exclusive() const {
    fd_guard fd{::open(holder_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
    if (fd.get() < 0) {
      if (errno == EEXIST) throw overlap("zklock exclusive hold: another exclusive holder's marker exists");
      throw_errno("open " + holder_.string());
    }
    fd.reset();
    append_log("X");
    expect_no_readers("on entry");
    const long n = read_count();
    std::this_thread::sleep_for(1ms);  // the work: widens the window in which an overlap is caught
    write_text(count_, std::to_string(n + 1));
    expect_no_readers("on exit");
    if (::unlink(holder_.c_str()) != 0) {
      if (errno == ENOENT) throw overlap("zklock exclusive hold: someone else deleted our holder marker");
      throw_errno("unlink " + holder_.string());
    }
  }

  /// Effects: one read hold; `tag` makes the reader marker unique. Returns: whether a Curator
  /// reader was inside at the same time. Throws: overlap if an exclusive holder is inside.
  bool hold_shared(const std::string& tag) const {
    const fs::path mine = dir_ / (reader_prefix_ + "C-" + tag);
    write_text(mine, "");
    append_log("R");
    if (fs::exists(holder_)) throw overlap("zklock read hold: an exclusive holder's marker exists on entry");
    const bool with_curator = count_readers(reader_prefix_ + "J-") > 0;
    read_count();
    std::this_thread::sleep_for(1ms);
    if (fs::exists(holder_)) throw overlap("zklock read hold: an exclusive holder's marker exists on exit");
    fs::remove(mine);
    return with_curator;
  }

  /// Returns: the count of exclusive holds written so far.
  long count() const { return read_count(); }

  /// Returns: the origins (J or C) of the holds in the order they were logged.
  std::string log_origins() const {
    std::istringstream in{read_text(log_)};
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out += line.front();
    return out;
  }

 private:
  void append_log(std::string_view kind) const {
    const std::string line = "C " + std::to_string(::getpid()) + " " + std::string{kind} + "\n";
    fd_guard fd{::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)};
    if (fd.get() < 0 || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw_errno("append " + log_.string());
  }
  std::size_t count_readers(const std::string& prefix) const {
    std::size_t n = 0;
    std::error_code ec;
    for (fs::directory_iterator it{dir_, ec}, end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string().starts_with(prefix)) ++n;
    return n;
  }
  void expect_no_readers(std::string_view when) const {
    if (const auto n = count_readers(reader_prefix_); n > 0)
      throw overlap("zklock exclusive hold: " + std::to_string(n) + " reader marker(s) exist " + std::string{when});
  }
  long read_count() const {
    const std::string text = read_text(count_);
    long n = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || ptr != text.data() + text.size() || text.empty())
      throw overlap("the count file reads \"" + text + "\" (being rewritten by another holder)");
    return n;
  }

  fs::path count_, dir_, holder_, log_;
  std::string reader_prefix_;
};

// ---- looking at the lock node ------------------------------------------------------------------

const std::regex mutex_name{"_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-[0-9]{10}"};
const std::regex rw_name{"_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-__(READ|WRIT)__[0-9]{10}"};

/// A contender node as listed, with where it comes from.
struct queued {
  std::string name;
  char origin;  ///< 'C': zklock (data "host=... pid=... since=..."), 'J': Curator (data: client IP)
};

/// Returns: the contender nodes under `path` in sequence order, with their origins (nodes deleted
/// while we looked are left out).
std::vector<queued> queue_of(const std::string& path) {
  auto names = zkt::children(path);
  auto seq = [](const std::string& n) { return n.size() >= 10 ? n.substr(n.size() - 10) : n; };
  std::sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return seq(a) < seq(b); });
  std::vector<queued> out;
  for (auto& n : names) {
    const auto st = zkt::stat_node(path + "/" + n);
    if (st.exists) out.push_back({n, st.data.starts_with("host=") ? 'C' : 'J'});
  }
  return out;
}

std::string origins(const std::vector<queued>& q) {
  std::string s;
  for (const auto& e : q) s += e.origin;
  return s;
}

/// Effects: polls the children of `path` until `pred` holds. Returns: whether it did within step_limit.
bool await_queue(const std::string& path, const std::function<bool(const std::vector<std::string>&)>& pred) {
  const auto limit = steady_clock::now() + step_limit;
  while (!pred(zkt::children(path))) {
    if (steady_clock::now() > limit) return false;
    std::this_thread::yield();
  }
  return true;
}

bool has_marker(const std::vector<std::string>& names, std::string_view marker) {
  return std::any_of(names.begin(), names.end(), [&](const auto& n) { return n.find(marker) != std::string::npos; });
}

/// A zklock hold taken on a thread of its own (holds belong to threads): `acquire` runs at once
/// (it must be bounded), the hold is kept until release() or destruction, then `release` runs.
class thread_hold {
 public:
  thread_hold(std::function<bool()> acquire, std::function<void()> release)
      : acquired_f_(acquired_.get_future().share()) {
    t_ = std::jthread([this, acquire = std::move(acquire), release = std::move(release)] {
      bool ok = false;
      try {
        ok = acquire();
      } catch (...) {
      }
      acquired_.set_value(ok);
      if (!ok) return;
      go_.get_future().wait();
      release();
    });
  }
  ~thread_hold() { release(); }
  thread_hold(const thread_hold&) = delete;
  thread_hold& operator=(const thread_hold&) = delete;

  /// Returns: whether the thread holds, waiting for its attempt to finish until `limit` passes.
  bool acquired(std::chrono::milliseconds limit) const {
    return acquired_f_.wait_for(limit) == std::future_status::ready && acquired_f_.get();
  }
  /// Returns: whether the attempt has finished by now.
  bool finished() const { return acquired_f_.wait_for(0s) == std::future_status::ready; }
  /// Effects: lets the thread release its hold, and joins it.
  void release() {
    if (!released_) go_.set_value();
    released_ = true;
    if (t_.joinable()) t_.join();
  }

 private:
  std::promise<bool> acquired_;
  std::shared_future<bool> acquired_f_;
  std::promise<void> go_;
  bool released_ = false;
  std::jthread t_;
};

// ---- the race: Curator JVMs and zklock threads on one path --------------------------------------

struct race_config {
  std::string name;        // of the work directory
  bool read_write = false; // false: mutex vs InterProcessMutex; true: shared_mutex vs InterProcessReadWriteLock
  int java_procs = 2, java_iterations = 40;
  int zk_threads = 3, zk_iterations = 40;
};

/// Returns: the value of `key=<n>` in a DONE line, or -1.
long field(const std::string& line, const std::string& key) {
  const auto pos = line.find(" " + key + "=");
  if (pos == std::string::npos) return -1;
  return std::stol(line.substr(pos + key.size() + 2));
}

void race(const race_config& cfg) {
  const std::string path = zkt::unique_path(cfg.name);
  const fs::path dir = work_dir(cfg.name);
  const shared_resource res{dir / "resource"};
  const std::string java_mode = cfg.read_write ? "rw-mixed" : "mutex";

  std::vector<std::unique_ptr<java_contender>> javas;
  for (int i = 0; i < cfg.java_procs; ++i)
    javas.push_back(std::make_unique<java_contender>(
        std::vector<std::string>{zkt::connect(), path, java_mode, std::to_string(cfg.java_iterations),
                                 (dir / "resource").string()},
        dir / ("java" + std::to_string(i) + ".err")));
  for (auto& j : javas) {
    const auto line = j->read_line(steady_clock::now() + 60s);
    ASSERT_EQ(line.value_or("<nothing>"), "READY") << j->stderr_text();
  }
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int t = 0; t < cfg.zk_threads; ++t) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));

  // The watcher: samples the queue until the race is over.
  std::atomic<bool> over{false};
  std::mutex seen_mu;
  std::size_t samples = 0, mixed_samples = 0, curator_first = 0, zklock_first = 0;
  std::vector<std::string> odd_names;
  std::jthread watcher{[&] {
    while (!over) {
      const auto q = queue_of(path);
      const std::string o = origins(q);
      std::lock_guard lk{seen_mu};
      ++samples;
      for (const auto& e : q)
        if (!std::regex_match(e.name, cfg.read_write ? rw_name : mutex_name)) odd_names.push_back(e.name);
      if (o.find('C') == std::string::npos || o.find('J') == std::string::npos) continue;
      ++mixed_samples;
      (o.front() == 'J' ? curator_first : zklock_first) += 1;  // the first holds while the other origin waits behind
    }
  }};
  struct stop_watcher {  // also on an early return (failed ASSERT)
    std::atomic<bool>& over;
    std::jthread& t;
    ~stop_watcher() {
      over = true;
      if (t.joinable()) t.join();
    }
  } stop_watcher_guard{over, watcher};

  std::mutex fail_mu;
  std::vector<std::string> failures;
  std::atomic<long> zk_exclusive{0}, zk_shared{0}, zk_with_curator{0}, zk_done{0};
  for (auto& j : javas) j->send("go");
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < cfg.zk_threads; ++t)
      threads.emplace_back([&, t] {
        try {
          std::mt19937 rng{static_cast<unsigned>(t) + 1};
          zklock::mutex m{*sessions[t], path};
          zklock::shared_mutex sm{*sessions[t], path};
          for (int i = 0; i < cfg.zk_iterations; ++i) {
            const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(t) + "-" + std::to_string(i);
            if (!cfg.read_write) {
              std::unique_lock g{m, step_limit};
              if (!g) throw std::runtime_error("zklock::mutex not acquired within 20 s");
              res.hold_exclusive();
              ++zk_exclusive;
            } else if (rng() % 2 == 0) {
              std::unique_lock g{sm, step_limit};
              if (!g) throw std::runtime_error("write side not acquired within 20 s");
              res.hold_exclusive();
              ++zk_exclusive;
            } else {
              std::shared_lock g{sm, step_limit};
              if (!g) throw std::runtime_error("read side not acquired within 20 s");
              if (res.hold_shared(tag)) ++zk_with_curator;
              ++zk_shared;
            }
            ++zk_done;
          }
        } catch (const overlap& e) {
          std::lock_guard lk{fail_mu};
          failures.push_back(std::string{"OVERLAP "} + e.what());
        } catch (const std::exception& e) {
          std::lock_guard lk{fail_mu};
          failures.push_back(std::string{"ERROR "} + e.what());
        }
      });
  }

  long java_exclusive = 0, java_shared = 0, java_with_zklock = 0, java_done = 0;
  for (auto& j : javas) {
    std::vector<std::string> lines;
    while (auto line = j->read_line(steady_clock::now() + 60s)) lines.push_back(*line);
    const auto rc = j->wait(steady_clock::now() + 10s);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    EXPECT_EQ(rc, std::optional<int>{0}) << "stdout:\n" << out << "stderr:\n" << j->stderr_text();
    for (const auto& l : lines) EXPECT_FALSE(l.starts_with("OVERLAP")) << l;
    const auto done = std::find_if(lines.begin(), lines.end(), [](const auto& l) { return l.starts_with("DONE"); });
    ASSERT_NE(done, lines.end()) << out;
    java_exclusive += field(*done, "exclusive");
    java_shared += field(*done, "shared");
    java_with_zklock += field(*done, "shared_with_zklock");
    java_done += field(*done, "iterations");
  }
  over = true;
  watcher.join();

  EXPECT_TRUE(failures.empty()) << failures.front();
  EXPECT_EQ(zk_done.load(), long{cfg.zk_threads} * cfg.zk_iterations);
  EXPECT_EQ(java_done, long{cfg.java_procs} * cfg.java_iterations);
  EXPECT_EQ(java_exclusive + java_shared, java_done);
  // A lost update (two exclusive holders at once) shows here even if no marker check caught it.
  EXPECT_EQ(res.count(), java_exclusive + zk_exclusive.load());

  // Holds of both origins interleaved: Curator handed over to zklock and back.
  const std::string log = res.log_origins();
  EXPECT_EQ(std::count(log.begin(), log.end(), 'J'), java_done);
  EXPECT_EQ(std::count(log.begin(), log.end(), 'C'), zk_done.load());
  EXPECT_NE(log.find("JC"), std::string::npos) << log;
  EXPECT_NE(log.find("CJ"), std::string::npos) << log;

  // The queue held contenders of both origins, each origin at the head while the other waited,
  // all named alike.
  EXPECT_GT(curator_first, 0u) << samples << " samples";
  EXPECT_GT(zklock_first, 0u) << samples << " samples";
  EXPECT_TRUE(odd_names.empty()) << odd_names.front();
  EXPECT_TRUE(zkt::children(path).empty());

  std::cout << "[ race    ] " << cfg.name << ": holds J=" << java_done << " C=" << zk_done << " (exclusive "
            << java_exclusive + zk_exclusive << ", shared " << java_shared + zk_shared
            << "); reads overlapping across languages: Curator saw zklock " << java_with_zklock
            << ", zklock saw Curator " << zk_with_curator << "; queue samples " << samples << ", mixed "
            << mixed_samples << " (Curator first " << curator_first << ", zklock first " << zklock_first
            << "); origin switches in the hold log " << [&] {
                 std::size_t n = 0;
                 for (std::size_t i = 1; i < log.size(); ++i) n += log[i] != log[i - 1];
                 return n;
               }()
            << "\n";
}

TEST(CuratorInterop, MutexRaceAgainstInterProcessMutex) { race({.name = "curator-mutex-race"}); }

TEST(CuratorInterop, SharedMutexRaceAgainstInterProcessReadWriteLock) {
  race({.name = "curator-rw-race", .read_write = true});
}

// ---- step by step ---------------------------------------------------------------------------------

std::unique_ptr<java_contender> interactive_java(const std::string& path, const fs::path& dir) {
  return start_java({zkt::connect(), path, "interactive", "0", (dir / "unused").string()}, dir / "java.err");
}

// Curator and zklock mutex contenders queue in one order and wake each other.
TEST(CuratorInterop, MutexStepByStep) {
  const std::string path = zkt::unique_path("curator-mutex-steps");
  auto java = interactive_java(path, work_dir("curator-mutex-steps"));
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::mutex mine{s1, path}, waiter{s2, path};

  ASSERT_EQ(ask(*java, "0.mutex.lock"), "0 ok");
  EXPECT_FALSE(mine.try_lock());  // a Curator holder stops zklock

  // Queue: Curator (holds), zklock, Curator.
  thread_hold zk{[&] { return waiter.try_lock_for(step_limit); }, [&] { waiter.unlock(); }};
  ASSERT_TRUE(await_queue(path, [](const auto& c) { return c.size() == 2; }));
  java->send("1.mutex.lock");
  ASSERT_TRUE(await_queue(path, [](const auto& c) { return c.size() == 3; }));
  const auto q = queue_of(path);
  EXPECT_EQ(origins(q), "JCJ");
  for (const auto& e : q) EXPECT_TRUE(std::regex_match(e.name, mutex_name)) << e.name;

  // Curator's release wakes zklock's waiter; the Curator waiter behind it keeps waiting.
  EXPECT_EQ(ask(*java, "0.mutex.unlock"), "0 ok");
  EXPECT_TRUE(zk.acquired(step_limit));
  EXPECT_EQ(java->read_line(steady_clock::now()), std::nullopt);  // no "1 ok" while zklock holds
  EXPECT_EQ(ask(*java, "0.mutex.try"), "0 false");               // a zklock holder stops Curator

  // zklock's release wakes the Curator waiter.
  zk.release();
  EXPECT_EQ(answer(*java), "1 ok");
  EXPECT_FALSE(mine.try_lock());
  EXPECT_EQ(ask(*java, "1.mutex.unlock"), "1 ok");
  EXPECT_TRUE(mine.try_lock());
  mine.unlock();

  EXPECT_TRUE(zkt::children(path).empty());
  java->send("quit");
  EXPECT_EQ(java->wait(steady_clock::now() + step_limit), std::optional<int>{0}) << java->stderr_text();
}

// One path, one meaning (docs/interop.md): every zklock type counts every Curator lock node on its
// path (a Curator mutex holder is a writer to zklock), while each Curator type counts only its own
// kind, which the second half pins down as the documented limit.
TEST(CuratorInterop, AcrossKindsZklockCountsEveryCuratorNode) {
  const std::string path = zkt::unique_path("curator-kinds-steps");
  auto java = interactive_java(path, work_dir("curator-kinds-steps"));
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::mutex m{s1, path};
  zklock::shared_mutex rw{s2, path};

  // Curator's holders keep zklock's other kinds out.
  ASSERT_EQ(ask(*java, "0.mutex.lock"), "0 ok");
  EXPECT_FALSE(rw.try_lock()) << "zklock's write side beside Curator's InterProcessMutex";
  EXPECT_FALSE(rw.try_lock_shared()) << "zklock's read side beside Curator's InterProcessMutex";
  EXPECT_EQ(ask(*java, "0.mutex.unlock"), "0 ok");
  for (const char* side : {"write", "read"}) {
    ASSERT_EQ(ask(*java, std::string{"0."} + side + ".lock"), "0 ok");
    EXPECT_FALSE(m.try_lock()) << "zklock's mutex beside Curator's " << side << " lock";
    EXPECT_EQ(ask(*java, std::string{"0."} + side + ".unlock"), "0 ok");
  }
  EXPECT_TRUE(zkt::children(path).empty());

  // Curator's limit: its InterProcessMutex ignores read/write nodes, its read/write lock ignores
  // mutex nodes (if Curator ever counts them, this fails: update docs/interop.md).
  rw.lock();
  EXPECT_EQ(ask(*java, "0.mutex.try"), "0 true");
  EXPECT_EQ(ask(*java, "0.mutex.unlock"), "0 ok");
  rw.unlock();
  m.lock();
  EXPECT_EQ(ask(*java, "0.write.try"), "0 true");
  EXPECT_EQ(ask(*java, "0.write.unlock"), "0 ok");
  m.unlock();

  EXPECT_TRUE(zkt::children(path).empty());
  java->send("quit");
  EXPECT_EQ(java->wait(steady_clock::now() + step_limit), std::optional<int>{0}) << java->stderr_text();
}

// `zklock exec` records what its acquire cost in a node beside its contender node,
// "zkstats-<token>" (see docs/cli.md). Neither Curator's mutex nor its read/write lock may take
// it for a contender: one sorted ahead of Curator's own node would keep Curator waiting forever.
TEST(CuratorInterop, AnAcquireRecordBesideTheQueueIsNoContenderToCurator) {
  for (const char* side : {"mutex", "write", "read"}) {
    SCOPED_TRACE(side);
    const std::string path = zkt::unique_path("curator-record");
    zkt::create_path(path + "/zkstats-12884901890");  // persistent here; exec's are ephemeral
    auto java = interactive_java(path, work_dir("curator-record"));
    const std::string cmd = std::string{"0."} + side;
    ASSERT_EQ(ask(*java, cmd + ".try"), "0 true") << "Curator counted the record as a contender ahead of it";
    zklock::session s{zkt::options()};
    zklock::mutex m{s, path};
    zklock::shared_mutex rw{s, path};
    if (std::string_view{side} == "mutex") EXPECT_FALSE(m.try_lock()) << "the Curator holder does not stop zklock";
    else EXPECT_FALSE(rw.try_lock()) << "the Curator holder does not stop zklock";
    EXPECT_EQ(ask(*java, cmd + ".unlock"), "0 ok");
    // And behind a zklock holder, Curator waits, then is woken by its release.
    if (std::string_view{side} == "mutex") {
      ASSERT_TRUE(m.try_lock());
      EXPECT_EQ(ask(*java, cmd + ".try"), "0 false");
      java->send(cmd + ".lock");
      m.unlock();
    } else {
      ASSERT_TRUE(rw.try_lock());
      EXPECT_EQ(ask(*java, cmd + ".try"), "0 false");
      java->send(cmd + ".lock");
      rw.unlock();
    }
    EXPECT_EQ(answer(*java), "0 ok");
    EXPECT_EQ(ask(*java, cmd + ".unlock"), "0 ok");
    ASSERT_TRUE(zkt::remove(path + "/zkstats-12884901890"));
    EXPECT_TRUE(zkt::children(path).empty());
    java->send("quit");
    EXPECT_EQ(java->wait(steady_clock::now() + step_limit), std::optional<int>{0}) << java->stderr_text();
  }
}

// The read/write rule, each clause checked with the holder on one side and the asker on the other.
TEST(CuratorInterop, SharedMutexStepByStep) {
  const std::string path = zkt::unique_path("curator-rw-steps");
  auto java = interactive_java(path, work_dir("curator-rw-steps"));
  zklock::session s1{zkt::options()}, s2{zkt::options()}, s3{zkt::options()};
  zklock::shared_mutex r1{s1, path}, r2{s2, path}, w{s3, path};

  // Readers of both sides share; writers of both sides wait for them.
  ASSERT_TRUE(r1.try_lock_shared_for(step_limit));
  EXPECT_EQ(ask(*java, "0.read.try"), "0 true");
  const auto q = queue_of(path);
  EXPECT_EQ(origins(q), "CJ");
  for (const auto& e : q) EXPECT_TRUE(std::regex_match(e.name, rw_name) && e.name.find("__READ__") != std::string::npos) << e.name;
  EXPECT_TRUE(r2.try_lock_shared());
  r2.unlock_shared();
  EXPECT_FALSE(w.try_lock());
  EXPECT_EQ(ask(*java, "1.write.try"), "1 false");

  // A Curator writer waits for a zklock reader alone, and new zklock readers queue behind it.
  EXPECT_EQ(ask(*java, "0.read.unlock"), "0 ok");
  EXPECT_EQ(ask(*java, "1.write.try"), "1 false");
  java->send("1.write.lock");
  ASSERT_TRUE(await_queue(path, [](const auto& c) { return has_marker(c, "__WRIT__"); }));
  EXPECT_FALSE(r2.try_lock_shared());
  r1.unlock_shared();  // wakes the Curator writer
  ASSERT_EQ(answer(*java), "1 ok");

  // A Curator writer holding stops zklock readers and writers; its release wakes a zklock reader,
  // which then shares with a Curator reader.
  EXPECT_FALSE(r2.try_lock_shared());
  EXPECT_FALSE(w.try_lock());
  {
    thread_hold reader{[&] { return r2.try_lock_shared_for(step_limit); }, [&] { r2.unlock_shared(); }};
    ASSERT_TRUE(await_queue(path, [](const auto& c) { return c.size() == 2; }));
    EXPECT_FALSE(reader.finished());
    EXPECT_EQ(ask(*java, "1.write.unlock"), "1 ok");
    EXPECT_TRUE(reader.acquired(step_limit));
    EXPECT_EQ(ask(*java, "0.read.try"), "0 true");
    EXPECT_EQ(ask(*java, "0.read.unlock"), "0 ok");
  }

  // A zklock writer waits for a Curator reader, and new Curator readers queue behind it; the
  // Curator reader's release wakes it, and while it holds Curator can take neither side.
  EXPECT_EQ(ask(*java, "0.read.lock"), "0 ok");
  {
    thread_hold writer{[&] { return w.try_lock_for(step_limit); }, [&] { w.unlock(); }};
    ASSERT_TRUE(await_queue(path, [](const auto& c) { return has_marker(c, "__WRIT__"); }));
    EXPECT_EQ(ask(*java, "1.read.try"), "1 false");
    EXPECT_FALSE(writer.finished());
    EXPECT_EQ(ask(*java, "0.read.unlock"), "0 ok");
    EXPECT_TRUE(writer.acquired(step_limit));
    EXPECT_EQ(ask(*java, "1.read.try"), "1 false");
    EXPECT_EQ(ask(*java, "1.write.try"), "1 false");
  }
  EXPECT_EQ(ask(*java, "1.read.try"), "1 true");
  EXPECT_EQ(ask(*java, "1.read.unlock"), "1 ok");

  EXPECT_TRUE(zkt::children(path).empty());
  java->send("quit");
  EXPECT_EQ(java->wait(steady_clock::now() + step_limit), std::optional<int>{0}) << java->stderr_text();
}


// ---- revocation in both directions ----------------------------------------------------------------

// zklock's revoke() asks a revocable Curator mutex (makeRevocable): Curator hears the request, its
// owning thread releases, and revoke() reports the hold released on request, not forced.
TEST(CuratorInterop, ZklockRevokesARevocableCuratorMutex) {
  const std::string path = zkt::unique_path("curator-revoked");
  auto java = interactive_java(path, work_dir("curator-revoked"));
  zklock::session s{zkt::options()};
  ASSERT_EQ(ask(*java, "0.mutex.revocable"), "0 ok");
  ASSERT_EQ(ask(*java, "0.mutex.lock"), "0 ok");
  const auto holders = zklock::contenders(s, path);
  ASSERT_EQ(holders.size(), 1u);
  const auto result = zklock::revoke(s, path, {.grace = step_limit});
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].node, holders[0].node);
  EXPECT_EQ(result[0].outcome, zklock::revoke_outcome::released) << zklock::to_string(result[0].outcome);
  EXPECT_EQ(answer(*java), "0 revoke requested");
  EXPECT_EQ(answer(*java), "0 released on request");
  EXPECT_TRUE(zkt::children(path).empty());
  java->send("quit");
  EXPECT_EQ(java->wait(steady_clock::now() + step_limit), std::optional<int>{0}) << java->stderr_text();
}

// Curator's Revoker asks a zklock holder: its revocation_token() fires (notify, the default); the
// holder lets go.
TEST(CuratorInterop, CuratorsRevokerAsksAZklockHolder) {
  const std::string path = zkt::unique_path("curator-revoker");
  auto java = interactive_java(path, work_dir("curator-revoker"));
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  m.lock();
  std::promise<void> asked;
  const std::stop_callback on_request{m.revocation_token(), [&] { asked.set_value(); }};
  EXPECT_EQ(ask(*java, "revoke " + m.fence().node), "r ok");
  EXPECT_EQ(asked.get_future().wait_for(step_limit), std::future_status::ready) << "the request was not heard";
  EXPECT_TRUE(m.still_owned()) << "a request is no loss";
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
  java->send("quit");
  EXPECT_EQ(java->wait(steady_clock::now() + step_limit), std::optional<int>{0}) << java->stderr_text();
}

}  // namespace
