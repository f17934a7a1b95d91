// SPDX-License-Identifier: Apache-2.0
// zklock:nodes — single nodes outside the contender queue, for zklock's own tools: the plain reads
// and ephemeral creates that inspection and hold records use (zklock:inspect). An implementation
// partition like zklock:session_impl (private file set: neither installed nor visible to importers);
// defined in modules/session/nodes.cpp.
module;
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
module zklock:nodes;
import :session;

namespace zklock::detail {

/// A node's data and the stat fields that tools show (the `zklock ls` command).
struct node_info {
  std::string data;                  ///< up to 4 KiB of the node's data
  std::int64_t czxid = 0;            ///< creation zxid (a contender's fencing token)
  std::int64_t ephemeral_owner = 0;  ///< session id of an ephemeral node's owner, else 0
};

/// Returns: `path`'s data and stat, or nullopt if the node does not exist. Waits through a
/// connection loss for up to the session's connect_timeout.
/// Throws: std::system_error (operation_timeout after that wait, session or server failures).
std::optional<node_info> read_node(session& s, const std::string& path);

/// Effects: creates the ephemeral node `path` holding `data` (the ACL of contender nodes). Waits
/// through a connection loss for up to the session's connect_timeout. Returns: false if its
/// parent does not exist or a node of another session is there.
/// Throws: std::system_error (operation_timeout after that wait, session or server failures).
bool create_ephemeral(session& s, const std::string& path, std::string_view data);

}  // namespace zklock::detail
