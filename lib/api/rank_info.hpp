// Where this rank sits in the job, as libcanopy answers canopy_rank() and its siblings.
#pragma once

#include <string>

namespace canopy::api {

// -1 where the launcher does not say; whichever launcher libcanopy learnt it from.
struct RankInfo {
    int rank = -1;
    int size = -1;
    int local_rank = -1;
    int local_size = -1;
    int node_rank = -1;
    int num_nodes = -1;
    std::string node_name;
};

} // namespace canopy::api
