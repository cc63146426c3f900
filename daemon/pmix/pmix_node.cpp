// A node's PMIx service: the relay, the server module, and the exits seen before the server ran.
#include "pmix/pmix_node.hpp"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/logger.h>

#include "hosts/namespace_names.hpp"
#include "hosts/rank_blocks.hpp"
#include "pmix/client_env.hpp"
#include "pmix/pmix_module.hpp"
#include "proc/abandoned_segments.hpp"
#include "proc/rank_env.hpp"
#include "util/log.hpp"
#include "wire/codec.hpp"

namespace canopy {

std::unique_ptr<PmixNode> PmixNode::start(boost::asio::io_context& io, PmixMode mode, PmixJob job,
                                          JobExchange& exchange, PmixDaemonCalls calls,
                                          const std::string& relay_address, Hooks hooks)
{
    std::unique_ptr<PmixNode> node(new PmixNode(io, std::move(job), exchange, std::move(calls), std::move(hooks)));
    if (mode == PmixMode::eager)
        return node->start_server() ? std::move(node) : nullptr;
    auto relay = PmixRelay::listen(io, relay_address, [raw = node.get()] { return raw->server_uri(); });
    if (!relay) {
        node->hooks_.report_error(
            fmt::format("cannot start the PMIx server on {}: {}", node->node(), relay.error().message));
        return nullptr;
    }
    node->relay_ = std::move(*relay);
    return node;
}

PmixNode::PmixNode(boost::asio::io_context& io, PmixJob job, JobExchange& exchange, PmixDaemonCalls calls,
                   Hooks hooks)
    : io_(io), job_(std::move(job)), first_nspace_(job_.nspace), namespaces_(job_), exchange_(exchange),
      calls_(std::move(calls)), hooks_(std::move(hooks))
{
    calls_.report_error = hooks_.report_error;
}

PmixNode::~PmixNode() { stop(); }

std::string PmixNode::node() const { return job_.hosts.at(static_cast<std::size_t>(job_.node_index)); }

bool PmixNode::start_server()
{
    auto module = load_pmix_module();
    if (!module) {
        hooks_.report_error(fmt::format("cannot start the PMIx server on {}: {}", node(), module.error().message));
        return false;
    }
    auto host = (*module)->start(io_, job_, exchange_, calls_);
    if (!host) {
        hooks_.report_error(fmt::format("cannot start the PMIx server on {}: {}", node(), host.error().message));
        return false;
    }
    host_ = std::move(*host);
    if (relay_)
        relay_->tap_messages(host_->job_control_prefix(),
                             [this](std::string_view message) { cleanups_registered(message); });
    if (relay_ && calls_.keep && calls_.within_limit)
        relay_->check_sizes({host_->commit_prefix(), host_->publish_prefix()},
                            [this](const connect_ack::Client& client, std::size_t which, std::size_t bytes) {
                                return within_limit(client, which == 0, bytes);
                            });
    hooks_.ready();
    return true;
}

void PmixNode::cleanups_registered(std::string_view message)
{
    if (!host_ || !hooks_.watch_cleanup)
        return;
    for (auto& cleanup : host_->registered_cleanups(message)) {
        // PMIx alone runs the partial kinds (empty subdirectories only, ignore lists, keeping the top): the guard
        // can only remove a whole tree, and removing more than was asked is worse than leaving it.
        if (cleanup.directory && !cleanup.whole_tree)
            continue;
        auto path = std::filesystem::path(cleanup.path).lexically_normal();
        if (!path.is_absolute() || path == path.root_path())
            continue;
        if (!hooks_.watch_cleanup(path.string()) && !std::exchange(guard_full_reported_, true))
            area_logger("pmix").warn("{}: the node guard's table of paths is full; files ranks register for cleanup "
                                     "from now on are removed only if canopyd ends normally",
                                     node());
    }
}

bool PmixNode::within_limit(const connect_ack::Client& client, bool commit, std::size_t bytes)
{
    // Checked before the server reads any of it, so that it never holds what goes past. A commit carries all the
    // rank has put so far, and the server keeps it in place of the one before: it counts as one key. A publish
    // counts by its values once the server passes them up (RequestRouter::publish); here, one request alone must
    // fit the limit.
    auto rank = namespaces_.tree_rank(client.nspace, client.rank);
    if (!rank)
        return true;
    if (commit)
        return calls_.keep(*rank, "pmix-commit", bytes, "PMIx_Commit");
    return calls_.within_limit({*rank}, bytes, "PMIx_Publish");
}

Result<std::string> PmixNode::server_uri()
{
    if (!server_uri_.empty())
        return server_uri_;
    if (start_failed_ || hooks_.ending())
        return make_error("no PMIx server on {}", node());
    start_failed_ = true;   // until it is up: one attempt, one error line
    if (!start_server())
        return make_error("no PMIx server on {}", node());
    // The ranks are running already; PMIx must know them before their handshakes reach it.
    RankBlocks blocks(job_.ranks_per_node);
    long first = blocks.first_rank(job_.node_index);
    for (long rank = first; rank < first + blocks.local_size(job_.node_index); ++rank) {
        if (auto registered = host_->register_rank(rank, ::getuid(), ::getgid()); !registered) {
            hooks_.report_error(fmt::format("cannot register rank {} with PMIx on {}: {}", rank, node(),
                                            registered.error().message));
            return make_error("no PMIx server on {}", node());
        }
    }
    // Then what was spawned into the job so far, each namespace before its ranks here.
    for (auto& ns : namespaces_.spawned_so_far()) {
        long first = ns.first, size = ns.size();
        if (auto added = host_->add_namespace(std::move(ns)); !added) {
            hooks_.report_error(fmt::format("cannot register a spawned namespace with PMIx on {}: {}", node(),
                                            added.error().message));
            return make_error("no PMIx server on {}", node());
        }
        for (long rank = first; rank < first + size; ++rank)
            if (namespaces_.is_local(rank))
                if (auto registered = host_->register_rank(rank, ::getuid(), ::getgid()); !registered)
                    hooks_.report_error(registered.error().message);
    }
    for (auto [rank, status] : exits_before_server_)
        host_->rank_exited(rank, status);
    exits_before_server_.clear();
    server_uri_ = host_->server_uri();
    start_failed_ = false;
    return server_uri_;
}

Status PmixNode::prepare_rank(RankLaunch& launch)
{
    if (relay_) {
        // On demand, every rank gets the relay's address; the server behind it starts when one connects.
        auto who = namespaces_.proc_of(launch.rank);
        if (!who)
            return make_error("no PMIx namespace has tree rank {} on {}", launch.rank, node());
        auto env = who->nspace == job_.nspace ? pmix_rank_env(job_, who->rank, relay_->uri())
                                               : pmix_spawned_rank_env(job_, who->nspace, who->rank, relay_->uri());
        for (auto& setting : env)
            add_environment_default(launch.env, std::move(setting));
        // A rank spawned once the server runs: PMIx must know it before its handshake arrives.
        if (host_)
            return host_->register_rank(launch.rank, ::getuid(), ::getgid());
        return {};
    }
    if (!host_)
        return {};
    auto env = host_->prepare_rank(launch.rank, ::getuid(), ::getgid());
    if (!env)
        return make_error("cannot register rank {} with PMIx on {}: {}", launch.rank, node(), env.error().message);
    for (auto& setting : *env)
        add_environment_default(launch.env, std::move(setting));
    return {};
}

void PmixNode::rank_exited(long rank, int wait_status)
{
    if (host_)
        host_->rank_exited(rank, wait_status);
    else if (relay_)
        exits_before_server_.emplace(rank, wait_status);   // judged by the server if another rank starts it
}

void PmixNode::serve_requests(RoutedServices& services)
{
    services.serve<wire::DirectModexRequest>([this](long, wire::DirectModexRequest request, auto reply) {
        // Another node's rank wants one of ours: the server must run for it even if no rank here connected yet.
        if (!host_ && relay_)
            (void)relay_->start_server();
        if (!host_)
            return reply(make_error("{} has no PMIx server to answer for rank {}", node(), request.rank));
        host_->serve_direct_modex(static_cast<long>(request.rank), [reply = std::move(reply)](Status status, Bytes blob) {
            if (!status)
                return reply(status.error());
            reply(wire::ModexData{std::move(blob)});
        });
    });
}

Status PmixNode::namespace_started(const wire::NamespaceStart& start)
{
    auto ns = Namespaces::spawned(start, job_.hosts, job_.node_index, job_.tmpdir);
    if (auto parent = namespaces_.proc_of(static_cast<long>(start.parent_rank))) {
        ns.job.parent_nspace = parent->nspace;
        ns.job.parent_rank = parent->rank;
    }
    if (auto added = namespaces_.add(ns); !added)
        return added;
    if (host_)
        return host_->add_namespace(std::move(ns));
    return {};   // the server registers it when it starts
}

Status PmixNode::next_attempt(long attempt)
{
    // A fresh namespace for the next attempt, on every node alike: a rank of it never finds an old rank's data.
    job_.nspace = attempt_nspace(first_nspace_, attempt);
    namespaces_.rename_job(job_.nspace);
    exits_before_server_.clear();
    if (!host_)
        return {};
    sweep_abandoned_probes();   // the old ranks were stopped, maybe inside MPI_Init
    if (auto restarted = host_->restart_job(job_.nspace); !restarted)
        return make_error("cannot restart the ranks' PMIx namespace on {}: {}", node(), restarted.error().message);
    return {};
}

void PmixNode::stop()
{
    relay_.reset();
    bool ran = host_ != nullptr;
    host_.reset();   // before the temp dir goes: PMIx keeps its rendezvous files there
    if (ran && loaded_pmix_server_abandoned())   // ranks ended abnormally
        sweep_abandoned_probes();
}

void PmixNode::sweep_abandoned_probes() const
{
    // Listing /dev/shm costs O(files there), which thousands of simulated nodes share: only after an abnormal end.
    for (const auto& path : remove_abandoned_segments(std::string(open_mpi_probe_directory), open_mpi_probe_prefix,
                                                      started_))
        area_logger("pmix").debug("{}: removed {}, which an Open MPI rank made in MPI_Init and died before it "
                                  "unlinked it",
                                  node(), path);
}

} // namespace canopy
