// A staged job's side on one node (docs/staging.md): the node cache, written from the index and contents the parent
// streams down (relayed to the children first), and the lookups the index cannot answer, fetched on demand
// through the tree. A rank service: it puts the interposer into every rank's launch and holds the ranks back until
// the node cache is installed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

#include "rank_service.hpp"
#include "stage_tree/fetch_tree.hpp"
#include "stage_fetcher.hpp"
#include "stage_receiver.hpp"
#include "position/tree_position.hpp"
#include "util/lifetime.hpp"

namespace canopy {

class StageNode : public RankService {
public:
    struct Paths {
        std::string cache_dir;    // the node cache, created for the job (in the node's temp dir, or made fresh in
                                  // the job's stage cache base)
        std::string socket;       // the ranks' on-demand socket; empty: no on-demand lookups on this node
        std::string interposer;   // libcanopy_interpose.so, preloaded into every rank
        // The job's programs named by path (absolute): checked through the tree when the index lacks them.
        std::vector<std::string> programs;
    };
    struct Hooks {
        // One line for the user: the job cannot run staged on this node.
        std::function<void(const std::string& message)> report_error;
        // The node cache is installed (a daemon phase).
        std::function<void()> installed;
    };

    // Registers the stage frames with `position`, which must outlive the node; the fetch tree's misses go to the
    // parent through it. `node` names this node in log lines.
    StageNode(boost::asio::io_context& io, TreePosition& position, Paths paths, std::string node, Hooks hooks);
    ~StageNode() override;

    // Once the node cache is installed and the job's programs that the index lacks have been looked up
    // through the tree.
    bool ready_for_ranks(std::function<void()> wake) override;
    Status prepare_rank(RankLaunch& launch) override;
    // From the installed index, or the tree's answer: the program's check costs the shared filesystem nothing
    // on a staged node, every node's stat and access otherwise (on demand, the root reads it once for all).
    bool knows_executable(const std::string& path) const override;
    void rank_exited(long, int) override {}
    // On-demand staging, as counts: what this node answered itself and what it had to ask its parent.
    void record(timing::PhaseSet& phases, const std::string& node) override;
    // Stops answering, fails every lookup still waiting, and removes the node cache.
    void stop() override;

private:
    void start_on_demand(boost::asio::io_context& io);
    void take(const wire::Frame& frame);
    void install_off_the_loop();
    void installed(const Status& status);
    void fail(const std::string& why);
    void wait_for_installer();
    // Looks up the programs the index lacks through the tree; true if none is left to wait for.
    bool look_up_programs();
    void wake_ranks();

    boost::asio::any_io_executor executor_;
    TreePosition& position_;
    Paths paths_;
    std::string node_;
    Hooks hooks_;
    StageReceiver receiver_;
    std::unique_ptr<StageFetchTree> fetch_;
    std::unique_ptr<StageFetcher> fetcher_;
    std::function<void()> wake_;   // the ranks wait for the node cache and the programs' answers
    bool programs_looked_up_ = false;
    int programs_waiting_ = 0;
    std::map<std::string, canopy_stage_path_facts> programs_;   // what the tree answered for each program
    bool failed_ = false;
    std::thread installer_;   // writes the skeleton and the index
    Lifetime lifetime_;   // ended once stopped: reports and frames are dropped
};

} // namespace canopy
