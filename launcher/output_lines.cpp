// The ranks' output as the launcher prints it: labels, open lines, and other ranks' output waiting behind them.
#include "output_lines.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace canopy {

std::string OutputLines::print(Stream& s, std::uint64_t rank, std::string_view data)
{
    std::string out;
    bool continuing = s.open == rank;
    if (!labelled_) {
        out = data;
    } else {
        if (s.open && !continuing) {
            out += '\n';   // not the rank's own: the label of what continues its line says so
            s.cut.insert(*s.open);
        }
        std::string prefix = fmt::format("[{}] ", rank);
        for (std::size_t start = 0; start < data.size();) {
            std::size_t end = data.find('\n', start);
            std::size_t stop = end == std::string_view::npos ? data.size() : end + 1;
            if (start == 0 && !continuing && s.cut.erase(rank)) {
                out += fmt::format("[{}+] ", rank);
            } else if (!(start == 0 && continuing)) {
                out += prefix;
            }
            out.append(data, start, stop - start);
            start = stop;
        }
    }
    s.open = data.back() == '\n' ? std::nullopt : std::optional<std::uint64_t>(rank);
    return out;
}

std::string OutputLines::drain(Stream& s, Clock::time_point now, bool force)
{
    std::string out;
    bool printed = false;
    auto opened = s.open;
    while (!s.waiting.empty()) {
        // The open line's rank goes first: its output is what can end the line. Each rank's output keeps its order.
        auto next = s.waiting.begin();
        if (s.open) {
            auto own = std::find_if(s.waiting.begin(), s.waiting.end(),
                                    [&](const Waiting& waiting) { return waiting.rank == *s.open; });
            if (own != s.waiting.end())
                next = own;
            else if (!force)
                break;
        }
        out += print(s, next->rank, next->data);
        s.waiting_bytes -= next->data.size();
        s.waiting.erase(next);
        printed = true;
    }
    if (printed)
        s.waiting_since = now;   // what still waits, waits for the line now open
    if (printed && (s.waiting.empty() || s.open != opened))
        s.blocked_since = now;   // and for the whole of its time
    return out;
}

std::string OutputLines::text(std::uint64_t rank, std::uint8_t id, std::string_view data, Clock::time_point now)
{
    if (data.empty())
        return {};
    Stream& s = stream(id);
    if (s.waiting.empty() && (!s.open || s.open == rank))
        return print(s, rank, data);   // nothing to wait for: the usual case, without a copy
    if (s.waiting.empty())
        s.waiting_since = s.blocked_since = now;
    s.waiting.push_back({rank, std::string(data)});
    s.waiting_bytes += data.size();
    return drain(s, now, s.waiting_bytes > split_bytes);
}

std::optional<OutputLines::Clock::time_point> OutputLines::due(std::uint8_t id) const
{
    const Stream& s = streams_[id == 2 ? 1 : 0];
    if (s.waiting.empty())
        return std::nullopt;
    return std::min(s.waiting_since + hold_limit, s.blocked_since + hold_max);
}

std::optional<std::uint64_t> OutputLines::line_hold(std::uint8_t id) const
{
    const Stream& s = streams_[id == 2 ? 1 : 0];
    if (s.waiting_bytes > hold_bytes)
        return s.open;
    return std::nullopt;
}

void OutputLines::restart_waits(Clock::time_point now)
{
    for (Stream& s : streams_)
        if (!s.waiting.empty())
            s.waiting_since = s.blocked_since = now;
}

std::string OutputLines::release(std::uint8_t id, Clock::time_point now)
{
    Stream& s = stream(id);
    auto when = due(id);
    if (!when || now < *when)
        return {};
    return drain(s, now, true);
}

std::string OutputLines::end_open_line(std::uint8_t id)
{
    Stream& s = stream(id);
    std::string out = drain(s, Clock::now(), true);
    if (auto open = std::exchange(s.open, std::nullopt)) {
        out += '\n';
        if (labelled_)
            s.cut.insert(*open);
    }
    return out;
}

} // namespace canopy
