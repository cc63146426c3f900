// Routing over the tree: every message reaches its target through tree links only, in at most 2 x depth hops.
#include <gtest/gtest.h>

#include "collective/routing.hpp"

namespace canopy {
namespace {

TEST(Routing, EveryPairIsConnectedThroughTreeLinksOnly)
{
    for (long nodes : {1L, 7L, 40L, 300L}) {
        for (long fanout : {2L, 3L, 32L}) {
            Topology topology(nodes, fanout);
            for (long from = 0; from <= nodes; from += (nodes > 50 ? 13 : 1)) {
                for (long to = 0; to <= nodes; to += (nodes > 50 ? 7 : 1)) {
                    long here = from;
                    int hops = 0;
                    while (here != to) {
                        long next = next_position(topology, here, to);
                        bool is_link = topology.parent(here) == next || topology.parent(next) == here;
                        ASSERT_TRUE(is_link) << here << " -> " << next << " is not a tree link";
                        here = next;
                        ASSERT_LE(++hops, 2 * topology.depth()) << "from " << from << " to " << to;
                    }
                }
            }
        }
    }
}

TEST(Routing, GoesUpToTheCommonAncestorThenDown)
{
    Topology topology(7, 2);   // 1: {3, 4}, 2: {5, 6}, 3: {7}
    EXPECT_EQ(next_position(topology, 7, 6), 3);
    EXPECT_EQ(next_position(topology, 3, 6), 1);
    EXPECT_EQ(next_position(topology, 1, 6), 0);
    EXPECT_EQ(next_position(topology, 0, 6), 2);
    EXPECT_EQ(next_position(topology, 2, 6), 6);
    EXPECT_EQ(next_position(topology, 6, 6), 6);
}

} // namespace
} // namespace canopy
