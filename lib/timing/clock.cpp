// Wall-clock stamps and NTP-style offset estimation between a daemon and its parent.
#include "timing/clock.hpp"

#include <ctime>

#include <fmt/format.h>

namespace canopy::timing {

std::int64_t now_ns()
{
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string format_utc(std::int64_t unix_ns)
{
    // Floor division so times before 1970 still print a valid date.
    std::int64_t seconds = unix_ns / 1'000'000'000;
    std::int64_t rest = unix_ns % 1'000'000'000;
    if (rest < 0) {
        rest += 1'000'000'000;
        --seconds;
    }
    const auto as_time = static_cast<std::time_t>(seconds);
    std::tm utc{};
    if (gmtime_r(&as_time, &utc) == nullptr)
        return "invalid-time";
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                       utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, rest / 1'000'000);
}

ClockOffset estimate_offset(const std::vector<ClockSample>& samples)
{
    const ClockSample* best = nullptr;
    std::int64_t best_round_trip = 0;
    for (const auto& sample : samples) {
        const std::int64_t held = sample.t2 - sample.t1;
        const std::int64_t round_trip = (sample.t3 - sample.t0) - held;
        if (held < 0 || round_trip < 0)
            continue;
        if (best == nullptr || round_trip < best_round_trip) {
            best = &sample;
            best_round_trip = round_trip;
        }
    }
    if (best == nullptr)
        return {};
    // ((t1 - t0) + (t2 - t3)) / 2: the one-way delays cancel when they are equal.
    const std::int64_t forward = best->t1 - best->t0;
    const std::int64_t backward = best->t2 - best->t3;
    return ClockOffset{forward / 2 + backward / 2 + (forward % 2 + backward % 2) / 2, best_round_trip};
}

} // namespace canopy::timing
