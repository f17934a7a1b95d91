// SPDX-License-Identifier: Apache-2.0
// Raw ZooKeeper access for tests, straight through the C client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zookeeper/zookeeper.h>

#include "zk_test.hpp"

namespace zkt {
namespace {

extern "C" void quiet_log(const char*) {}

zhandle_t* open_handle(const clientid_t* id = nullptr) {
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zhandle_t* zh = zookeeper_init2(connect().c_str(), nullptr, 10000, id, nullptr, 0, &quiet_log);
  if (!zh) throw std::runtime_error("zookeeper_init2 failed");
  for (int i = 0; i < 300 && zoo_state(zh) != ZOO_CONNECTED_STATE; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});  // polling a C handle's state
  return zh;
}

zhandle_t* observer() {
  static std::mutex mu;
  static zhandle_t* zh = nullptr;
  std::lock_guard lk{mu};
  if (!zh || zoo_state(zh) != ZOO_CONNECTED_STATE) {
    if (zh) zookeeper_close(zh);
    zh = open_handle();
  }
  return zh;
}

}  // namespace

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
  if (zoo_get_children(observer(), path.c_str(), 0, &kids) == ZOK) {
    for (int i = 0; i < kids.count; ++i) out.emplace_back(kids.data[i]);
    deallocate_String_vector(&kids);
  }
  return out;
}

bool exists(const std::string& path) { return zoo_exists(observer(), path.c_str(), 0, nullptr) == ZOK; }

void create_path(const std::string& path) {
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    zoo_create(observer(), path.substr(0, pos).c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
  }
}

bool expire(zklock::session& s, std::chrono::milliseconds limit) {
  const auto gen = s.generation();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    clientid_t id{};
    id.client_id = s.id();
    const std::string pw = zklock::detail::session_password(s);
    std::memcpy(id.passwd, pw.data(), std::min(pw.size(), sizeof id.passwd));
    zhandle_t* zh = open_handle(&id);
    zookeeper_close(zh);
    // The original handle may win the session back (it reconnects within milliseconds): retry.
    for (int i = 0; i < 100; ++i) {
      if (s.generation() != gen || s.state() == zklock::session_state::expired) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
  }
  return false;
}

std::string four_letter(std::string_view word) {
  const std::string c = connect();
  const auto first = c.substr(0, c.find(','));
  const auto colon = first.rfind(':');
  const int port = std::stoi(first.substr(colon + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    (void)!::write(fd, word.data(), word.size());
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

zklock::session_options options(std::chrono::milliseconds session_timeout) {
  zklock::session_options o;
  o.connect = connect();
  o.session_timeout = session_timeout;
  o.connect_timeout = std::chrono::seconds{15};
  return o;
}

}  // namespace zkt
