// Sizes in bytes, read and written.
#include "util/byte_size.hpp"

#include <array>
#include <cctype>
#include <limits>

namespace canopy {

namespace {

constexpr std::array<std::string_view, 5> units = {"", "K", "M", "G", "T"};

std::string lower(std::string_view text)
{
    std::string out(text);
    for (char& c : out)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

} // namespace

Result<std::uint64_t> parse_byte_size(std::string_view text)
{
    auto bad = [&] {
        return make_error("'{}' is not a size: write a number of bytes, or one of K, M, G or T, such as 16MiB", text);
    };
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
        ++digits;
    if (digits == 0 || digits > 19)
        return bad();
    std::uint64_t number = 0;
    for (char c : text.substr(0, digits))
        number = number * 10 + static_cast<std::uint64_t>(c - '0');
    std::string suffix = lower(text.substr(digits));
    if (suffix.empty() || suffix == "b")
        return number;
    for (std::size_t power = 1; power < units.size(); ++power) {
        std::string unit = lower(units[power]);
        if (suffix != unit && suffix != unit + "b" && suffix != unit + "ib")
            continue;
        std::uint64_t scale = std::uint64_t{1} << (10 * power);
        if (number > std::numeric_limits<std::uint64_t>::max() / scale)
            return make_error("'{}' is too large a size", text);
        return number * scale;
    }
    return bad();
}

std::string format_byte_size(std::uint64_t bytes)
{
    std::size_t power = 0;
    while (power + 1 < units.size() && bytes >= (std::uint64_t{1} << (10 * (power + 1))))
        ++power;
    if (power == 0)
        return fmt::format("{} bytes", bytes);
    std::uint64_t scale = std::uint64_t{1} << (10 * power);
    if (bytes % scale == 0)
        return fmt::format("{} {}iB", bytes / scale, units[power]);
    return fmt::format("{:.1f} {}iB", static_cast<double>(bytes) / static_cast<double>(scale), units[power]);
}

} // namespace canopy
