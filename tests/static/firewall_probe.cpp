// SPDX-License-Identifier: Apache-2.0
// Compiled four times by the firewall tests: with PROBE_zoo_create, PROBE_ZOK or PROBE_ranges it must fail
// ("undeclared identifier"), with PROBE_control it must compile.
import zklock;

int main() {
#if defined(PROBE_zoo_create)
  return zoo_create == nullptr;
#elif defined(PROBE_ZOK)
  return ZOK;
#elif defined(PROBE_ranges)
  return ranges::views::iota(0, 3).size() > 0;
#else
  return zklock::session_state::connected == zklock::session_state::closed;
#endif
}
