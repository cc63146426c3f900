// The local ranks' lifecycle as the PMIx server sees it (connected, finalized, aborted, exited) and what follows
// from it: which exit loses a rank, and whether the job ended abnormally. Knows nothing of PMIx, so it is
// unit-tested on its own.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace canopy {

// Thread-safe: PMIx's thread records connects, finalizes and aborts as they happen, so an exit the daemon reaps
// right after is judged with them; the io thread records exits and asks for decisions.
class RankTracker {
public:
    // A rank the job has lost: `code` goes with the abort, `message` is one line that names the rank and its node.
    struct Loss {
        long rank = -1;
        int code = 1;
        std::string message;
    };

    // `rank_name` says which rank a number is ("rank 3", or a spawned namespace's rank); empty: "rank N".
    explicit RankTracker(std::string node, std::function<std::string(long)> rank_name = {});

    void connected(long rank);
    void finalized(long rank);
    // The rank called PMIx_Abort: the abort is its report, so its exit is never a loss as well.
    void aborted(long rank);

    // The daemon reaped `rank`. It is lost if it connected and did not finalize, or if it never connected while
    // another rank did. One that never connected while none did may not be a PMIx program at all: it is judged
    // at the next connect.
    std::optional<Loss> exited(long rank, int wait_status);
    // A rank connected: one that exited earlier without connecting would hang every whole-job fence.
    std::optional<Loss> loss_found_by_connect();

    // True the first time only: the first abort reaches the daemon; ranks dying from the teardown it starts are
    // not new news.
    bool claim_abort();
    bool abort_claimed() const;
    // An abort was reported, or a rank connected and never finalized: PMIx's own teardown must be skipped.
    bool ended_abnormally() const;

    // The job's ranks restart (--max-restarts): the next attempt's ranks start with no history, and the first of
    // their aborts is news again. Whether the job ended abnormally keeps what the old ranks did.
    void next_attempt();

    // "rank 3 on node1"
    std::string label(long rank) const;

private:
    struct Rank {
        bool connected = false;
        bool finalized = false;
        bool reported = false;   // its loss or abort went to the daemon already
    };

    const std::string node_;
    const std::function<std::string(long)> rank_name_;
    mutable std::mutex mutex_;   // held only for a few assignments
    std::map<long, Rank> ranks_;
    std::set<long> exited_unconnected_;
    bool abort_claimed_ = false;
    bool earlier_attempt_abnormal_ = false;   // an earlier attempt's ranks ended abnormally
};

// A wait status as the exit code an abort carries: the code, or 128+signal.
int exit_status_code(int wait_status);

} // namespace canopy
