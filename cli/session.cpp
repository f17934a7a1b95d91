// SPDX-License-Identifier: Apache-2.0
// zklock's messages, the session every command opens, and which exit code (docs/cli.md) an
// exception from the library means.
#include <exception>
#include <stdexcept>
#include "cli.hpp"

namespace zkcli {

bool g_verbose = false;
bool g_client_log = false;

std::string tidy(std::string_view what) {
  for (std::string_view prefix : {"zklock: ", "zklock::session: "})
    if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  return std::string{what};
}

void usage_error(const std::string& message) {
  throw exit_error{exit_code::usage, message + "\n(see 'zklock --help')"};
}

exit_error classify(const std::exception& e) {
  const std::string what = tidy(e.what());
  if (dynamic_cast<const std::invalid_argument*>(&e)) return {exit_code::usage, what};
  const auto* se = dynamic_cast<const std::system_error*>(&e);
  if (!se) return {exit_code::software, what};
  if (se->code().category() != zklock::error_category()) return {exit_code::software, what};
  using zklock::errc;
  switch (static_cast<errc>(se->code().value())) {
    case errc::connect_timeout:
    case errc::connection_loss:
    case errc::operation_timeout:
    case errc::session_expired:
    case errc::session_closed:
    case errc::closing:
    case errc::invalid_state:
      return {exit_code::unavailable, what};
    case errc::no_auth:
    case errc::auth_failed:
      return {exit_code::no_permission, what};
    case errc::lock_lost:
    case errc::contender_deleted:
      return {exit_code::lost, what};
    case errc::lock_timeout:
      return {exit_code::timeout, what};
    case errc::lease_count_mismatch:
    case errc::bad_arguments:
    case errc::chroot_missing:
      return {exit_code::usage, what};
    default:
      return {exit_code::software, what};
  }
}

std::unique_ptr<zklock::session> open_session(const options& o) {
  zklock::session_options so;
  so.connect = *o.connect;
  so.session_timeout = o.session_timeout;
  so.connect_timeout = o.connect_timeout;
  // A session that expires, or is given up after a long disconnection, is replaced by a new one:
  // a waiting exec queues again on it, wait and ls look again (docs/cli.md, "Faults").
  so.reestablish_after_expiry = true;
  if (g_client_log) zklock::set_log_handler([](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  try {
    auto s = std::make_unique<zklock::session>(std::move(so));
    const long long granted = s->negotiated_timeout().count(), asked = o.session_timeout.count();
    if (g_verbose)
      say("connected to %s (session 0x%llx, session timeout %lld ms granted)", o.connect->c_str(),
          static_cast<unsigned long long>(s->id()), granted);
    // The server keeps a session timeout within its minSessionTimeout and maxSessionTimeout (by
    // default 2 and 20 ticks): the granted one, not the one asked for, is how long a dead zklock
    // keeps its lock, and how long the session outlives a silent connection.
    if (granted > 0 && granted != asked)
      say("warning: the server granted a session timeout of %lld ms, not the %lld ms asked for (its %s): a dead "
          "zklock keeps its lock for up to %lld ms",
          granted, asked, granted < asked ? "maxSessionTimeout" : "minSessionTimeout", granted);
    return s;
  } catch (const std::invalid_argument& e) {
    usage_error(tidy(e.what()));
  } catch (const std::system_error& e) {
    auto err = classify(e);
    if (err.code == exit_code::software) err.code = exit_code::unavailable;  // e.g. a host that does not resolve
    err.message = "cannot connect to ZooKeeper at \"" + *o.connect + "\": " + err.message;
    throw err;
  }
}

}  // namespace zkcli
