// SPDX-License-Identifier: Apache-2.0
// `zklock revoke PATH`: asks the holders of PATH (or one contender, --node) to let go, waits up to
// --grace for them to, then deletes the nodes of those still holding (zklock::revoke); prints what
// happened to each. The request is Curator's revocation marker: zklock holders (revocation_token(),
// `zklock exec`, which stops CMD) and revocable Curator locks both hear it.
#include "cli.hpp"

namespace zkcli {

int run_revoke(const options& o) {
  auto s = open_session(o);
  zklock::revoke_options r;
  r.node = o.revoke_node;
  r.grace = o.revoke_force ? ms::zero() : o.revoke_grace;
  if (g_verbose) {
    if (o.revoke_force) say("asking the holders of %s to let go, then deleting their nodes at once", o.path.c_str());
    else say("asking the holders of %s to let go within %s", o.path.c_str(), span(r.grace.count()).c_str());
  }
  const auto done = zklock::revoke(*s, o.path, r);
  if (done.empty()) {
    say("nobody holds %s: nothing to revoke", o.path.c_str());
    return exit_code::ok;
  }
  for (const auto& d : done) {
    const char* what = "";
    switch (d.outcome) {
      case zklock::revoke_outcome::released: what = "released on request"; break;
      case zklock::revoke_outcome::forced: what = "forced (its node deleted)"; break;
      case zklock::revoke_outcome::gone: what = "already gone"; break;
      case zklock::revoke_outcome::still_held: what = "still held"; break;
    }
    std::printf("%s: %s\n", d.node.c_str(), what);
  }
  std::fflush(stdout);
  return exit_code::ok;
}

}  // namespace zkcli
