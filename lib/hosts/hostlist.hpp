// pdsh-style hostlists ("nid[001-004,010],login1"): expand to names and compress names back.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

// Most hosts one list may name; guards against a typo like "n[0-99999999]" eating all memory.
inline constexpr long max_hostlist_hosts = 1'000'000;

// "nid[001-004,010],login1" -> nid001 nid002 nid003 nid004 nid010 login1. A range keeps the zero padding
// of its low end ("[08-10]" -> 08 09 10). Several bracket groups multiply: "a[1-2]b[3-4]" -> a1b3 a1b4
// a2b3 a2b4. Commas outside brackets separate items; whitespace around items and range elements is
// ignored. Errors are one line quoting the input, e.g. `hostlist "nid[5-3]": range 5-3 is reversed`.
Result<std::vector<std::string>> expand_hostlist(std::string_view list);

// Inverse of expand_hostlist for compact messages and logs: consecutive names that differ only in
// their last number run share one bracket group, and order is kept, e.g.
// {nid001,nid002,nid003,nid010,login1} -> "nid[001-003,010],login1".
// expand_hostlist(compress_hostlist(v)) == v for any v whose names are valid (no brackets, commas or
// whitespace).
std::string compress_hostlist(const std::vector<std::string>& hosts);

// The parsed form of a list, for HostNames to name its i-th host without expanding the rest.
struct HostRange {
    long lo = 0;
    long hi = 0;
    std::size_t width = 0; // digits at least, zeros in front
    long before = 0;       // hosts in the group's earlier ranges
};
// Literal text, or a bracket group when `ranges` is non-empty.
struct HostPart {
    std::string literal;
    std::vector<HostRange> ranges;
    long count = 1; // hosts it gives
};
// One comma-separated item: the product of its parts, the last part varying fastest.
struct HostItem {
    std::vector<HostPart> parts;
    long count = 1;
};

// Parses and checks a list as expand_hostlist does (the same errors) without making its names.
Result<std::vector<HostItem>> parse_hostlist(std::string_view list);

// The `index`-th host (0 <= index < item.count) of an item, in expansion order.
std::string hostlist_item_name(const HostItem& item, long index);

} // namespace canopy
