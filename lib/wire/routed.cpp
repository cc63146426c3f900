// Names of the routed operations, from their one list (wire/routed.hpp).
#include "wire/routed.hpp"

namespace canopy::wire {

const char* routed_name(RoutedOp op)
{
#define CANOPY_ROUTED_NAME(R)                                                                                   \
    if (op == R::op)                                                                                             \
        return R::name;
    CANOPY_ROUTED_REQUESTS(CANOPY_ROUTED_NAME)
#undef CANOPY_ROUTED_NAME
    return "unknown routed request";
}

} // namespace canopy::wire
