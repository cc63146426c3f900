// The timing report's line layout: cutting to the terminal's width, and numbers as times or counts.
#include "timing/report_lines.hpp"

#include "timing/analysis.hpp"
#include "timing/report.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace canopy::timing {

std::string fit(std::string text, std::size_t width)
{
    if (text.size() <= width)
        return text;
    if (width <= 3)
        return text.substr(0, width);
    text.resize(width - 3);
    return text + "...";
}

std::string format_value(std::string_view phase, double value)
{
    return phase_kind(phase) == PhaseKind::count ? fmt::format("{:.0f}", value) : format_seconds(value);
}

std::size_t name_width(std::size_t longest, std::size_t header)
{
    return std::clamp(longest, header, std::size_t{30});
}

void append_line(std::string& out, std::string line)
{
    while (!line.empty() && line.back() == ' ')
        line.pop_back();
    out += fit(std::move(line), max_columns);
    out += '\n';
}

} // namespace canopy::timing
