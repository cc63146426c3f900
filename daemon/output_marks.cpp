// --mark-on-output: phases marked by the first matching line of each rank's output.
#include "output_marks.hpp"

#include "util/log.hpp"

namespace canopy {

OutputMarks::OutputMarks(const std::vector<std::pair<std::string, std::string>>& patterns)
{
    for (const auto& [pattern, name] : patterns) {
        try {
            marks_.emplace_back(std::regex(pattern), name);
        } catch (const std::regex_error&) {
            area_logger("tree").warn("ignored --mark-on-output '{}': not a valid regular expression here", pattern);
        }
    }
}

void OutputMarks::scan(long rank, const std::string& data, const std::function<void(const std::string& name)>& hit)
{
    auto& fired = hit_[rank];
    fired.resize(marks_.size(), false);
    std::size_t start = 0;
    while (start < data.size()) {
        std::size_t end = data.find('\n', start);
        if (end == std::string::npos)
            end = data.size();
        for (std::size_t i = 0; i < marks_.size(); ++i) {
            if (fired[i])
                continue;
            if (std::regex_search(data.begin() + static_cast<std::ptrdiff_t>(start),
                                  data.begin() + static_cast<std::ptrdiff_t>(end), marks_[i].first)) {
                fired[i] = true;
                hit(marks_[i].second);
            }
        }
        start = end + 1;
    }
}

} // namespace canopy
