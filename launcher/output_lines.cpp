#include "output_lines.hpp"

#include <utility>

#include <fmt/format.h>

namespace canopy {

std::string OutputLines::text(std::uint64_t rank, std::uint8_t stream, std::string_view data)
{
    std::string out;
    if (data.empty())
        return out;
    std::optional<std::uint64_t>& open_line = open(stream);
    bool continuing = open_line == rank;
    if (!labelled_) {
        out = data;
    } else {
        if (open_line && !continuing)
            out += '\n';
        std::string prefix = fmt::format("[{}] ", rank);
        for (std::size_t start = 0; start < data.size();) {
            std::size_t end = data.find('\n', start);
            std::size_t stop = end == std::string_view::npos ? data.size() : end + 1;
            if (!(start == 0 && continuing))
                out += prefix;
            out.append(data, start, stop - start);
            start = stop;
        }
    }
    open_line = data.back() == '\n' ? std::nullopt : std::optional<std::uint64_t>(rank);
    return out;
}

std::string OutputLines::end_open_line(std::uint8_t stream)
{
    return std::exchange(open(stream), std::nullopt) ? "\n" : "";
}

} // namespace canopy
