// A root and its daemons inside one process, on one io_context, with real sockets between them (as Thallium's
// tests run a server and its clients): the readiness sequence, a fence over the tree, and a lost child, with no
// daemon forked. The ranks are real processes, started by the in-process daemons.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "daemon.hpp"
#include "launch_plan.hpp"
#include "options.hpp"
#include "root.hpp"
#include "timing/clock.hpp"
#include "tree/agent.hpp"
#include "tree/topology.hpp"

namespace canopy {
namespace {

namespace fs = std::filesystem;

class InProcessTree : public ::testing::Test {
protected:
    void SetUp() override
    {
        tmpdir_ = fs::temp_directory_path() / fmt::format("canopy-in-process-{}", ::getpid());
        fs::create_directories(tmpdir_);
    }
    void TearDown() override { fs::remove_all(tmpdir_); }

    // Runs `canopy ARGS` with every daemon in this process; returns the exit code.
    int run(std::vector<std::string> args)
    {
        auto options = parse_options(args);
        EXPECT_TRUE(options) << options.error().message;
        Config config;
        config.tmpdir = tmpdir_.string();
        auto plan = make_root_plan(*options, config, {"PATH=/usr/bin:/bin"}, "/nonexistent/canopyd");
        EXPECT_TRUE(plan) << plan.error().message;
        std::int64_t now = timing::now_ns();
        root_ = std::make_unique<Root>(io_, reaper_, std::move(*plan), now, now, starter());
        return root_->run();
    }

    InProcessStarter starter()
    {
        return [this](const ChildLaunch& launch, const std::string& endpoint, const auth::Key& key) -> Status {
            auto colon = endpoint.rfind(':');
            DaemonArgs args;
            args.parent_host = endpoint.substr(0, colon);
            args.parent_port = static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1)));
            args.position = launch.position;
            args.node_name = launch.host;
            args.bind_address = simulated_node_address(Topology::position_to_node(launch.position));
            args.same_clock = true;
            args.started_ns = timing::now_ns();
            if (lost_.count(launch.position)) {
                hang_up_after_plan(args, key);
                return {};
            }
            long position = launch.position;
            InProcessDaemon in_process{starter(), [this, position] { stopped_.insert(position); }};
            auto& daemon = daemons_[position];
            daemon = std::make_unique<Daemon>(io_, reaper_, std::move(args), key, std::nullopt, std::move(in_process));
            daemon->start();
            return {};
        };
    }

    // A child that joins, takes its plan and hangs up: a daemon lost before its subtree is done.
    void hang_up_after_plan(const DaemonArgs& args, const auth::Key& key)
    {
        asio::co_spawn(
            io_,
            [this, args, key]() -> asio::awaitable<void> {
                tcp::socket socket(io_);
                boost::system::error_code error;
                co_await socket.async_connect(
                    tcp::endpoint(asio::ip::make_address(args.parent_host), args.parent_port),
                    asio::redirect_error(asio::use_awaitable, error));
                if (error)
                    co_return;
                auto joined = co_await connect_to_parent(socket, key, static_cast<std::uint64_t>(args.position), 10, 0);
                if (!joined)
                    co_return;
                // The pending read keeps the link alive; a handler owning it too would leak it if no frame came.
                auto link = std::make_shared<Link>(std::move(socket), "parent");
                link->start(
                    [weak = std::weak_ptr<Link>(link)](wire::Frame) {
                        if (auto alive = weak.lock())
                            alive->close();
                    },
                    [](const std::string&) {});
            },
            asio::detached);
    }

    // The job's node temp dirs that are still there.
    std::vector<std::string> leftover_temp_dirs() const
    {
        std::vector<std::string> left;
        for (const auto& entry : fs::recursive_directory_iterator(tmpdir_))
            left.push_back(entry.path().string());
        return left;
    }

    fs::path tmpdir_;
    asio::io_context io_{1};
    ProcessReaper reaper_{io_};
    std::unique_ptr<Root> root_;
    std::map<long, std::unique_ptr<Daemon>> daemons_;
    std::set<long> stopped_;   // positions whose daemon has left
    std::set<long> lost_;      // positions that hang up after the plan
};

std::vector<std::string> stamps(const timing::JobTiming& timing)
{
    std::vector<std::string> names;
    for (const auto& stamp : timing.timeline)
        names.push_back(stamp.name);
    return names;
}

long index_of(const std::vector<std::string>& names, const std::string& name)
{
    auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : static_cast<long>(it - names.begin());
}

TEST_F(InProcessTree, EveryDaemonGoesUpSpawnsFinishesAndLeavesInOrder)
{
    // 5 nodes under fanout 2: the root starts positions 1 and 2, position 1 starts 3 and 4, position 2 starts 5.
    int code = run({"--sim-nodes", "5", "--fanout", "2", "--ppn", "2", "--pmi", "none", "--timeout", "30", "true"});
    EXPECT_EQ(code, 0);
    EXPECT_EQ(daemons_.size(), 5u);
    EXPECT_EQ(stopped_, (std::set<long>{1, 2, 3, 4, 5}));
    for (const auto& [position, daemon] : daemons_)
        EXPECT_EQ(daemon->exit_code(), 0) << "position " << position;

    auto timing = root_->job_timing();
    auto names = stamps(timing);
    long up = index_of(names, "tree_up"), spawned = index_of(names, "ranks_spawned");
    long exited = index_of(names, "ranks_exited"), teardown = index_of(names, "teardown_done");
    ASSERT_GE(up, 0);
    EXPECT_LT(up, spawned);
    EXPECT_LT(spawned, exited);
    EXPECT_LT(exited, teardown);
    // Every node's daemon reported its phases, and every rank its spawn and exit.
    const auto* received = timing.phases.find("daemon.job_received");
    ASSERT_NE(received, nullptr);
    EXPECT_EQ(received->count(), 5u);
    const auto* rank_exited = timing.phases.find("rank.exited");
    ASSERT_NE(rank_exited, nullptr);
    EXPECT_EQ(rank_exited->count(), 10u);
    EXPECT_EQ(leftover_temp_dirs(), std::vector<std::string>{});
}

TEST_F(InProcessTree, ABarrierOverTheTreeCarriesEveryRanksKeyToEveryRank)
{
    testing::internal::CaptureStdout();
    int code = run({"--sim-nodes", "4", "--fanout", "2", "--ppn", "2", "--pmi", "simple", "--timeout", "30",
                    "/usr/bin/python3", PMI_CLIENT, "v1", "exchange"});
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(code, 0) << out;
    for (int rank = 0; rank < 8; ++rank)
        EXPECT_NE(out.find(fmt::format("pmi_client rank {}: v1 8 ranks, mapping (vector,(0,4,2)), OK", rank)),
                  std::string::npos)
            << "rank " << rank << " in:\n" << out;
    // The puts crossed the tree: every daemon but the leaves relayed fence frames.
    auto timing = root_->job_timing();   // a copy: the pointer below points into it
    const auto* messages = timing.phases.find("daemon.tree_messages");
    ASSERT_NE(messages, nullptr);
    EXPECT_GE(messages->count(), 2u);
}

TEST_F(InProcessTree, ALostDaemonEndsTheJobNamingItsNodeAndEveryOtherDaemonLeaves)
{
    lost_ = {3};   // under position 1
    testing::internal::CaptureStderr();
    int code = run({"--sim-nodes", "4", "--fanout", "2", "--ppn", "1", "--pmi", "none", "--timeout", "30",
                    "sleep", "20"});
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, exit_infrastructure) << err;
    EXPECT_NE(err.find("lost canopyd on sim0002"), std::string::npos) << err;
    EXPECT_EQ(stopped_, (std::set<long>{1, 2, 4}));
    auto names = stamps(root_->job_timing());
    EXPECT_EQ(index_of(names, "ranks_exited"), -1);
    EXPECT_GE(index_of(names, "teardown_done"), 0);
    EXPECT_EQ(leftover_temp_dirs(), std::vector<std::string>{});
}

} // namespace
} // namespace canopy
