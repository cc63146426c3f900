// The ranks' output as the launcher prints it. Partial lines come too (a progress bar is printed within 100 ms,
// not at its newline), so each stream remembers whose line is still open. While a rank's line is open, the other
// ranks' output waits: a program that writes a line's text and its newline apart (Python's print does) and is
// descheduled in between still gets its line whole, and so does a line of any length written on end. Past
// hold_bytes of it, the daemons are told to hold the other ranks' output on that stream where it is written
// (line_hold), so memory stays bounded while the line goes on. The wait ends when the line does, or after hold_limit
// without progress (a prompt), or after hold_max in all (a progress bar's line never ends). With labels (-l) the open
// rank's next output goes on without a prefix, and another rank's output that waited its time ends the open line
// first, so two ranks never share one; the rest of a line cut so is labelled "[3+] ", which says to join it to that
// rank's line before. Without labels the bytes pass as the ranks wrote them, a newline never added; canopy's own
// lines still start on a line of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace canopy {

class OutputLines {
public:
    using Clock = std::chrono::steady_clock;
    // How long another rank's output waits for an open line that makes no progress (a prompt).
    static constexpr auto hold_limit = std::chrono::seconds(1);
    // How long it waits behind one open line in all, progress or not (a progress bar's line never ends).
    static constexpr auto hold_max = std::chrono::seconds(10);
    // Past this much waiting on a stream, only the open line's rank goes on there (line_hold): the others are held
    // at their daemons until the line ends.
    static constexpr std::size_t hold_bytes = 1 << 20;
    // Past this much, the waiting output goes whatever the line: what the tree had on its way when the hold was
    // told is bounded, and so is this.
    static constexpr std::size_t split_bytes = 64 << 20;

    explicit OutputLines(bool labelled) : labelled_(labelled) {}

    // The text to print now for `data` from `rank` on `stream` (1 stdout, 2 stderr): this output and whatever
    // waited behind its line, or nothing if it must wait.
    std::string text(std::uint64_t rank, std::uint8_t stream, std::string_view data, Clock::time_point now = Clock::now());
    // When output waiting on `stream` is due (release() then lets it through), if any waits.
    std::optional<Clock::time_point> due(std::uint8_t stream) const;
    // The rank whose open line has more than hold_bytes of other ranks' output waiting behind it on `stream`: only
    // its output on that stream should come until the line ends.
    std::optional<std::uint64_t> line_hold(std::uint8_t stream) const;
    // The waits start again at `now`: canopy itself held every rank's output back (a stalled reader), and the open
    // lines could not go on meanwhile.
    void restart_waits(Clock::time_point now);
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
        Clock::time_point waiting_since;     // since the open line last went on
        Clock::time_point blocked_since;     // since output began waiting behind the open line
        std::set<std::uint64_t> cut;         // -l: ranks whose line canopy ended; their next output continues it
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
