// The launcher's output writer: a reader that stalls does not stall the caller, and nothing is lost or reordered.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "output_writer.hpp"

namespace canopy {
namespace {

using namespace std::chrono_literals;

std::string read_all(int fd)
{
    std::string data;
    char buffer[65536];
    for (;;) {
        ssize_t got = ::read(fd, buffer, sizeof buffer);
        if (got <= 0)
            return data;
        data.append(buffer, static_cast<std::size_t>(got));
    }
}

TEST(OutputWriter, QueuingMoreThanAStalledPipeHoldsReturnsAtOnceAndFlushWritesItAllInOrder)
{
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    std::string expected;
    {
        // Both streams on one pipe, so the order across them shows.
        OutputWriter writer(pipe_fds[1], pipe_fds[1]);
        auto started = std::chrono::steady_clock::now();
        for (int i = 0; i < 200; ++i) {
            std::string line = std::string(10000, static_cast<char>('a' + i % 26)) + "\n";
            expected += line;
            if (i % 2)
                writer.to_stderr(line);
            else
                writer.to_stdout(line);
        }
        // 2 MB against a 64 KiB pipe nobody reads: a blocking write would wait forever here.
        EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
        std::this_thread::sleep_for(200ms);
        std::string got;
        std::thread reader([&] { got = read_all(pipe_fds[0]); });
        writer.flush();
        ::close(pipe_fds[1]);   // the writer is idle now; the reader sees the end
        reader.join();
        EXPECT_EQ(got.size(), expected.size());
        EXPECT_TRUE(got == expected) << "output reordered or damaged";
    }
    ::close(pipe_fds[0]);
}

TEST(OutputWriter, CountsWhatAStalledReaderHasNotTakenAndSaysOnceItFallsBelowAMark)
{
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    std::atomic<int> calls{0};
    {
        OutputWriter writer(pipe_fds[1], pipe_fds[1]);
        for (int i = 0; i < 100; ++i)
            writer.to_stdout(std::string(10000, 'x'));   // 1 MB; the pipe holds 64 KiB of it
        std::this_thread::sleep_for(200ms);
        std::size_t queued = writer.queued_bytes();
        EXPECT_GT(queued, 900'000u);
        EXPECT_LE(queued, 1'000'000u);
        writer.when_below(100'000, [&] { ++calls; });
        EXPECT_EQ(calls, 0) << "called while the reader still stalls";
        std::thread reader([&] { read_all(pipe_fds[0]); });
        writer.flush();
        EXPECT_EQ(writer.queued_bytes(), 0u);
        EXPECT_EQ(calls, 1);
        writer.when_below(100'000, [&] { ++calls; });   // below already: at once
        EXPECT_EQ(calls, 2);
        ::close(pipe_fds[1]);
        reader.join();
    }
    ::close(pipe_fds[0]);
}

TEST(OutputWriter, AStreamThatWentAwayDoesNotHangFlush)
{
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    ::close(pipe_fds[0]);   // as `canopy ... | head` once head has exited (SIGPIPE is ignored by the launcher)
    ::signal(SIGPIPE, SIG_IGN);
    OutputWriter writer(pipe_fds[1], pipe_fds[1]);
    writer.to_stdout(std::string(1 << 20, 'x'));
    writer.flush();
    ::close(pipe_fds[1]);
}

TEST(OutputWriter, AFailedWriteIsReportedOnceWithItsErrorAndTheOtherStreamGoesOn)
{
    // /dev/full refuses every write as a full disk does.
    int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(full, 0);
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    std::vector<std::pair<int, int>> failures;
    {
        OutputWriter writer(full, pipe_fds[1]);
        writer.on_failed([&](int fd, int error) { failures.emplace_back(fd, error); });
        EXPECT_EQ(writer.write_error(full), 0);
        writer.to_stdout("lost\n");
        writer.to_stdout("lost too\n");
        writer.to_stderr("kept\n");
        writer.flush();
        EXPECT_EQ(writer.write_error(full), ENOSPC);
        EXPECT_EQ(writer.write_error(pipe_fds[1]), 0);
    }
    EXPECT_EQ(failures, (std::vector<std::pair<int, int>>{{full, ENOSPC}}));
    ::close(pipe_fds[1]);
    EXPECT_EQ(read_all(pipe_fds[0]), "kept\n");
    ::close(pipe_fds[0]);
    ::close(full);
}

TEST(OutputWriter, NothingQueuedStartsNoThreadAndFlushReturns)
{
    OutputWriter writer(-1, -1);
    writer.flush();
    writer.to_stdout("");
    writer.flush();
}

} // namespace
} // namespace canopy
