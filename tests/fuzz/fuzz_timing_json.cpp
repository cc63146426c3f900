// Fuzzes `canopy report FILE.json`: a saved --timing document read back, printed and compared.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "timing/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace canopy::timing;
    auto timing = parse_timing_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    if (!timing)
        return 0;
    (void)format_report(*timing);
    (void)format_comparison(*timing, *timing, "before", "after");
    // What canopy read, it writes back in a form it reads again (--timing files are compared across versions).
    if (!from_json(to_json(*timing)))
        std::abort();
    return 0;
}
