// Point-to-point routing over the tree: a message for any position goes down if it lies below, else up.
#pragma once

#include "tree/topology.hpp"

namespace canopy {

// The neighbour of `here` (a child or the parent) that brings a message closer to `target`, or `here` itself
// when it has arrived. Every hop is a tree link, so no daemon talks to anyone but its parent and children.
long next_position(const Topology& topology, long here, long target);

} // namespace canopy
