// SPDX-License-Identifier: Apache-2.0
// zklock:revoke — asking a holder to let go: revoke() asks (Curator's revocation marker in the
// holder's node), waits a grace period for the hold to end, then deletes the node; each hold's
// on_revoke policy says what the holder does on its own (revocation_token() of every lock kind).
// Curator's Revoker asks zklock holders the same way, and revoke() asks revocable Curator locks.
module;
#include <chrono>
#include <string>
#include <string_view>
#include <vector>
export module zklock:revoke;
import :session;

export namespace zklock {

/// What a holder does on its own when asked to let go (by revoke(), or Curator's Revoker). Set per
/// lock object with set_on_revoke(); a hold keeps the policy it was granted with.
enum class on_revoke {
  notify,   ///< the default: revocation_token() fires; the holder decides (a revoker forces the
            ///< release after its grace period, and then lost_token() fires too)
  ignore,   ///< nothing fires: the request goes unheard, until a revoker forces the release
  release   ///< zklock ends the hold at once: its node is deleted, revocation_token() and
            ///< lost_token() fire (the owner still unlocks it, which then deletes nothing)
};

/// How one revoked hold ended.
enum class revoke_outcome {
  released,    ///< its holder let go within the grace period
  forced,      ///< it was still held after the grace period: the revoker deleted its node
  gone,        ///< it had ended before it could be asked (no such node)
  still_held   ///< still held after the grace period, and revoke_options::force was false
};

/// Returns: the outcome's name: "released", "forced", "gone" or "still held".
const char* to_string(revoke_outcome o) noexcept;

/// What revoke() does.
struct revoke_options {
  /// The contender node to revoke (its name under the lock node); empty: every holder of the lock
  /// (its one holder, every reader holding the read side, every lease of a semaphore).
  std::string node{};
  /// How long holders have to let go once asked; zero: no wait (ask, then delete at once).
  std::chrono::milliseconds grace{10'000};
  /// Delete the nodes still held after the grace period (false: report them still_held).
  bool force = true;
};

/// One hold that revoke() asked to let go, and how it ended.
struct revoked {
  std::string node;                                 ///< its node's name under the lock node
  revoke_outcome outcome = revoke_outcome::gone;    ///< what happened
};

/// Effects: asks the holders of the lock (or semaphore) node `path` that `o` names to let go, by
/// writing Curator's revocation marker into each one's node; waits (on a children watch, no
/// polling) up to o.grace for their nodes to go; then deletes those still there if o.force. A
/// forced holder's lost_token() fires (it is told either way). Leaves no watch behind.
/// Returns: one entry per hold asked, in queue order (empty if nobody holds).
/// Throws: std::invalid_argument for a bad path, a negative grace or a node name with '/';
/// std::system_error: the server's refusal (no_auth: the node's ACL refuses our WRITE or DELETE),
/// session failures, operation_timeout if the connection stays down for connect_timeout.
std::vector<revoked> revoke(session& s, std::string_view path, const revoke_options& o = {});

}  // namespace zklock
