// PMI_process_mapping: how MPICH-family MPIs learn which ranks share a node, so they use shared memory there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace canopy::pmi {

// Hydra's "(vector,(first_node,nodes,ranks_per_node),...)" for ranks placed in blocks, node by node:
// {2,2,2,1} gives "(vector,(0,3,2),(3,1,1))".
std::string process_mapping(const std::vector<std::uint64_t>& ranks_per_node);

} // namespace canopy::pmi
