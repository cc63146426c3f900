// Ranks spawned onto nodes that had reported done.
#include "late_ranks.hpp"

#include <algorithm>
#include <limits>

namespace canopy {

void LateRankCount::serve_requests(RoutedServices& services)
{
    services.serve<wire::LateRanks>([this](long, wire::LateRanks late, auto reply) {
        if (late.count > static_cast<std::uint64_t>(std::numeric_limits<long>::max()))
            return reply(make_error("a late-ranks notice counts {} ranks", late.count));
        auto count = static_cast<long>(late.count);
        running_ = std::max(0L, running_ + (late.started ? count : -count));
        phases_.merge(late.phases);
        reply(wire::Acknowledged{});
        if (running_ == 0)
            all_ended_();
    });
}

} // namespace canopy
