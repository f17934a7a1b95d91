// SPDX-License-Identifier: Apache-2.0
// Raw ZooKeeper access for tests, straight through the C client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>
#include <zookeeper/zookeeper.h>

#include "zk_test.hpp"

namespace zkt {

double fault_scale() {
  static const double scale = [] {
    const char* e = std::getenv("ZKLOCK_FAULT_SCALE");
    if (!e || !*e) return 1.0;
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    if (end == e || *end != '\0' || !(v >= 0.25 && v <= 100.0)) {
      std::fprintf(stderr, "ZKLOCK_FAULT_SCALE=\"%s\" ignored: want a number in 0.25..100\n", e);
      return 1.0;
    }
    return v;
  }();
  return scale;
}

long long server_watch_count() {
  std::istringstream in{four_letter("mntr")};
  std::string key;
  long long value = -1;
  while (in >> key) {
    if (key == "zk_watch_count") {
      in >> value;
      return value;
    }
  }
  return -1;
}

std::chrono::milliseconds scaled(std::chrono::milliseconds d) {
  return std::chrono::milliseconds{
      static_cast<std::int64_t>(std::llround(static_cast<double>(d.count()) * fault_scale()))};
}

}  // namespace zkt

namespace zkt {
namespace {

extern "C" void quiet_log(const char*) {}

zhandle_t* open_handle(const clientid_t* id = nullptr) {
  zoo_set_debug_level(static_cast<ZooLogLevel>(0));  // off: nothing formatted (see zklock's session.cpp)
  zhandle_t* zh = zookeeper_init2(connect().c_str(), nullptr, 10000, id, nullptr, 0, &quiet_log);
  if (!zh) throw std::runtime_error("zookeeper_init2 failed");
  for (int i = 0; i < 300 && zoo_state(zh) != ZOO_CONNECTED_STATE && zoo_state(zh) != ZOO_EXPIRED_SESSION_STATE; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});  // polling a C handle's state
  return zh;
}

zhandle_t* observer() {
  static std::mutex mu;
  static zhandle_t* zh = nullptr;
  static std::string used;  // a private_server changes the address
  std::lock_guard lk{mu};
  if (!zh || zoo_state(zh) != ZOO_CONNECTED_STATE || used != connect()) {
    if (zh) zookeeper_close(zh);
    used = connect();
    zh = open_handle();
  }
  return zh;
}

/// Returns: the observer, synced (see sync_handle).
zhandle_t* synced_observer() {
  zhandle_t* zh = observer();
  sync_handle(zh);
  return zh;
}

}  // namespace

bool sync_handle(void* handle) {
  struct box {
    std::mutex m;
    std::condition_variable c;
    bool done = false;
    int rc = ZSYSTEMERROR;
  };
  auto b = std::make_shared<box>();
  auto* ctx = new std::shared_ptr<box>(b);  // the completion always comes (reply, loss or close)
  const auto done = [](int rc, const char*, const void* data) {
    std::unique_ptr<std::shared_ptr<box>> own{static_cast<std::shared_ptr<box>*>(const_cast<void*>(data))};
    {
      std::lock_guard lk{(*own)->m};
      (*own)->done = true;
      (*own)->rc = rc;
    }
    (*own)->c.notify_all();
  };
  if (zoo_async(static_cast<zhandle_t*>(handle), "/", done, ctx) != ZOK) {
    delete ctx;
    return false;
  }
  std::unique_lock lk{b->m};
  return b->c.wait_for(lk, std::chrono::seconds{10}, [&] { return b->done; }) && b->rc == ZOK;
}

std::string connect() {
  const char* c = std::getenv("ZKLOCK_TEST_ZK");
  if (!c || !*c) {
    ADD_FAILURE() << "ZKLOCK_TEST_ZK is not set: run through ctest (tools/zk env)";
    return "127.0.0.1:1";
  }
  return c;
}

std::string unique_path(std::string_view stem) {
  static std::atomic<int> n{0};
  return "/zklock-test/" + std::string{stem} + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

std::vector<std::string> children(const std::string& path) {
  String_vector kids{};
  std::vector<std::string> out;
  zhandle_t* zh = synced_observer();
  if (zoo_get_children(zh, path.c_str(), 0, &kids) == ZOK) {
    for (int i = 0; i < kids.count; ++i) out.emplace_back(kids.data[i]);
    deallocate_String_vector(&kids);
  }
  return out;
}

bool exists(const std::string& path) {
  zhandle_t* zh = synced_observer();
  return zoo_exists(zh, path.c_str(), 0, nullptr) == ZOK;
}

void create_path(const std::string& path) {
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    zoo_create(observer(), path.substr(0, pos).c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
  }
}

bool expire(zklock::session& s, std::chrono::milliseconds limit) {
  // A listener notices the expiry even if the session is re-established right after it.
  struct seen {
    std::mutex mu;
    std::condition_variable cv;
    bool expired = false;
  };
  auto flag = std::make_shared<seen>();
  const auto listener = s.add_state_listener([flag](zklock::session_state st) {
    // closed: a listener added before this one closed the session on expiry (then the others
    // are not told of the expiry).
    if (st != zklock::session_state::expired && st != zklock::session_state::closed) return;
    {
      std::lock_guard lk{flag->mu};
      flag->expired = true;
    }
    flag->cv.notify_all();
  });
  const auto gen = s.generation();
  auto done = [&] {
    std::lock_guard lk{flag->mu};
    const auto st = s.state();
    return flag->expired || s.generation() != gen || st == zklock::session_state::expired ||
           st == zklock::session_state::closed;
  };
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool ok = done();
  while (!ok && std::chrono::steady_clock::now() < deadline) {
    clientid_t id{};
    id.client_id = s.id();
    const std::string pw = session_password(s);
    // Read both from the session being expired: a re-established one must not be hit instead.
    if ((ok = done())) break;
    std::memcpy(id.passwd, pw.data(), std::min(pw.size(), sizeof id.passwd));
    zhandle_t* zh = open_handle(&id);
    zookeeper_close(zh);
    // The original handle may win the session back (it reconnects within milliseconds): retry.
    std::unique_lock lk{flag->mu};
    flag->cv.wait_for(lk, std::chrono::milliseconds{250}, [&] { return flag->expired; });
    lk.unlock();
    ok = done();
  }
  s.remove_state_listener(listener);
  return ok;
}

std::string session_password(const zklock::session& s) {
  try {
    return s.credentials().password;
  } catch (const std::system_error&) {  // no live session: nothing to attach to
    return {};
  }
}

std::string four_letter(std::string_view word) { return four_letter_to(connect(), word); }

zklock::session_options options(std::chrono::milliseconds session_timeout) {
  zklock::session_options o;
  o.connect = connect();
  o.session_timeout = session_timeout;
  o.connect_timeout = std::chrono::seconds{15};
  // Waiters look one handoff ahead whatever the round trip (a semaphore's choice depends on the
  // measured round trip, which a test cannot pin); with ZKLOCK_TEST_LOOK_AHEAD=never a semaphore's
  // waiters watch only the L nearest leases ahead (what a loopback session chooses).
  const char* look = std::getenv("ZKLOCK_TEST_LOOK_AHEAD");
  o.look_ahead_round_trip = look && std::string_view{look} == "never" ? std::chrono::microseconds::max()
                                                                      : std::chrono::microseconds::zero();
  // ZKLOCK_TEST_OVER_TLS=1 (a suite's run over TLS, on a `tools/zk start --tls` server): the
  // sessions made from these options connect to its TLS port, with its trusted client's keys.
  if (const char* t = std::getenv("ZKLOCK_TEST_OVER_TLS"); t && std::string_view{t} == "1") {
    o.connect = tls_connect();
    if (o.connect.empty()) ADD_FAILURE() << "ZKLOCK_TEST_OVER_TLS=1 without a TLS server (tools/zk start --tls)";
    o.tls = tls_keys();
  }
  return o;
}

std::vector<std::unique_ptr<zklock::session>> open_sessions(int n) {
  std::vector<std::unique_ptr<zklock::session>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<zklock::session>(options()));
  return out;
}

std::string tls_connect() {
  const char* c = std::getenv("ZKLOCK_TEST_ZK_TLS");
  return c ? c : "";
}

zklock::tls_options tls_keys(std::string_view ca, std::string_view client) {
  const char* d = std::getenv("ZKLOCK_TEST_ZK_DIR");
  const std::string dir = std::string{d ? d : "."} + "/tls/";
  zklock::tls_options t;
  t.ca_file = dir + std::string{ca} + ".pem";
  t.cert_file = dir + std::string{client} + ".pem";
  t.key_file = dir + std::string{client} + ".key";
  return t;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

void default_client_log_level() { zoo_set_debug_level(ZOO_LOG_LEVEL_INFO); }

// ---- digest_client ---------------------------------------------------------------------------------

struct digest_client::impl {
  zhandle_t* zh = nullptr;
};

namespace {
struct auth_reply {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
};

extern "C" void auth_done(int rc, const void* data) {
  auto* p = static_cast<std::shared_ptr<auth_reply>*>(const_cast<void*>(data));
  {
    std::lock_guard lk{(*p)->mu};
    (*p)->done = true;
    (*p)->rc = rc;
  }
  (*p)->cv.notify_all();
  delete p;
}
}  // namespace

digest_client::digest_client(std::string_view user, std::string_view password) : p_(std::make_unique<impl>()) {
  p_->zh = open_handle();
  if (zoo_state(p_->zh) != ZOO_CONNECTED_STATE) {
    zookeeper_close(p_->zh);
    throw std::runtime_error("digest_client: not connected");
  }
  const std::string cred = std::string{user} + ":" + std::string{password};
  auto reply = std::make_shared<auth_reply>();
  auto* held = new std::shared_ptr<auth_reply>(reply);  // freed by auth_done
  int rc = zoo_add_auth(p_->zh, "digest", cred.data(), static_cast<int>(cred.size()), &auth_done, held);
  if (rc == ZOK) {
    std::unique_lock lk{reply->mu};
    if (!reply->cv.wait_for(lk, std::chrono::seconds{10}, [&] { return reply->done; }))
      rc = ZOPERATIONTIMEOUT;
    else
      rc = reply->rc;
  } else {
    delete held;
  }
  if (rc != ZOK) {
    zookeeper_close(p_->zh);  // runs any completion still pending
    throw std::runtime_error("digest_client: addauth failed: " + std::to_string(rc));
  }
}

digest_client::~digest_client() { zookeeper_close(p_->zh); }

int digest_client::create_private(const std::string& path) {
  return zoo_create(p_->zh, path.c_str(), nullptr, -1, &ZOO_CREATOR_ALL_ACL, 0, nullptr, 0);
}

std::optional<std::vector<std::string>> digest_client::children(const std::string& path) {
  String_vector kids{};
  if (zoo_get_children(p_->zh, path.c_str(), 0, &kids) != ZOK) return std::nullopt;
  std::vector<std::string> out;
  for (int i = 0; i < kids.count; ++i) out.emplace_back(kids.data[i]);
  deallocate_String_vector(&kids);
  return out;
}

void digest_client::remove_tree(const std::string& path) {
  if (auto kids = children(path))
    for (const auto& k : *kids) remove_tree(path + "/" + k);
  zoo_delete(p_->zh, path.c_str(), -1);
}

}  // namespace zkt

namespace zkt {

node_stat stat_node(const std::string& path) {
  node_stat out;
  char buf[4096];
  int len = sizeof buf;
  struct Stat st {};
  zhandle_t* zh = synced_observer();
  if (zoo_get(zh, path.c_str(), 0, buf, &len, &st) != ZOK) return out;
  out.exists = true;
  if (len > 0) out.data.assign(buf, static_cast<std::size_t>(len));
  out.czxid = st.czxid;
  out.ephemeral_owner = st.ephemeralOwner;
  return out;
}

}  // namespace zkt

namespace zkt {

namespace {
std::string run_capture(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    if (::pclose(p) != 0) throw std::runtime_error("command failed: " + cmd);
  } else {
    throw std::runtime_error("cannot run: " + cmd);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}
}  // namespace

private_server::private_server(int nodes, int tick_ms, const std::string& start_options) {
  const char* tools = std::getenv("ZKLOCK_TOOLS");
  const std::string zk = std::string{tools && *tools ? tools : ZKLOCK_SOURCE_DIR "/tools"} + "/zk";
  static std::atomic<int> n{0};
  dir_ = (std::filesystem::temp_directory_path() /
          ("zklock-private-" + std::to_string(::getpid()) + "-" + std::to_string(++n)))
             .string();
  dir_ = zk + "\x1f" + dir_;  // remember the tool beside the dir
  connect_ = tool("start \"$D\" --nodes " + std::to_string(nodes) + " --tick " + std::to_string(tick_ms) +
                  " " + start_options + " --owner " + std::to_string(::getpid()));
  if (const char* c = std::getenv("ZKLOCK_TEST_ZK")) saved_ = c;
  ::setenv("ZKLOCK_TEST_ZK", connect_.c_str(), 1);
}

std::string private_server::dir() const { return dir_.substr(dir_.find('\x1f') + 1); }

private_server::~private_server() {
  try {
    tool("stop \"$D\"");
    std::error_code ec;
    std::filesystem::remove_all(dir_.substr(dir_.find('\x1f') + 1), ec);  // data, logs, config
  } catch (...) {
  }
  if (saved_.empty())
    ::unsetenv("ZKLOCK_TEST_ZK");
  else
    ::setenv("ZKLOCK_TEST_ZK", saved_.c_str(), 1);
}

std::string private_server::tool(const std::string& args) const {
  const auto sep = dir_.find('\x1f');
  const std::string zk = dir_.substr(0, sep), dir = dir_.substr(sep + 1);
  return run_capture("D='" + dir + "'; '" + zk + "' " + args + " 2>/dev/null");
}

void private_server::pause(int node) { tool("pause \"$D\" " + std::to_string(node)); }
void private_server::resume(int node) { tool("resume \"$D\" " + std::to_string(node)); }
void private_server::kill(int node) { tool("kill \"$D\" " + std::to_string(node)); }
void private_server::restart(int node) { tool("restart \"$D\" " + std::to_string(node)); }
int private_server::kill_leader() { return std::stoi(tool("kill-leader \"$D\"")); }
int private_server::leader() { return std::stoi(tool("leader \"$D\"")); }
int private_server::port(int node) const { return std::stoi(tool("port \"$D\" " + std::to_string(node))); }

long long private_server::connections(int node) const {
  std::istringstream in{four_letter(port(node), "srvr")};
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("Connections: ")) return std::stoll(line.substr(13));
  return -1;
}

bool remove(const std::string& path) { return zoo_delete(observer(), path.c_str(), -1) == ZOK; }

}  // namespace zkt

namespace zkt {

namespace {
/// Returns: the ACL of `path` as the handle `zh` reads it, or nullopt if the call failed.
std::optional<std::vector<acl_entry>> acl_through(zhandle_t* zh, const std::string& path) {
  ACL_vector acl{};
  struct Stat st {};
  if (zoo_get_acl(zh, path.c_str(), &acl, &st) != ZOK) return std::nullopt;
  std::vector<acl_entry> out;
  for (int i = 0; i < acl.count; ++i)
    out.push_back({acl.data[i].perms, acl.data[i].id.scheme ? acl.data[i].id.scheme : "",
                   acl.data[i].id.id ? acl.data[i].id.id : ""});
  deallocate_ACL_vector(&acl);
  return out;
}
}  // namespace

std::optional<std::vector<acl_entry>> acl_of(const std::string& path) { return acl_through(observer(), path); }

std::optional<std::vector<acl_entry>> raw_client::acl(const std::string& path) {
  return acl_through(static_cast<zhandle_t*>(zh_), path);
}

raw_client::raw_client(std::string_view user, std::string_view password) {
  zhandle_t* zh = open_handle();
  if (zoo_state(zh) != ZOO_CONNECTED_STATE) {
    zookeeper_close(zh);
    throw std::runtime_error("raw_client: not connected");
  }
  if (!user.empty()) {
    const std::string cred = std::string{user} + ":" + std::string{password};
    auto reply = std::make_shared<auth_reply>();
    auto* held = new std::shared_ptr<auth_reply>(reply);  // freed by auth_done
    int rc = zoo_add_auth(zh, "digest", cred.data(), static_cast<int>(cred.size()), &auth_done, held);
    if (rc == ZOK) {
      std::unique_lock lk{reply->mu};
      rc = reply->cv.wait_for(lk, std::chrono::seconds{10}, [&] { return reply->done; }) ? reply->rc
                                                                                        : ZOPERATIONTIMEOUT;
    } else {
      delete held;
    }
    if (rc != ZOK) {
      zookeeper_close(zh);  // runs any completion still pending
      throw std::runtime_error("raw_client: addauth failed: " + std::to_string(rc));
    }
  }
  zh_ = zh;
}

raw_client::~raw_client() { zookeeper_close(static_cast<zhandle_t*>(zh_)); }

int raw_client::remove(const std::string& path) { return zoo_delete(static_cast<zhandle_t*>(zh_), path.c_str(), -1); }

int raw_client::create_with_world(const std::string& path, int world_perms) {
  char auth_scheme[] = "auth", auth_id[] = "", world_scheme[] = "world", world_id[] = "anyone";
  ACL entries[] = {{ZOO_PERM_ALL, {auth_scheme, auth_id}}, {world_perms, {world_scheme, world_id}}};
  ACL_vector acl{2, entries};
  return zoo_create(static_cast<zhandle_t*>(zh_), path.c_str(), nullptr, -1, &acl, 0, nullptr, 0);
}

int raw_client::create_with_acl(const std::string& path, const std::vector<acl_entry>& acl) {
  std::vector<ACL> entries;  // (the C client's Id has char*, and only reads it)
  for (const auto& e : acl)
    entries.push_back({e.perms, {const_cast<char*>(e.scheme.c_str()), const_cast<char*>(e.id.c_str())}});
  ACL_vector v{static_cast<std::int32_t>(entries.size()), entries.data()};
  return zoo_create(static_cast<zhandle_t*>(zh_), path.c_str(), nullptr, -1, &v, 0, nullptr, 0);
}

std::optional<std::string> raw_client::create_ephemeral_sequential(const std::string& prefix) {
  char created[1024];
  const int rc = zoo_create(static_cast<zhandle_t*>(zh_), prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created);
  if (rc != ZOK) return std::nullopt;
  return std::string{created};
}

std::int64_t raw_client::id() const {
  const clientid_t* id = zoo_client_id(static_cast<zhandle_t*>(zh_));
  return id ? id->client_id : 0;
}

int raw_client::set_world_acl(const std::string& path, int world_perms) {
  char world_scheme[] = "world", world_id[] = "anyone";
  ACL entries[] = {{world_perms, {world_scheme, world_id}}};
  ACL_vector acl{1, entries};
  return zoo_set_acl(static_cast<zhandle_t*>(zh_), path.c_str(), -1, &acl);
}

}  // namespace zkt

namespace zkt {

bool await_children(const std::string& path, std::size_t n, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (children(path).size() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace zkt

namespace zkt {

bool expire_session(std::int64_t id, std::string_view password, std::chrono::milliseconds limit) {
  clientid_t cid{};
  cid.client_id = id;
  std::memcpy(cid.passwd, password.data(), std::min(password.size(), sizeof cid.passwd));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  do {
    zhandle_t* zh = open_handle(&cid);  // waits until connected or told "expired"
    const int state = zoo_state(zh);
    zookeeper_close(zh);  // connected: closing ends the session on the server
    if (state == ZOO_EXPIRED_SESSION_STATE) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

}  // namespace zkt

namespace zkt {

using namespace std::chrono_literals;

/// Returns: the paths at or below `path` that session `s` watches, per the server's "wchp".
/// ("wchp" prints each watched path, then one tab-indented 0x... session id per line.)
std::set<std::string> watches_below(const std::string& path, const zklock::session& s) {
  return watches_below(path, static_cast<std::uint64_t>(s.id()));
}

std::set<std::string> watches_below(const std::string& path, std::uint64_t sid) {
  std::set<std::string> out;
  std::istringstream in{zkt::four_letter("wchp")};
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.starts_with("/")) {
      current = line;
    } else if (const auto x = line.find("0x"); x != std::string::npos) {
      if (std::stoull(line.substr(x + 2), nullptr, 16) != sid) continue;
      if (current == path || current.starts_with(path + "/")) out.insert(current);
    }
  }
  return out;
}

/// Polls until session `s` watches something at or below `path`. Returns: whether within 30 s.
bool await_watch(const std::string& path, const zklock::session& s) {
  const auto limit = std::chrono::steady_clock::now() + 30s;
  while (watches_below(path, s).empty()) {
    if (std::chrono::steady_clock::now() > limit) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace zkt
