// The allocator behind each sim device arena (private to the sim backend).
//
// Two-level segregated fit over granule offsets: a free list per size class (first level = the
// power of two, second level = 16 linear steps inside it), found through two bitmaps, with
// immediate coalescing of address neighbours. Allocation and release are O(1); only a request
// that falls strictly inside a class scans that one class's list before giving up, so "no
// block fits" is exact. Metadata lives out of band, in caller-provided arrays: device memory
// carries no headers, so user writes cannot corrupt the allocator and strict mode can make free
// pages inaccessible.
//
//   block_allocator a;                                  // in zero-filled storage
//   a.init(records, record_capacity, owner, granules);  // zero-filled arrays
//   std::uint32_t g = a.allocate(4);                    // 4 granules; no_block when none fits
//   a.release(g);
//
// Thread safety: none; the sim guards each allocator with its context's allocation mutex.
#pragma once

#include <cstdint>

namespace faultline::core::device::detail {

enum class block_state : std::uint32_t { unused = 0, free = 1, live = 2, pending_free = 3 };

/// One block of the arena (or a spare record). Links are record indices; 0 means none.
struct block_record {
  std::uint32_t start;      ///< first granule
  std::uint32_t size;       ///< granules
  std::uint32_t phys_prev;  ///< address-order neighbours
  std::uint32_t phys_next;
  std::uint32_t free_prev;  ///< size-class list (free_next also links spare records)
  std::uint32_t free_next;
  block_state state;
  std::uint32_t padding;
};

class block_allocator {
 public:
  static constexpr std::uint32_t no_block = 0xffffffffu;
  /// A run of granules.
  struct span {
    std::uint32_t start = 0;
    std::uint32_t size = 0;
  };

  /// Binds zero-filled storage: `records` holds `record_capacity` entries (index 0 is never
  /// used), `owner` one entry per granule. The whole arena starts as one free block.
  void init(block_record* records, std::uint32_t record_capacity, std::uint32_t* owner,
            std::uint32_t granules) noexcept;

  /// First granule of a new live block of at least `granules` (exactly `granules` unless the
  /// record array is exhausted, when the whole free block is handed out); no_block when no free
  /// block is large enough or `granules` is 0.
  std::uint32_t allocate(std::uint32_t granules) noexcept;

  /// State of the block starting at `start`: live or pending_free, else unused (free blocks
  /// and granules inside blocks answer unused).
  [[nodiscard]] block_state state_at(std::uint32_t start) const noexcept;
  /// Size of the live or pending block at `start` (0 when none).
  [[nodiscard]] std::uint32_t size_at(std::uint32_t start) const noexcept;
  /// The free block right after the live block at `start` (size 0 when none).
  [[nodiscard]] span free_after(std::uint32_t start) const noexcept;

  /// live -> pending_free (a stream-ordered free is queued). False when not live.
  bool mark_pending(std::uint32_t start) noexcept;
  /// Frees the live or pending block at `start` (precondition) and returns the free block it
  /// was merged into.
  span release(std::uint32_t start) noexcept;

  [[nodiscard]] std::uint64_t granules_in_use() const noexcept { return in_use_; }
  [[nodiscard]] std::uint32_t granules() const noexcept { return granules_; }

 private:
  static constexpr int fl_count = 32;
  static constexpr int sl_bits = 4;
  static constexpr int sl_count = 1 << sl_bits;

  std::uint32_t new_record() noexcept;
  void recycle(std::uint32_t index) noexcept;
  void insert_free(std::uint32_t index) noexcept;
  void remove_free(std::uint32_t index) noexcept;
  void absorb(std::uint32_t keep, std::uint32_t gone) noexcept;
  [[nodiscard]] std::uint32_t find_free(std::uint32_t granules) const noexcept;

  block_record* records_ = nullptr;
  std::uint32_t* owner_ = nullptr;  // granule -> record of the live/pending block starting there
  std::uint32_t record_capacity_ = 0;
  std::uint32_t records_used_ = 1;
  std::uint32_t spare_head_ = 0;
  std::uint32_t granules_ = 0;
  std::uint64_t in_use_ = 0;
  std::uint32_t fl_bitmap_ = 0;
  std::uint32_t sl_bitmap_[fl_count] = {};
  std::uint32_t heads_[fl_count][sl_count] = {};
};

}  // namespace faultline::core::device::detail
