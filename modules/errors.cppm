// SPDX-License-Identifier: Apache-2.0
// zklock:errors — zklock::errc and the "zklock" error category (the std::io_errc pattern).
module;
#include <string>
#include <system_error>
export module zklock:errors;

export namespace zklock {

/// Every error zklock reports. Negative values are the ZooKeeper C client's return codes, with
/// the same numbers; positive values are zklock's own.
enum class errc : int {
  // ZooKeeper return codes
  system_error = -1,
  runtime_inconsistency = -2,
  data_inconsistency = -3,
  connection_loss = -4,
  marshalling_error = -5,
  unimplemented = -6,
  operation_timeout = -7,
  bad_arguments = -8,
  invalid_state = -9,
  new_config_no_quorum = -13,
  reconfig_in_progress = -14,
  ssl_connection_error = -15,
  api_error = -100,
  no_node = -101,
  no_auth = -102,
  bad_version = -103,
  no_children_for_ephemerals = -108,
  node_exists = -110,
  not_empty = -111,
  session_expired = -112,
  invalid_callback = -113,
  invalid_acl = -114,
  auth_failed = -115,
  closing = -116,
  nothing = -117,
  session_moved = -118,
  not_read_only = -119,
  ephemeral_on_local_session = -120,
  no_watcher = -121,
  reconfig_disabled = -123,
  session_closed_requires_sasl_auth = -124,
  throttled_op = -127,
  // zklock's own
  connect_timeout = 1,     ///< the session was not established within connect_timeout
  chroot_missing = 2,      ///< the connect string's chroot node does not exist
  session_closed = 3,      ///< the session object was closed
  lock_timeout = 4,        ///< a blocking acquire hit the timeout policy's bound
  lock_lost = 5,           ///< our contender node vanished while we waited or held
  not_held = 6,            ///< the operation needs a held lock
  lease_count_mismatch = 7 ///< a semaphore was opened with another lease count than stored
};

/// The "zklock" error category. Returns: a reference to the one category object.
const std::error_category& error_category() noexcept;

/// Returns: {e, error_category()}; found by ADL so that std::error_code{errc::...} works.
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// Returns: the error_condition for e (maps, e.g., operation_timeout to std::errc::timed_out).
inline std::error_condition make_error_condition(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// Effects: throws std::system_error{e, what}. Throws: always.
[[noreturn]] void throw_error(errc e, const std::string& what);

}  // namespace zklock

export template <> struct std::is_error_code_enum<zklock::errc> : std::true_type {};
