// Fuzzes `canopy report FILE.json`: a saved --timing document read back, printed, compared and drawn as a page.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "timing/html_report.hpp"
#include "timing/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace canopy::timing;
    auto timing = parse_timing_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    if (!timing)
        return 0;
    (void)format_report(*timing);
    (void)format_comparison(*timing, *timing, "before", "after");
    // The page carries the document: what it embeds reads back.
    auto embedded = embedded_timing_json(format_html_report(*timing, "fuzz.json"));
    if (!embedded || !parse_timing_json(*embedded, "page"))
        std::abort();
    // What canopy read, it writes back in a form it reads again (--timing files are compared across versions).
    if (!from_json(to_json(*timing)))
        std::abort();
    return 0;
}
