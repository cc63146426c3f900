// How a tree position sends bulk data to its children (staged files and their index, large fence results, large
// replies on their way down): on the children's TCP links, as everything else, or over a fabric
// (lib/fabric/fabric_plane.hpp). The stage sender, every daemon's relay and the collectives' large frames go
// through it; control frames never do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tree/children.hpp"
#include "wire/messages.hpp"

namespace canopy {

class BulkRoute {
public:
    virtual ~BulkRoute() = default;
    // Sends a frame made here to every child. `urgent`: on a TCP link, ahead of the frames queued there, this
    // route's earlier ones included (Link::send), for what a node waits on before its ranks start (the stage
    // index); a fabric keeps its order.
    virtual void broadcast(std::vector<std::uint8_t> frame, bool urgent = false) = 0;
    // Sends a frame made here to some of the children. Frames to one child arrive in the order they were sent on
    // this route, but not in order with its link's frames.
    virtual void send(const std::vector<long>& children, std::vector<std::uint8_t> frame) = 0;
    // Sends on a frame just received from the parent (called while it is being handled); `urgent` as above.
    virtual void relay(const wire::Frame& frame, bool urgent = false) = 0;
    // The most bytes any child still has to be sent: a bulk sender waits while it is high.
    virtual std::size_t max_queued_bytes() const = 0;
    // A child said where its fabric endpoint is, or that it has none.
    virtual void child_announced(long position, const wire::FabricHello& hello) = 0;
};

// Bulk data on the children's links.
class LinkBulkRoute : public BulkRoute {
public:
    explicit LinkBulkRoute(ChildSet& children) : children_(children) {}
    void broadcast(std::vector<std::uint8_t> frame, bool urgent = false) override
    {
        children_.broadcast(std::move(frame), urgent);
    }
    void send(const std::vector<long>& children, std::vector<std::uint8_t> frame) override
    {
        // To every child (a whole-job fence's result on its way down): one copy that each link queues, so a chunk
        // waiting for slow children costs its size once, not once per child.
        if (children.size() > 1 && children == children_.connected_positions()) {
            children_.broadcast(std::move(frame));
            return;
        }
        for (long child : children)
            children_.send(child, frame);
    }
    void relay(const wire::Frame& frame, bool urgent = false) override
    {
        if (children_.connected_count() > 0)   // a leaf need not encode it again
            children_.broadcast(wire::encode_frame(frame), urgent);
    }
    std::size_t max_queued_bytes() const override { return children_.max_queued_bytes(); }
    void child_announced(long, const wire::FabricHello&) override {}

private:
    ChildSet& children_;
};

} // namespace canopy
