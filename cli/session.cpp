// SPDX-License-Identifier: Apache-2.0
// zklock's messages, the session every command opens (and why it could not be opened), and which
// exit code (docs/cli.md) an exception from the library means.
#include <algorithm>
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

std::string tidy(const std::exception& e) {
  std::string what = tidy(e.what());
  const auto* se = dynamic_cast<const std::system_error*>(&e);
  if (!se) return what;
  // std::system_error's what() is "<what_arg>: <the code's message>". When the what_arg's last
  // clause already says what the message says, keep one of them.
  const std::string message = se->code().message();
  if (!what.ends_with(": " + message)) return what;
  std::string before = what.substr(0, what.size() - message.size() - 2);
  const auto colon = before.rfind(": ");
  const std::string last = colon == std::string::npos ? before : before.substr(colon + 2);
  if (last.empty()) return what;
  if (message.starts_with(last)) return (colon == std::string::npos ? "" : before.substr(0, colon + 2)) + message;
  if (last.starts_with(message)) return before;
  return what;
}

void usage_error(const std::string& message) {
  throw exit_error{exit_code::usage, message + "\n(see 'zklock --help')"};
}

exit_error classify(const std::exception& e) {
  const std::string what = tidy(e);
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
    case errc::no_auth: {
      // The library names the call, the node and the permission it needs, then the code's meaning:
      // "creating /a/b (needs CREATE permission on /a): not authorised". The verdict goes first.
      const std::string meaning = ": " + se->code().message();
      if (what.ends_with(meaning))
        return {exit_code::no_permission, "not authorised: " + what.substr(0, what.size() - meaning.size())};
      return {exit_code::no_permission, what};
    }
    case errc::auth_failed:
      return {exit_code::no_permission, what};
    case errc::lock_lost:
    case errc::contender_deleted:
      return {exit_code::lost, what};
    case errc::lock_timeout:
      return {exit_code::timeout, what};
    case errc::chroot_missing:
      return {exit_code::config, what};
    case errc::lease_count_mismatch: {  // the library's text says it all: without the code's message
      const std::string suffix = ": " + se->code().message();
      std::string said = what.ends_with(suffix) ? what.substr(0, what.size() - suffix.size()) : what;
      return {exit_code::usage, said + " (every user of the path must give the same --permits)"};
    }
    case errc::path_kind_mismatch:
    case errc::bad_arguments:
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
  so.auth = o.auth;
  so.acl = o.acl;
  so.tls = tls_from_options(o);
  so.sasl = sasl_from_options(o);
  // A session that expires, or is given up after a long disconnection, is replaced by a new one:
  // a waiting exec queues again on it, wait and ls look again (docs/cli.md, "Faults").
  so.reestablish_after_expiry = true;
  if (g_client_log) zklock::set_log_handler([](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  const std::string at = "cannot connect to ZooKeeper at \"" + *o.connect + "\": ";
  try {
    auto s = std::make_unique<zklock::session>(std::move(so));
    const long long granted = s->negotiated_timeout().count(), asked = o.session_timeout.count();
    if (g_verbose) {
      std::string server = reached_server(*s, *o.connect);
      if (server.empty()) server = "\"" + *o.connect + "\"";  // (the connection dropped already)
      say("connected to %s (session 0x%llx, session timeout %lld ms granted)", server.c_str(),
          static_cast<unsigned long long>(s->id()), granted);
    }
    if (g_verbose && !o.auth.empty()) say("authenticated as %s", identities(o.auth).c_str());
    if (g_verbose && o.sasl_given)
      say("authenticated with SASL %s%s", o.sasl.mechanism.c_str(), o.sasl.user.empty() ? "" : (" as " + o.sasl.user).c_str());
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
    const auto code = e.code();
    if (code == zklock::make_error_code(zklock::errc::chroot_missing)) {
      const auto slash = o.connect->find('/');
      throw exit_error{exit_code::config, "the chroot " + o.connect->substr(slash) + " does not exist on ZooKeeper at \"" +
                                              o.connect->substr(0, slash) +
                                              "\": create it, or fix the connect string"};
    }
    if (code == zklock::make_error_code(zklock::errc::connect_timeout) &&
        std::string_view{e.what()}.find("addauth") == std::string_view::npos) {  // (not: connected, no answer to auth)
      // Look again, to say why: a refused connection, a server that does not answer, ...
      const std::string why = why_unreachable(*o.connect, std::min<ms>(o.connect_timeout, 2s));
      throw exit_error{exit_code::unavailable, at + "no session within " + std::to_string(o.connect_timeout.count()) +
                                                   " ms" + (why.empty() ? "" : "; " + why)};
    }
    if (code.category() == std::generic_category()) {
      // The C client refused the connect string, which the library found well-formed: most often
      // a host name that does not resolve (the client then reports ENOENT or EINVAL).
      const std::string why = why_unreachable(*o.connect, ms::zero());
      throw exit_error{exit_code::unavailable,
                       at + (why.empty() ? "the ZooKeeper client refused it (" + code.message() + ")" : why)};
    }
    if (code == zklock::make_error_code(zklock::errc::ssl_connection_error) ||
        code == zklock::make_error_code(zklock::errc::not_supported))
      throw exit_error{exit_code::config, at + tidy(e.what())};
    auto err = classify(e);
    if (err.code == exit_code::software) err.code = exit_code::unavailable;
    err.message = at + err.message;
    throw err;
  }
}

}  // namespace zkcli
