// PMI_process_mapping for block placement.
#include "pmi/process_mapping.hpp"

#include <fmt/format.h>

namespace canopy::pmi {

std::string process_mapping(const std::vector<std::uint64_t>& ranks_per_node)
{
    std::string text = "(vector";
    for (std::size_t node = 0; node < ranks_per_node.size();) {
        std::size_t run = 1;
        while (node + run < ranks_per_node.size() && ranks_per_node[node + run] == ranks_per_node[node])
            ++run;
        text += fmt::format(",({},{},{})", node, run, ranks_per_node[node]);
        node += run;
    }
    return text + ")";
}

} // namespace canopy::pmi
