// Area loggers made and used from many threads at once, as the root's stage readers do.
#include "util/log.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace canopy {
namespace {

TEST(AreaLogger, ThreadsMakingTheSameAndOtherLoggersAtOnceGetOneEach)
{
    // Each round, 8 threads start together and ask for loggers that do not exist yet: the same area for all,
    // and one of their own. Before the loggers were made under a lock this freed the shared sink's formatter
    // twice (ASan: heap-use-after-free in set_pattern), in about one run of three.
    for (int round = 0; round < 50; ++round) {
        std::atomic<int> ready = 0;
        std::vector<spdlog::logger*> shared(8, nullptr);
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t)
            threads.emplace_back([&, t] {
                ++ready;
                while (ready < 8)
                    std::this_thread::yield();
                shared[t] = &area_logger("shared-" + std::to_string(round));
                area_logger("own-" + std::to_string(round) + "-" + std::to_string(t)).debug("thread {}", t);
            });
        for (auto& thread : threads)
            thread.join();
        for (auto* logger : shared)
            EXPECT_EQ(logger, shared[0]) << "round " << round;
        EXPECT_EQ(shared[0]->name(), "shared-" + std::to_string(round));
    }
}

} // namespace
} // namespace canopy
