// libcanopy's errors: canopy::Error carrying the CANOPY_ERR_* code the C ABI returns (canopy/canopy.h).
#pragma once

#include <utility>

#include <fmt/format.h>

#include <canopy/canopy.h>

#include "util/result.hpp"

namespace canopy::api {

template <typename... Args>
Error fail(int code, fmt::format_string<Args...> format, Args&&... args)
{
    return Error{fmt::format(format, std::forward<Args>(args)...), code};
}

inline Status done() { return {}; }

} // namespace canopy::api
