// The lifecycle of a tree link (lib/tree/link.hpp): its states and the moves between them, listed once.
#pragma once

#include <array>
#include <string_view>

#include "util/transitions.hpp"

namespace canopy {

enum class LinkState {
    open,             // frames go both ways
    flushing,         // close_after_flush: nothing more is taken, what is queued still goes out
    our_side_ended,   // the queue is out and our FIN sent: we read (and drop) until the peer's FIN or the linger ends
    closed,           // the socket is closed and the close handler has heard why
    peer_silent,      // closed because the peer sent nothing for the heartbeat timeout
};

inline constexpr std::array<Transition<LinkState>, 7> link_transitions{{
    {LinkState::open, LinkState::flushing},
    {LinkState::open, LinkState::closed},
    {LinkState::open, LinkState::peer_silent},
    {LinkState::flushing, LinkState::our_side_ended},
    {LinkState::flushing, LinkState::closed},
    // A hung peer reads nothing, so our queue may never flush: its silence ends the link.
    {LinkState::flushing, LinkState::peer_silent},
    // After our FIN the heartbeat is stopped: a silent peer is waited for only until the linger ends (closed).
    {LinkState::our_side_ended, LinkState::closed},
}};

constexpr bool link_may_move(LinkState from, LinkState to) { return allows(link_transitions, from, to); }

// Closed or peer_silent: the link is gone and stays so.
constexpr bool link_ended(LinkState state) { return state == LinkState::closed || state == LinkState::peer_silent; }

constexpr std::string_view link_state_name(LinkState state)
{
    switch (state) {
    case LinkState::open: return "open";
    case LinkState::flushing: return "flushing";
    case LinkState::our_side_ended: return "our side ended";
    case LinkState::closed: return "closed";
    case LinkState::peer_silent: return "peer silent";
    }
    return "unknown";
}

} // namespace canopy
