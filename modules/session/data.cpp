// SPDX-License-Identifier: Apache-2.0
// The session's data API (zklock:session's create, get, exists, children, set, remove, commit and
// commit_if_held): plain requests on the session's handle, on the caller's thread. Reads are sent
// again after a connection loss (as read_node); writes are sent once, since a write whose reply
// was lost may have been applied: the caller is told (errc::connection_loss) and decides.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;

namespace zklock {

namespace {

using detail::call_name;
using detail::clock;
using detail::reply;
using detail::session_impl;

/// Effects: checks `path` for a read ("/" allowed), or for a write. Throws: std::invalid_argument.
void check_path(std::string_view path, std::string_view what, bool read) {
  if (read && path == "/") return;
  detail::validate_path(path, what);
}

node_stat stat_of(const struct Stat& st) {
  using std::chrono::milliseconds;
  node_stat n;
  n.czxid = st.czxid;
  n.mzxid = st.mzxid;
  n.pzxid = st.pzxid;
  n.ctime = std::chrono::system_clock::time_point{milliseconds{st.ctime}};
  n.mtime = std::chrono::system_clock::time_point{milliseconds{st.mtime}};
  n.version = st.version;
  n.cversion = st.cversion;
  n.aversion = st.aversion;
  n.ephemeral_owner = st.ephemeralOwner;
  n.data_length = st.dataLength;
  n.num_children = st.numChildren;
  return n;
}

int flags_of(create_mode m) {
  switch (m) {
    case create_mode::persistent: return ZOO_PERSISTENT;
    case create_mode::ephemeral: return ZOO_EPHEMERAL;
    case create_mode::persistent_sequential: return ZOO_PERSISTENT_SEQUENTIAL;
    case create_mode::ephemeral_sequential: return ZOO_EPHEMERAL_SEQUENTIAL;
    case create_mode::container: return ZOO_CONTAINER;
  }
  throw std::invalid_argument("zklock: unknown create_mode");
}

int length_of(std::string_view data, std::string_view path) {
  if (data.size() > 1024 * 1024)  // the server's default jute.maxbuffer refuses more
    throw std::invalid_argument("zklock: data for " + std::string{path} + " is over 1 MiB");
  return static_cast<int>(data.size());
}

/// Returns: a read's reply code (answered), sent again after a connection loss until
/// connect_timeout. Throws: operation_timeout at the deadline; as session_impl::call.
template <class Send>
int read_call(session_impl& s, const call_name& what, reply* out, Send&& send) {
  const auto rc = s.call(clock::now() + s.opts.connect_timeout, s.states.live_generation(what), what, out, send);
  if (!rc) detail::throw_error(errc::operation_timeout, what.text());
  return *rc;
}

/// Returns: a write's reply code (answered), sent once the session is connected (waiting up to
/// connect_timeout for it). `send` returns ZCONNECTIONLOSS without sending if it finds the handle
/// not connected: it is tried again. Throws: operation_timeout at the deadline; connection_loss if
/// the reply was lost (the outcome is unknown); as session_impl::request.
template <class Send>
int write_call(session_impl& s, const call_name& what, reply* out, Send&& send) {
  const auto g = s.states.live_generation(what);
  const auto deadline = clock::now() + s.opts.connect_timeout;
  for (;;) {
    if (!s.states.wait_connected(deadline, g, what)) detail::throw_error(errc::operation_timeout, what.text());
    bool sent = false;
    const int rc = s.request(g, what, out, [&](zhandle_t* zh, const void* d) {
      if (zoo_state(zh) != ZOO_CONNECTED_STATE) return static_cast<int>(ZCONNECTIONLOSS);
      const int r = send(zh, d);
      sent = r == ZOK;
      return r;
    });
    if (detail::answered(rc, what)) return rc;
    if (sent)
      detail::throw_error(errc::connection_loss,
                          what.text() + ": the connection was lost before the reply; it may or may not have been applied");
    if (clock::now() >= deadline) detail::throw_error(errc::operation_timeout, what.text());
  }
}

/// What the C client writes into while a transaction is in flight (kept by its reply_state).
struct transaction {
  std::vector<zoo_op_t> ops;
  std::vector<zoo_op_result_t> results;
  std::vector<struct Stat> stats;
  std::vector<std::vector<char>> created;
};

const char* kind_name(op::kind k) {
  switch (k) {
    case op::kind::create: return "create";
    case op::kind::remove: return "remove";
    case op::kind::set: return "set";
    case op::kind::check: return "check";
  }
  return "?";
}

/// Effects: commits `all` (the first `skip` of them zklock's own, not reported) in one transaction.
/// Returns: the results of the others. Throws: see session::commit; lock_lost if op 0 is a guard
/// (`skip` == 1) that the server refused with ZNONODE.
std::vector<op_result> run_transaction(session_impl& s, const std::vector<op>& all, std::size_t skip) {
  const std::size_t n = all.size();
  for (const op& o : all) {
    detail::validate_path(o.path, "zklock: a transaction's operation");
    if (o.type == op::kind::create && o.mode == create_mode::container)
      throw std::invalid_argument("zklock: a transaction cannot create the container " + o.path +
                                  " (Debian's C client 3.8.0 misreads the reply): create it with session::create");
    if (o.type == op::kind::create || o.type == op::kind::set) (void)length_of(o.data, o.path);
  }
  auto t = std::make_shared<transaction>();
  t->ops.resize(n);
  t->results.resize(n);
  t->stats.resize(n);
  t->created.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const op& o = all[i];
    switch (o.type) {
      case op::kind::create:
        t->created[i].resize(o.path.size() + 16);  // + a sequence's 10 digits
        zoo_create_op_init(&t->ops[i], o.path.c_str(), o.data.data(), static_cast<int>(o.data.size()),
                           detail::contender_acl(s), flags_of(o.mode), t->created[i].data(),
                           static_cast<int>(t->created[i].size()));
        break;
      case op::kind::remove: zoo_delete_op_init(&t->ops[i], o.path.c_str(), o.version); break;
      case op::kind::set:
        zoo_set_op_init(&t->ops[i], o.path.c_str(), o.data.data(), static_cast<int>(o.data.size()), o.version,
                        &t->stats[i]);
        break;
      case op::kind::check: zoo_check_op_init(&t->ops[i], o.path.c_str(), o.version); break;
    }
  }
  const std::string first = all.empty() ? std::string{} : all[skip < n ? skip : 0].path;
  const call_name what{"zklock: committing a transaction on ", first};
  // Sent only while connected (write_call): Debian's C client 3.8.0 frees uninitialised request
  // paths in zoo_amulti when a request cannot be made (an invalid path, which validate_path rules
  // out, or a session that is over); see acl_probe in contenders.cpp.
  const int rc = write_call(s, what, nullptr, [&](zhandle_t* zh, const void* d) {
    static_cast<detail::reply_state*>(const_cast<void*>(d))->keep = t;
    return zoo_amulti(zh, static_cast<int>(n), t->ops.data(), t->results.data(), &detail::reply_to::on_void, d);
  });
  if (rc != ZOK) {
    // The first refused operation says why; the ones after it say ZRUNTIMEINCONSISTENCY.
    std::size_t bad = 0;
    while (bad < n && (t->results[bad].err == ZOK || t->results[bad].err == ZRUNTIMEINCONSISTENCY)) ++bad;
    if (bad == n) detail::fail(rc, what);
    const int err = t->results[bad].err;
    const op& o = all[bad];
    if (bad < skip) {
      if (err == ZNONODE)
        detail::throw_error(errc::lock_lost, "zklock: guarded transaction: the hold's node " + o.path +
                                                 " is gone (the hold was released or lost): nothing was written");
      detail::fail(err, call_name{"zklock: guarded transaction: checking the hold's node ", o.path, "READ", o.path});
    }
    const std::string text = "zklock: transaction refused at operation " + std::to_string(bad - skip + 1) + " of " +
                             std::to_string(n - skip) + " (" + kind_name(o.type) + " " + o.path +
                             "): nothing was written";
    const std::string_view parent = detail::parent_of(o.path);
    const bool on_parent = o.type == op::kind::create || o.type == op::kind::remove;
    detail::fail(err, call_name{text, "", on_parent ? (o.type == op::kind::create ? "CREATE" : "DELETE")
                                                    : (o.type == op::kind::set ? "WRITE" : "READ"),
                                on_parent ? parent : std::string_view{o.path}});
  }
  std::vector<op_result> out;
  out.reserve(n - skip);
  for (std::size_t i = skip; i < n; ++i) {
    op_result r;
    if (all[i].type == op::kind::create)
      r.path = t->results[i].value ? std::string{t->results[i].value} : all[i].path;
    else
      r.path = all[i].path;
    if (all[i].type == op::kind::set) r.stat = stat_of(t->stats[i]);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

std::string session::create(std::string_view path_in, std::string_view data, create_mode mode) {
  const std::string path{path_in};
  check_path(path, "zklock::session::create", false);
  const int len = length_of(data, path);
  const int flags = flags_of(mode);
  session_impl& s = *impl_;
  const call_name what{"zklock: creating ", path, "CREATE", detail::parent_of(path)};
  reply r;
  const int rc = write_call(s, what, &r, [&](zhandle_t* zh, const void* d) {
    return zoo_acreate(zh, path.c_str(), data.data(), len, detail::contender_acl(s), flags,
                       &detail::reply_to::on_string, d);
  });
  if (rc != ZOK) detail::fail(rc, what);
  return r.value.empty() ? path : r.value;
}

std::optional<node_data> session::get(std::string_view path_in) {
  const std::string path{path_in};
  check_path(path, "zklock::session::get", true);
  session_impl& s = *impl_;
  const call_name what{"zklock: reading ", path, "READ", path};
  reply r;
  const int rc = read_call(s, what, &r, [&](zhandle_t* zh, const void* d) {
    return zoo_aget(zh, path.c_str(), 0, &detail::reply_to::on_data, d);
  });
  if (rc == ZNONODE) return std::nullopt;
  if (rc != ZOK) detail::fail(rc, what);
  return node_data{std::move(r.value), stat_of(r.stat)};
}

std::optional<node_stat> session::exists(std::string_view path_in) {
  const std::string path{path_in};
  check_path(path, "zklock::session::exists", true);
  session_impl& s = *impl_;
  const call_name what{"zklock: looking for ", path};
  reply r;
  const int rc = read_call(s, what, &r, [&](zhandle_t* zh, const void* d) {
    return zoo_aexists(zh, path.c_str(), 0, &detail::reply_to::on_stat, d);
  });
  if (rc == ZNONODE) return std::nullopt;
  if (rc != ZOK) detail::fail(rc, what);
  return stat_of(r.stat);
}

std::vector<std::string> session::children(std::string_view path_in) {
  const std::string path{path_in};
  check_path(path, "zklock::session::children", true);
  session_impl& s = *impl_;
  const call_name what{"zklock: listing ", path, "READ", path};
  reply r;
  const int rc = read_call(s, what, &r, [&](zhandle_t* zh, const void* d) {
    return zoo_aget_children(zh, path.c_str(), 0, &detail::reply_to::on_names, d);
  });
  if (rc != ZOK) detail::fail(rc, what);
  auto names = r.names.strings();
  std::sort(names.begin(), names.end());
  return names;
}

node_stat session::set(std::string_view path_in, std::string_view data, std::int32_t version) {
  const std::string path{path_in};
  check_path(path, "zklock::session::set", false);
  const int len = length_of(data, path);
  session_impl& s = *impl_;
  const call_name what{"zklock: setting ", path, "WRITE", path};
  reply r;
  const int rc = write_call(s, what, &r, [&](zhandle_t* zh, const void* d) {
    return zoo_aset(zh, path.c_str(), data.data(), len, version, &detail::reply_to::on_stat, d);
  });
  if (rc != ZOK) detail::fail(rc, what);
  return stat_of(r.stat);
}

bool session::remove(std::string_view path_in, std::int32_t version) {
  const std::string path{path_in};
  check_path(path, "zklock::session::remove", false);
  session_impl& s = *impl_;
  const call_name what{"zklock: deleting ", path, "DELETE", detail::parent_of(path)};
  const int rc = write_call(s, what, nullptr, [&](zhandle_t* zh, const void* d) {
    return zoo_adelete(zh, path.c_str(), version, &detail::reply_to::on_void, d);
  });
  if (rc == ZNONODE) return false;
  if (rc != ZOK) detail::fail(rc, what);
  return true;
}

std::vector<op_result> session::commit(const std::vector<op>& ops) {
  if (ops.empty()) return {};
  return run_transaction(*impl_, ops, 0);
}

std::vector<op_result> session::commit_if_held(const fence& held, const std::vector<op>& ops) {
  if (held.node.empty()) throw std::invalid_argument("zklock::session::commit_if_held: an empty fence (no hold's node)");
  detail::validate_path(held.node, "zklock::session::commit_if_held: the fence's node");
  std::vector<op> all;
  all.reserve(ops.size() + 1);
  all.push_back(op::check(held.node));
  all.insert(all.end(), ops.begin(), ops.end());
  return run_transaction(*impl_, all, 1);
}

}  // namespace zklock
