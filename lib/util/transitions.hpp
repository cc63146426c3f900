// A state machine's allowed moves, listed once as a table of edges that the machine and its tests both read.
#pragma once

#include <array>
#include <cstddef>

namespace canopy {

template <typename State>
struct Transition {
    State from;
    State to;
};

// Whether `table` lists the move from `from` to `to`; a move to the same state is a move like any other.
template <typename State, std::size_t N>
constexpr bool allows(const std::array<Transition<State>, N>& table, State from, State to)
{
    for (const auto& edge : table)
        if (edge.from == from && edge.to == to)
            return true;
    return false;
}

} // namespace canopy
