// What each of a node's ranks keeps in the job's stores, against the limit per rank.
#include "collective/store_limit.hpp"

#include <utility>

#include <fmt/format.h>

#include "util/byte_size.hpp"

namespace canopy {

namespace {

// PMIx's packing of a fence contribution around each rank's data: its name, the keys' names and types.
constexpr std::uint64_t packing_per_rank = 4096;

// "rank 3", or "ranks 0, 1, 2" (the first eight, then how many more).
std::string name_ranks(const std::vector<long>& ranks)
{
    if (ranks.size() == 1)
        return fmt::format("rank {}", ranks.front());
    std::string names;
    for (std::size_t i = 0; i < ranks.size() && i < 8; ++i)
        names += fmt::format("{}{}", i == 0 ? "" : ", ", ranks[i]);
    if (ranks.size() > 8)
        names += fmt::format(" and {} more", ranks.size() - 8);
    return "ranks " + names;
}

} // namespace

StoreLimit::StoreLimit(std::uint64_t limit, std::string node, Over over)
    : limit_(limit), node_(std::move(node)), over_(std::move(over))
{
}

bool StoreLimit::keep(long rank, const std::string& key, std::uint64_t bytes, std::string_view how)
{
    if (limit_ == 0)
        return true;
    Account& account = accounts_[rank];
    auto found = account.keys.find(key);
    std::uint64_t before = found == account.keys.end() ? 0 : found->second;
    std::uint64_t total = account.total - before + bytes;
    if (total > limit_) {
        report(rank, fmt::format("rank {} on {} would store {} with {}, over the limit of {} a rank ({})", rank, node_,
                                 format_byte_size(total), how, format_byte_size(limit_), raise_it()));
        return false;
    }
    account.total = total;
    if (found == account.keys.end())
        account.keys.emplace(key, bytes);
    else
        found->second = bytes;
    return true;
}

void StoreLimit::drop(long rank, const std::string& key)
{
    auto account = accounts_.find(rank);
    if (account == accounts_.end())
        return;
    auto found = account->second.keys.find(key);
    if (found == account->second.keys.end())
        return;
    account->second.total -= found->second;
    account->second.keys.erase(found);
}

bool StoreLimit::allows(const std::vector<long>& ranks, std::uint64_t bytes, std::string_view how)
{
    if (limit_ == 0 || ranks.empty() || bytes <= (limit_ + packing_per_rank) * ranks.size())
        return true;
    report(ranks.front(), fmt::format("{} on {} sent {} to {}, over the limit of {} a rank ({})", name_ranks(ranks),
                                      node_, format_byte_size(bytes), how, format_byte_size(limit_), raise_it()));
    return false;
}

std::uint64_t StoreLimit::kept(long rank) const
{
    auto account = accounts_.find(rank);
    return account == accounts_.end() ? 0 : account->second.total;
}

void StoreLimit::report(long rank, const std::string& line)
{
    if (std::exchange(reported_, true))
        return;
    if (over_)
        over_(rank, line);
}

std::string StoreLimit::raise_it() const
{
    return "raise it with --rank-store-limit or [job] rank_store_limit";
}

} // namespace canopy
