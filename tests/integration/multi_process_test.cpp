// SPDX-License-Identifier: Apache-2.0
// Locks across processes. The test binary re-executes itself as contender processes (see main()
// at the bottom): they append multi-line records to one file under a zklock::mutex, hold a lock and
// get SIGKILLed, or read a file under a zklock::shared_mutex while a writer process appends to it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
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
#include "scratch_dir.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

constexpr std::string_view child_flag = "--zklock-child";

using zkt::child_process;
using zkt::describe;
using zkt::read_file;
using zkt::throw_errno;
using zkt::write_all;

// ---------------------------------------------------------------------------------------------
// The record log. A record is "begin P S TOKEN B", B body lines "body P S K" and "end P S", each
// line its own write(2) with a yield in between, so two writers at once would interleave lines.

namespace records {

struct record {
  int proc = 0;
  int seq = 0;
  std::int64_t token = 0;
};

struct parsed {
  std::vector<record> records;
  std::string error;  ///< empty iff the text is a sequence of complete records
};

std::string id(const record& r) { return std::to_string(r.proc) + " " + std::to_string(r.seq); }

/// Effects: appends `r` with `body` body lines to `fd` (opened O_APPEND), line by line.
void append(int fd, const record& r, int body) {
  write_all(fd, "begin " + id(r) + " " + std::to_string(r.token) + " " + std::to_string(body) + "\n");
  for (int k = 1; k <= body; ++k) {
    std::this_thread::yield();
    write_all(fd, "body " + id(r) + " " + std::to_string(k) + "\n");
  }
  std::this_thread::yield();
  write_all(fd, "end " + id(r) + "\n");
}

/// Returns: the records of `text`, or an error naming the first line that breaks one.
parsed parse(std::string_view text) {
  parsed out;
  std::optional<record> cur;
  int body = 0, k = 0;
  std::size_t line_no = 0;
  auto fail = [&](const std::string& why) {
    out.error = "line " + std::to_string(line_no) + ": " + why;
    return out;
  };
  while (!text.empty()) {
    ++line_no;
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) return fail("unterminated line '" + std::string{text} + "'");
    const std::string line{text.substr(0, nl)};
    text.remove_prefix(nl + 1);
    if (!cur) {
      std::istringstream in{line};
      std::string word;
      record r;
      if (!(in >> word >> r.proc >> r.seq >> r.token >> body) || word != "begin" || body < 0 ||
          !(in >> std::ws).eof())
        return fail("expected a begin line, found '" + line + "'");
      cur = r;
      k = 0;
    } else if (k < body) {
      const std::string want = "body " + id(*cur) + " " + std::to_string(++k);
      if (line != want) return fail("expected '" + want + "', found '" + line + "'");
    } else {
      const std::string want = "end " + id(*cur);
      if (line != want) return fail("expected '" + want + "', found '" + line + "'");
      out.records.push_back(*cur);
      cur.reset();
    }
  }
  if (cur) return fail("record " + id(*cur) + " is incomplete at the end of the file");
  return out;
}

}  // namespace records

// ---------------------------------------------------------------------------------------------
// Child side: `<self> --zklock-child PARENT_PID ROLE ARGS...`. Reports on stdout, one line each.

void say(const std::string& line) { write_all(STDOUT_FILENO, line + "\n"); }

zklock::session_options child_options(std::chrono::milliseconds session_timeout) {
  const char* c = std::getenv("ZKLOCK_TEST_ZK");
  if (!c || !*c) throw std::runtime_error("ZKLOCK_TEST_ZK is not set");
  zklock::session_options o;
  o.connect = c;
  o.session_timeout = session_timeout;
  o.connect_timeout = 15s;
  return o;
}

int open_append(const std::string& file) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("open " + file);
  return fd;
}

// append LOCK FILE PROC RECORDS BODY COMBO: appends RECORDS records under a mutex of watch x
// wake-up combination COMBO (0..3: predecessor/cv, predecessor/latch, children/cv, children/latch).
template <class Mutex>
int append_with(const std::vector<std::string>& a) {
  zklock::session s{child_options(4s)};
  Mutex m{s, a.at(0)};
  const int fd = open_append(a.at(1));
  const int proc = std::stoi(a.at(2)), count = std::stoi(a.at(3)), body = std::stoi(a.at(4));
  for (int seq = 0; seq < count; ++seq) {
    std::lock_guard g{m};
    records::append(fd, {proc, seq, m.fencing_token()}, body);
  }
  ::close(fd);
  say("done");
  return 0;
}

int role_append(const std::vector<std::string>& a) {
  switch (a.size() > 5 ? std::stoi(a[5]) : 0) {
    case 1: return append_with<zkt::combo<zklock::watch_predecessor, zklock::wake_latch>::mutex>(a);
    case 2: return append_with<zkt::combo<zklock::watch_children, zklock::wake_condition_variable>::mutex>(a);
    case 3: return append_with<zkt::combo<zklock::watch_children, zklock::wake_latch>::mutex>(a);
    default: return append_with<zklock::mutex>(a);
  }
}

// hold LOCK: takes a zklock::mutex with a 2 s session, says "held TOKEN", waits to be killed.
int role_hold(const std::vector<std::string>& a) {
  zklock::session s{child_options(2000ms)};
  zklock::mutex m{s, a.at(0)};
  std::lock_guard g{m};
  say("held " + std::to_string(m.fencing_token()));
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {}  // until SIGKILL (or the parent closes the pipe)
  return 0;
}

// shared-write LOCK FILE RECORDS BODY: appends RECORDS records, each under std::unique_lock.
int role_shared_write(const std::vector<std::string>& a) {
  zklock::session s{child_options(4s)};
  zklock::shared_mutex m{s, a.at(0)};
  const int fd = open_append(a.at(1));
  const int count = std::stoi(a.at(2)), body = std::stoi(a.at(3));
  for (int seq = 0; seq < count; ++seq) {
    std::unique_lock g{m};
    records::append(fd, {0, seq, m.fencing_token()}, body);
  }
  ::close(fd);
  say("done");
  return 0;
}

// shared-read LOCK FILE RECORDS: reads FILE under std::shared_lock until it holds RECORDS records.
// Says "first=F reads=R partial=P" (F: records seen by the first read; P: reads that saw some but
// not all records), or "torn ERROR" and exits 1 as soon as a read sees a broken record.
int role_shared_read(const std::vector<std::string>& a) {
  zklock::session s{child_options(4s)};
  zklock::shared_mutex m{s, a.at(0)};
  const std::filesystem::path file = a.at(1);
  const std::size_t want = std::stoul(a.at(2));
  const auto limit = steady_clock::now() + 120s;
  std::size_t first = 0, reads = 0, partial = 0;
  for (;;) {
    std::shared_lock g{m};
    const auto p = records::parse(read_file(file));
    if (!p.error.empty()) {
      say("torn " + p.error);
      return 1;
    }
    const std::size_t n = p.records.size();
    if (reads++ == 0) first = n;
    if (n > 0 && n < want) ++partial;
    if (n >= want) break;
    if (steady_clock::now() > limit) {
      say("timeout after " + std::to_string(reads) + " reads, " + std::to_string(n) + " records");
      return 1;
    }
  }
  say("first=" + std::to_string(first) + " reads=" + std::to_string(reads) + " partial=" + std::to_string(partial));
  return 0;
}

int child_main(int argc, char** argv) {
  return zkt::child_main(argc, argv, "zklock test child",
                         {{"append", role_append}, {"hold", role_hold}, {"shared-write", role_shared_write},
                          {"shared-read", role_shared_read}});
}

// ---------------------------------------------------------------------------------------------
// Parent side.

/// Returns: this binary running `role_args` as a child (see child_main), with pipes to its stdin
/// and from its stdout.
std::unique_ptr<child_process> spawn(const std::vector<std::string>& role_args) {
  return std::make_unique<child_process>(child_process::self(child_flag, role_args));
}

/// Expects `c` to exit with 0 within `timeout`.
void expect_clean_exit(child_process& c, std::chrono::milliseconds timeout = 120s) {
  const auto st = c.wait(timeout);
  ASSERT_TRUE(st.has_value()) << "child " << c.pid() << " still running after " << timeout.count() << " ms";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "child " << c.pid() << ": " << describe(*st);
}

/// Polls the server until `path` has `n` children (a queued contender is a child node).
/// Returns: true once it has; false if `c` exited first or 30 s passed.
bool await_queued(const std::string& path, std::size_t n, const child_process& c) {
  const auto limit = steady_clock::now() + 30s;
  while (zkt::children(path).size() != n) {
    if (c.exited() || steady_clock::now() > limit) return false;
    std::this_thread::sleep_for(2ms);  // polling interval, not a synchronisation
  }
  return true;
}

/// A fresh directory under the system temp dir, removed with its contents.
struct temp_dir : zkt::scratch_dir {
  temp_dir() : scratch_dir("zklock-proc") {}
};

// The checker itself: whole records pass; interleaved, torn and unterminated ones do not.
TEST(RecordLog, ParserAcceptsWholeRecordsOnly) {
  temp_dir dir;
  const auto file = (dir.path / "log").string();
  const int fd = open_append(file);
  records::append(fd, {0, 0, 7}, 2);
  records::append(fd, {1, 0, 9}, 0);
  ::close(fd);
  const std::string good = read_file(file);
  const auto ok = records::parse(good);
  EXPECT_EQ(ok.error, "");
  ASSERT_EQ(ok.records.size(), 2u);
  EXPECT_EQ(ok.records[1].proc, 1);
  EXPECT_EQ(ok.records[1].token, 9);

  EXPECT_NE(records::parse("begin 0 0 7 2\nbody 0 0 1\nbegin 1 0 9 0\nend 1 0\nbody 0 0 2\nend 0 0\n").error, "");
  EXPECT_NE(records::parse("begin 0 0 7 2\nbody 0 0 1\n").error, "");  // torn: writer mid-record
  EXPECT_NE(records::parse(good.substr(0, good.size() - 1)).error, "");  // unterminated last line
  EXPECT_NE(records::parse("begin 0 0 7 1\nbody 0 0 2\nend 0 0\n").error, "");
}

// (a) Four processes append 25 records each under one mutex, for every watch x wake-up combination
// (the parameter): every record is whole, each process's records are in its order, fencing tokens
// rise through the file, and with all four queued behind the test's own hold, the first round
// follows queue order (FIFO across processes).
class MultiProcessCombo : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(EveryWatchAndWakeup, MultiProcessCombo, ::testing::Range(0, 4));

TEST_P(MultiProcessCombo, MutexKeepsRecordsWholeAcrossFourProcesses) {
  constexpr int procs = 4, per_proc = 25, body = 4;
  const auto lock = zkt::unique_path("mp-mutex");
  temp_dir dir;
  const auto file = (dir.path / "log").string();

  zklock::session s{zkt::options()};
  zklock::mutex gate{s, lock};
  gate.lock();
  const auto gate_token = gate.fencing_token();
  std::vector<std::unique_ptr<child_process>> kids;
  for (int p = 0; p < procs; ++p) {
    kids.push_back(spawn({
        "append", lock, file, std::to_string(p), std::to_string(per_proc), std::to_string(body),
        std::to_string(GetParam())}));
    ASSERT_TRUE(await_queued(lock, static_cast<std::size_t>(p) + 2, *kids.back()))
        << "child " << p << " did not queue";
  }
  gate.unlock();
  for (auto& k : kids) {
    EXPECT_EQ(k->read_line(120s), std::optional<std::string>{"done"}) << "child " << k->pid();
    expect_clean_exit(*k);
  }

  const auto log = records::parse(read_file(file));
  ASSERT_EQ(log.error, "") << "the file shows interleaved or incomplete records";
  ASSERT_EQ(log.records.size(), static_cast<std::size_t>(procs * per_proc));
  std::vector<int> next(procs, 0);
  std::int64_t last_token = gate_token;
  for (std::size_t i = 0; i < log.records.size(); ++i) {
    const auto& r = log.records[i];
    ASSERT_TRUE(r.proc >= 0 && r.proc < procs) << "record " << i;
    EXPECT_EQ(r.seq, next[static_cast<std::size_t>(r.proc)]++) << "record " << i << " of process " << r.proc;
    EXPECT_GT(r.token, last_token) << "record " << i << ": fencing tokens must rise with each hold";
    last_token = r.token;
    if (i < static_cast<std::size_t>(procs)) EXPECT_EQ(r.proc, static_cast<int>(i)) << "first round out of queue order";
  }
  EXPECT_TRUE(zkt::children(lock).empty());
}

// (c) A holder process killed with SIGKILL: while it lives another session cannot take the lock;
// after the kill, its session times out (2 s) and the lock passes on.
TEST(MultiProcess, MutexPassesOnAfterHolderIsKilled) {
  const auto lock = zkt::unique_path("mp-kill");
  child_process holder{child_process::self(child_flag, {"hold", lock})};
  const auto held = holder.read_line(60s);
  ASSERT_TRUE(held && held->starts_with("held ")) << "the holder did not report its hold";
  const std::int64_t holder_token = std::stoll(held->substr(5));

  zklock::session s{zkt::options()};
  zklock::mutex m{s, lock};
  const bool taken_while_alive = m.try_lock();
  EXPECT_FALSE(taken_while_alive) << "try_lock succeeded while another process held the lock";
  if (taken_while_alive) m.unlock();

  holder.signal(SIGKILL);
  const auto st = holder.wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << describe(*st);

  ASSERT_TRUE(m.try_lock_for(30s)) << "the lock did not pass on after the holder was killed";
  EXPECT_GT(m.fencing_token(), holder_token);
  m.unlock();
  EXPECT_TRUE(zkt::children(lock).empty());
}

// (d) One writer process appends records under the write side of a zklock::shared_mutex while
// three reader processes read the file under the read side until it is complete: no reader ever
// sees a torn record. All four queue behind the test's own write hold (writer first), so every
// reader's first read comes after exactly one record and before the writer's second.
TEST(MultiProcess, SharedMutexReadersNeverSeeHalfARecord) {
  constexpr int readers = 3, count = 25, body = 4;
  const auto lock = zkt::unique_path("mp-rw");
  temp_dir dir;
  const auto file = (dir.path / "log").string();

  zklock::session s{zkt::options()};
  zklock::shared_mutex gate{s, lock};
  std::unique_lock g{gate};
  std::vector<std::unique_ptr<child_process>> kids;
  kids.push_back(spawn(
      {"shared-write", lock, file, std::to_string(count), std::to_string(body)}));
  ASSERT_TRUE(await_queued(lock, 2, *kids.back())) << "the writer did not queue";
  for (int r = 0; r < readers; ++r) {
    kids.push_back(spawn(
        {"shared-read", lock, file, std::to_string(count)}));
    ASSERT_TRUE(await_queued(lock, static_cast<std::size_t>(r) + 3, *kids.back())) << "reader " << r << " did not queue";
  }
  g.unlock();

  EXPECT_EQ(kids[0]->read_line(120s), std::optional<std::string>{"done"}) << "writer";
  for (int r = 1; r <= readers; ++r) {
    const auto line = kids[static_cast<std::size_t>(r)]->read_line(120s);
    ASSERT_TRUE(line.has_value()) << "reader " << r << " reported nothing";
    unsigned long first = 0, reads = 0, partial = 0;
    ASSERT_EQ(std::sscanf(line->c_str(), "first=%lu reads=%lu partial=%lu", &first, &reads, &partial), 3)
        << "reader " << r << ": " << *line;
    EXPECT_EQ(first, 1u) << "reader " << r << "'s first read should see exactly the writer's first record";
    EXPECT_GE(partial, 1u) << "reader " << r << " never read while the writer was still writing";
  }
  for (auto& k : kids) expect_clean_exit(*k);

  const auto log = records::parse(read_file(file));
  EXPECT_EQ(log.error, "");
  EXPECT_EQ(log.records.size(), static_cast<std::size_t>(count));
  EXPECT_TRUE(zkt::children(lock).empty());
}

}  // namespace

// This binary is also the child: `--zklock-child ...` runs a role instead of the tests. (This
// main() replaces the one in GTest::gtest_main, which the linker then does not pull in.)
int main(int argc, char** argv) {
  if (argc > 1 && std::string_view{argv[1]} == child_flag) return child_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
