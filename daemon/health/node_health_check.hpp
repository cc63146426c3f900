// --health-check on one node (docs/health-check.md): the built-in checks and the site's command, then the job-wide
// verdict. The node's ranks wait until every node of the job is known to be healthy; one bad node, and no rank
// starts anywhere (the root names every bad node and ends the job).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "collective/job_exchange.hpp"
#include "proc/process.hpp"
#include "rank_service.hpp"
#include "util/lifetime.hpp"
#include "wire/messages.hpp"

namespace canopy {

class NodeHealthCheck : public RankService {
public:
    // Where the checks run: the node, its temp dir, its clock's offset to its parent, and its share of the ranks
    // (a job that binds GPUs checks that the node has what the binding needs).
    struct Site {
        std::string node;
        std::string temp_dir;
        double parent_clock_offset = 0;
        long local_size = 0;
        long first_rank = 0;
    };
    // `checked`: this node's own checks have ended (the daemon.health_check phase).
    NodeHealthCheck(boost::asio::io_context& io, ProcessReaper& reaper, JobExchange& exchange, const wire::JobSpec& job,
                    Site site, std::function<void()> checked);
    ~NodeHealthCheck() override;

    // Held until every node's verdict is in and none is bad.
    bool ready_for_ranks(std::function<void()> wake) override;
    Status prepare_rank(RankLaunch&) override { return {}; }
    void rank_exited(long, int) override {}
    void stop() override;

private:
    enum class State { checking, waiting_for_job, healthy, held };

    void start_command(std::string built_in_problem);
    void read_output();
    void command_ended(std::string problem);
    // This node's verdict goes into the job-wide fence; its result says whether the ranks may start.
    void give_verdict(std::string problem);
    void kill_command();

    boost::asio::io_context& io_;
    ProcessReaper& reaper_;
    JobExchange& exchange_;
    const wire::HealthCheckSpec spec_;
    Site site_;
    std::function<void()> checked_;
    std::function<void()> wake_;
    State state_ = State::checking;

    // The command, while it runs.
    pid_t command_ = -1;
    int before_reap_hook_ = -1;
    std::string built_in_problem_;
    std::string output_;   // its first bytes: the first line is the reason it gives
    std::array<char, 1024> buffer_{};
    std::unique_ptr<boost::asio::posix::stream_descriptor> output_pipe_;
    std::unique_ptr<boost::asio::steady_timer> deadline_;
    bool timed_out_ = false;
    Lifetime lifetime_;
};

} // namespace canopy
