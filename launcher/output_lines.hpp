// The ranks' output as the launcher prints it. Partial lines come too (a progress bar is printed within 100 ms,
// not at its newline), so each stream remembers whose line is still open. While a rank's line is open, the other
// ranks' output waits, up to hold_limit or hold_bytes: a program that writes a line's text and its newline apart
// (Python's print does) and is descheduled in between still gets its line whole. With labels (-l) the open rank's
// next output goes on without a prefix, and another rank's output that waited its time ends the open line first,
// so two ranks never share one. Without labels the bytes pass as the ranks wrote them; canopy's own lines still
// start on a line of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace canopy {

class OutputLines {
public:
    using Clock = std::chrono::steady_clock;
    // How long another rank's output waits for an open line to end (a prompt or a progress bar never does).
    static constexpr auto hold_limit = std::chrono::seconds(1);
    // Or until this much waits: output held here is beyond the writer's mark that slows the daemons down.
    static constexpr std::size_t hold_bytes = 1 << 20;

    explicit OutputLines(bool labelled) : labelled_(labelled) {}

    // The text to print now for `data` from `rank` on `stream` (1 stdout, 2 stderr): this output and whatever
    // waited behind its line, or nothing if it must wait.
    std::string text(std::uint64_t rank, std::uint8_t stream, std::string_view data, Clock::time_point now = Clock::now());
    // When output waiting on `stream` is due (release() then lets it through), if any waits.
    std::optional<Clock::time_point> due(std::uint8_t stream) const;
    // The waiting output on `stream` whose time is up at `now` (all of it when `now` is Clock::time_point::max()).
    std::string release(std::uint8_t stream, Clock::time_point now);
    // Whatever waits, then "\n" when a rank's line is open on `stream` (it is then closed): what goes before a line
    // of canopy's own, or at the end of the job.
    std::string end_open_line(std::uint8_t stream);

private:
    struct Waiting {
        std::uint64_t rank;
        std::string data;
    };
    struct Stream {
        std::optional<std::uint64_t> open;   // the rank whose line has no newline yet
        std::deque<Waiting> waiting;         // other ranks' output, in the order it came
        std::size_t waiting_bytes = 0;
        Clock::time_point waiting_since;
    };
    Stream& stream(std::uint8_t id) { return streams_[id == 2 ? 1 : 0]; }
    // Formats `data` as printed after what came before on `s`, and notes whose line is open after it.
    std::string print(Stream& s, std::uint64_t rank, std::string_view data);
    // Prints what waits on `s`: the open line's rank first, then in the order it came, until another rank's line
    // is open (all of it when `force`). Each rank's output stays in its order.
    std::string drain(Stream& s, Clock::time_point now, bool force);

    bool labelled_;
    Stream streams_[2];
};

} // namespace canopy
