// The simple PMI wire protocols as a pure codec.
#include "pmi/wire.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace canopy::pmi {
namespace {

constexpr std::size_t length_prefix = 6;   // PMI-2: the command's length in 6 decimal characters

std::string printable(std::string_view text)
{
    std::string out;
    for (char c : text.substr(0, 40))
        out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    return text.size() > 40 ? out + "..." : out;
}

Status add_field(Command& command, std::string_view pair, const Limits& limits)
{
    auto equals = pair.find('=');
    if (equals == 0)
        return make_error("malformed PMI field '{}': expected key=value", printable(pair));
    if (equals == std::string_view::npos)
        equals = pair.size();   // a bare key, as MPICH 4's own parser allows
    if (command.fields.size() >= limits.max_fields)
        return make_error("PMI command has more than {} fields", limits.max_fields);
    auto key = pair.substr(0, equals);
    auto value = equals < pair.size() ? pair.substr(equals + 1) : std::string_view();
    if (command.name.empty() && command.fields.empty() && (key == "cmd" || key == "mcmd")) {
        if (value.empty())
            return make_error("PMI command with an empty {}=", key);
        command.name = value;
        return {};
    }
    if (command.name.empty())
        return make_error("PMI command does not start with cmd=: '{}'", printable(pair));
    command.fields.emplace_back(key, value);
    return {};
}

bool is_length_prefix(std::string_view bytes)
{
    return std::all_of(bytes.begin(), bytes.end(),
                       [](char c) { return c == ' ' || std::isdigit(static_cast<unsigned char>(c)); }) &&
           std::any_of(bytes.begin(), bytes.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

} // namespace

std::optional<std::string_view> Command::find(std::string_view key) const
{
    for (const auto& [name, value] : fields)
        if (name == key)
            return std::string_view(value);
    return std::nullopt;
}

Command& Command::add(std::string key, std::string value)
{
    fields.emplace_back(std::move(key), std::move(value));
    return *this;
}

Result<Command> parse_v1(std::string_view line, const Limits& limits)
{
    Command command;
    std::size_t start = 0;
    while (start < line.size()) {
        if (line[start] == ' ' || line[start] == '\t' || line[start] == '\r') {
            ++start;
            continue;
        }
        std::size_t end = line.find_first_of(" \t\r", start);
        if (end == std::string_view::npos)
            end = line.size();
        if (auto added = add_field(command, line.substr(start, end - start), limits); !added)
            return added.error();
        start = end;
    }
    if (command.name.empty())
        return make_error("empty PMI command");
    return command;
}

Result<Command> parse_v2(std::string_view body, const Limits& limits)
{
    Command command;
    std::string pair;
    for (std::size_t i = 0; i < body.size(); ++i) {
        if (body[i] != ';') {
            pair += body[i];
            continue;
        }
        if (i + 1 < body.size() && body[i + 1] == ';') {   // an escaped ';' inside a value
            pair += ';';
            ++i;
            continue;
        }
        if (auto added = add_field(command, pair, limits); !added)
            return added.error();
        pair.clear();
    }
    if (!pair.empty())   // the last pair's ';' is optional
        if (auto added = add_field(command, pair, limits); !added)
            return added.error();
    if (command.name.empty())
        return make_error("empty PMI-2 command");
    return command;
}

Result<std::optional<Command>> Decoder::next()
{
    if (failed_)
        return *failed_;
    if (!framing_known_ && buffer_.size() >= length_prefix) {
        framing_known_ = true;
        if (is_length_prefix(std::string_view(buffer_).substr(0, length_prefix)))
            wire_ = Wire::v2;
    }
    auto result = wire_ == Wire::v1 ? next_line() : next_framed();
    if (!result)
        failed_ = result.error();
    return result;
}

Result<std::optional<Command>> Decoder::next_line()
{
    // A PMI-1 multi-line command (mcmd=spawn) runs to a line that reads "endcmd".
    // Scanning goes on from where the last call stopped: a rank that sends a long command a byte at a time must not
    // make each byte cost a pass over everything before it.
    bool multi_line = std::string_view(buffer_).starts_with("mcmd=");
    std::size_t end = std::string::npos;
    if (multi_line) {
        for (std::size_t line_start = scanned_; line_start < buffer_.size();) {
            std::size_t newline = buffer_.find('\n', line_start);
            if (newline == std::string::npos)
                break;
            if (std::string_view(buffer_).substr(line_start, newline - line_start) == "endcmd") {
                end = newline;
                break;
            }
            line_start = scanned_ = newline + 1;
        }
    } else {
        end = buffer_.find('\n', scanned_);
        if (end == std::string::npos && buffer_.size() >= 5)   // "mcmd=" can no longer begin it
            scanned_ = buffer_.size();
    }
    if (end == std::string::npos) {
        if (buffer_.size() > limits_.max_message)
            return make_error("PMI line over the limit of {} bytes", limits_.max_message);
        return std::optional<Command>{};
    }
    if (end > limits_.max_message)
        return make_error("PMI line of {} bytes, over the limit of {} bytes", end, limits_.max_message);
    std::string text = buffer_.substr(0, end);
    buffer_.erase(0, end + 1);
    scanned_ = 0;
    if (!multi_line) {
        auto command = parse_v1(text, limits_);
        if (!command)
            return command.error();
        return std::optional<Command>(std::move(*command));
    }
    // One key=value per line; the closing "endcmd" line is not a field.
    Command command;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t newline = text.find('\n', start);
        if (newline == std::string::npos)
            newline = text.size();
        auto line = std::string_view(text).substr(start, newline - start);
        if (!line.empty() && line != "endcmd")
            if (auto added = add_field(command, line, limits_); !added)
                return added.error();
        start = newline + 1;
    }
    return std::optional<Command>(std::move(command));
}

Result<std::optional<Command>> Decoder::next_framed()
{
    if (buffer_.size() < length_prefix)
        return std::optional<Command>{};
    auto prefix = std::string_view(buffer_).substr(0, length_prefix);
    if (!is_length_prefix(prefix))
        return make_error("PMI-2 command without a length prefix: '{}'", printable(prefix));
    std::size_t length = 0;
    for (char c : prefix)
        if (c != ' ')
            length = length * 10 + static_cast<std::size_t>(c - '0');
    if (length > limits_.max_message)
        return make_error("PMI-2 command of {} bytes, over the limit of {} bytes", length, limits_.max_message);
    if (buffer_.size() < length_prefix + length)
        return std::optional<Command>{};
    auto command = parse_v2(std::string_view(buffer_).substr(length_prefix, length), limits_);
    buffer_.erase(0, length_prefix + length);
    if (!command)
        return command.error();
    return std::optional<Command>(std::move(*command));
}

std::string encode_v1(const Command& command)
{
    auto clean = [](std::string_view text) {
        std::string out(text);
        // Whatever parse_v1 splits on: a value from a PMI-2 client may hold any of them.
        std::replace_if(out.begin(), out.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; },
                        '_');
        return out;
    };
    std::string line = "cmd=" + clean(command.name);
    for (const auto& [key, value] : command.fields)
        line += " " + clean(key) + "=" + clean(value);
    return line + "\n";
}

std::string encode_v2(const Command& command)
{
    auto escape = [](std::string_view text) {
        std::string out;
        for (char c : text) {
            out += c;
            if (c == ';')
                out += ';';
        }
        return out;
    };
    std::string body = "cmd=" + escape(command.name) + ";";
    for (const auto& [key, value] : command.fields)
        body += escape(key) + "=" + escape(value) + ";";
    return fmt::format("{:<6}", body.size()) + body;
}

std::string encode(Wire wire, const Command& command)
{
    return wire == Wire::v1 ? encode_v1(command) : encode_v2(command);
}

} // namespace canopy::pmi
