// Small text helpers shared by the parsers.
#include "util/text.hpp"

#include <utility>

namespace canopy {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view text)
{
    while (!text.empty() && is_space(text.front()))
        text.remove_prefix(1);
    while (!text.empty() && is_space(text.back()))
        text.remove_suffix(1);
    return text;
}

std::optional<long> parse_decimal(std::string_view digits, std::size_t max_digits)
{
    if (digits.empty() || digits.size() > max_digits)
        return std::nullopt;
    long value = 0;
    for (char c : digits) {
        if (!is_digit(c))
            return std::nullopt;
        value = value * 10 + (c - '0');
    }
    return value;
}

std::vector<std::string> split_commas(std::string_view text)
{
    std::vector<std::string> items;
    while (!text.empty()) {
        auto comma = text.find(',');
        if (auto item = text.substr(0, comma); !item.empty())
            items.emplace_back(item);
        if (comma == std::string_view::npos)
            break;
        text.remove_prefix(comma + 1);
    }
    return items;
}

Result<std::vector<std::string>> split_shell_words(std::string_view line)
{
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        char c = line[i];
        if (is_space(c)) {
            if (in_word)
                words.push_back(std::exchange(word, {}));
            in_word = false;
            continue;
        }
        in_word = true;
        if (c == '\\') {
            if (++i < line.size())
                word += line[i];
        } else if (c == '\'' || c == '"') {
            std::size_t close = i + 1;
            for (; close < line.size() && line[close] != c; ++close) {
                if (c == '"' && line[close] == '\\' && close + 1 < line.size() &&
                    (line[close + 1] == '"' || line[close + 1] == '\\'))
                    ++close;
                word += line[close];
            }
            if (close >= line.size())
                return make_error("unclosed {} quote", c == '"' ? "double" : "single");
            i = close;
        } else {
            word += c;
        }
    }
    if (in_word)
        words.push_back(std::move(word));
    return words;
}

} // namespace canopy
