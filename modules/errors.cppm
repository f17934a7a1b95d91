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
  system_error = -1,            ///< a system call inside the C client failed
  runtime_inconsistency = -2,   ///< the client found its own state inconsistent (a bug)
  data_inconsistency = -3,      ///< the client found inconsistent data (a bug)
  connection_loss = -4,         ///< the connection dropped; the request's outcome is unknown (zklock
                                ///< retries its own requests; the C client's code, e.g. in logs)
  marshalling_error = -5,       ///< a request or reply could not be encoded or decoded
  unimplemented = -6,           ///< the server does not implement the operation (too old a server)
  operation_timeout = -7,       ///< no answer in time: a call that waited connect_timeout for a
                                ///< connection (session::flush(), opening a semaphore, contenders(),
                                ///< record_hold()) or the C client's own timeout
  bad_arguments = -8,           ///< the client refused the arguments of a request
  invalid_state = -9,           ///< the client handle is unusable (zklock reports session_expired or
                                ///< session_closed instead)
  new_config_no_quorum = -13,   ///< reconfig: no quorum of the new configuration is connected
  reconfig_in_progress = -14,   ///< reconfig: another reconfiguration is still running
  ssl_connection_error = -15,   ///< the TLS connection to the server failed
  api_error = -100,             ///< an unspecified server-side API error
  no_node = -101,               ///< the node does not exist (record_hold(): the lock node is gone)
  no_auth = -102,               ///< the node's ACL denies this session the operation; also a lock node
                                ///< whose ACL would not let this session delete its contender node
                                ///< again (zklock refuses to queue there), and unlock(ec) when the
                                ///< server refused the delete
  bad_version = -103,           ///< the node's version is not the one the request expected
  no_children_for_ephemerals = -108,  ///< a node was to be created under an ephemeral node
  node_exists = -110,           ///< the node to be created exists already (record_hold(): another
                                ///< session stored a record for that token)
  not_empty = -111,             ///< the node to be deleted has children
  session_expired = -112,       ///< the session ended (expired on the server, or given up by zklock
                                ///< after a suspension longer than its loss tolerance): its nodes are
                                ///< gone. An acquire that was waiting queues again on the next session;
                                ///< it reports this code if none is connected before its deadline or
                                ///< none will come (reestablish_after_expiry off, re-establishment
                                ///< refused); credentials() while no session is live
  invalid_callback = -113,      ///< the client was given an invalid callback
  invalid_acl = -114,           ///< the ACL of a create is malformed or empty
  auth_failed = -115,           ///< the server refused the session's credentials (the constructor,
                                ///< reestablish())
  closing = -116,               ///< the client handle is being closed
  nothing = -117,               ///< the client had no server replies to process (internal)
  session_moved = -118,         ///< the session moved to another server; this connection is stale
  not_read_only = -119,         ///< a write was sent to a server in read-only mode
  ephemeral_on_local_session = -120,  ///< an ephemeral node was asked for on a local session
  no_watcher = -121,            ///< the watch to remove is not registered
  reconfig_disabled = -123,     ///< dynamic reconfiguration is turned off on the server
  session_closed_requires_sasl_auth = -124,  ///< the server closed the session: it demands SASL
  throttled_op = -127,          ///< the server is overloaded and refused the request; retry later
  // zklock's own
  connect_timeout = 1,     ///< no session (with its auth) within connect_timeout: the constructor,
                           ///< reestablish(), or a re-establishment after expiry
  chroot_missing = 2,      ///< the connect string's chroot node does not exist (the constructor,
                           ///< reestablish())
  session_closed = 3,      ///< the session was closed (close() or its destructor) before or during
                           ///< the call; also an asynchronous acquire still pending when its lock
                           ///< object was destroyed
  lock_timeout = 4,        ///< a blocking lock() / lock_shared() / acquire() reached the timeout
                           ///< policy's bound; an asynchronous acquire reached its wait_context's
                           ///< deadline or that bound
  lock_lost = 5,           ///< the caller locks again (a re-entrant policy) while its earlier hold
                           ///< of the lock object is lost: unlock it first; or a guarded write
                           ///< (session::commit_if_held) found the hold's node gone: nothing written
  not_held = 6,            ///< a call that needs the caller's hold (fencing_token(), lost_token())
                           ///< found none; the error_code overloads of unlock(), unlock_shared(),
                           ///< release() and lock_hold::unlock() report a release of nothing held
  lease_count_mismatch = 7, ///< a semaphore was opened with another lease count than its node stores
  cancelled = 8,           ///< an asynchronous acquire was cancelled by a stop request on its
                           ///< wait_context's token (a blocking try returns false instead)
  contender_deleted = 9,   ///< our contender node was deleted by someone else (not by this
                           ///< session) while it waited: the acquire fails, nothing is granted
  path_kind_mismatch = 10, ///< the path is another kind's: a semaphore opened on a lock's path (or
                           ///< on a node that stores no lease count), a lock queued on a semaphore's
                           ///< path, or a queue that shows both kinds' nodes; nothing is granted
  not_supported = 11       ///< the options ask for what the C client zklock was built on cannot do
                           ///< (TLS, SASL): see docs/security.md, tools/setup --with-tls-sasl
};

/// Returns: the one "zklock" category object. Its codes match these std::errc conditions:
/// timed_out (operation_timeout, connect_timeout, lock_timeout), not_connected (connection_loss),
/// invalid_argument (bad_arguments), permission_denied (no_auth, auth_failed),
/// no_such_file_or_directory (no_node), file_exists (node_exists), operation_canceled (cancelled),
/// not_supported (not_supported); other codes none of std::errc.
const std::error_category& error_category() noexcept;

/// Returns: {e, error_category()}; found by ADL so that std::error_code{errc::...} works.
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// Returns: {e, error_category()}, a condition matched only by codes of the same enumerator. Never
/// used implicitly (errc is no error-condition enum); to test for timed_out etc., use std::errc.
inline std::error_condition make_error_condition(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

}  // namespace zklock

// Outside any `export`: reachable by the lock templates, not visible to importers.
namespace zklock::detail {
/// Effects: throws std::system_error{e, what}. Throws: always.
[[noreturn]] void throw_error(errc e, const std::string& what);
}  // namespace zklock::detail

/// Makes zklock::errc convert implicitly to std::error_code (through make_error_code), so that
/// `ec == zklock::errc::lock_timeout` and `std::error_code ec = zklock::errc::no_node;` work.
export template <> struct std::is_error_code_enum<zklock::errc> : std::true_type {};
