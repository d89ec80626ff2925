// The search's rank sets on few nodes (rule 7, schedule_hybrid_search.cpp):
// from a pool of ranks (the first m of an order by free time), g ranks on
// the fewest nodes. Kept apart so that a test can hold the counted version
// to a recount.
#pragma once

#include <cstdint>
#include <vector>

namespace fulcrum::hybrid {

// The pools of one order of ranks. A pool is the order's first m ranks; per
// node, how many of them it holds, and its nodes by that count (most first;
// ties: the node whose first rank comes first in the order). Both are
// counted once per m (O(m)) and kept while this lives: the search asks for
// several group sizes from the same one or two pools, and at a large W a
// pool of idle ranks is most of the world.
class NodePool {
 public:
  // `order`: every rank at most once, each below `world`; it must outlive
  // this and not change. `per_node` >= 1.
  NodePool(const std::vector<std::int32_t>& order, std::int32_t world, std::int32_t per_node);

  // g (<= m <= order's size) of the pool's m ranks on the fewest nodes:
  // whole nodes' pool ranks while they fit (the most first), then the rest
  // from the last node in that order that still holds them (the fewest to
  // spare), each node's ranks taken in the order's order; ascending.
  std::vector<std::int32_t> packed(std::int32_t m, std::int32_t g);

 private:
  struct Counted {
    std::int32_t m = 0;
    std::vector<std::int32_t> count;  // per node: pool ranks on it
    std::vector<std::int32_t> nodes;  // pool nodes by count, most first
  };
  const Counted& counted(std::int32_t m);

  const std::vector<std::int32_t>& order_;
  std::int32_t per_node_;
  std::size_t nodes_;
  std::vector<Counted> kept_;
  std::vector<std::int32_t> want_;  // per node, ranks still to take; all 0 between calls
};

}  // namespace fulcrum::hybrid
