// Point-to-point routing over the tree.
#include "collective/routing.hpp"

namespace canopy {

long next_position(const Topology& topology, long here, long target)
{
    if (target == here)
        return here;
    long down = topology.next_hop(here, target);
    return down >= 0 ? down : topology.parent(here);
}

} // namespace canopy
