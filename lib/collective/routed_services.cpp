// The routed operations one tree position serves.
#include "collective/routed_services.hpp"

namespace canopy {

void RoutedServices::dispatch(long from, wire::RoutedOp op, std::span<const std::uint8_t> payload, Done done) const
{
    const auto& slot = handlers_[static_cast<std::size_t>(op)];
    if (!slot)
        return done(make_error("{} serves no {}s ({} bytes from tree position {})", where_, wire::routed_name(op),
                               payload.size(), from),
                    {});
    slot(from, payload, std::move(done));
}

} // namespace canopy
