// The k-ary launch tree: position 0 is the launcher, position p >= 1 the daemon of node p-1.
#pragma once

#include <vector>

namespace canopy {

// Children of p are p*k+1 .. min(p*k+k, nodes); the parent of p > 0 is (p-1)/k. Every query is
// arithmetic costing O(depth), so nothing is built and a million nodes cost no memory.
class Topology {
public:
    // A fanout below 1 is taken as 1 and negative nodes as 0; callers validate user input first.
    Topology(long nodes, long fanout);

    long nodes() const { return nodes_; }
    long fanout() const { return fanout_; }
    long positions() const { return nodes_ + 1; }

    long parent(long position) const;                // -1 for the root and for invalid positions
    std::vector<long> children(long position) const; // empty for leaves and invalid positions
    long depth() const;                              // levels below the root (0 nodes -> 0, 1..k -> 1)
    long depth_of(long position) const;              // root = 0; -1 for invalid positions
    long subtree_size(long position) const;          // positions in p's subtree including p; 0 if invalid
    bool in_subtree(long root, long position) const; // true also when position == root
    // The child of `from` whose subtree holds `to`, or -1 when `to` is not below `from`. For routing down.
    long next_hop(long from, long to) const;

    static long node_to_position(long node_index) { return node_index + 1; }
    static long position_to_node(long position) { return position - 1; }

private:
    bool valid(long position) const { return position >= 0 && position <= nodes_; }
    // p*k+1, saturated so that an overflow reads as "past the last position".
    long first_child(long position) const;

    long nodes_;
    long fanout_;
};

} // namespace canopy
