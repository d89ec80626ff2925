// hybrid's drafts while they pack their trailing rows (rule 4): the rows
// and their pieces in flat arrays, for schedule_hybrid_draft.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum::hybrid {

// Rule 4's trailing rows while they are packed: every row in one array and
// every piece placed in another, a rank's rows and a row's pieces linked
// in order (thousands of rows at W = 1024 made a list each, and a list of
// rows per rank). rebalance borrows the two ranks it changes as lists and
// gives them back relinked; the draft takes the rows rank by rank.
class RowBook {
 public:
  static constexpr std::int32_t kNone = -1;

  RowBook(std::size_t ranks, std::size_t pieces) : first_(ranks, kNone), last_(ranks, kNone) {
    links_.reserve(pieces);
  }
  std::size_t ranks() const { return first_.size(); }
  // The next rank, without rows.
  void add() {
    first_.push_back(kNone);
    last_.push_back(kNone);
  }
  // Rank a's rows in order: first_row(a), then next_row of each.
  std::int32_t first_row(std::int32_t a) const { return first_[static_cast<std::size_t>(a)]; }
  std::int32_t next_row(std::int32_t r) const { return rows_[static_cast<std::size_t>(r)].next; }
  std::int64_t room(std::int32_t r) const { return rows_[static_cast<std::size_t>(r)].room; }
  // A row of `room` tokens after rank a's others.
  std::int32_t new_row(std::int32_t a, std::int64_t room) {
    const auto r = static_cast<std::int32_t>(rows_.size());
    rows_.push_back({room, kNone, kNone, kNone});
    std::int32_t& last = last_[static_cast<std::size_t>(a)];
    (last == kNone ? first_[static_cast<std::size_t>(a)]
                   : rows_[static_cast<std::size_t>(last)].next) = r;
    last = r;
    return r;
  }
  // Piece p after row r's others, its room `len` tokens less.
  void put(std::int32_t r, std::size_t p, std::int64_t len) {
    BookRow& row = rows_[static_cast<std::size_t>(r)];
    const auto l = static_cast<std::int32_t>(links_.size());
    links_.push_back({p, kNone});
    (row.tail == kNone ? row.head : links_[static_cast<std::size_t>(row.tail)].next) = l;
    row.tail = l;
    row.room -= len;
  }

  // rebalance's loan (rebalance_rows): rank a's rows as a list.
  std::vector<Row>& open(std::int32_t a, int side) {
    std::vector<Row>& lent = lent_[static_cast<std::size_t>(side)];
    lent.clear();
    for (std::int32_t r = first_row(a); r != kNone; r = next_row(r)) {
      const BookRow& row = rows_[static_cast<std::size_t>(r)];
      lent.push_back({row.room, {}});
      for (std::int32_t l = row.head; l != kNone; l = links_[static_cast<std::size_t>(l)].next) {
        lent.back().pieces.push_back(links_[static_cast<std::size_t>(l)].piece);
      }
    }
    return lent;
  }
  // Rank a's rows become the list lent (their old entries left unlinked).
  void close(std::int32_t a, int side) {
    first_[static_cast<std::size_t>(a)] = kNone;
    last_[static_cast<std::size_t>(a)] = kNone;
    for (const Row& row : lent_[static_cast<std::size_t>(side)]) {
      const std::int32_t r = new_row(a, row.room);
      for (const std::size_t p : row.pieces) put(r, p, 0);
    }
  }

  // The rows into `d`, rank by rank.
  void write(Draft& d) const {
    d.rank_first.assign(1, 0);
    d.rank_first.reserve(first_.size() + 1);
    d.rows.reserve(rows_.size());
    d.row_pieces.reserve(links_.size());
    for (std::size_t a = 0; a < first_.size(); ++a) {
      for (std::int32_t r = first_[a]; r != kNone; r = next_row(r)) {
        const BookRow& row = rows_[static_cast<std::size_t>(r)];
        RowSpan span{row.room, d.row_pieces.size(), 0};
        for (std::int32_t l = row.head; l != kNone; l = links_[static_cast<std::size_t>(l)].next) {
          d.row_pieces.push_back(links_[static_cast<std::size_t>(l)].piece);
          ++span.size;
        }
        d.rows.push_back(span);
      }
      d.rank_first.push_back(d.rows.size());
    }
  }

 private:
  struct BookRow {
    std::int64_t room;
    std::int32_t head, tail;  // into links_
    std::int32_t next;        // the rank's next row
  };
  struct Link {
    std::size_t piece;
    std::int32_t next;
  };
  std::vector<std::int32_t> first_, last_;  // per rank, its first and last row
  std::vector<BookRow> rows_;
  std::vector<Link> links_;
  std::array<std::vector<Row>, 2> lent_;
};

}  // namespace fulcrum::hybrid
