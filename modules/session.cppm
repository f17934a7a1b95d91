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
#include <vector>
export module zklock:session;
export import :data;  // the values of the data API below

// The state behind a session, and zklock's own access to it (both defined in the implementation
// partition zklock:session_impl, modules/session/session_impl.cppm): not exported.
namespace zklock::detail {
struct session_impl;
struct session_access;
}  // namespace zklock::detail

export namespace zklock {

/// Where a session is.
enum class session_state {
  connecting,  ///< a handle is being opened (first connect, or re-establishment after expiry)
  connected,   ///< the session is established and the connection is up
  suspended,   ///< it was connected and lost the connection; the session (and its locks) may
               ///< still be alive
  expired,     ///< the server ended it, or zklock gave it up after a suspension longer than
               ///< session_options::loss_tolerance; everything it held is lost
  closed       ///< close() was called (or the destructor ran); every operation now fails
};

/// Returns: the state's name, e.g. "connected" ("unknown" for a value outside the enum).
const char* to_string(session_state s) noexcept;

/// Credentials sent with ZooKeeper's `addauth`.
struct auth_info {
  std::string scheme;      ///< e.g. "digest"
  std::string credential;  ///< e.g. "user:password"
};

/// Returns: digest credentials, {"digest", "user:password"}.
/// Throws: std::invalid_argument if user is empty or contains ':'.
auth_info digest(std::string_view user, std::string_view password);

/// ZooKeeper's permissions: the bits of acl_entry::perms (zkCli's letters r, w, c, d, a).
namespace perm {
inline constexpr int read = 1;    ///< r: read the node's data, list its children
inline constexpr int write = 2;   ///< w: set the node's data
inline constexpr int create = 4;  ///< c: create children
inline constexpr int remove = 8;  ///< d: delete children (ZooKeeper's DELETE)
inline constexpr int admin = 16;  ///< a: read and set the node's ACL
inline constexpr int all = 31;    ///< every permission
}  // namespace perm

/// One entry of a node's ACL: the identity `scheme`:`id` may do what `perms` allows (zkCli writes
/// it scheme:id:perms, e.g. world:anyone:r or digest:alice:HASH:cdrwa).
struct acl_entry {
  int perms = 0;       ///< perm:: bits, 1..31
  std::string scheme;  ///< "world", "auth", "digest", "ip", ...
  /// "anyone" (world), ignored (auth: every identity the session authenticated with),
  /// "user:base64(sha1(user:password))" (digest, see digest_id), an address or a CIDR block (ip).
  std::string id;
  friend bool operator==(const acl_entry&, const acl_entry&) = default;
};

/// Returns: the id ZooKeeper's digest scheme gives `user` with `password`, the id of an acl_entry
/// for that user: "user:" + base64(sha1("user:password")).
/// Throws: std::invalid_argument if user is empty or contains ':' (as digest()).
std::string digest_id(std::string_view user, std::string_view password);

/// TLS to the servers (their secureClientPort). Needs zklock built on a C client with TLS
/// (`tools/setup --with-tls-sasl`, then a new build: see docs/security.md); has_tls() says. The
/// ZooKeeper C client 3.8 checks the server's certificate chain against `ca_file`, not its host
/// name, and always presents a certificate of its own (mutual TLS): all three files are needed.
struct tls_options {
  std::string ca_file;       ///< PEM: the certificates (CAs) that may sign a server's
  std::string cert_file;     ///< PEM: this client's certificate (chain)
  std::string key_file;      ///< PEM: its private key
  std::string key_password;  ///< the key file's passphrase, if it is encrypted (empty: none)
};

/// Returns: whether this zklock's C client can connect with TLS (session_options::tls).
bool has_tls() noexcept;

/// SASL authentication of the session (the servers' SASLAuthenticationProvider), through Cyrus
/// SASL's client (its mechanism plugins: Debian's libsasl2-modules for DIGEST-MD5,
/// libsasl2-modules-gssapi-mit for GSSAPI). Needs zklock built on a C client with SASL
/// (`tools/setup --with-tls-sasl`); has_sasl() says. The session's identity on the server is then
/// sasl:<user> (DIGEST-MD5) or the Kerberos principal (GSSAPI): ACLs may name it, and the
/// default ACL of the nodes zklock creates gives it every permission (as with `auth`).
struct sasl_options {
  std::string mechanism = "DIGEST-MD5";  ///< the SASL mechanism: "DIGEST-MD5", "GSSAPI", ...
  std::string service = "zookeeper";     ///< the servers' service name
  /// The server name the mechanism authenticates: for DIGEST-MD5 ZooKeeper's "zk-sasl-md5" (unless
  /// the servers set another); for GSSAPI the servers' host name, as in their principal.
  std::string host = "zk-sasl-md5";
  std::string user;      ///< who this session is (DIGEST-MD5: required; GSSAPI: from the ticket)
  std::string password;  ///< the user's secret (DIGEST-MD5: required; GSSAPI: unused, see the keytab)
  std::string realm;     ///< the realm, if the mechanism asks for one (empty: none)
};

/// Returns: whether this zklock's C client can authenticate with SASL (session_options::sasl).
bool has_sasl() noexcept;

/// How to open a session.
struct session_options {
  std::string connect;  ///< "host:port[,host:port...][/chroot]"
  std::chrono::milliseconds session_timeout{10'000};  ///< asked of the server (it may clamp it)
  std::chrono::milliseconds connect_timeout{15'000};  ///< the constructor gives up after this
  /// Credentials, sent in order before the constructor returns (and again by the C client on
  /// every reconnection); the session has every identity they give. Empty: none.
  std::vector<auth_info> auth;
  /// The ACL of every node zklock creates: lock nodes and their missing parents (containers),
  /// contender nodes, semaphore nodes, the records of tools. Nodes that exist already keep theirs.
  /// Empty (the default): with credentials (auth, or sasl), the creator's identities get every
  /// permission and everybody else READ ({perm::all, "auth", ""}, {perm::read, "world", "anyone"}); without,
  /// everybody gets every permission. A chosen ACL must let this session read, create and delete
  /// children (READ, CREATE and DELETE through world:anyone, auth, one of its digest ids, or a
  /// scheme zklock cannot judge, such as ip): else its contenders could queue but never leave.
  std::vector<acl_entry> acl;
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
  /// When a released hold had waited for its grant and lasted at least a round trip, and round
  /// trips are far (longer than look_ahead_round_trip, measured), this session's next acquire of
  /// the same lock queues only once that delete is answered: the lock is not going to be free for
  /// it sooner (others queue ahead and hold as long), and its create, listing and watches then stay
  /// off the connection and the server while the delete hands the lock over. (An acquire that may
  /// not wait, such as try_lock(), queues at once.)
  bool background_release = false;
  /// A semaphore's waiting contender watches as many leases ahead as may remain when it holds (L)
  /// while a round trip to the server is at most this long, and twice as many (2L) when it is
  /// longer: it then lists again while the leases just ahead are still held, so that their release
  /// grants it with no further request, one round trip per handoff instead of two, at the price of
  /// 2L watches (every release wakes 2L waiters, not L). Cheap round trips (loopback, one rack) make
  /// those wake-ups the cost that counts; dear ones (across racks or zones) make the round trips
  /// count. (Mutexes and read/write locks always look ahead: for them it costs one more watch and
  /// one more listing per handoff.) The round trip is the session's recent minimum read latency
  /// (until it has one: looked ahead). Zero: always look ahead; microseconds::max(): never.
  /// Applies to the predecessor watch strategy.
  std::chrono::microseconds look_ahead_round_trip{1000};
  /// TLS to the servers (the connect string names their secureClientPort); unset (the default):
  /// plain TCP.
  std::optional<tls_options> tls;
  /// SASL authentication, when the session connects; unset (the default): none. The ZooKeeper C
  /// client 3.8 cannot combine it with tls in one session.
  std::optional<sasl_options> sasl;
};

/// Receives one line of the ZooKeeper C client's log. Called on the client's threads, so it must
/// be thread-safe.
using log_handler = std::function<void(std::string_view line)>;

/// Effects: routes the C client's log of every session to h (an empty function = silent, the default).
/// Also sets the C client's process-wide log level, here and whenever a session opens a handle:
/// off without a handler (nothing is even formatted), INFO with one. Thread-safe.
void set_log_handler(log_handler h);

/// Receives every state change of a session, in order, on the session's own thread (never
/// ZooKeeper's); the final `closed` arrives on the thread that calls close(). A listener may add or
/// remove listeners, or close the session.
using state_listener = std::function<void(session_state)>;

/// What a second handle needs to attach to a session (e.g. a test that ends it on the server).
struct session_credentials {
  std::int64_t id = 0;   ///< the server's session id, as session::id()
  std::string password;  ///< the session's password: 16 bytes, not text
};

/// One ZooKeeper session. Thread-safe; lock objects keep a reference to it, so it must outlive them.
class session {
 public:
  /// Effects: connects to `connect` with default options. Returns: once the session is established.
  /// Throws: std::invalid_argument for a malformed connect string; std::system_error: zklock
  /// category for connect_timeout or chroot_missing; generic category if the C client refuses it.
  explicit session(std::string_view connect);

  /// Effects: connects as `options` say, then sends each of `options.auth`. Returns: once the
  /// session is established and authenticated. Throws: as above; std::invalid_argument for
  /// non-positive timeouts, a session_timeout over 24 h, a negative loss_tolerance, auth with an
  /// empty scheme, a NUL character or over 64 KiB in all, or an acl entry with an empty scheme,
  /// perms outside 1..31, a NUL character, world other than "anyone", digest not "user:hash",
  /// auth without credentials, over 64 KiB in all, or an acl that would not let this session read,
  /// create and delete children (see session_options::acl), or tls with a file name empty, with a
  /// comma or a NUL character, or not readable; not_supported for tls where has_tls() is false;
  /// auth_failed (or the server's code) if credentials are refused; ssl_connection_error if the TLS
  /// handshake failed with every server of the connect string (OpenSSL's reason in what());
  /// std::invalid_argument for sasl with an empty mechanism, service or host, DIGEST-MD5 without
  /// a user or password, or a NUL character; not_supported for sasl where has_sasl() is false, or
  /// for tls and sasl together; auth_failed if the servers refuse the SASL authentication.
  explicit session(session_options options);

  /// Effects: close(). Never throws.
  ~session();

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// Returns: the current state.
  session_state state() const noexcept;

  /// Returns: the server's id of the current session (changes when a new handle replaces an expired
  /// one; 0 while a new handle is connecting).
  std::int64_t id() const noexcept;

  /// Returns: how many handles this object has opened (1 until an expired session is re-established).
  std::uint64_t generation() const noexcept;

  /// Returns: the session timeout the server granted (to the current handle).
  std::chrono::milliseconds negotiated_timeout() const noexcept;

  /// Effects: calls `l` on every later state change (see state_listener); may be called from a
  /// listener. Returns: an id for remove_state_listener.
  std::uint64_t add_state_listener(state_listener l);

  /// Effects: stops calling the listener `id` (unknown ids are ignored); waits if a listener is
  /// running on another thread right now. May be called from a listener. Never throws.
  void remove_state_listener(std::uint64_t id) noexcept;

  /// Effects: blocks until the state is `s` or `timeout` passes (zero: looks once).
  /// Returns: whether the state is `s`. Throws: std::invalid_argument for a negative timeout.
  bool wait_for(session_state s, std::chrono::milliseconds timeout) const;

  /// Effects: one round trip: returns once the server has served every request this session sent
  /// before the call (a session's requests are served in order), including deletes sent by
  /// background_release. Waits through a disconnection for up to connect_timeout.
  /// Throws: std::system_error: session_expired / session_closed, operation_timeout if still
  /// disconnected after connect_timeout, or the server's code if it refuses the request.
  void flush();

  /// Effects: after expiry, opens a new handle now and waits until it is established (also done by
  /// itself when reestablish_after_expiry is set); does nothing unless the state is `expired`.
  /// Throws: std::system_error: session_closed after close(); as the constructor (connect_timeout,
  /// auth_failed, chroot_missing) if the new session cannot be established; the state is then `expired`.
  void reestablish();

  /// Effects: after the session generation `generation` (see generation()) ended, expired or given
  /// up after a long disconnection, blocks until a later generation is connected: what a waiting
  /// acquire does before it queues again. Use it to retry your own reads on the next session.
  /// Returns: true once a later generation is connected (at once if one already is); false if
  /// `deadline` passed first.
  /// Throws: std::system_error: session_closed after close(); session_expired if no next session
  /// will come (reestablish_after_expiry is off, or re-establishment was refused for good).
  bool await_next_generation(std::uint64_t generation, std::chrono::steady_clock::time_point deadline);

  /// Effects: closes the handle (if connected, the server deletes the session's nodes at once; else
  /// they go when the session times out). Blocked lock calls wake and throw errc::session_closed,
  /// as do later operations; lost_token()s fire; listeners get `closed` on this thread, after any
  /// earlier change not delivered yet (unless close() is called from a listener). Idempotent;
  /// never throws.
  void close() noexcept;

  /// Returns: the id and password of the current session, for a second handle on the same session
  /// (a test or tool that expires it on the server). Throws: std::system_error: session_closed
  /// after close(); session_expired while there is no live session (expired, or a new one still
  /// connecting).
  session_credentials credentials() const;

  /// Returns: the options this session was opened with.
  const session_options& options() const noexcept;

  /// Returns: the address of the server the connection is up with now, as "ip:port" ("[ip]:port"
  /// for IPv6): which server of the connect string was reached (e.g. for a log line). "" while no
  /// connection is up (connecting, suspended, expired, closed). A snapshot: the client may move to
  /// another server at any time.
  std::string server_address() const;

  // ---- data: a small API for the nodes beside your locks -------------------------------------------
  // Paths are absolute (the chroot of the connect string, if any, is prepended); created nodes get
  // the session's ACL (session_options::acl). Reads wait through a disconnection for up to
  // connect_timeout, sending again. A write is sent once, when connected (after up to
  // connect_timeout): if the connection drops before its reply, whether it was applied is unknown,
  // and it throws errc::connection_loss (read to find out). Every call blocks for one round trip:
  // never call one on the session's completion thread (a completion given no executor).
  // Throws, besides what each says: std::invalid_argument for a malformed path (relative, empty
  // component, trailing '/', control character, the /zookeeper subtree; "/" for reads only);
  // std::system_error: session_closed, session_expired, operation_timeout (no connection within
  // connect_timeout), connection_loss (a write's outcome unknown), no_auth (the ACL refuses), or the
  // server's other refusals, each naming the path.

  /// Effects: creates `path` holding `data`. Returns: the path created (for a sequential mode, with
  /// its sequence number). Throws: also node_exists, no_node (its parent is missing),
  /// no_children_for_ephemerals (its parent is ephemeral).
  std::string create(std::string_view path, std::string_view data = {}, create_mode mode = create_mode::persistent);

  /// Returns: `path`'s data and stat; nullopt if it does not exist.
  std::optional<node_data> get(std::string_view path);

  /// Returns: `path`'s stat; nullopt if it does not exist.
  std::optional<node_stat> exists(std::string_view path);

  /// Returns: the names of `path`'s children, sorted. Throws: also no_node if it does not exist.
  std::vector<std::string> children(std::string_view path);

  /// Effects: sets `path`'s data to `data` if its version is `version` (any_version: whatever it is).
  /// Returns: its stat after the change. Throws: also no_node, bad_version.
  node_stat set(std::string_view path, std::string_view data, std::int32_t version = any_version);

  /// Effects: deletes `path` if its version is `version` (any_version: whatever it is).
  /// Returns: true if deleted; false if it did not exist. Throws: also bad_version, not_empty.
  bool remove(std::string_view path, std::int32_t version = any_version);

  /// Effects: applies `ops` in one transaction: all or nothing. An empty list sends nothing.
  /// Returns: one result per operation, in order. Throws: std::invalid_argument for an op with a
  /// malformed path or a container create; std::system_error with the code of the first operation
  /// the server refused (naming it: "operation 2 of 3 (set /app/x)"), nothing applied.
  std::vector<op_result> commit(const std::vector<op>& ops);

  /// Effects: as commit(ops), in a transaction that commits only if `held`'s node still exists (a
  /// check of it goes first in the same transaction): a holder that lost its hold (expired, paused
  /// past its session, partitioned, its node deleted) commits nothing, whichever session sends it.
  /// Returns: as commit (the check's result is not among them).
  /// Throws: std::invalid_argument for an empty fence or as commit; std::system_error: lock_lost if
  /// the hold's node is gone (nothing applied); else as commit.
  std::vector<op_result> commit_if_held(const fence& held, const std::vector<op>& ops);

 private:
  friend struct detail::session_access;
  std::unique_ptr<detail::session_impl> impl_;
};

}  // namespace zklock
