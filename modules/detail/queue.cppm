// SPDX-License-Identifier: Apache-2.0
// zklock.detail:queue — contender nodes by name: which side of a lock a node stands for, its
// sequence number, and the queue order of a listing (serial-number arithmetic, right across the
// 32-bit wrap). Pure functions (defined in modules/detail/detail.cpp), unit-tested without a server.
module;
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
  std::uint32_t weight = 1;                    ///< permits it stands for (a lease of n permits: n; else 1)
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

/// A node's path, immutable and shared by count: one allocation (the count, the length, the
/// characters and a NUL) however many hold it. What a session's watch registry and the watch slots
/// of its waiters keep of a watched node's path: one copy per node, not one per watcher. Copies
/// share it (thread-safe, as std::shared_ptr's count); compares as its text.
class shared_path {
 public:
  /// An empty path.
  shared_path() noexcept = default;
  /// Effects: a copy of `text`. Throws: std::bad_alloc.
  explicit shared_path(std::string_view text) : rep_{make(text)} {}
  shared_path(const shared_path& o) noexcept : rep_{o.rep_} {
    if (rep_) rep_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  shared_path(shared_path&& o) noexcept : rep_{std::exchange(o.rep_, nullptr)} {}
  shared_path& operator=(shared_path o) noexcept {
    std::swap(rep_, o.rep_);
    return *this;
  }
  ~shared_path() {
    if (rep_ && rep_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      rep_->~rep();
      ::operator delete(rep_);
    }
  }
  /// Returns: the text.
  std::string_view view() const noexcept { return rep_ ? std::string_view{rep_->text(), rep_->size} : std::string_view{}; }
  operator std::string_view() const noexcept { return view(); }
  /// Returns: the text, NUL-terminated.
  const char* c_str() const noexcept { return rep_ ? rep_->text() : ""; }
  /// Returns: whether `o` holds the same allocation (not only the same text).
  bool shares(const shared_path& o) const noexcept { return rep_ == o.rep_; }
  friend bool operator==(const shared_path& a, const shared_path& b) noexcept { return a.view() == b.view(); }
  friend bool operator==(const shared_path& a, std::string_view b) noexcept { return a.view() == b; }

 private:
  struct rep {
    std::atomic<std::uint32_t> refs{1};
    std::uint32_t size = 0;
    char* text() noexcept { return reinterpret_cast<char*>(this + 1); }
  };
  static rep* make(std::string_view text) {
    auto* r = ::new (::operator new(sizeof(rep) + text.size() + 1)) rep{};
    r->size = static_cast<std::uint32_t>(text.size());
    if (!text.empty()) std::memcpy(r->text(), text.data(), text.size());
    r->text()[text.size()] = '\0';
    return r;
  }
  rep* rep_ = nullptr;
};

/// A listing's child names, all in one buffer: two allocations for a listing, not one per name (a
/// long queue's listing is read on every wake-up of a waiter behind it). A name views the buffer,
/// which a move keeps where it is. Iterates as std::string_view.
class name_list {
 public:
  /// Effects: no names.
  name_list() = default;
  /// Effects: `names`, in order. Throws: std::bad_alloc.
  name_list(std::initializer_list<std::string_view> names) {
    for (const auto n : names) push_back(n);
  }
  /// Effects: makes room for `count` names of `bytes` characters in all. Throws: std::bad_alloc.
  void reserve(std::size_t count, std::size_t bytes) {
    ends_.reserve(count);
    text_.reserve(bytes);
  }
  /// Effects: appends `name` (a name viewed before may move if the buffer grows past what reserve
  /// made room for). Throws: std::bad_alloc.
  void push_back(std::string_view name) {
    text_.insert(text_.end(), name.begin(), name.end());
    ends_.push_back(text_.size());
  }
  /// Returns: how many names it holds.
  std::size_t size() const noexcept { return ends_.size(); }
  /// Returns: whether it holds none.
  bool empty() const noexcept { return ends_.empty(); }
  /// Returns: the name at `i` (< size()).
  std::string_view operator[](std::size_t i) const noexcept {
    const std::size_t from = i == 0 ? 0 : ends_[i - 1];
    return {text_.data() + from, ends_[i] - from};
  }
  /// Returns: the names as strings. Throws: std::bad_alloc.
  std::vector<std::string> strings() const {
    std::vector<std::string> out;
    out.reserve(size());
    for (std::size_t i = 0; i < size(); ++i) out.emplace_back((*this)[i]);
    return out;
  }

  /// A forward iterator over the names (as std::string_view).
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;
    iterator() = default;
    iterator(const name_list* l, std::size_t i) noexcept : l_(l), i_(i) {}
    std::string_view operator*() const noexcept { return (*l_)[i_]; }
    iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator was = *this;
      ++i_;
      return was;
    }
    bool operator==(const iterator& o) const noexcept { return i_ == o.i_; }

   private:
    const name_list* l_ = nullptr;
    std::size_t i_ = 0;
  };
  iterator begin() const noexcept { return {this, 0}; }
  iterator end() const noexcept { return {this, size()}; }

 private:
  std::vector<char> text_;          // the names, back to back
  std::vector<std::size_t> ends_;   // where each ends in text_
};

/// Returns: the children that are contenders of one of `kinds` (bit i = contender_kind i), in
/// listing order (unsorted: for a caller that needs only where one of them stands, rules' locate()).
/// `present`, if given, receives the kinds of every contender among the children (wanted or not).
/// The contenders' names view `children`'s: keep it while they are used.
std::vector<contender> listed_contenders(const name_list& children, unsigned kinds, unsigned* present = nullptr);

/// Returns: the children that are contenders of one of `kinds` (bit i = contender_kind i), in
/// queue order. `present`, if given, receives the kinds of every contender among the children
/// (wanted or not), so that a caller sees nodes that do not belong under its path. The contenders'
/// names view `children`'s: keep it while they are used.
std::vector<contender> sorted_contenders(const name_list& children, unsigned kinds, unsigned* present = nullptr);

/// Returns: a fresh random id, formatted like a Java UUID (8-4-4-4-12 lowercase hex).
std::string random_uuid();

/// Returns: the node name prefix of one acquire attempt: "_c_<uuid>-<marker>"; for a lease of
/// `permits` > 1 permits, "_c_<uuid>-p<permits>-lease-" (the name carries its weight, so that a
/// listing alone tells every waiter how many permits are taken ahead of it).
std::string contender_prefix(contender_kind k, std::uint32_t permits = 1);

/// Returns: the permits a contender named `name` stands for: n for a lease named "...-p<n>-lease-<seq>"
/// (n in 2..1,000,000), else 1.
std::uint32_t weight_of(std::string_view name) noexcept;

}  // namespace zklock::detail
