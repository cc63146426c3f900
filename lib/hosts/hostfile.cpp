// Parsing of hostfiles and of SLURM's node list into host entries with slots.
#include "hosts/hostfile.hpp"
#include "util/read_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <optional>
#include <system_error>
#include <unordered_map>

#include "hosts/hostlist.hpp"
#include "util/text.hpp"

namespace canopy {
namespace {

// A decimal in 1..INT_MAX, or nothing.
std::optional<int> parse_positive(std::string_view text)
{
    auto value = parse_decimal(text, 10);
    if (!value || *value < 1 || *value > std::numeric_limits<int>::max())
        return std::nullopt;
    return static_cast<int>(*value);
}

// Splits at whitespace, except inside brackets ("n[1, 3]") and around '=' so that "slots = 4" reads as
// "slots=4" (Open MPI allows it).
std::vector<std::string> split_fields(std::string_view line)
{
    std::vector<std::string> fields;
    std::string current;
    bool glue = false; // the last non-space character was '='
    bool in_brackets = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        char c = line[i];
        if (c == '[' || c == ']')
            in_brackets = c == '[';
        if (is_space(c) && !in_brackets) {
            std::size_t next = i;
            while (next < line.size() && is_space(line[next]))
                ++next;
            bool next_is_eq = next < line.size() && line[next] == '=';
            if (!current.empty() && !glue && !next_is_eq) {
                fields.push_back(std::move(current));
                current.clear();
            }
            i = next - 1;
            continue;
        }
        current += c;
        glue = c == '=';
    }
    if (!current.empty())
        fields.push_back(std::move(current));
    return fields;
}

// A host while parsing: merged lines so far and whether they gave slots.
struct PendingHost {
    std::string name;
    long slots = 0; // sum of explicit slots, or number of lines when none were given
    bool explicit_slots = false;
    int first_line = 0;
    int last_line = 0;
};

class HostfileParser {
public:
    explicit HostfileParser(std::string_view file_name) : file_(file_name) {}

    Status add_line(std::string_view raw, int line_no)
    {
        line_ = line_no;
        std::string_view line = raw.substr(0, raw.find('#'));
        line = trim(line);
        if (line.empty())
            return {};
        std::vector<std::string> fields = split_fields(line);

        std::string_view name = fields[0];
        std::optional<int> slots;
        if (std::size_t colon = name.rfind(':'); colon != std::string_view::npos) {
            auto parsed = parse_slots(name.substr(colon + 1));
            if (!parsed)
                return parsed.error();
            slots = *parsed;
            name = name.substr(0, colon);
            if (name.empty())
                return fail("missing host name before ':' in \"{}\"", fields[0]);
        }
        for (std::size_t i = 1; i < fields.size(); ++i) {
            std::string_view field = fields[i];
            if (field.starts_with("slots=")) {
                if (slots)
                    return fail("slots given twice for \"{}\"; keep one", name);
                auto parsed = parse_slots(field.substr(6));
                if (!parsed)
                    return parsed.error();
                slots = *parsed;
            } else if (field.starts_with("max_slots=")) {
                // Open MPI's oversubscription limit; canopy places by slots or --ppn only.
            } else {
                return fail("unknown field \"{}\"; expected \"host\", \"host:N\" or \"host slots=N\"",
                            field);
            }
        }

        auto names = expand_hostlist(name);
        if (!names)
            return fail("{}", names.error().message);
        for (std::string& host : *names)
            if (auto status = add_host(std::move(host), slots); !status)
                return status;
        return {};
    }

    std::vector<HostEntry> finish() const
    {
        // A host listed on several lines without slots means the file lists one line per slot
        // (PBS_NODEFILE); then every host without slots gets its line count, even a count of one.
        bool per_slot_lines = false;
        for (const PendingHost& host : hosts_)
            if (!host.explicit_slots && host.slots > 1)
                per_slot_lines = true;
        std::vector<HostEntry> entries;
        entries.reserve(hosts_.size());
        for (const PendingHost& host : hosts_) {
            int slots = host.explicit_slots || per_slot_lines ? static_cast<int>(host.slots) : 0;
            entries.push_back(HostEntry{host.name, slots});
        }
        return entries;
    }

private:
    template <typename... Args>
    Error fail(fmt::format_string<Args...> format, Args&&... args) const
    {
        return Error{fmt::format("hostfile {}:{}: {}", file_, line_,
                                 fmt::format(format, std::forward<Args>(args)...))};
    }

    Result<int> parse_slots(std::string_view text) const
    {
        if (auto slots = parse_positive(text))
            return *slots;
        return fail("slots must be a positive integer, got \"{}\"", text);
    }

    Status add_host(std::string host, std::optional<int> slots)
    {
        // DNS names stop at 253 characters; a longer "name" is a file that is not a hostfile.
        if (host.size() > 253)
            return fail("a host name of {} characters (\"{}...\"); host names have at most 253", host.size(),
                        host.substr(0, 20));
        if (!hosts_.empty() && hosts_.back().name == host) {
            PendingHost& last = hosts_.back();
            if (last.explicit_slots != slots.has_value()) {
                int with = slots ? line_ : last.last_line;
                int without = slots ? last.last_line : line_;
                return fail("host \"{}\" has slots on line {} but not on line {}; give slots on both "
                            "lines or on neither",
                            host, with, without);
            }
            last.slots += slots ? *slots : 1;
            if (last.slots > std::numeric_limits<int>::max())
                return fail("slots for host \"{}\" add up to more than {}", host,
                            std::numeric_limits<int>::max());
            last.last_line = line_;
            return {};
        }
        if (auto it = index_.find(host); it != index_.end())
            return fail("host \"{}\" is already listed on line {}; list each host once, or on "
                        "consecutive lines",
                        host, hosts_[it->second].first_line);
        index_.emplace(host, hosts_.size());
        hosts_.push_back(PendingHost{std::move(host), slots ? *slots : 1, slots.has_value(), line_, line_});
        return {};
    }

    std::string_view file_;
    int line_ = 0;
    std::vector<PendingHost> hosts_;
    std::unordered_map<std::string, std::size_t> index_;
};

Result<std::vector<int>> parse_tasks_per_node(std::string_view text)
{
    auto fail = [&](std::string_view why) {
        return make_error("SLURM_TASKS_PER_NODE \"{}\": {}; expected a list like \"2(x3),1\"", text, why);
    };
    std::vector<int> counts;
    std::size_t start = 0;
    while (true) {
        std::size_t comma = text.find(',', start);
        std::string_view item =
            trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
        std::string_view count_text = item;
        long repeat = 1;
        if (std::size_t paren = item.find('('); paren != std::string_view::npos) {
            count_text = item.substr(0, paren);
            std::string_view rest = item.substr(paren + 1);
            if (!rest.starts_with("x") || !rest.ends_with(")"))
                return fail(fmt::format("\"{}\" is malformed", item));
            auto times = parse_positive(rest.substr(1, rest.size() - 2));
            if (!times)
                return fail(fmt::format("\"{}\" has a bad repeat count", item));
            repeat = *times;
        }
        auto count = parse_positive(trim(count_text));
        if (!count)
            return fail(fmt::format("\"{}\" is not a positive task count", item));
        if (static_cast<long>(counts.size()) + repeat > max_hostlist_hosts)
            return fail("describes too many nodes");
        counts.insert(counts.end(), static_cast<std::size_t>(repeat), *count);
        if (comma == std::string_view::npos)
            break;
        start = comma + 1;
    }
    return counts;
}

} // namespace

Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, std::string_view file_name)
{
    try {
        HostfileParser parser(file_name);
        int line_no = 0;
        std::size_t start = 0;
        while (start < text.size()) {
            std::size_t end = text.find('\n', start);
            if (end == std::string_view::npos)
                end = text.size();
            if (auto status = parser.add_line(text.substr(start, end - start), ++line_no); !status)
                return status.error();
            start = end + 1;
        }
        return parser.finish();
    } catch (const std::exception& e) {
        return make_error("hostfile {}: {}", file_name, e.what());
    }
}

Result<std::vector<HostEntry>> read_hostfile(const std::string& path)
{
    // A million hosts of 60 characters: anything larger is not a hostfile.
    auto text = read_file(path, std::size_t{64} << 20, "hostfile");
    if (!text)
        return text.error();
    auto entries = parse_hostfile(*text, path);
    if (entries && entries->empty())
        return make_error("hostfile {}: no hosts listed; add one host name per line", path);
    return entries;
}

Result<std::vector<HostEntry>> parse_hosts_option(std::string_view list)
{
    std::vector<HostEntry> hosts;
    int depth = 0;
    std::size_t begin = 0;
    for (std::size_t i = 0; i <= list.size(); ++i) {
        char c = i < list.size() ? list[i] : ',';
        depth += c == '[' ? 1 : c == ']' && depth > 0 ? -1 : 0;
        if (i < list.size() && (c != ',' || depth > 0))
            continue;   // the end always closes an item, an unbalanced '[' included, for the hostlist to report
        std::string_view item = trim(list.substr(begin, i - begin));
        begin = i + 1;
        int slots = 0;
        std::size_t colon = item.find(':');
        if (colon != std::string_view::npos && colon == item.rfind(':')) {
            std::string_view count = item.substr(colon + 1);
            auto parsed = parse_positive(count);
            if (!parsed)
                return make_error("--hosts \"{}\": slots must be a positive integer, got \"{}\"", item, count);
            if (colon == 0)
                return make_error("--hosts \"{}\": missing host name before ':'", item);
            slots = *parsed;
            item = item.substr(0, colon);
        }
        // Each item alone, so that an error quotes it; the whole list still obeys the hostlist's limit.
        auto names = expand_hostlist(item);
        if (!names)
            return names.error();
        if (hosts.size() + names->size() > static_cast<std::size_t>(max_hostlist_hosts))
            return make_error("--hosts names more than {} hosts", max_hostlist_hosts);
        for (auto& name : *names)
            hosts.push_back({std::move(name), slots});
    }
    return hosts;
}

Result<std::vector<HostEntry>> hosts_from_slurm(std::string_view nodelist, std::string_view tasks_per_node)
{
    try {
        auto names = expand_hostlist(nodelist);
        if (!names)
            return make_error("SLURM_JOB_NODELIST: {}", names.error().message);
        std::vector<HostEntry> entries;
        entries.reserve(names->size());
        for (std::string& name : *names)
            entries.push_back(HostEntry{std::move(name), 0});
        if (trim(tasks_per_node).empty())
            return entries;

        auto counts = parse_tasks_per_node(tasks_per_node);
        if (!counts)
            return counts.error();
        if (counts->size() != entries.size())
            return make_error("SLURM_TASKS_PER_NODE \"{}\" describes {} nodes but SLURM_JOB_NODELIST "
                              "\"{}\" has {}; run inside one SLURM allocation or give --hostfile",
                              tasks_per_node, counts->size(), nodelist, entries.size());
        for (std::size_t i = 0; i < entries.size(); ++i)
            entries[i].slots = (*counts)[i];
        return entries;
    } catch (const std::exception& e) {
        return make_error("SLURM_JOB_NODELIST \"{}\": {}", nodelist, e.what());
    }
}

} // namespace canopy
