// "Did you mean ...?": the nearest spelling to a mistyped option, key or name.
#include "util/suggest.hpp"

#include <algorithm>

namespace canopy {

std::size_t edit_distance(std::string_view a, std::string_view b)
{
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j)
        row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::optional<std::string_view> closest_match(std::string_view word, const std::vector<std::string_view>& candidates,
                                              std::size_t max_distance)
{
    std::optional<std::string_view> best;
    std::size_t best_distance = max_distance + 1;
    for (std::string_view candidate : candidates) {
        std::size_t distance = edit_distance(word, candidate);
        if (distance < best_distance) {
            best_distance = distance;
            best = candidate;
        }
    }
    return best;
}

} // namespace canopy
