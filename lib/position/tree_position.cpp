// One position of the daemon tree: its children, their reports, the collectives, and the frame handler table.
#include "position/tree_position.hpp"

#include <signal.h>

#include <fmt/format.h>

#include "proc/node_temp_dir.hpp"
#include "tree/agent.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }

// The report every child's subtree must have sent before this position may enter readiness step `step`.
SubtreeStep subtree_step_for(TreePosition::State step)
{
    switch (step) {
    case TreePosition::State::up: return SubtreeStep::up;
    case TreePosition::State::spawned: return SubtreeStep::spawned;
    case TreePosition::State::done: return SubtreeStep::done;
    default: return SubtreeStep::none;   // not a readiness step: nothing to wait for
    }
}

} // namespace

TreePosition::TreePosition(boost::asio::io_context& io, ProcessReaper& reaper, const auth::Key& key, long position,
                           const wire::LaunchPlan& plan, std::function<void(std::vector<std::uint8_t>)> to_parent,
                           Hooks hooks, timing::PhaseSet& phases,
                           std::vector<wire::TraceEvent>& trace)
    : plan_(plan), position_(position),
      topology_(static_cast<long>(plan.hosts.size()), static_cast<long>(plan.fanout)), hooks_(std::move(hooks)),
      to_parent_(std::move(to_parent)), phases_(phases), trace_(trace)
{
    progress_.set_children(topology_.children(position_).size());

    ChildSet::Events events;
    events.connected = [this](long child) {
        if (!child_plans_)
            child_plans_.emplace(plan_);
        children_->send(child, child_plans_->frame_for(static_cast<std::uint64_t>(child), root_offset_ns_));
    };
    events.frame = [this](long child, wire::Frame frame) { on_child_frame(child, std::move(frame)); };
    events.closed = [this](long child, const std::string& reason) { on_child_closed(child, reason); };
    events.start_failed = [this](long child, const std::string& message) {
        const auto& host = children_->host_of(child);
        hooks_.child_failed(child, fmt::format("cannot start canopyd on {} via {}: {}", host, plan_.agent, message));
    };
    events.log_line = [this](long child, const std::string& line) { hooks_.log_line(child, line); };
    events.all_finished = [this] { advance(); };
    children_ = std::make_unique<ChildSet>(io, reaper, key, std::move(events));
    bulk_ = std::make_unique<LinkBulkRoute>(*children_);

    TreeCollectives::Links links;
    links.to_parent = to_parent_;   // empty at the root
    links.to_child = [this](long child, std::vector<std::uint8_t> frame) { children_->send(child, std::move(frame)); };
    links.to_children_bulk = [this](const std::vector<long>& children, std::vector<std::uint8_t> frame) {
        bulk_->send(children, std::move(frame));
    };
    std::string where = position_ == 0 ? std::string("the launcher")
                                       : plan.hosts.at(static_cast<std::size_t>(Topology::position_to_node(position_)));
    collectives_ = std::make_unique<TreeCollectives>(topology_, plan.job.ranks_per_node, position_, std::move(links),
                                                     std::move(where));
}

void TreePosition::send_to_parent(std::vector<std::uint8_t> frame)
{
    if (to_parent_)
        to_parent_(std::move(frame));
}

void TreePosition::on(wire::MessageType type, Handler handler) { handlers_[type] = std::move(handler); }

void TreePosition::on_parent(wire::MessageType type, Handler handler)
{
    parent_handlers_[type] = std::move(handler);
}

bool TreePosition::from_parent(long parent, const wire::Frame& frame)
{
    if (collectives_->handle(parent, frame))
        return true;
    auto handler = parent_handlers_.find(static_cast<wire::MessageType>(frame.type));
    return handler != parent_handlers_.end() && handler->second(parent, frame);
}

Status TreePosition::start_children(const std::string& listen_address, const std::string& daemon_path,
                                    std::int64_t root_offset_ns, InProcessStarter in_process)
{
    root_offset_ns_ = root_offset_ns;
    auto positions = topology_.children(position_);
    if (positions.empty())
        return {};   // a leaf does not even listen
    if (auto listening = children_->listen(listen_address); !listening)
        return listening;
    std::vector<ChildLaunch> launches;
    for (long child : positions) {
        auto launch = plan_child_launch(plan_, child, children_->endpoint(), daemon_path);
        if (!launch)
            return launch.error();
        launches.push_back(std::move(*launch));
    }
    children_->launch(std::move(launches), plan_.window, plan_.connect_timeout, plan_.heartbeat_timeout,
                      plan_.simulated, std::move(in_process));
    return {};
}

void TreePosition::on_child_frame(long position, wire::Frame frame)
{
    if (collectives_->handle(position, frame))
        return;
    auto type = static_cast<wire::MessageType>(frame.type);
    bool handled = false;
    if (type == wire::MessageType::subtree_up || type == wire::MessageType::subtree_spawned ||
        type == wire::MessageType::subtree_done)
        handled = on_subtree_report(position, frame);
    else if (type == wire::MessageType::fabric_hello)
        handled = on_fabric_hello(position, frame);
    else if (auto handler = handlers_.find(type); handler != handlers_.end())
        handled = handler->second(position, frame);
    if (!handled)
        tree_log().warn("ignored an unexpected or malformed {} message from {}", wire::message_name(frame.type),
                        children_->host_of(position));
}

bool TreePosition::on_fabric_hello(long position, const wire::Frame& frame)
{
    auto hello = wire::decode_frame<wire::FabricHello>(frame);
    if (!hello)
        return false;
    bulk_->child_announced(position, *hello);
    return true;
}

void TreePosition::use_bulk_route(std::unique_ptr<BulkRoute> route) { bulk_ = std::move(route); }

bool TreePosition::on_subtree_report(long position, const wire::Frame& frame)
{
    switch (static_cast<wire::MessageType>(frame.type)) {
    case wire::MessageType::subtree_up: {
        auto up = wire::decode_frame<wire::SubtreeUp>(frame);
        if (!up || !progress_.record(position, SubtreeStep::up))
            return false;
        daemons_below_ += up->daemons;
        break;
    }
    case wire::MessageType::subtree_spawned: {
        auto spawned = wire::decode_frame<wire::SubtreeSpawned>(frame);
        if (!spawned || !progress_.record(position, SubtreeStep::spawned))
            return false;
        spawned_below_ += spawned->ranks;
        break;
    }
    default: {
        auto done = wire::decode_frame<wire::SubtreeDone>(frame);
        if (!done || !progress_.record(position, SubtreeStep::done))
            return false;
        done_below_ += done->ranks;
        phases_.merge(done->phases);
        trace_.insert(trace_.end(), std::make_move_iterator(done->trace.begin()),
                      std::make_move_iterator(done->trace.end()));
        break;
    }
    }
    advance();
    return true;
}

void TreePosition::advance()
{
    if (advancing_)
        return;   // an entered() hook asked again: the loop below looks once more anyway
    advancing_ = true;
    for (;;) {
        if (state_ < State::done) {
            auto next = static_cast<State>(static_cast<int>(state_) + 1);
            if (!progress_.all(subtree_step_for(next)) || !hooks_.local_ready(next))
                break;
            state_ = reached_ = next;
            hooks_.entered(next);
        } else if (state_ == State::leaving && children_->finished() && hooks_.local_ready(State::left)) {
            state_ = State::left;
            hooks_.entered(State::left);
        } else {
            break;
        }
    }
    advancing_ = false;
}

void TreePosition::leave(bool abort)
{
    if (leaving())
        return;
    state_ = State::leaving;
    aborted_ = abort;
    children_->stop_listening();
    // After done every child leaves by itself, unless ranks may still be spawned onto its node (--spawn-slots) or
    // restarted there (--max-restarts); before, it must be told.
    if (!reached(State::done) || plan_.job.spawn_slots > 0 || plan_.job.max_restarts > 0)
        children_->broadcast(wire::to_frame(wire::Shutdown{abort}));
    // Children that never connected cannot hear the shutdown: stop their agents now.
    if (abort)
        children_->kill_unconnected(SIGTERM);
    hooks_.entered(State::leaving);
    advance();
}

void TreePosition::restart_ranks(std::uint64_t attempt, const std::string& why)
{
    if (leaving())
        return;
    collectives_->forget_ranks_exchange(attempt, why);
    state_ = reached_ = State::up;
    progress_.back_to_up();
    spawned_below_ = done_below_ = 0;
}

void TreePosition::give_up() { state_ = State::left; }

void TreePosition::on_child_closed(long position, const std::string& reason)
{
    // Requests on their way into that subtree (a store invalidation for a node that has left) fail now.
    collectives_->child_lost(position);
    // A done child leaves by itself, unless the job keeps it for ranks to come (--spawn-slots, --max-restarts):
    // then only our shutdown ends it, and a close before that is a loss.
    bool keeps_done_children = plan_.job.spawn_slots > 0 || plan_.job.max_restarts > 0;
    if (progress_.is_done(position) && (!keeps_done_children || leaving()))
        return;
    const auto& host = children_->host_of(position);
    hooks_.child_failed(position, fmt::format("lost canopyd on {}: {}", host,
                                              reason.empty() ? "it exited before its ranks finished" : reason));
    // A simulated node shares our disk: clean up after a child that could not. Its dir's name ends in characters
    // only it knew: found by how the name starts, and only if it is ours.
    if (plan_.simulated)
        remove_temp_dirs_made_with(node_temp_base(plan_.tmpdir).path, node_dir_prefix(plan_.job_id, host));
}

} // namespace canopy
