// Expansion and compression of pdsh-style hostlists.
#include "hosts/hostlist.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <optional>

#include "util/text.hpp"

namespace canopy {
namespace {

// Enough digits for any value to fit in a long.
constexpr std::size_t max_number_digits = 18;

std::optional<long> parse_number(std::string_view digits) { return parse_decimal(digits, max_number_digits); }

// Appends `value` with at least `width` digits, zeros in front. Runs once per host name the launcher expands:
// no formatting library.
void append_padded(std::string& out, long value, std::size_t width)
{
    char digits[24];
    auto [end, error] = std::to_chars(digits, digits + sizeof digits, value);
    std::size_t count = static_cast<std::size_t>(end - digits);
    if (count < width)
        out.append(width - count, '0');
    out.append(digits, count);
}

// How many digits a number of a host name (never negative) has without zeros in front.
std::size_t decimal_digits(long value)
{
    std::size_t count = 1;
    for (; value >= 10; value /= 10)
        ++count;
    return count;
}

class Expander {
public:
    explicit Expander(std::string_view input) : input_(input) {}

    Result<std::vector<HostItem>> run()
    {
        if (trim(input_).empty())
            return fail("empty list; give at least one host name");

        // Split at commas outside brackets, checking bracket balance on the way.
        std::size_t item_start = 0;
        constexpr std::size_t closed = std::string_view::npos;
        std::size_t open_at = closed; // column of the '[' we are inside, if any
        for (std::size_t i = 0; i <= input_.size(); ++i) {
            char c = i < input_.size() ? input_[i] : ',';
            if (c == '[') {
                if (open_at != closed)
                    return fail("nested '[' at column {}; brackets cannot nest", i + 1);
                open_at = i;
            } else if (c == ']') {
                if (open_at == closed)
                    return fail("']' at column {} has no matching '['", i + 1);
                open_at = closed;
            } else if (c == ',' && open_at == closed) {
                if (auto status = add_item(item_start, i); !status)
                    return status.error();
                item_start = i + 1;
            }
            if (i == input_.size() && open_at != closed)
                return fail("'[' at column {} is never closed", open_at + 1);
        }
        return std::move(items_);
    }

private:
    template <typename... Args>
    Error fail(fmt::format_string<Args...> format, Args&&... args) const
    {
        return Error{fmt::format("hostlist \"{}\": {}", input_,
                                 fmt::format(format, std::forward<Args>(args)...))};
    }

    // Parses input_[begin, end) as one item and appends it.
    Status add_item(std::size_t begin, std::size_t end)
    {
        std::string_view raw = input_.substr(begin, end - begin);
        std::string_view item = trim(raw);
        if (item.empty())
            return fail("empty item at column {}; remove the extra ','", begin + 1);
        std::size_t column = begin + static_cast<std::size_t>(item.data() - raw.data()) + 1;

        HostItem parsed;
        long& item_hosts = parsed.count;
        std::size_t i = 0;
        while (i < item.size()) {
            if (item[i] != '[') {
                std::size_t next = item.find('[', i);
                if (next == std::string_view::npos)
                    next = item.size();
                std::string_view text = item.substr(i, next - i);
                for (char c : text)
                    if (is_space(c))
                        return fail("unexpected whitespace in \"{}\"; separate hosts with ','", item);
                parsed.parts.push_back(HostPart{std::string(text), {}, 1});
                i = next;
                continue;
            }
            std::size_t close = item.find(']', i); // balance was checked by run()
            std::string_view group = item.substr(i + 1, close - i - 1);
            auto ranges = parse_group(group, column + i);
            if (!ranges)
                return ranges.error();
            long group_hosts = 0;
            for (HostRange& r : *ranges) {
                r.before = group_hosts;
                group_hosts += r.hi - r.lo + 1;
                if (group_hosts > max_hostlist_hosts)
                    return too_many();
            }
            if (item_hosts > max_hostlist_hosts / group_hosts)
                return too_many();
            item_hosts *= group_hosts;
            parsed.parts.push_back(HostPart{{}, std::move(ranges.value()), group_hosts});
            i = close + 1;
        }
        if (total_ + item_hosts > max_hostlist_hosts)
            return too_many();
        total_ += item_hosts;
        items_.push_back(std::move(parsed));
        return {};
    }

    Error too_many() const
    {
        return fail("expands to more than {} hosts; check the ranges", max_hostlist_hosts);
    }

    // Parses the inside of "[...]"; `column` is where '[' is, for messages.
    Result<std::vector<HostRange>> parse_group(std::string_view group, std::size_t column) const
    {
        std::vector<HostRange> ranges;
        std::size_t start = 0;
        while (true) {
            std::size_t comma = group.find(',', start);
            std::string_view element = trim(group.substr(start, comma == std::string_view::npos
                                                                    ? std::string_view::npos
                                                                    : comma - start));
            if (element.empty())
                return fail("empty range in \"[{}]\" at column {}", group, column);
            std::size_t dash = element.find('-');
            std::string_view lo_text = trim(element.substr(0, dash));
            std::string_view hi_text =
                dash == std::string_view::npos ? lo_text : trim(element.substr(dash + 1));
            auto lo = parse_number(lo_text);
            auto hi = parse_number(hi_text);
            if (!lo || !hi) {
                bool too_long = lo_text.size() > max_number_digits || hi_text.size() > max_number_digits;
                return fail("range \"{}\" at column {} is {}; use [LOW-HIGH] with digits", element,
                            column, too_long ? "too long" : "not numeric");
            }
            if (*hi < *lo)
                return fail("range {} is reversed; write it as {}-{}", element, hi_text, lo_text);
            if (*hi - *lo + 1 > max_hostlist_hosts)
                return fail("range {} has more than {} hosts", element, max_hostlist_hosts);
            ranges.push_back(HostRange{*lo, *hi, lo_text.size()});
            if (comma == std::string_view::npos)
                break;
            start = comma + 1;
        }
        return ranges;
    }

    std::string_view input_;
    std::vector<HostItem> items_;
    long total_ = 0; // hosts in items_
};

// A name cut around its last run of digits: prefix + digits + suffix.
struct SplitName {
    std::string_view prefix;
    std::string_view digits;
    std::string_view suffix;
    long value = 0;
};

std::optional<SplitName> split_last_number(std::string_view name)
{
    std::size_t end = name.size();
    while (end > 0 && !is_digit(name[end - 1]))
        --end;
    if (end == 0)
        return std::nullopt;
    std::size_t begin = end;
    while (begin > 0 && is_digit(name[begin - 1]))
        --begin;
    auto value = parse_number(name.substr(begin, end - begin));
    if (!value)
        return std::nullopt;
    return SplitName{name.substr(0, begin), name.substr(begin, end - begin), name.substr(end), *value};
}

// Writes the numbers of one group as "lo-hi,v,..." so that expansion gives back exactly `numbers`.
void append_ranges(std::string& out, const std::vector<SplitName>& numbers)
{
    std::size_t i = 0;
    while (i < numbers.size()) {
        const SplitName& first = numbers[i];
        std::size_t width = first.digits.size();
        std::size_t j = i + 1;
        while (j < numbers.size() && numbers[j].value == numbers[j - 1].value + 1 &&
               numbers[j].value - first.value < max_hostlist_hosts &&
               // printed as the range would print it: no more zeros in front than `width` asks for
               numbers[j].digits.size() == std::max(width, decimal_digits(numbers[j].value)))
            ++j;
        if (i > 0)
            out += ',';
        out += first.digits;
        if (j - i > 1) {
            out += '-';
            out += numbers[j - 1].digits;
        }
        i = j;
    }
}

} // namespace

Result<std::vector<HostItem>> parse_hostlist(std::string_view list)
{
    try {
        return Expander(list).run();
    } catch (const std::exception& e) {
        return make_error("hostlist \"{}\": {}", list, e.what());
    }
}

std::string hostlist_item_name(const HostItem& item, long index)
{
    std::string name;
    long stride = item.count; // hosts per step of the current part
    for (const HostPart& part : item.parts) {
        if (part.ranges.empty()) {
            name += part.literal;
            continue;
        }
        stride /= part.count;
        long pick = index / stride;
        index %= stride;
        auto range = std::upper_bound(part.ranges.begin(), part.ranges.end(), pick,
                                      [](long value, const HostRange& r) { return value < r.before; });
        --range;
        append_padded(name, range->lo + pick - range->before, range->width);
    }
    return name;
}

Result<std::vector<std::string>> expand_hostlist(std::string_view list)
{
    auto items = parse_hostlist(list);
    if (!items)
        return items.error();
    try {
        std::vector<std::string> hosts;
        for (const HostItem& item : *items)
            for (long i = 0; i < item.count; ++i)
                hosts.push_back(hostlist_item_name(item, i));
        return hosts;
    } catch (const std::exception& e) {
        return make_error("hostlist \"{}\": {}", list, e.what());
    }
}

std::string compress_hostlist(const std::vector<std::string>& hosts)
{
    std::string out;
    std::size_t i = 0;
    while (i < hosts.size()) {
        if (!out.empty())
            out += ',';
        auto first = split_last_number(hosts[i]);
        if (!first) {
            out += hosts[i++];
            continue;
        }
        // Only neighbours join a group, so expansion returns the names in the same order.
        std::vector<SplitName> group{*first};
        std::size_t j = i + 1;
        for (; j < hosts.size(); ++j) {
            auto next = split_last_number(hosts[j]);
            if (!next || next->prefix != first->prefix || next->suffix != first->suffix)
                break;
            group.push_back(*next);
        }
        if (group.size() == 1) {
            out += hosts[i];
        } else {
            out += first->prefix;
            out += '[';
            append_ranges(out, group);
            out += ']';
            out += first->suffix;
        }
        i = j;
    }
    return out;
}

} // namespace canopy
