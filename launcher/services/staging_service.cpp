// File staging at the root.
#include "staging_service.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "exit_codes.hpp"
#include "proc/rank_env.hpp"
#include "timing/clock.hpp"
#include "tree/agent.hpp"
#include "util/log.hpp"
#include "util/remove_tree.h"
#include "util/worker_thread.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }

} // namespace

StagingService::StagingService(boost::asio::io_context& io, const RootPlan& plan, TreePosition& position,
                               OutputWriter& output, RootControl& root)
    : io_(io), plan_(plan), position_(position), output_(output), root_(root), progress_timer_(io)
{
    position_.on(wire::MessageType::stage_fetch, [this](long child, const wire::Frame& frame) {
        StageFetchTree::serve_child(fetch_.get(), position_.children(), child, frame);
        return true;
    });
}

StagingService::~StagingService()
{
    if (thread_.joinable())
        thread_.join();
}

void StagingService::start()
{
    start_fetch_tree();
    thread_ = worker_thread([this, settings = *plan_.stage] {
        auto prepared = prepare_stage(settings);
        boost::asio::post(io_, [this, prepared = std::move(prepared)]() mutable { on_prepared(std::move(prepared)); });
    });
}

void StagingService::start_fetch_tree()
{
    // The cache can hold gigabytes of /dev/shm: a SIGKILL of the launcher must not leave it behind. A dir made
    // fresh, never one another user put in its place (lib/util/private_dir.hpp).
    auto cache = stage::NodeCache::create_unique(plan_.plan.job.stage_cache_base,
                                                 node_dir_prefix(plan_.plan.job_id, "launcher"),
                                                 [this](const std::string& path) { root_.watch_path(path, "stage cache"); });
    if (!cache) {
        tree_log().warn("{}; ranks read what the stage index lacks from the shared filesystem", cache.error().message);
        return;
    }
    auto tree = StageFetchTree::for_root(io_, cache->dir(), position_.children(), plan_.stage->prefixes);
    if (!tree) {
        tree_log().warn("{}; ranks read what the stage index lacks from the shared filesystem", tree.error().message);
        return;
    }
    fetch_ = std::move(*tree);
    // While the tree starts: the ranks' first questions are their program and the libraries it loads. (A
    // manifest's index has them: the root would read and push them twice.)
    if (!stages_on_demand(*plan_.stage))
        return;
    for (const auto& app : plan_.plan.job.apps) {
        auto env = environment_with(plan_.plan.job.env, app.env);
        fetch_->read_ahead_program(app.argv, environment_value(env, "PATH"), environment_value(env, "LD_LIBRARY_PATH"));
    }
}

void StagingService::on_prepared(Result<PreparedStage> prepared)
{
    if (position_.leaving())
        return;
    if (!prepared) {
        root_.fail(exit_usage, prepared.error().message);
        return;
    }
    root_.stamp("stage_indexed");
    if (!prepared->warning.empty())
        root_.print_line(fmt::format("canopy: {}\n", prepared->warning));
    if (!prepared->learn.empty())
        tree_log().info("stage manifest {} does not exist yet: staging on demand, and writing it at the end",
                        prepared->learn);
    stage_.emplace(std::move(*prepared));
    tree_log().info("stage index: {} entries, {} files, {} bytes of content", stage_->index.size(),
                    stage_->index.content_files().size(), stage_->index.content_bytes());
    maybe_send();
}

void StagingService::maybe_send()
{
    if (!stage_ || !position_.reached(TreePosition::State::up) || sender_ || position_.leaving())
        return;
    sending_since_ns_ = timing::now_ns();
    sender_ = std::make_unique<StageSender>(io_, position_.bulk(), stage_->index);
    sending_ = true;
    show_progress(false);
    sender_->start([this](Status status) {
        progress_timer_.cancel();
        sending_ = false;
        show_progress(true);
        if (!status.ok()) {
            root_.fail(exit_infrastructure, status.error().message);
            return;
        }
        root_.stamp("stage_sent");
    });
}

void StagingService::show_progress(bool final)
{
    // A bar on a terminal; elsewhere (job logs) a line every few seconds, and none for quick staging.
    static const bool tty = ::isatty(STDERR_FILENO) == 1;
    const auto& progress = sender_->progress();
    double elapsed = static_cast<double>(timing::now_ns() - sending_since_ns_) / 1e9;
    auto mib = [](std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
    if (tty && (progress_shown_ || !final)) {
        double fraction = progress.bytes_total ? static_cast<double>(progress.bytes_sent) / progress.bytes_total : 1;
        int filled = static_cast<int>(fraction * 30);
        output_.to_stderr(fmt::format("\rcanopy: staging [{:<30}] {:.0f}/{:.0f} MiB, {}/{} files{}",
                                      std::string(static_cast<std::size_t>(filled), '#'), mib(progress.bytes_sent),
                                      mib(progress.bytes_total), progress.files_sent, progress.files_total,
                                      final ? "\r\033[K" : ""));
        progress_shown_ = !final;
    } else if (!tty && !final && elapsed >= 5.0) {
        root_.print_line(fmt::format("canopy: staging: {:.0f}/{:.0f} MiB, {}/{} files sent after {:.0f} s\n",
                                     mib(progress.bytes_sent), mib(progress.bytes_total), progress.files_sent,
                                     progress.files_total, elapsed));
    }
    if (final || !sending_)
        return;
    progress_timer_.expires_after(std::chrono::milliseconds(tty ? 200 : 5000));
    progress_timer_.async_wait([this](const boost::system::error_code& error) {
        if (!error && sending_ && !position_.leaving())
            show_progress(false);
    });
}

void StagingService::before_own_line()
{
    if (progress_shown_)
        output_.to_stderr("\r\033[K");   // the line goes on a clean line, not after the progress bar
    progress_shown_ = false;
}

void StagingService::stop(const std::string&)
{
    if (!sender_)
        return;
    sender_->stop();
    progress_timer_.cancel();
    before_own_line();
}

void StagingService::after_run()
{
    if (thread_.joinable())
        thread_.join();
    if (!fetch_)
        return;
    const auto& counts = fetch_->counters();
    fetched_ = true;
    answered_here_ = counts.answered_here();
    read_from_filesystem_ = counts.sent_up;
    read_ahead_ = counts.read_ahead;
    if (stage_ && !stage_->learn.empty())
        write_learned_manifest();
    std::string dir = fetch_->cache_dir();
    fetch_.reset();   // joins the reader threads
    canopy_remove_tree(dir.c_str());
}

void StagingService::record(timing::PhaseSet& phases) const
{
    if (!fetched_)
        return;
    // Counts: lookups the root answered from its cache, and those it read from the filesystem (once each).
    phases.add("root.stage_local_messages", static_cast<double>(answered_here_), "launcher");
    phases.add("root.stage_read_messages", static_cast<double>(read_from_filesystem_), "launcher");
    phases.add("root.stage_read_ahead_messages", static_cast<double>(read_ahead_), "launcher");
}

void StagingService::write_learned_manifest()
{
    const auto& answers = fetch_->answers();
    if (answers.empty()) {
        root_.print_line(fmt::format("canopy: no rank looked anything up under the staged prefixes; stage manifest "
                                     "{} not written\n", stage_->learn));
        return;
    }
    auto learned = learn_manifest(stage_->learn, plan_.stage->prefixes, answers);
    if (!learned) {
        root_.print_line(fmt::format("canopy: {}\n", learned.error().message));
        return;
    }
    root_.print_line(fmt::format("canopy: wrote stage manifest {}: {} paths, {} files ({:.1f} MiB) that jobs naming "
                                 "it stage up front\n",
                                 stage_->learn, learned->size(), learned->content_files().size(),
                                 static_cast<double>(learned->content_bytes()) / (1 << 20)));
}

} // namespace canopy
