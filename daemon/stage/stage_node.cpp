// A staged job's side on one node: the node cache from the parent, and on-demand lookups through the tree.
#include "stage_node.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "proc/rank_env.hpp"
#include "util/log.hpp"
#include "util/remove_tree.h"
#include "util/worker_thread.hpp"

namespace canopy {
namespace {

spdlog::logger& stage_log() { return area_logger("stage"); }

// Puts `library` first in a colon-separated list variable, keeping what the job set there.
void prepend_library(std::vector<std::string>& env, const std::string& name, const std::string& library)
{
    std::string prefix = name + "=";
    auto it = std::find_if(env.begin(), env.end(), [&](const std::string& kv) { return kv.starts_with(prefix); });
    if (it == env.end())
        env.push_back(prefix + library);
    else if (it->size() == prefix.size())
        *it = prefix + library;
    else
        *it = prefix + library + ":" + it->substr(prefix.size());
}

} // namespace

StageNode::StageNode(boost::asio::io_context& io, TreePosition& position, Paths paths, std::string node, Hooks hooks)
    : executor_(io.get_executor()), position_(position), paths_(std::move(paths)), node_(std::move(node)),
      hooks_(std::move(hooks)),
      receiver_(paths_.cache_dir)
{
    start_on_demand(io);
    auto take = [this](long, const wire::Frame& frame) {
        this->take(frame);
        return true;
    };
    position_.on_parent(wire::MessageType::stage_index, take);
    position_.on_parent(wire::MessageType::stage_content, take);
    position_.on_parent(wire::MessageType::stage_fetch_reply, [this](long, const wire::Frame& frame) {
        if (fetch_)
            fetch_->on_parent_reply(frame);
        return true;
    });
    position_.on_parent(wire::MessageType::stage_fetch_push, [this](long, const wire::Frame& frame) {
        if (fetch_)
            fetch_->on_parent_push(frame);
        else
            position_.bulk().relay(frame);   // nothing to keep here; the children may use it
        return true;
    });
    position_.on(wire::MessageType::stage_fetch, [this](long child, const wire::Frame& frame) {
        StageFetchTree::serve_child(fetch_.get(), position_.children(), child, frame);
        return true;
    });
}

StageNode::~StageNode()
{
    wait_for_installer();
    lifetime_.end();
}

void StageNode::start_on_demand(boost::asio::io_context& io)
{
    auto fallback = [this](const std::string& why) {
        stage_log().warn("{}; ranks on {} read what the stage index lacks from the shared filesystem", why, node_);
    };
    auto tree = StageFetchTree::for_daemon(io, paths_.cache_dir, position_.children(),
                                           [this](std::vector<std::uint8_t> frame) {
                                               position_.send_to_parent(std::move(frame));
                                           });
    if (!tree) {
        fallback(tree.error().message);
        return;
    }
    fetch_ = std::move(*tree);
    if (paths_.socket.empty())
        return;
    auto fetcher = StageFetcher::start(io, paths_.socket, *fetch_);
    if (!fetcher) {
        fallback(fetcher.error().message);
        return;
    }
    fetcher_ = std::move(*fetcher);
}

void StageNode::take(const wire::Frame& frame)
{
    // Stopped: what the parent still sends is not written into a cache that is going.
    if (failed_ || lifetime_.ended())
        return;
    // Forward first: the subtree below is waiting on this chunk more than our own cache is. The index goes
    // ahead of queued read-ahead there too, as the root sent it.
    position_.bulk().relay(frame, frame.type == static_cast<std::uint8_t>(wire::MessageType::stage_index));
    if (auto taken = receiver_.take(frame); !taken) {
        fail(taken.error().message);
        return;
    }
    if (receiver_.ready_to_install() && !installer_.joinable())
        install_off_the_loop();
}

void StageNode::install_off_the_loop()
{
    // With 64 caches going to one disk, this took up to 18 s here: on the loop, it kept heartbeats from the
    // parent until the node was declared lost.
    installer_ = worker_thread([this, executor = executor_, watch = lifetime_.watch()] {
        // Tests stand in for such a disk with CANOPY_TEST_STAGE_INSTALL_DELAY (seconds).
        if (const char* delay = std::getenv("CANOPY_TEST_STAGE_INSTALL_DELAY"))
            std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(delay)));
        Status status = receiver_.install();
        boost::asio::post(executor, [this, watch, status = std::move(status)] {
            if (watch.alive())
                installed(status);
        });
    });
}

void StageNode::installed(const Status& status)
{
    wait_for_installer();   // it has posted this and is ending
    if (failed_)
        return;
    if (!status) {
        fail(status.error().message);
        return;
    }
    receiver_.mark_installed();
    hooks_.installed();
    if (wake_ && look_up_programs())
        wake_ranks();
}

void StageNode::wake_ranks()
{
    if (auto wake = std::move(wake_))
        wake();
}

bool StageNode::look_up_programs()
{
    if (programs_looked_up_)
        return programs_waiting_ == 0;
    programs_looked_up_ = true;
    if (!fetch_)
        return true;
    ++programs_waiting_;   // held while asking: an answer already here comes back at once
    for (const auto& program : paths_.programs) {
        if (!receiver_.staged(program) || receiver_.knows_executable(program))
            continue;   // not the tree's to answer, or answered by the index
        ++programs_waiting_;
        fetch_->fetch(stage::FetchKind::metadata, program,
                      lifetime_.guard([this, program](const Status& status, const stage::FetchAnswer& answer) {
                          if (status)   // else the daemon checks it on the shared filesystem
                              programs_[program] = answer.facts;
                          if (--programs_waiting_ == 0 && wake_)
                              wake_ranks();
                      }));
    }
    return --programs_waiting_ == 0;
}

void StageNode::fail(const std::string& why)
{
    failed_ = true;
    hooks_.report_error(fmt::format("cannot stage files on {}: {}", node_, why));
}

void StageNode::wait_for_installer()
{
    if (installer_.joinable())
        installer_.join();
}

bool StageNode::ready_for_ranks(std::function<void()> wake)
{
    wake_ = std::move(wake);
    if (!receiver_.complete() || !look_up_programs())
        return false;
    wake_ = nullptr;
    return true;
}

bool StageNode::knows_executable(const std::string& path) const
{
    if (failed_)
        return false;
    auto answered = programs_.find(path);
    return receiver_.knows_executable(path) ||
           (answered != programs_.end() && StageReceiver::executable(answered->second));
}

Status StageNode::prepare_rank(RankLaunch& launch)
{
    // Ranks of a staged job load the interposer, which answers lookups under the prefixes from the node cache.
    for (const char* name : {"LD_PRELOAD", "LD_AUDIT"})
        prepend_library(launch.env, name, paths_.interposer);
    // Replaced, not defaulted: a rank must reach its own node's cache and daemon, not those of a canopy job it
    // was launched from.
    set_environment_value(launch.env, "CANOPY_STAGE_CACHE", receiver_.cache_dir());
    if (fetcher_)
        set_environment_value(launch.env, "CANOPY_STAGE_SOCKET", fetcher_->path());   // what the index lacks
    return {};
}

void StageNode::record(timing::PhaseSet& phases, const std::string& node)
{
    if (!fetch_)
        return;
    const auto& counts = fetch_->counters();
    phases.add("daemon.stage_local_messages", static_cast<double>(counts.answered_here()), node);
    phases.add("daemon.stage_up_messages", static_cast<double>(counts.sent_up), node);
    phases.add("daemon.stage_pushed_messages", static_cast<double>(counts.pushed), node);
    phases.add("daemon.stage_fetched_ahead_messages", static_cast<double>(counts.fetched_ahead), node);
}

void StageNode::stop()
{
    fetcher_.reset();
    if (fetch_)
        fetch_->fail_all(fmt::format("the job is ending on {}", node_));
    fetch_.reset();
    wake_ = nullptr;
    wait_for_installer();   // before the tree it writes into is removed
    lifetime_.end();        // and what it posted finds the job over
    canopy_remove_tree(receiver_.cache_dir().c_str());
}

} // namespace canopy
