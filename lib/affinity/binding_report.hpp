// --report-bindings and --dry-run: one node's bindings as a table, a rank a row.
#pragma once

#include <string>
#include <vector>

#include "affinity/binding_request.hpp"

namespace canopy {

// `applied[i]`: whether local rank i's CPUs and memory binding are applied on this machine (a foreign topology's
// may not be); empty when all are. Rows past `max_rows` are counted, not shown.
std::string binding_table(const std::string& node, const NodeBindings& bindings, long first_rank,
                          const std::vector<bool>& applied, std::size_t max_rows = 1 << 20);

} // namespace canopy
