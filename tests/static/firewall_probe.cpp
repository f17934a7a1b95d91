// SPDX-License-Identifier: Apache-2.0
// Compiled three times by the firewall tests: with PROBE_zoo_create or PROBE_ZOK it must fail
// ("undeclared identifier"), with PROBE_control it must compile.
import zklock;

int main() {
#if defined(PROBE_zoo_create)
  return zoo_create == nullptr;
#elif defined(PROBE_ZOK)
  return ZOK;
#else
  return zklock::session_state::connected == zklock::session_state::closed;
#endif
}
