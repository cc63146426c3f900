// The services a node runs for its ranks.
#include "node_services.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "health/node_health_check.hpp"
#include "hosts/namespace_names.hpp"
#include "hosts/rank_blocks.hpp"
#include "pmi/pmi_server.hpp"
#include "pmix/pmix_node.hpp"
#include "pmix/rank_locality.hpp"
#include "proc/rank_env.hpp"
#include "rank_socket.hpp"
#include "stage/stage_node.hpp"
#include "synthetic/synthetic_ranks.hpp"
#include "timing/clock.hpp"
#include "tree/agent.hpp"
#include "tree/topology.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }

} // namespace

NodeServices::NodeServices(boost::asio::io_context& io, const wire::LaunchPlan& plan, long position, std::string node,
                           NodeTempDir& tmpdir, TreePosition& tree, StoreLimit& store_limit,
                           timing::PhaseSet& phases, NodeControl& control)
    : io_(io), plan_(plan), position_number_(position), node_(std::move(node)), tmpdir_(tmpdir), position_(tree),
      store_limit_(store_limit), phases_(phases), control_(control)
{
}

void NodeServices::start()
{
    start_health_check();
    start_stage_node();
    start_pmi_servers();
    start_synthetic_ranks();
    start_rank_socket();
}

void NodeServices::add_rank_service(std::unique_ptr<RankService> service)
{
    service->serve_requests(position_.collectives().services());
    services_.push_back(std::move(service));
}

void NodeServices::start_rank_socket()
{
    if (tmpdir_.path().empty())
        return;
    auto path = tmpdir_.socket_path("app.sock", control_.watch_for_guard());
    if (!path) {
        tree_log().warn("{}; libcanopy marks and store are unavailable on {}", path.error().message, node_);
        return;
    }
    RankSocket::Hooks hooks;
    hooks.mark = [this](AppServer::Mark mark) {
        auto label = control_.rank_label(mark.rank);
        phases_.add("app." + mark.name, control_.since_launch(mark.time_ns), label);
        if (mark.duration_ns >= 0)
            phases_.add("app." + mark.name + ".duration", static_cast<double>(mark.duration_ns) / 1e9, label);
        control_.trace(mark.rank, mark.name, control_.since_launch(mark.time_ns),
              mark.duration_ns >= 0 ? static_cast<double>(mark.duration_ns) / 1e9 : -1);
    };
    hooks.to_root = [this](wire::StoreRequest request, RoutedServices::Reply<wire::StoreRequest> done) {
        position_.collectives().request<wire::StoreRequest>(0, std::move(request), std::move(done));
    };
    hooks.store_limit = plan_.job.rank_store_limit;
    hooks.keep = keep_in_limit();
    hooks.drop = drop_from_limit();
    if (auto socket = RankSocket::start(io_, *path, node_, std::move(hooks)))
        add_rank_service(std::move(socket));
}

void NodeServices::start_health_check()
{
    if (!plan_.job.health_check.enabled)
        return;
    RankBlocks blocks(plan_.job.ranks_per_node);
    long index = Topology::position_to_node(position_number_);
    NodeHealthCheck::Site site{node_, tmpdir_.path(), control_.parent_clock_offset(), blocks.local_size(index),
                               blocks.first_rank(index)};
    add_rank_service(std::make_unique<NodeHealthCheck>(
        io_, control_.reaper(), position_.collectives(), plan_.job, std::move(site),
        [this] { control_.node_phase("daemon.health_check", control_.since_launch(timing::now_ns())); }));
}

void NodeServices::start_stage_node()
{
    if (!plan_.job.stage || control_.setup_failed())
        return;
    // In the node temp dir when that is where the cache's base is anyway (the default): one dir per node, which
    // the sweep of abandoned dirs covers too. Elsewhere, a dir made fresh as the temp dir is.
    const std::string& cache_base = plan_.job.stage_cache_base;
    std::error_code ignored;
    bool in_temp_dir = !tmpdir_.path().empty() &&
                       std::filesystem::equivalent(std::filesystem::path(tmpdir_.path()).parent_path(), cache_base,
                                                   ignored);
    auto cache = in_temp_dir ? stage::NodeCache::create(tmpdir_.path() + "/stage")
                             : stage::NodeCache::create_unique(cache_base, node_dir_prefix(plan_.job_id, node_),
                                                               control_.watch_for_guard());
    if (!cache) {
        control_.fail_setup(fmt::format("cannot stage files on {}: {}", node_, cache.error().message));
        return;
    }
    StageNode::Paths paths;
    paths.cache_dir = cache->dir();
    paths.interposer = plan_.job.stage_interposer;
    for (const auto& app : plan_.job.apps) {
        const std::string& program = app.argv.at(0);
        if (program.find('/') != std::string::npos)   // else found in PATH, as the daemon looks for it
            paths.programs.push_back(from_working_dir(program, app.wdir));
    }
    if (!tmpdir_.path().empty()) {
        if (auto socket = tmpdir_.socket_path("stage.sock", control_.watch_for_guard()))
            paths.socket = std::move(*socket);
        else
            tree_log().warn("{}; ranks on {} read what the stage index lacks from the shared filesystem",
                            socket.error().message, node_);
    }
    StageNode::Hooks hooks;
    hooks.report_error = [this](const std::string& message) { control_.report_error(node_, message); };
    hooks.installed = [this] { control_.node_phase("daemon.stage_ready", control_.since_launch(timing::now_ns())); };
    add_rank_service(std::make_unique<StageNode>(io_, position_, std::move(paths), node_, std::move(hooks)));
}

void NodeServices::start_pmi_servers()
{
    const auto& plan = plan_;
    if (plan.job.simple_pmi)
        start_simple_pmi_server();
    if (plan.job.pmix == PmixMode::off)
        return;
    PmixJob job;
    job.nspace = job_nspace(plan_.job_id);
    job.hosts = plan_.hosts;
    job.ranks_per_node = plan_.job.ranks_per_node;
    for (const auto& app : plan.job.apps)
        job.ranks_per_app.push_back(app.ranks);
    job.node_index = Topology::position_to_node(position_number_);
    job.tmpdir = tmpdir_.path();
    // MPI_UNIVERSE_SIZE: the job and the ranks it may spawn on its nodes.
    job.universe_size = RankBlocks(job.ranks_per_node).world_size() + plan.job.spawn_slots * plan.hosts.size();
    add_rank_locality(job, plan.job.binding, node_);
    PmixNode::Hooks hooks;
    hooks.report_error = [this](const std::string& message) { control_.report_error(node_, message); };
    hooks.ready = [this] { control_.node_phase("daemon.pmix_ready", control_.since_launch(timing::now_ns())); };
    hooks.ending = [this] { return position_.leaving(); };
    hooks.watch_cleanup = [this](const std::string& path) { return control_.watch_path(path); };
    auto relay_address = plan.simulated ? simulated_node_address(job.node_index) : std::string("127.0.0.1");
    if (auto node = PmixNode::start(io_, plan.job.pmix, std::move(job), position_.collectives(), pmix_daemon_calls(),
                                    relay_address, std::move(hooks)))
        add_rank_service(std::move(node));
}

void NodeServices::start_simple_pmi_server()
{
    PmiJob job;
    job.kvsname = job_nspace(plan_.job_id);
    job.ranks_per_node = plan_.job.ranks_per_node;
    job.node_index = Topology::position_to_node(position_number_);
    job.node = node_;
    PmiNode node;
    node.fail = [this](long rank, int exit_code, std::string message) { control_.report_abort(rank, exit_code, message); };
    node.keep = keep_in_limit();
    node.drop = drop_from_limit();
    node.mark = [this](long rank, const std::string& what, std::int64_t time_ns) {
        phases_.add("rank." + what, control_.since_launch(time_ns), control_.rank_label(rank));
    };
    add_rank_service(std::make_unique<PmiServer>(io_, std::move(job), position_.collectives(), std::move(node)));
}

void NodeServices::start_synthetic_ranks()
{
    if (plan_.job.synthetic_ranks.empty())
        return;
    auto spec = synthetic::parse_spec(plan_.job.synthetic_ranks);
    if (!spec) {
        control_.fail_setup(fmt::format("--synthetic-ranks on {}: {}", node_, spec.error().message));
        return;
    }
    RankBlocks blocks(plan_.job.ranks_per_node);
    long index = Topology::position_to_node(position_number_);
    SyntheticNode node{blocks.first_rank(index), blocks.local_size(index), blocks.world_size(), node_};
    // The PMIx paths fetch as the PMIx host does.
    SyntheticTree tree;
    tree.direct_modex = [this](long rank, std::function<void(Status, Bytes)> done) {
        fetch_direct_modex(rank, std::move(done));
    };
    tree.fail = [this](long rank, std::string message) { control_.report_abort(rank, 1, message); };
    tree.now = [this] { return control_.since_launch(timing::now_ns()); };
    add_rank_service(
        std::make_unique<SyntheticRanks>(io_, *spec, std::move(node), position_.collectives(), std::move(tree)));
}

void NodeServices::fetch_direct_modex(long rank, std::function<void(Status, Bytes)> done)
{
    long target = position_.collectives().position_of_rank(rank);
    if (target < 0) {
        done(make_error("the job has no rank {}", rank), {});
        return;
    }
    position_.collectives().request<wire::DirectModexRequest>(
        target, {static_cast<std::uint64_t>(rank)}, [done = std::move(done)](Result<wire::ModexData> reply) {
            if (!reply)
                return done(reply.error(), {});
            done(Status{}, std::move(reply->blob));
        });
}

PmixDaemonCalls NodeServices::pmix_daemon_calls()
{
    PmixDaemonCalls calls;
    calls.direct_modex = [this](long rank, std::function<void(Status, Bytes)> done) {
        fetch_direct_modex(rank, std::move(done));
    };
    calls.abort = [this](long rank, int status, std::string message) { control_.report_abort(rank, status, message); };
    calls.spawn = [this](wire::SpawnRequest request, std::function<void(Status, wire::SpawnReply)> done) {
        position_.collectives().request<wire::SpawnRequest>(
            0, std::move(request), [done = std::move(done)](Result<wire::SpawnReply> reply) {
                if (!reply)
                    return done(reply.error(), {});
                done(Status{}, std::move(*reply));
            });
    };
    calls.rank_output = [this](long rank, bool to_stderr, std::string text) {
        control_.send_up(wire::to_frame(
            wire::Output{static_cast<std::uint64_t>(rank), static_cast<std::uint8_t>(to_stderr ? 2 : 1), std::move(text)}));
    };
    calls.keep = keep_in_limit();
    calls.drop = drop_from_limit();
    if (plan_.job.rank_store_limit > 0)
        calls.within_limit = [this](const std::vector<long>& ranks, std::uint64_t bytes, std::string_view how) {
            return store_limit_.allows(ranks, bytes, how);
        };
    return calls;
}

std::function<bool(long, const std::string&, std::uint64_t, std::string_view)> NodeServices::keep_in_limit()
{
    if (plan_.job.rank_store_limit == 0)
        return {};
    return [this](long rank, const std::string& key, std::uint64_t bytes, std::string_view how) {
        return store_limit_.keep(rank, key, bytes, how);
    };
}

std::function<void(long, const std::string&)> NodeServices::drop_from_limit()
{
    if (plan_.job.rank_store_limit == 0)
        return {};
    return [this](long rank, const std::string& key) { store_limit_.drop(rank, key); };
}

} // namespace canopy
