// SPDX-License-Identifier: Apache-2.0
// guarded_config — a configuration node updated under a lock with guarded writes: each update
// commits only while its writer's hold stands, so a holder that lost the lock while it was paused
// (its hold broken, its session expired) cannot overwrite what the next holder wrote.
//
// usage: example_guarded_config [ROUNDS=20] [PATH=/zklock-examples/config-PID] [HOSTS]
//   HOSTS: "host:port[,host:port...]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
// Two writers update PATH/config ROUNDS times each; then a holder pauses in the middle of an update,
// an operator breaks its hold (deletes its node, as `zklock ls` shows it), a writer updates, and the
// paused holder wakes and tries to write. Exits 1 if an update was lost or the stale write landed.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
import zklock;

namespace {

/// Returns: the generation stored in `data` ("generation=N").
long generation_of(const std::string& data) { return std::atol(data.c_str() + data.find('=') + 1); }

/// Effects: under `m`, reads the config and writes the next generation, guarded by the hold.
void update(zklock::session& s, zklock::mutex& m, const std::string& config) {
  std::lock_guard hold{m};
  const long next = generation_of(s.get(config).value().data) + 1;
  s.commit_if_held(m.fence(), {zklock::op::set(config, "generation=" + std::to_string(next))});
}

}  // namespace

int main(int argc, char** argv) try {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string path = argc > 2 ? argv[2] : "/zklock-examples/config-" + std::to_string(getpid());
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 3 ? argv[3] : env && *env ? env : "127.0.0.1:2181";
  const std::string config = path + "/config", lock_path = path + "/lock";

  zklock::session admin{hosts};
  for (const std::string& p : {std::string{"/zklock-examples"}, path}) {
    if (!admin.exists(p)) admin.create(p);
  }
  if (!admin.exists(config)) admin.create(config, "generation=0");
  const long start = generation_of(admin.get(config)->data);

  // Two writers, each with its own session, in turn under the lock.
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      zklock::session s{hosts};
      zklock::mutex m{s, lock_path};
      for (int i = 0; i < rounds; ++i) update(s, m, config);
    });
  }
  for (auto& t : writers) t.join();

  // A holder pauses in the middle of an update (a GC pause, a stopped VM)...
  zklock::session stale_session{hosts};
  zklock::mutex stale{stale_session, lock_path};
  stale.lock();
  const zklock::fence fence = stale.fence();
  const long seen = generation_of(stale_session.get(config)->data);
  // ...an operator breaks the stuck hold, and another writer takes the lock and updates...
  for (const auto& c : zklock::contenders(admin, lock_path))
    if (c.state == zklock::contender_state::holder) admin.remove(lock_path + "/" + c.node);
  {
    zklock::session s{hosts};
    zklock::mutex m{s, lock_path};
    update(s, m, config);
  }
  // ...and the paused holder wakes and writes what it computed before the pause. (Its lost_token()
  // fires too, once the deletion's event arrives: a holder that checks it first learns it earlier;
  // the guard holds even if the pause falls between that check and the write.)
  bool stale_landed = true;
  try {
    stale_session.commit_if_held(fence, {zklock::op::set(config, "generation=" + std::to_string(seen + 1))});
  } catch (const std::system_error& e) {
    stale_landed = e.code() != zklock::errc::lock_lost;
    std::printf("the paused holder's write was refused: %s\n", e.what());
  }
  stale.unlock();

  const long end = generation_of(admin.get(config)->data);
  const long want = start + 2L * rounds + 1;
  std::printf("generation %ld (expected %ld)%s\n", end, want, stale_landed ? ": the stale write landed" : "");
  return end == want && !stale_landed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_guarded_config: %s\n", e.what());
  return 1;
}
