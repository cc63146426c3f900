// Unit tests for AcceptGuard: the cap on pending handshakes, the pause when descriptors run out, and the
// rate-limited warnings about refused peers.
#include "util/accept_guard.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <memory>
#include <sstream>
#include <vector>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

namespace canopy {
namespace {

using namespace std::chrono_literals;

class AcceptGuardTest : public ::testing::Test {
protected:
    AcceptGuardTest()
        : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(said_)), log_("test", sink_)
    {
        sink_->set_pattern("%l: %v");
        log_.set_level(spdlog::level::debug);
    }

    std::vector<std::string> warnings() const
    {
        std::vector<std::string> out;
        std::istringstream lines(said_.str());
        for (std::string line; std::getline(lines, line);)
            if (line.rfind("warning: ", 0) == 0)
                out.push_back(line);
        return out;
    }

    boost::asio::io_context io_;
    std::ostringstream said_;
    std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
    spdlog::logger log_;
};

TEST_F(AcceptGuardTest, TheOldestPendingConnectionIsDroppedForANewOneAtTheCap)
{
    AcceptGuard guard(io_, log_, {.max_pending = 3});
    std::vector<int> dropped;
    std::vector<AcceptGuard::Pending> pending;
    for (int i = 0; i < 5; ++i)
        pending.push_back(guard.admit([&dropped, i] { dropped.push_back(i); }));
    EXPECT_EQ(dropped, (std::vector<int>{0, 1}));
    EXPECT_EQ(guard.pending(), 3u);
    EXPECT_EQ(guard.dropped_for_room(), 2u);
    EXPECT_TRUE(pending[1].dropped_for_room());
    EXPECT_FALSE(pending[2].dropped_for_room());
}

TEST_F(AcceptGuardTest, UnderALowDescriptorLimitTheCapIsAnEighthOfIt)
{
    struct rlimit saved;
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 1024)
        GTEST_SKIP() << "the hard descriptor limit is below 1024";
    struct rlimit low = saved;
    low.rlim_cur = 1024;   // as under `ulimit -n 1024`
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    AcceptGuard relay_like(io_, log_, {.max_pending = 1024});
    AcceptGuard small(io_, log_, {.max_pending = 3});
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);

    std::vector<AcceptGuard::Pending> pending;
    for (int i = 0; i < 300; ++i) {
        pending.push_back(relay_like.admit([] {}));
        pending.push_back(small.admit([] {}));
    }
    EXPECT_EQ(relay_like.pending(), 128u);
    EXPECT_EQ(small.pending(), 3u);
}

TEST_F(AcceptGuardTest, AHandshakeThatEndsMakesRoom)
{
    AcceptGuard guard(io_, log_, {.max_pending = 2});
    int dropped = 0;
    {
        auto first = guard.admit([&] { ++dropped; });
        auto second = guard.admit([&] { ++dropped; });
        EXPECT_EQ(guard.pending(), 2u);
    }
    EXPECT_EQ(guard.pending(), 0u);
    auto third = guard.admit([&] { ++dropped; });
    auto fourth = guard.admit([&] { ++dropped; });
    EXPECT_EQ(dropped, 0);
}

TEST_F(AcceptGuardTest, AssigningOrReleasingAPendingConnectionStopsCountingIt)
{
    AcceptGuard guard(io_, log_);
    auto first = guard.admit([] {});
    first = guard.admit([] {});
    EXPECT_EQ(guard.pending(), 1u);
    first.release();
    EXPECT_EQ(guard.pending(), 0u);
}

TEST_F(AcceptGuardTest, APendingConnectionMayOutliveTheGuard)
{
    AcceptGuard::Pending pending;
    {
        AcceptGuard guard(io_, log_);
        pending = guard.admit([] {});
    }
    SUCCEED();   // destroying `pending` now touches nothing freed
}

TEST_F(AcceptGuardTest, RunningOutOfDescriptorsPausesAcceptingInsteadOfSpinning)
{
    AcceptGuard guard(io_, log_, {.pause = 50ms});
    int accepts = 0;
    auto start = std::chrono::steady_clock::now();
    std::function<void()> accept = [&] {
        if (++accepts < 4)
            guard.after_accept(boost::system::error_code(EMFILE, boost::system::system_category()), accept);
    };
    accept();
    EXPECT_EQ(accepts, 1);   // not again at once
    io_.run();
    EXPECT_EQ(accepts, 4);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
}

TEST_F(AcceptGuardTest, OtherErrorsAcceptAgainAtOnceAndAClosedAcceptorStops)
{
    AcceptGuard guard(io_, log_);
    int accepts = 0;
    EXPECT_TRUE(guard.after_accept(boost::asio::error::connection_aborted, [&] { ++accepts; }));
    EXPECT_EQ(accepts, 1);
    EXPECT_FALSE(guard.after_accept(boost::asio::error::operation_aborted, [&] { ++accepts; }));
    EXPECT_EQ(accepts, 1);
}

TEST_F(AcceptGuardTest, TwoHundredRefusalsGiveAFewLinesAndACount)
{
    {
        AcceptGuard guard(io_, log_, {.warnings_in_full = 3, .summary_interval = 20ms});
        for (int i = 0; i < 100; ++i)
            guard.refused("dropped a connection from 127.0.0." + std::to_string(i));
        io_.run();   // the summary of the first hundred
        io_.restart();
        for (int i = 100; i < 200; ++i)
            guard.refused("dropped a connection from 127.0.0." + std::to_string(i));
    }   // the last summary when the guard goes
    auto said = warnings();
    ASSERT_EQ(said.size(), 5u) << said_.str();
    EXPECT_NE(said[0].find("127.0.0.0"), std::string::npos);
    EXPECT_NE(said[3].find("97 more connections refused"), std::string::npos) << said[3];
    EXPECT_NE(said[3].find("127.0.0.99"), std::string::npos) << said[3];
    EXPECT_NE(said[4].find("100 more connections refused"), std::string::npos) << said[4];
}

TEST_F(AcceptGuardTest, FlushSaysTheCountAtOnceAndOnlyOnce)
{
    AcceptGuard guard(io_, log_, {.warnings_in_full = 1});
    for (int i = 0; i < 10; ++i)
        guard.refused("dropped a connection");
    guard.flush();
    ASSERT_EQ(warnings().size(), 2u) << said_.str();
    EXPECT_NE(warnings()[1].find("9 more connections refused"), std::string::npos) << said_.str();
    io_.run();
    guard.flush();
    EXPECT_EQ(warnings().size(), 2u) << said_.str();
}

} // namespace
} // namespace canopy
