// --health-check on one node.
#include "health/node_health_check.hpp"

#include <signal.h>

#include <chrono>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "affinity/binding_request.hpp"
#include "health/node_checks.hpp"
#include "proc/rank_env.hpp"
#include "util/log.hpp"

namespace canopy {
namespace asio = boost::asio;
namespace {

// What the command's reason may take: its first line, cut to one line's length.
constexpr std::size_t kept_output = 4096;
constexpr std::size_t reason_length = 200;

spdlog::logger& health_log() { return area_logger("tree"); }

std::string first_line(const std::string& output)
{
    std::string line = output.substr(0, output.find('\n'));
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
        line.pop_back();
    if (line.size() > reason_length)
        line = line.substr(0, reason_length) + "...";
    return line;
}

std::string joined(std::string first, const std::string& second)
{
    if (first.empty())
        return second;
    return second.empty() ? first : first + "; " + second;
}

// What the job's GPU binding would refuse on this node (too few GPUs, a GPU the list names missing), as the
// node would find out only when its ranks start.
std::string binding_problem(const wire::JobSpec& job, const NodeHealthCheck::Site& site)
{
    if (job.binding.gpu_bind == "none" || site.local_size == 0)
        return {};
    auto bindings = plan_node_bindings(job.binding, site.local_size, BindingSite{site.node, site.first_rank});
    return bindings ? std::string() : bindings.error().message;
}

} // namespace

NodeHealthCheck::NodeHealthCheck(asio::io_context& io, ProcessReaper& reaper, JobExchange& exchange,
                                 const wire::JobSpec& job, Site site, std::function<void()> checked)
    : io_(io), reaper_(reaper), exchange_(exchange), spec_(job.health_check), site_(std::move(site)),
      checked_(std::move(checked))
{
    std::string problem = judge_node(spec_, measure_node(spec_, site_.temp_dir, site_.parent_clock_offset));
    problem = joined(std::move(problem), binding_problem(job, site_));
    if (spec_.command.empty())
        asio::post(io_, lifetime_.guard([this, problem = std::move(problem)] { give_verdict(problem); }));
    else
        start_command(std::move(problem));
}

NodeHealthCheck::~NodeHealthCheck()
{
    kill_command();
    if (before_reap_hook_ >= 0)
        reaper_.remove_before_reap(before_reap_hook_);
}

bool NodeHealthCheck::ready_for_ranks(std::function<void()> wake)
{
    if (state_ == State::healthy)
        return true;
    wake_ = std::move(wake);
    return false;
}

void NodeHealthCheck::stop()
{
    state_ = State::held;
    kill_command();
    if (deadline_)
        deadline_->cancel();
}

void NodeHealthCheck::start_command(std::string built_in_problem)
{
    built_in_problem_ = std::move(built_in_problem);
    auto pipe = make_pipe();
    if (!pipe) {
        asio::post(io_, lifetime_.guard([this, why = pipe.error().message] {
            give_verdict(joined(built_in_problem_, "cannot run the health-check command: " + why));
        }));
        return;
    }
    SpawnRequest request;
    request.argv = {"/bin/sh", "-c", spec_.command};
    request.env = own_environment();
    set_environment_value(*request.env, "CANOPY_NODE", site_.node);
    request.stdout_fd = pipe->write_end.get();
    request.stderr_fd = pipe->write_end.get();
    request.parent_death_signal = SIGKILL;
    auto pid = spawn_process(request);
    if (!pid) {
        asio::post(io_, lifetime_.guard([this, why = pid.error().message] {
            give_verdict(joined(built_in_problem_, "cannot run the health-check command: " + why));
        }));
        return;
    }
    command_ = *pid;
    // Whatever the command left running in its process group goes with it, while its pid cannot be reused.
    before_reap_hook_ = reaper_.add_before_reap([this](pid_t exited) {
        if (exited == command_)
            ::kill(-exited, SIGKILL);
    });
    output_pipe_ = std::make_unique<asio::posix::stream_descriptor>(io_, pipe->read_end.release());
    read_output();
    deadline_ = std::make_unique<asio::steady_timer>(io_);
    deadline_->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(spec_.command_timeout)));
    deadline_->async_wait(lifetime_.guard([this](const boost::system::error_code& error) {
        if (error || command_ < 0)
            return;
        timed_out_ = true;
        kill_command();
    }));
    reaper_.watch(command_, lifetime_.guard([this](int wait_status) {
        command_ = -1;
        deadline_->cancel();
        // What it wrote before it ended is in the pipe already: take it without waiting for an end of file that a
        // process it let escape its group could hold off.
        boost::system::error_code ignored;
        output_pipe_->non_blocking(true, ignored);
        while (output_.size() < kept_output) {
            std::size_t got = output_pipe_->read_some(asio::buffer(buffer_), ignored);
            if (ignored || got == 0)
                break;
            output_.append(buffer_.data(), got);
        }
        output_pipe_->close(ignored);
        std::string line = first_line(output_);
        std::string said = line.empty() ? "" : ": " + line;
        if (timed_out_)
            command_ended(fmt::format("the health-check command did not end within {:g} s{}", spec_.command_timeout,
                                      said));
        else if (wait_status != 0)
            command_ended(fmt::format("the health-check command {}{}", describe_wait_status(wait_status), said));
        else
            command_ended({});
    }));
}

void NodeHealthCheck::read_output()
{
    output_pipe_->async_read_some(asio::buffer(buffer_),
                                  lifetime_.guard([this](const boost::system::error_code& error, std::size_t got) {
                                      if (error || !output_pipe_->is_open())
                                          return;
                                      if (output_.size() < kept_output)
                                          output_.append(buffer_.data(), got);
                                      read_output();   // read on past what is kept, so the command never blocks
                                  }));
}

void NodeHealthCheck::command_ended(std::string problem)
{
    reaper_.remove_before_reap(before_reap_hook_);
    before_reap_hook_ = -1;
    give_verdict(joined(built_in_problem_, problem));
}

void NodeHealthCheck::give_verdict(std::string problem)
{
    if (state_ != State::checking)
        return;
    state_ = State::waiting_for_job;
    if (checked_)
        checked_();
    if (!problem.empty())
        health_log().debug("health check: {} is bad: {}", site_.node, problem);
    Bytes verdict = problem.empty() ? Bytes{} : wire::encode_fields(wire::NodeHealth{site_.node, std::move(problem)});
    exchange_.fence(
        {}, std::move(verdict),
        lifetime_.guard([this](Status status, Bytes result) {
            // A bad node anywhere, or a fence that failed: the root ends the job, and no rank starts here.
            if (!status || !result.empty() || state_ != State::waiting_for_job) {
                state_ = State::held;
                return;
            }
            state_ = State::healthy;
            if (auto wake = std::move(wake_); wake)
                wake();
        }),
        wire::FenceDomain::health, false);
}

void NodeHealthCheck::kill_command()
{
    if (command_ > 0)
        ::kill(-command_, SIGKILL);
}

} // namespace canopy
