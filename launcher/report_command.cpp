// `canopy report`: prints a saved --timing JSON file again, or two side by side.
#include "report_command.hpp"

#include <fmt/format.h>

#include "timing/report.hpp"
#include "util/read_file.hpp"

namespace canopy {
namespace {

constexpr const char* report_usage =
    "usage: canopy report FILE.json              print the timing report of a job run with --timing=FILE.json\n"
    "       canopy report BEFORE.json AFTER.json compare two runs: every step and phase median, and the ratio\n";

Result<timing::JobTiming> load(const std::string& path)
{
    auto text = read_file(path, std::size_t{1} << 30, "timing report");
    if (!text)
        return text.error();
    return timing::parse_timing_json(*text, path);
}

} // namespace

int run_report_command(const std::vector<std::string>& args)
{
    if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
        fmt::print("{}", report_usage);
        return 0;
    }
    if (args.empty() || args.size() > 2) {
        fmt::print(stderr, "canopy report: give one timing file, or two to compare\n{}", report_usage);
        return 2;
    }
    std::vector<timing::JobTiming> runs;
    for (const auto& path : args) {
        auto run = load(path);
        if (!run) {
            fmt::print(stderr, "canopy report: {}\n", run.error().message);
            return 2;
        }
        runs.push_back(std::move(*run));
    }
    if (runs.size() == 1)
        fmt::print("{}", timing::format_report(runs[0]));
    else
        fmt::print("{}", timing::format_comparison(runs[0], runs[1], args[0], args[1]));
    return 0;
}

} // namespace canopy
