// The ranks' output as the launcher prints it. Partial lines come too (a progress bar is printed within 100 ms,
// not at its newline), so each stream remembers whose line is still open. With labels (-l) that rank's next
// output goes on without a prefix, and any other rank's first ends the open line, so two ranks never share one.
// Without labels the bytes pass as the ranks wrote them; canopy's own lines still start on a line of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace canopy {

class OutputLines {
public:
    explicit OutputLines(bool labelled) : labelled_(labelled) {}

    // The text to print for `data` from `rank` on `stream` (1 stdout, 2 stderr).
    std::string text(std::uint64_t rank, std::uint8_t stream, std::string_view data);
    // "\n" when a rank's line is open on `stream` (it is then closed), else nothing: what goes before a line of
    // canopy's own, or at the end of a labelled job.
    std::string end_open_line(std::uint8_t stream);

private:
    std::optional<std::uint64_t>& open(std::uint8_t stream) { return open_[stream == 2 ? 1 : 0]; }

    bool labelled_;
    std::optional<std::uint64_t> open_[2];   // by stream: the rank whose line has no newline yet
};

} // namespace canopy
