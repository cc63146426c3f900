// Job-store request payloads as ranks send them (docs/libcanopy.md), built byte by byte for the store's unit tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "collective/job_store.hpp"

namespace canopy::store_requests {

using Bytes = std::vector<std::uint8_t>;

inline Bytes text(std::string_view s) { return Bytes(s.begin(), s.end()); }

// Appends a value in native (little-endian) byte order.
template <typename T>
void put(Bytes& out, T value)
{
    std::size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &value, sizeof(T));
}

// A u32 size, then the text.
inline Bytes sized(std::string_view s)
{
    Bytes out;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
    return out;
}

inline Bytes cat(Bytes a, const Bytes& b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

inline Bytes set_request(std::string_view key, std::string_view value) { return cat(sized(key), text(value)); }

inline Bytes get_request(std::string_view key, std::uint32_t timeout_ms = JobStore::wait_forever)
{
    Bytes out;
    put(out, timeout_ms);
    return cat(out, text(key));
}

inline Bytes keys_request(std::vector<std::string_view> keys)
{
    Bytes out;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(keys.size()));
    for (auto key : keys)
        out = cat(out, sized(key));
    return out;
}

inline Bytes wait_request(std::vector<std::string_view> keys, std::uint32_t timeout_ms = JobStore::wait_forever)
{
    Bytes out;
    put(out, timeout_ms);
    return cat(out, keys_request(std::move(keys)));
}

inline Bytes add_request(std::string_view key, std::int64_t delta)
{
    Bytes out;
    put(out, delta);
    return cat(out, text(key));
}

} // namespace canopy::store_requests
