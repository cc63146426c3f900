// The ranks' socket protocol (CANOPY_AGENT_SOCKET, docs/libcanopy.md), numbered once: libcanopy sends these
// operations, canopyd's app server and store cache read them, and the root's JobStore serves the store ones.
#pragma once

#include <cstdint>

#include "wire/fields.hpp"

namespace canopy::wire {

enum class RankSocketOp : std::uint8_t {
    mark = 1,   // a phase mark; no reply
    set = 2,
    get = 3,
    add = 4,
    compare_set = 5,
    check = 6,
    delete_key = 7,
    num_keys = 8,
    wait = 9,
    // 10 was the root's invalidation of a daemon's cached key: a routed request now (wire::StoreInvalidation).
};

enum class RankSocketAnswer : std::uint8_t { ok = 0, not_found = 1, error = 2, timeout = 3 };
constexpr EnumLimit wire_limit(RankSocketAnswer)
{
    return {static_cast<std::uint8_t>(RankSocketAnswer::timeout), "store answer"};
}

} // namespace canopy::wire
