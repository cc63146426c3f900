// Arithmetic on the k-ary launch tree.
#include "tree/topology.hpp"

#include <algorithm>
#include <limits>

namespace canopy {

Topology::Topology(long nodes, long fanout) : nodes_(std::max(nodes, 0L)), fanout_(std::max(fanout, 1L)) {}

long Topology::first_child(long position) const
{
    long product = 0;
    if (__builtin_mul_overflow(position, fanout_, &product) || product >= std::numeric_limits<long>::max())
        return std::numeric_limits<long>::max();
    return product + 1;
}

long Topology::parent(long position) const
{
    if (position <= 0 || position > nodes_)
        return -1;
    return (position - 1) / fanout_;
}

std::vector<long> Topology::children(long position) const
{
    std::vector<long> result;
    if (!valid(position))
        return result;
    long first = first_child(position);
    if (first > nodes_)
        return result;
    long last = nodes_ - first < fanout_ - 1 ? nodes_ : first + fanout_ - 1;
    result.reserve(static_cast<std::size_t>(last - first + 1));
    for (long child = first; child <= last; ++child)
        result.push_back(child);
    return result;
}

long Topology::depth_of(long position) const
{
    if (!valid(position))
        return -1;
    long depth = 0;
    for (; position > 0; position = (position - 1) / fanout_)
        ++depth;
    return depth;
}

long Topology::depth() const
{
    // Depth never decreases with position, so the last position is the deepest.
    return depth_of(nodes_);
}

long Topology::subtree_size(long position) const
{
    if (!valid(position))
        return 0;
    // The descendants on each level form one contiguous range [low, high].
    long size = 0;
    long low = position;
    long high = position;
    while (low <= nodes_) {
        size += std::min(high, nodes_) - low + 1;
        low = first_child(low);
        long next_high = first_child(high);
        high = next_high > std::numeric_limits<long>::max() - (fanout_ - 1) ? std::numeric_limits<long>::max()
                                                                           : next_high + fanout_ - 1;
    }
    return size;
}

bool Topology::in_subtree(long root, long position) const
{
    if (!valid(root) || !valid(position))
        return false;
    while (position > root)
        position = (position - 1) / fanout_;
    return position == root;
}

long Topology::next_hop(long from, long to) const
{
    if (!valid(from) || !valid(to) || to <= from)
        return -1;
    while (to > from) {
        long up = (to - 1) / fanout_;
        if (up == from)
            return to;
        to = up;
    }
    return -1;
}

} // namespace canopy
