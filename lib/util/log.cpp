// Named spdlog loggers sharing one sink chosen by the binary.
#include "util/log.hpp"

#include <map>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace canopy {
namespace {

// Threads make loggers too (the root's stage readers log each read): the map and the shared sink's formatter
// change under `mutex`.
struct LoggingState {
    std::mutex mutex;
    spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::null_sink_st>();
    spdlog::level::level_enum level = spdlog::level::warn;
    std::string pattern = "%v";
    std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
};

LoggingState& state()
{
    static LoggingState instance;
    return instance;
}

void configure(spdlog::logger& logger)
{
    auto& s = state();
    logger.sinks() = {s.sink};
    logger.set_level(s.level);
    logger.set_pattern(s.pattern);
    logger.flush_on(spdlog::level::warn);
}

} // namespace

void init_logging(std::string_view prefix, int verbosity)
{
    auto& s = state();
    std::lock_guard lock(s.mutex);
    s.sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    s.level = verbosity >= 2 ? spdlog::level::debug : verbosity == 1 ? spdlog::level::info : spdlog::level::warn;
    s.pattern = fmt::format("{} %n %l: %v", prefix);
    for (auto& [name, logger] : s.loggers)
        configure(*logger);
}

spdlog::logger& area_logger(const std::string& area)
{
    auto& s = state();
    std::lock_guard lock(s.mutex);
    auto it = s.loggers.find(area);
    if (it == s.loggers.end()) {
        auto logger = std::make_shared<spdlog::logger>(area);
        configure(*logger);
        it = s.loggers.emplace(area, std::move(logger)).first;
    }
    return *it->second;
}

} // namespace canopy
