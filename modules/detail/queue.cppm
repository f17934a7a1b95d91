// SPDX-License-Identifier: Apache-2.0
// zklock.detail:queue — contender nodes by name: which side of a lock a node stands for, its
// sequence number, and the queue order of a listing (serial-number arithmetic, right across the
// 32-bit wrap). Pure functions (defined in modules/detail/detail.cpp), unit-tested without a server.
module;
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
export module zklock.detail:queue;

export namespace zklock::detail {

/// Which side of a lock a contender node stands for (from its name).
enum class contender_kind : std::uint8_t { lock, read, write, lease };

/// The marker that precedes the sequence number in a contender's name (Curator's spellings for
/// lock/read/write).
std::string_view marker(contender_kind k) noexcept;

/// One contender node, as listed.
struct contender {
  std::string_view name;                       ///< the child's name under the lock node (views the listing's)
  std::int32_t seq = 0;                        ///< its sequence number (the last 10 digits)
  contender_kind kind = contender_kind::lock;  ///< which side it stands for
};

/// Returns: the contender a child name stands for, or nullopt if the name is not a contender
/// (no marker, or not followed by a 10-character ZooKeeper sequence). Its name views `name`.
std::optional<contender> parse_contender(std::string_view name);

/// Returns: whether sequence a was issued before b (serial-number arithmetic: right across the
/// signed 32-bit wrap).
constexpr bool seq_before(std::int32_t a, std::int32_t b) noexcept {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) - static_cast<std::uint32_t>(b)) < 0;
}

/// Returns: the children that are contenders of one of `kinds` (bit i = contender_kind i), in
/// queue order. `present`, if given, receives the kinds of every contender among the children
/// (wanted or not), so that a caller sees nodes that do not belong under its path. The contenders'
/// names view `children`'s: keep it while they are used.
std::vector<contender> sorted_contenders(const std::vector<std::string>& children, unsigned kinds,
                                         unsigned* present = nullptr);

/// Returns: a fresh random id, formatted like a Java UUID (8-4-4-4-12 lowercase hex).
std::string random_uuid();

/// Returns: the node name prefix of one acquire attempt: "_c_<uuid>-<marker>".
std::string contender_prefix(contender_kind k);

}  // namespace zklock::detail
