// File staging at the root (docs/staging.md): the index prepared on a thread while the tree starts and streamed
// once every daemon is up, with its progress on stderr; and on-demand answers read from this machine's filesystem
// into the launcher's cache for the daemons' misses.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launch_plan.hpp"
#include "output_writer.hpp"
#include "position/tree_position.hpp"
#include "root_service.hpp"
#include "stage_source.hpp"
#include "stage_tree/fetch_tree.hpp"

namespace canopy {

class StagingService : public RootService {
public:
    // `plan.stage` is set: the job stages files. `output` takes the progress bar.
    StagingService(boost::asio::io_context& io, const RootPlan& plan, TreePosition& position, OutputWriter& output,
                   RootControl& root);
    ~StagingService() override;

    // Makes the launcher's cache, reads ahead what the ranks will ask first, and prepares the index on a thread.
    void start() override;
    // Streams the index and contents, once prepared.
    void tree_up() override { maybe_send(); }
    void before_own_line() override;
    void stop(const std::string& why) override;
    // Joins the thread, writes a manifest the job was told to learn, removes the launcher's cache.
    void after_run() override;
    void record(timing::PhaseSet& phases) const override;

private:
    void start_fetch_tree();
    void on_prepared(Result<PreparedStage> prepared);
    void maybe_send();
    void show_progress(bool final);
    void write_learned_manifest();   // the on-demand answers, as the manifest the job was told to learn

    boost::asio::io_context& io_;
    const RootPlan& plan_;
    TreePosition& position_;
    OutputWriter& output_;
    RootControl& root_;
    std::thread thread_;
    std::optional<PreparedStage> stage_;
    std::unique_ptr<StageSender> sender_;
    std::unique_ptr<StageFetchTree> fetch_;
    boost::asio::steady_timer progress_timer_;
    std::int64_t sending_since_ns_ = 0;
    bool sending_ = false;
    bool progress_shown_ = false;   // a bar is on the terminal's last line
    // What the on-demand lookups cost the root, kept once the fetch tree is gone.
    bool fetched_ = false;
    std::uint64_t answered_here_ = 0, read_from_filesystem_ = 0, read_ahead_ = 0;
};

} // namespace canopy
