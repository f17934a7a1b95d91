// SPDX-License-Identifier: Apache-2.0
// The "zklock" error category: messages for every ZooKeeper return code and zklock's own errors.
module;
#include <string>
#include <system_error>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;

namespace zklock {
namespace {

// The enum must mirror the C client's numbers exactly.
static_assert(static_cast<int>(errc::connection_loss) == ZCONNECTIONLOSS);
static_assert(static_cast<int>(errc::operation_timeout) == ZOPERATIONTIMEOUT);
static_assert(static_cast<int>(errc::no_node) == ZNONODE);
static_assert(static_cast<int>(errc::session_expired) == ZSESSIONEXPIRED);
static_assert(static_cast<int>(errc::throttled_op) == ZTHROTTLEDOP);
static_assert(static_cast<int>(errc::session_closed_requires_sasl_auth) == ZSESSIONCLOSEDREQUIRESASLAUTH);

// Returns: the message of a ZooKeeper return code, or nullptr for a number the C client lacks.
const char* zookeeper_message(int rc) noexcept {
  switch (rc) {
    case ZOK: return "ok";
    case ZSYSTEMERROR: return "system error";
    case ZRUNTIMEINCONSISTENCY: return "runtime inconsistency";
    case ZDATAINCONSISTENCY: return "data inconsistency";
    case ZCONNECTIONLOSS: return "connection to the server lost";
    case ZMARSHALLINGERROR: return "error while marshalling or unmarshalling data";
    case ZUNIMPLEMENTED: return "operation not implemented";
    case ZOPERATIONTIMEOUT: return "operation timed out";
    case ZBADARGUMENTS: return "bad arguments";
    case ZINVALIDSTATE: return "invalid handle state";
    case ZNEWCONFIGNOQUORUM: return "no quorum of the new configuration is connected";
    case ZRECONFIGINPROGRESS: return "another reconfiguration is in progress";
    case ZSSLCONNECTIONERROR: return "TLS connection error";
    case ZAPIERROR: return "API error";
    case ZNONODE: return "node does not exist";
    case ZNOAUTH: return "not authorised";
    case ZBADVERSION: return "version conflict";
    case ZNOCHILDRENFOREPHEMERALS: return "ephemeral nodes may not have children";
    case ZNODEEXISTS: return "node already exists";
    case ZNOTEMPTY: return "node has children";
    case ZSESSIONEXPIRED: return "session expired";
    case ZINVALIDCALLBACK: return "invalid callback";
    case ZINVALIDACL: return "invalid ACL";
    case ZAUTHFAILED: return "authentication failed";
    case ZCLOSING: return "the client is closing";
    case ZNOTHING: return "no server responses to process";
    case ZSESSIONMOVED: return "session moved to another server";
    case ZNOTREADONLY: return "state-changing request sent to a read-only server";
    case ZEPHEMERALONLOCALSESSION: return "ephemeral node on a local session";
    case ZNOWATCHER: return "no such watcher";
    case ZRECONFIGDISABLED: return "reconfiguration is disabled";
    case ZSESSIONCLOSEDREQUIRESASLAUTH: return "session closed: the server requires SASL authentication";
    case ZTHROTTLEDOP: return "operation throttled by the server; retry";
    default: return nullptr;
  }
}

// The "zklock" category: one object, returned by error_category().
class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "zklock"; }

  // Returns: zklock's own message, the ZooKeeper one with its number, or "unknown zklock error N".
  std::string message(int v) const override {
    switch (static_cast<errc>(v)) {
      case errc::connect_timeout: return "session not established within connect_timeout";
      case errc::chroot_missing: return "the chroot node of the connect string does not exist";
      case errc::session_closed: return "the session is closed";
      case errc::lock_timeout: return "timed out waiting for the lock";
      case errc::lock_lost: return "the hold was lost";
      case errc::not_held: return "the lock is not held by the caller";
      case errc::lease_count_mismatch: return "semaphore opened with a lease count other than the stored one";
      case errc::cancelled: return "asynchronous acquire cancelled by its stop token";
      case errc::contender_deleted: return "our waiting contender node was deleted by someone else";
      case errc::path_kind_mismatch: return "the path is another kind's (a lock's path used as a semaphore, or the reverse)";
      case errc::not_supported: return "not supported by the ZooKeeper C client zklock was built on (see tools/setup --with-tls-sasl)";
      default: break;
    }
    if (const char* m = zookeeper_message(v)) return std::string{m} + " (ZooKeeper " + std::to_string(v) + ")";
    return "unknown zklock error " + std::to_string(v);
  }

  // Returns: the portable std::errc condition a code stands for (so that, e.g., lock_timeout
  // compares equal to std::errc::timed_out), or {v, *this} if there is none. Keep the list in
  // errors.cppm's comment on error_category() in step.
  std::error_condition default_error_condition(int v) const noexcept override {
    switch (static_cast<errc>(v)) {
      case errc::operation_timeout:
      case errc::connect_timeout:
      case errc::lock_timeout: return std::errc::timed_out;
      case errc::connection_loss: return std::errc::not_connected;
      case errc::bad_arguments: return std::errc::invalid_argument;
      case errc::no_auth:
      case errc::auth_failed: return std::errc::permission_denied;
      case errc::no_node: return std::errc::no_such_file_or_directory;
      case errc::node_exists: return std::errc::file_exists;
      case errc::cancelled: return std::errc::operation_canceled;
      case errc::not_supported: return std::errc::not_supported;
      default: return {v, *this};
    }
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category c;
  return c;
}

void detail::throw_error(errc e, const std::string& what) { throw std::system_error(make_error_code(e), what); }

}  // namespace zklock
