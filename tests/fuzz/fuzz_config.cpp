// Fuzzes canopy.toml as a user, a site profile or $CANOPY_CONFIG may write it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto config = canopy::apply_config(text, "fuzz.toml", canopy::Config{});
    if (config)   // layers apply over each other: the same file over its own result
        (void)canopy::apply_config(text, "fuzz.toml", *config);
    return 0;
}
