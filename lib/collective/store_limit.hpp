// The job's limit on what one rank may keep in its key-value stores ([job] rank_store_limit, --rank-store-limit),
// counted by the rank's own daemon as the data arrives, before it keeps it or passes it on.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace canopy {

// MPI's endpoint data is a few KB a rank and a few hundred KB at most, torch's rendezvous keys are small: 16 MiB
// is far above any of them and still bounds what a runaway rank costs every node (docs/architecture.md, "What a
// rank may store").
inline constexpr std::uint64_t default_rank_store_limit = std::uint64_t{16} << 20;

// One node's count of what each of its ranks keeps: PMI puts, node attributes and published names, PMIx commits
// and published values, and writes to the libcanopy store, each under a key of its own ("pmi:KEY", "store:KEY"),
// so that writing a key again replaces what it counted. The first rank to go past the limit ends the job.
class StoreLimit {
public:
    // Hears once, of the first rank over the limit: one line naming it and its node, the limit, and how to raise it.
    using Over = std::function<void(long rank, const std::string& line)>;

    // `limit` 0: no limit, and nothing is counted.
    StoreLimit(std::uint64_t limit, std::string node, Over over);

    // `rank` now keeps `bytes` under `key` instead of what it kept there before, through `how` ("a PMI put",
    // "PMIx_Commit"). False if that would take the rank past the limit: the caller refuses the data, which is not
    // counted, and the job is ending.
    bool keep(long rank, const std::string& key, std::uint64_t bytes, std::string_view how);
    // `rank` keeps nothing under `key` any more (an unpublish, a delete).
    void drop(long rank, const std::string& key);
    // Whether `ranks` may send `bytes` at once, all together (a node's part of a PMIx fence): at most the limit for
    // each of them, and 4 KiB each for PMIx's own packing. False after ending the job, naming them.
    bool allows(const std::vector<long>& ranks, std::uint64_t bytes, std::string_view how);

    std::uint64_t limit() const { return limit_; }
    std::uint64_t kept(long rank) const;
    // A rank went past the limit: the job is ending.
    bool exceeded() const { return reported_; }
    // The job's ranks restart (--max-restarts): the next attempt's start with nothing kept.
    void forget_ranks()
    {
        accounts_.clear();
        reported_ = false;
    }

private:
    void report(long rank, const std::string& line);
    std::string raise_it() const;

    struct Account {
        std::uint64_t total = 0;
        std::unordered_map<std::string, std::uint64_t> keys;
    };
    std::uint64_t limit_;
    std::string node_;
    Over over_;
    std::unordered_map<long, Account> accounts_;
    bool reported_ = false;
};

} // namespace canopy
