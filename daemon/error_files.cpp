#include "error_files.hpp"

#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace canopy {
namespace {

constexpr std::size_t max_file_bytes = 1 << 20;
constexpr std::size_t max_traceback_bytes = 64 * 1024;

// The innermost frame of a Python traceback: 'File "x.py", line 12, in main' -> "x.py:12 in main".
std::string innermost_frame(const std::string& traceback)
{
    static const std::regex frame(R"re(File "([^"]+)", line (\d+), in (\S+))re");
    std::string where;
    for (auto it = std::sregex_iterator(traceback.begin(), traceback.end(), frame); it != std::sregex_iterator();
         ++it)
        where = fmt::format("{}:{} in {}", (*it)[1].str(), (*it)[2].str(), (*it)[3].str());
    return where;
}

} // namespace

std::string error_file_for(const std::string& node_tmpdir, long rank)
{
    return fmt::format("{}/rank-{}.error.json", node_tmpdir, rank);
}

std::optional<RecordedError> read_error_file(const std::string& path)
{
    std::ifstream file(path, std::ios::binary);
    if (!file)
        return std::nullopt;
    std::string text(max_file_bytes, '\0');
    file.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(file.gcount()));
    auto document = nlohmann::json::parse(text, nullptr, false);
    if (document.is_discarded() || !document.is_object() || !document.contains("message"))
        return std::nullopt;
    // {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "..."}}}, or a plain string.
    const auto& message = document["message"];
    RecordedError recorded;
    if (message.is_string()) {
        recorded.summary = message.get<std::string>();
    } else if (message.is_object() && message.contains("message") && message["message"].is_string()) {
        recorded.summary = message["message"].get<std::string>();
        const auto& extra = message.value("extraInfo", nlohmann::json::object());
        if (extra.is_object() && extra.contains("py_callstack") && extra["py_callstack"].is_string())
            recorded.traceback = extra["py_callstack"].get<std::string>().substr(0, max_traceback_bytes);
    } else {
        return std::nullopt;
    }
    // One line: an exception's message may span several.
    if (auto newline = recorded.summary.find('\n'); newline != std::string::npos)
        recorded.summary = recorded.summary.substr(0, newline) + " ...";
    if (auto where = innermost_frame(recorded.traceback); !where.empty())
        recorded.summary += fmt::format(" (at {})", where);
    return recorded;
}

} // namespace canopy
