// SPDX-License-Identifier: Apache-2.0
// zklock's copy of the C client (tools/build-zookeeper-client), where one of its patches changes
// what the client does on its own threads: a handle's server address is formatted into a buffer of
// the calling thread's own. Debian's client formats every handle's into one static buffer, and does
// so even when nothing logs (a timed-out connection's message is built first): two sessions whose
// connections timed out together wrote it at once from their I/O threads, a race that
// ThreadSanitizer reported in fault_injection_tests. No server is needed: the single-threaded
// client connects only when its loop asks, and these handles are never looped.
#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "zk_test.hpp"
#include "zklock_zk_client.h"

namespace {

TEST(PrivateClient, EachThreadFormatsAServersAddressInABufferOfItsOwn) {
  if (!ZKLOCK_TEST_ENDPOINT_PER_THREAD) {
    GTEST_SKIP() << "Debian's C client formats every handle's server address into one static buffer "
                    "(tools/setup builds zklock's, which has one per thread)";
  }
  struct handle {
    zhandle_t* zh = nullptr;
    std::string address;  // what zoo_get_current_server must say
    const char* text = nullptr;  // where it said it, last
    int wrong = 0;  // how many times it said something else
  };
  // Quiet, as zklock keeps its client without a log handler (it sets the level again for each
  // handle it opens).
  zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  std::vector<handle> handles(2);
  for (auto& h : handles) {
    h.address = "127.0.0.1:" + std::to_string(zkt::free_port());
    h.zh = zookeeper_init(h.address.c_str(), nullptr, 10000, nullptr, nullptr, 0);
    ASSERT_NE(h.zh, nullptr) << h.address;
    zoo_cycle_next_server(h.zh);  // the address the handle would connect to next: its only one
  }
  constexpr int rounds = 2000;
  std::barrier together{2};  // each round's calls overlap as far as two threads can make them
  std::vector<std::thread> threads;
  for (auto& h : handles) {
    threads.emplace_back([&together, &h] {
      for (int i = 0; i < rounds; ++i) {
        together.arrive_and_wait();
        h.text = zoo_get_current_server(h.zh);
        if (h.address != h.text) ++h.wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  // A shared buffer is one address for both threads (and under ThreadSanitizer, a reported race).
  EXPECT_NE(handles[0].text, handles[1].text);
  for (const auto& h : handles) {
    EXPECT_EQ(h.wrong, 0) << h.address << " read another handle's address";
    zookeeper_close(h.zh);
  }
}

}  // namespace
