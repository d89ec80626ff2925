// balance_units as it stood before its deal was made lighter, and the
// balanced planner's rows over it (test-only reference,
// cp_unit_balance_reference.cpp).
#pragma once

#include <cstdint>

#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"

namespace fulcrum::cp::reference {

detail::Balanced balance_units(const CpWorkload& workload, const RowLayout& layout,
                               const detail::Units& units, std::int64_t total_pairs,
                               std::int64_t unsharded_tiles,
                               const detail::BalanceOptions& options = {});

// balance_row (plugin/strategies/cp_balanced.cpp) over that balance_units.
detail::Balanced balance_row(const CpWorkload& workload, const RowLayout& layout,
                             const detail::BalanceOptions& options = {});

}  // namespace fulcrum::cp::reference
