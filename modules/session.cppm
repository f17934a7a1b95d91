// SPDX-License-Identifier: Apache-2.0
// zklock:session — one ZooKeeper session (one C-client handle), its state and its listeners.
module;
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
export module zklock:session;

export namespace zklock {

/// Where a session is. `suspended`: it was connected and lost the connection; the session (and its
/// locks) may still be alive. `expired`: the server ended it, or zklock gave it up after a
/// suspension longer than session_options::loss_tolerance; everything it held is lost.
enum class session_state { connecting, connected, suspended, expired, closed };

/// Returns: the state's name, e.g. "connected".
const char* to_string(session_state s) noexcept;

/// Credentials sent with ZooKeeper's `addauth`.
struct auth_info {
  std::string scheme;      ///< e.g. "digest"
  std::string credential;  ///< e.g. "user:password"
};

/// Returns: digest credentials. Throws: std::invalid_argument if user is empty or contains ':'.
auth_info digest(std::string_view user, std::string_view password);

/// How to open a session.
struct session_options {
  std::string connect;  ///< "host:port[,host:port...][/chroot]"
  std::chrono::milliseconds session_timeout{10'000};  ///< asked of the server (it may clamp it)
  std::chrono::milliseconds connect_timeout{15'000};  ///< the constructor gives up after this
  std::optional<auth_info> auth;                      ///< sent before the constructor returns
  bool reestablish_after_expiry = true;  ///< open a new handle by itself when the session expires
  /// How long the session may stay suspended (disconnected) before zklock gives it up: its locks
  /// count as lost (lost_token() fires), the handle is closed so that its nodes cannot come back,
  /// and the state becomes `expired`. Zero = the default, a quarter of the negotiated session
  /// timeout: the client notices silence 2/3 of it after the last reply, and the server may expire
  /// the session 1/3 later; giving up at 11/12 leaves a margin of 1/12 before anyone else is granted.
  std::chrono::milliseconds loss_tolerance{0};
  /// When true, unlock() and release() return once the delete of the contender node is sent,
  /// without waiting for its reply (about one write's latency saved per release). The server
  /// serves this session's requests in order, so the session's own next request, such as its next
  /// lock(), is served after the delete; another session may still see the node for that round
  /// trip (and is granted only after it is gone). A delete whose reply is lost is retried in the
  /// background, as always. Default false: the node is gone when unlock() returns.
  bool background_release = false;
};

/// Receives one line of the ZooKeeper C client's log. Called on the client's threads.
using log_handler = std::function<void(std::string_view line)>;

/// Effects: routes the C client's log of every session to h (an empty function = silent, the default).
/// Also sets the C client's process-wide log level, here and whenever a session opens a handle:
/// off without a handler (nothing is even formatted), INFO with one.
void set_log_handler(log_handler h);

/// Receives every state change of a session, in order, on the session's own thread (never
/// ZooKeeper's); the final `closed` arrives on the thread that calls close(). A listener may add or
/// remove listeners, or close the session.
using state_listener = std::function<void(session_state)>;

namespace detail { struct session_impl; }

/// One ZooKeeper session. Thread-safe; lock objects keep a reference to it, so it must outlive them.
class session {
 public:
  /// Effects: connects to `connect` with default options. Returns: once the session is established.
  /// Throws: std::invalid_argument for a malformed connect string; std::system_error (zklock
  /// category) for connect_timeout, chroot_missing, auth_failed.
  explicit session(std::string_view connect);

  /// Effects: connects as `options` say. Throws: as above, and std::invalid_argument for
  /// non-positive timeouts.
  explicit session(session_options options);

  /// Effects: closes the session; the server deletes its ephemeral nodes at once.
  ~session();

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// Returns: the current state.
  session_state state() const noexcept;

  /// Returns: the server's id of the current session (changes when a new handle replaces an expired one).
  std::int64_t id() const noexcept;

  /// Returns: how many handles this object has opened (1 until an expired session is re-established).
  std::uint64_t generation() const noexcept;

  /// Returns: the session timeout the server granted.
  std::chrono::milliseconds negotiated_timeout() const noexcept;

  /// Effects: calls `l` on every later state change. Returns: an id for remove_state_listener.
  std::uint64_t add_state_listener(state_listener l);

  /// Effects: stops calling the listener; waits if it is running on another thread right now.
  void remove_state_listener(std::uint64_t id) noexcept;

  /// Effects: waits until the state is `s` or `timeout` passes. Returns: whether the state is `s`.
  bool wait_for(session_state s, std::chrono::milliseconds timeout) const;

  /// Effects: one round trip: returns once the server has served every request this session sent
  /// before the call (a session's requests are served in order), including deletes sent by
  /// background_release. Waits through a disconnection for up to connect_timeout.
  /// Throws: std::system_error: session_expired / session_closed, or operation_timeout if still
  /// disconnected after connect_timeout.
  void flush();

  /// Effects: after expiry, opens a new handle now (also done by itself when
  /// reestablish_after_expiry is set); does nothing while the session is alive.
  /// Throws: std::system_error if the new session cannot be established within connect_timeout.
  void reestablish();

  /// Effects: closes the handle; later operations fail with errc::session_closed. Idempotent.
  void close() noexcept;

  /// Returns: the options this session was opened with.
  const session_options& options() const noexcept;

  /// For zklock's own implementation.
  detail::session_impl& impl() const noexcept { return *impl_; }

 private:
  std::unique_ptr<detail::session_impl> impl_;
};

}  // namespace zklock
