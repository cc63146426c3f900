// Ctrl-Z for a whole job. A shell stops only the launcher, while the ranks run on and the daemons would soon take
// the launcher's silence for a hang. So on SIGTSTP the launcher tells the tree to stop every rank and to excuse its
// silence, then stops itself as the shell expects; continued (fg or bg), it lets the ranks go on.
#pragma once

#include <chrono>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace canopy {

class ChildSet;

class JobSuspension {
public:
    // How long the stop request may take to leave for the children before the launcher stops anyway.
    static constexpr std::chrono::milliseconds send_bound{500};

    explicit JobSuspension(boost::asio::io_context& io) : send_timer_(io) {}

    // SIGTSTP came: stops the ranks through `children`, then this process. Once continued, resumes the ranks.
    void suspend(ChildSet& children);

private:
    void stop_once_sent(ChildSet& children, std::chrono::steady_clock::time_point give_up);

    boost::asio::steady_timer send_timer_;
    bool suspending_ = false;
};

} // namespace canopy
