// The synthetic exchange's spec, values and result index.
#include "synthetic/synthetic_exchange.hpp"

#include <charconv>

#include <fmt/format.h>

#include "util/byte_size.hpp"
#include "wire/codec.hpp"

namespace canopy::synthetic {
namespace {

// 64 characters that PMI-1 and PMI-2 carry as they are (no space, '=' or ';').
constexpr std::string_view alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";

std::uint64_t mix(std::uint64_t x)
{
    // splitmix64: cheap, and every rank's stream differs from its neighbours'.
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

std::optional<long> whole_number(std::string_view text)
{
    long value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 0)
        return std::nullopt;
    return value;
}

constexpr std::string_view spec_usage = "R[:BYTES][:pmi|pmix|dmodex][:gets=N][:corrupt=RANK], such as 120:100 or "
                                        "120:1KiB:dmodex";

} // namespace

std::string_view path_name(Path path)
{
    switch (path) {
    case Path::pmi: return "pmi";
    case Path::pmix: return "pmix";
    case Path::dmodex: return "dmodex";
    }
    return "?";
}

Result<Spec> parse_spec(std::string_view text)
{
    Spec spec;
    std::vector<std::string_view> parts;
    for (std::size_t start = 0;;) {
        auto colon = text.find(':', start);
        parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
        if (colon == std::string_view::npos)
            break;
        start = colon + 1;
    }
    auto ranks = whole_number(parts[0]);
    if (!ranks || *ranks < 1)
        return make_error("'{}': the ranks per node must be a whole number of at least 1; give {}", text, spec_usage);
    spec.ranks_per_node = *ranks;
    bool bytes_given = false;
    for (std::size_t i = 1; i < parts.size(); ++i) {
        std::string_view part = parts[i];
        if (part == "pmi" || part == "pmix" || part == "dmodex") {
            spec.path = part == "pmi" ? Path::pmi : part == "pmix" ? Path::pmix : Path::dmodex;
        } else if (part.starts_with("gets=") || part.starts_with("corrupt=")) {
            bool gets = part.starts_with("gets=");
            auto number = whole_number(part.substr(part.find('=') + 1));
            if (!number)
                return make_error("'{}': {} needs a whole number; give {}", text, part.substr(0, part.find('=')),
                                  spec_usage);
            (gets ? spec.gets : spec.corrupt_rank) = *number;
        } else if (!bytes_given && !part.empty() && part[0] >= '0' && part[0] <= '9') {
            auto size = parse_byte_size(part);
            if (!size || *size < 1)
                return make_error("'{}': the bytes a rank puts must be a size of at least 1, such as 100 or 1KiB",
                                  text);
            spec.bytes = static_cast<std::size_t>(*size);
            bytes_given = true;
        } else {
            return make_error("'{}': '{}' is not understood; give {}", text, part, spec_usage);
        }
    }
    return spec;
}

std::string to_string(const Spec& spec)
{
    std::string text = fmt::format("{}:{}:{}:gets={}", spec.ranks_per_node, spec.bytes, path_name(spec.path), spec.gets);
    if (spec.corrupt_rank >= 0)
        text += fmt::format(":corrupt={}", spec.corrupt_rank);
    return text;
}

std::string key_of(long rank) { return fmt::format("ep{}", rank); }

std::string value_of(long rank, std::size_t bytes)
{
    std::string value(bytes, ' ');
    std::uint64_t state = static_cast<std::uint64_t>(rank);
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < bytes; ++i) {
        if (i % 10 == 0)
            bits = state = mix(state);
        value[i] = alphabet[bits & 63];
        bits >>= 6;
    }
    return value;
}

std::string corrupted_value_of(long rank, std::size_t bytes)
{
    std::string value = value_of(rank, bytes);
    value[0] = value[0] == 'x' ? 'y' : 'x';
    return value;
}

std::vector<long> peers_of(long rank, long world_size, long ranks_per_node, long gets)
{
    std::vector<long> peers;
    for (long k = 0; k < gets && world_size > 0; ++k) {
        std::uint64_t spread = mix(static_cast<std::uint64_t>(rank) * 31 + static_cast<std::uint64_t>(k));
        long peer = k == 0   ? rank + 1
                    : k == 1 ? rank + ranks_per_node
                             : static_cast<long>(spread % static_cast<std::uint64_t>(world_size));
        peers.push_back(peer % world_size);
    }
    return peers;
}

std::string check_value(long reader, long peer, std::string_view got, std::size_t bytes)
{
    std::string expected = value_of(peer, bytes);
    if (got == expected)
        return {};
    if (got.size() != expected.size())
        return fmt::format("synthetic rank {} read {} bytes for rank {}'s key {}, which put {}", reader, got.size(), peer,
                           key_of(peer), expected.size());
    std::size_t at = 0;
    while (at < got.size() && got[at] == expected[at])
        ++at;
    return fmt::format("synthetic rank {} read a wrong value for rank {}'s key {}: byte {} of {} is '{}', not '{}'",
                       reader, peer, key_of(peer), at, got.size(), got[at], expected[at]);
}

Bytes encode_values(const std::vector<std::pair<long, std::string>>& values)
{
    wire::Writer writer;
    for (const auto& [rank, value] : values) {
        writer.varint(static_cast<std::uint64_t>(rank));
        writer.string(value);
    }
    return writer.take();
}

Result<ValueIndex> ValueIndex::build(Bytes result, long world_size)
{
    ValueIndex index;
    index.result_ = std::move(result);
    index.offsets_.assign(static_cast<std::size_t>(std::max(world_size, 0L)), 0);
    wire::Reader reader(index.result_);
    while (reader.ok() && !reader.at_end()) {
        std::uint64_t rank = reader.varint();
        std::size_t at = index.result_.size() - reader.remaining();
        (void)reader.bytes_view();
        if (!reader.ok())
            break;
        if (rank >= index.offsets_.size())
            return make_error("a synthetic fence result names rank {}, outside the job's {} ranks", rank, world_size);
        index.offsets_[rank] = at + 1;
    }
    if (!reader.ok())
        return make_error("malformed synthetic fence result ({} bytes)", index.result_.size());
    return index;
}

std::optional<std::string_view> ValueIndex::find(long rank) const
{
    if (rank < 0 || static_cast<std::size_t>(rank) >= offsets_.size() || offsets_[rank] == 0)
        return std::nullopt;
    wire::Reader reader(std::span<const std::uint8_t>(result_).subspan(offsets_[rank] - 1));
    auto value = reader.bytes_view();
    return std::string_view(reinterpret_cast<const char*>(value.data()), value.size());
}

} // namespace canopy::synthetic
