// A job's host names answered from the compressed hostlist.
#include "hosts/host_names.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace canopy {

namespace {

// Whether the parsed list names exactly `names`, in order.
bool names_exactly(const std::vector<HostItem>& items, const std::vector<std::string>& names)
{
    std::size_t next = 0;
    for (const HostItem& item : items)
        for (long i = 0; i < item.count; ++i)
            if (next >= names.size() || hostlist_item_name(item, i) != names[next++])
                return false;
    return next == names.size();
}

std::vector<HostItem> items_of(const std::string& compressed, const std::vector<std::string>& names)
{
    // The launcher's names are the user's: if the hostlist syntax cannot carry one as it is, the launcher still
    // answers with the name as given (sending it fails as it always has).
    if (auto items = parse_hostlist(compressed); items && names_exactly(*items, names))
        return std::move(*items);
    std::vector<HostItem> literal;
    for (const auto& name : names)
        literal.push_back(HostItem{{HostPart{name, {}, 1}}, 1});
    return literal;
}

} // namespace

HostNames::HostNames(const std::vector<std::string>& names)
    : text_(compress_hostlist(names)), items_(items_of(text_, names))
{
    count_ends();
}

HostNames::HostNames(std::string text, std::vector<HostItem> items) : text_(std::move(text)), items_(std::move(items))
{
    count_ends();
}

void HostNames::count_ends()
{
    std::size_t total = 0;
    for (const HostItem& item : items_)
        ends_.push_back(total += static_cast<std::size_t>(item.count));
}

Result<HostNames> HostNames::parse(std::string_view list)
{
    auto items = parse_hostlist(list);
    if (!items)
        return items.error();
    return HostNames(std::string(list), std::move(*items));
}

std::string HostNames::operator[](std::size_t index) const
{
    auto end = std::upper_bound(ends_.begin(), ends_.end(), index);
    std::size_t item = static_cast<std::size_t>(end - ends_.begin());
    std::size_t first = item == 0 ? 0 : ends_[item - 1];
    return hostlist_item_name(items_[item], static_cast<long>(index - first));
}

std::string HostNames::at(std::size_t index) const
{
    if (index >= size())
        throw std::out_of_range(fmt::format("host {} of a list of {}", index, size()));
    return (*this)[index];
}

std::vector<std::string> HostNames::expand() const
{
    std::vector<std::string> names;
    names.reserve(size());
    for (const HostItem& item : items_)
        for (long i = 0; i < item.count; ++i)
            names.push_back(hostlist_item_name(item, i));
    return names;
}

bool operator==(const HostNames& a, const HostNames& b)
{
    // The same text is the same names; other spellings ("a1,a2" and "a[1-2]") are compared by name.
    if (a.text_ == b.text_)
        return true;
    if (a.size() != b.size())
        return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i])
            return false;
    return true;
}

} // namespace canopy
