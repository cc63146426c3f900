// The ranks' output at the root, and canopy's own lines among it.
#include "services/rank_output.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

namespace canopy {

RankOutput::RankOutput(boost::asio::io_context& io, TreePosition& position, bool label, RootControl& root)
    : io_(io), position_(position), root_(root), label_(label), lines_(label), wait_timer_(io)
{
    // The writer's thread finds a closed stream; what that means for the job is decided on the io thread.
    writer_.on_failed([this](int fd, int error) { boost::asio::post(io_, [this, fd, error] { write_failed(fd, error); }); });
    position_.on(wire::MessageType::output, [this](long, const wire::Frame& frame) {
        auto output = wire::decode_frame<wire::Output>(frame);
        if (output) {
            print(*output);
            backpressure_.queued(position_.children());
            hold_lines();
        }
        return output.ok();
    });
}

void RankOutput::print_own_line(std::string line)
{
    writer_.to_stderr(lines_.end_open_line(2) + line);
    hold_lines();   // what waited on stderr has gone: the others may go on
}

void RankOutput::print(const wire::Output& output)
{
    std::string text = lines_.text(output.rank, output.stream, output.data);
    if (output.stream == 2)
        writer_.to_stderr(std::move(text));
    else
        writer_.to_stdout(std::move(text));
    arm_wait_timer();
}

void RankOutput::arm_wait_timer()
{
    auto out = lines_.due(1), err = lines_.due(2);
    if (!out && !err)
        return;
    auto when = out && err ? std::min(*out, *err) : out ? *out : *err;
    if (wait_timer_.expiry() == when)
        return;
    wait_timer_.expires_at(when);
    wait_timer_.async_wait([this](const boost::system::error_code& error) {
        if (error)
            return;
        auto now = OutputLines::Clock::now();
        if (backpressure_.holding_all()) {
            // We hold the open lines back ourselves, for our reader: their waits start again once we let them go.
            lines_.restart_waits(now);
        } else {
            writer_.to_stdout(lines_.release(1, now));
            writer_.to_stderr(lines_.release(2, now));
            hold_lines();
        }
        arm_wait_timer();
    });
}

void RankOutput::hold_lines()
{
    backpressure_.hold_lines(position_.children(), lines_.line_hold(1), lines_.line_hold(2));
}

void RankOutput::write_failed(int fd, int error)
{
    int stream = fd == STDOUT_FILENO ? 0 : 1;
    if (std::exchange(failure_reported_[stream], true))
        return;
    // As a command in a pipeline dies of SIGPIPE when its reader goes (`canopy ... | head -1`), the job ends, with
    // the shell's status for that death. Any other failure (a full disk, a descriptor canopy was started without)
    // ends it too, with 1, as a write error ends cat or seq: the output is lost from here on, and a job whose output
    // goes nowhere would run on for nothing. The line says why the ranks were stopped; where stderr is what failed,
    // it cannot be read, and the exit code alone says so.
    const char* name = fd == STDOUT_FILENO ? "standard output" : "standard error";
    int exit_code = error == EPIPE ? 128 + SIGPIPE : 1;
    bool ending = !position_.leaving();
    root_.print_line(error == EPIPE ? fmt::format("canopy: {} was closed{}\n", name, ending ? "; ending the job" : "")
                                    : fmt::format("canopy: cannot write the job's {}: {}\n", name, std::strerror(error)));
    root_.output_lost(exit_code);
}

void RankOutput::finish()
{
    if (label_) {   // a rank's last line without its newline: the prompt after the job goes on a line of its own
        writer_.to_stdout(lines_.end_open_line(1));
        writer_.to_stderr(lines_.end_open_line(2));
    } else {   // what waited behind a line that never ended
        writer_.to_stdout(lines_.release(1, OutputLines::Clock::time_point::max()));
        writer_.to_stderr(lines_.release(2, OutputLines::Clock::time_point::max()));
    }
    writer_.flush();   // before main() prints the timing report, and whatever the reader's pace
    // A write that failed after the io thread's last turn (the job's last output, or the line saying why it ended)
    // still counts.
    for (int fd : {STDOUT_FILENO, STDERR_FILENO})
        if (int error = writer_.write_error(fd))
            write_failed(fd, error);
    writer_.flush();
}

} // namespace canopy
