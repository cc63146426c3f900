// `canopy report`: prints a saved --timing report again, or two side by side, or writes either as an HTML page.
#include "report_command.hpp"

#include <fmt/format.h>

#include "report_files.hpp"
#include "timing/html_report.hpp"
#include "timing/report.hpp"
#include "util/read_file.hpp"

namespace canopy {
namespace {

constexpr const char* report_usage =
    "usage: canopy report FILE.json              print the timing report of a job run with --timing=FILE.json\n"
    "       canopy report BEFORE.json AFTER.json compare two runs: each step, and each phase's median, p99, max\n"
    "       canopy report --html OUT.html FILE.json [OTHER.json]\n"
    "                                            write the report or the comparison as a page with charts\n"
    "A page written by --timing=FILE.html or --html can be read back in place of its JSON.\n";

// A --timing JSON file, or a page that embeds one (--timing=FILE.html, canopy report --html).
Result<timing::JobTiming> load(const std::string& path)
{
    auto text = read_file(path, std::size_t{1} << 30, "timing report");
    if (!text)
        return text.error();
    if (auto embedded = timing::embedded_timing_json(*text))
        return timing::parse_timing_json(*embedded, path);
    if (text->find_first_not_of(" \t\r\n") != std::string::npos && (*text)[text->find_first_not_of(" \t\r\n")] == '<')
        return make_error("{} is a page with no canopy timing report in it; expected a file written by canopy "
                          "--timing=FILE.json or FILE.html",
                          path);
    return timing::parse_timing_json(*text, path);
}

int usage(const std::string& message)
{
    fmt::print(stderr, "canopy: report: {}; see canopy report --help\n", message);
    return 2;
}

} // namespace

int run_report_command(const std::vector<std::string>& args)
{
    if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
        fmt::print("{}", report_usage);
        return 0;
    }
    std::optional<std::string> html;
    std::vector<std::string> files;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--html" || arg.starts_with("--html=")) {
            std::string value = arg == "--html" ? (i + 1 < args.size() ? args[++i] : std::string()) : arg.substr(7);
            if (value.empty())
                return usage("--html needs the page's file name, e.g. --html report.html");
            html = std::move(value);
        } else if (arg.starts_with("-") && arg != "-") {
            return usage(fmt::format("unknown option '{}'", arg));
        } else {
            files.push_back(arg);
        }
    }
    if (files.empty() || files.size() > 2)
        return usage("give one timing file, or two to compare");
    if (html)
        if (auto writable = check_report_file(*html); !writable) {
            fmt::print(stderr, "canopy: report: --html: {}\n", writable.error().message);
            return 2;
        }

    std::vector<timing::JobTiming> runs;
    for (const auto& path : files) {
        auto run = load(path);
        if (!run) {
            fmt::print(stderr, "canopy: {}\n", run.error().message);
            return 2;
        }
        runs.push_back(std::move(*run));
    }
    if (html) {
        const std::string page = runs.size() == 1 ? timing::format_html_report(runs[0], files[0])
                                                  : timing::format_html_comparison(runs[0], runs[1], files[0], files[1]);
        if (auto written = write_report_file(*html, page); !written) {
            fmt::print(stderr, "canopy: report: --html: {}\n", written.error().message);
            return 2;
        }
        return 0;
    }
    if (runs.size() == 1)
        fmt::print("{}", timing::format_report(runs[0]));
    else
        fmt::print("{}", timing::format_comparison(runs[0], runs[1], files[0], files[1]));
    return 0;
}

} // namespace canopy
