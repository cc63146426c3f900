// --mark-on-output: the first line of a rank's output that matches a pattern marks a phase for that rank, so an
// application that prints "step 1" can be timed without linking libcanopy.
#pragma once

#include <functional>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace canopy {

class OutputMarks {
public:
    // (regular expression, mark name) pairs. A pattern this daemon's regex library rejects is dropped with a warning.
    explicit OutputMarks(const std::vector<std::pair<std::string, std::string>>& patterns);

    bool empty() const { return marks_.empty(); }
    // Calls `hit` with the name of each mark that a line of `data` from `rank` sets for the first time.
    void scan(long rank, const std::string& data, const std::function<void(const std::string& name)>& hit);

private:
    std::vector<std::pair<std::regex, std::string>> marks_;
    std::map<long, std::vector<bool>> hit_;   // by rank: which marks have fired
};

} // namespace canopy
