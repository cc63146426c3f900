// What a phase mark may be called: checked by libcanopy, by canopyd's app server and by --mark-on-output.
#pragma once

#include <string_view>

#include "canopy/canopy.h"

namespace canopy::timing {

// Mark names are short and plain (1 to CANOPY_MARK_NAME_MAX of A-Z a-z 0-9 _ . : -), so they read well in
// reports and cannot break the JSON or the table.
inline bool valid_mark_name(std::string_view name)
{
    if (name.empty() || name.size() > CANOPY_MARK_NAME_MAX)
        return false;
    for (char c : name) {
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '.' || c == ':' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

} // namespace canopy::timing
