// Prints canopy's protocol numbers as JSON, from their one definition (wire/messages.hpp, wire/routed.hpp,
// wire/rank_socket.hpp), so that tests in other languages never copy them.
#include <cstdio>

#include "wire/messages.hpp"
#include "wire/rank_socket.hpp"
#include "wire/routed.hpp"

namespace {

using namespace canopy::wire;

void print_entry(bool& first, const char* name, unsigned number)
{
    std::printf("%s\"%s\": %u", first ? "" : ", ", name, number);
    first = false;
}

} // namespace

int main()
{
    bool first = true;
    std::printf("{\"messages\": {");
#define CANOPY_PRINT_MESSAGE(M) print_entry(first, M::name, static_cast<unsigned>(M::type));
    CANOPY_WIRE_MESSAGES(CANOPY_PRINT_MESSAGE)
#undef CANOPY_PRINT_MESSAGE
    first = true;
    std::printf("}, \"routed\": {");
#define CANOPY_PRINT_ROUTED(R) print_entry(first, R::name, static_cast<unsigned>(R::op));
    CANOPY_ROUTED_REQUESTS(CANOPY_PRINT_ROUTED)
#undef CANOPY_PRINT_ROUTED
    std::printf("}, \"limits\": {\"max_unauthenticated_frame\": %u, \"max_frame\": %u}}\n",
                static_cast<unsigned>(max_unauthenticated_frame), static_cast<unsigned>(max_frame));
    return 0;
}
