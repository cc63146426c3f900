// --report-bindings and --dry-run: one node's bindings as a table, a rank a row.
#pragma once

#include <string>
#include <vector>

#include "affinity/binding_request.hpp"

namespace canopy {

// `show_applied`: a column saying whether each rank's binding is applied on this machine (bindings.applied), for a
// node that planned from a foreign topology. Rows past `max_rows` are counted, not shown.
std::string binding_table(const std::string& node, const NodeBindings& bindings, long first_rank, bool show_applied,
                          std::size_t max_rows = 1 << 20);

} // namespace canopy
