// Ctrl-Z for a whole job: stop the ranks, then ourselves; resume them when continued.
#include "job_suspension.hpp"

#include <signal.h>

#include "tree/children.hpp"
#include "wire/messages.hpp"

namespace canopy {

void JobSuspension::suspend(ChildSet& children)
{
    if (suspending_)
        return;   // a second Ctrl-Z while the first is being sent
    suspending_ = true;
    // Daemons give their ranks SIGSTOP for it, which no rank can ignore, and hold their checks of us.
    children.broadcast(wire::to_frame(wire::Signal{SIGTSTP}));
    stop_once_sent(children, std::chrono::steady_clock::now() + send_bound);
}

void JobSuspension::stop_once_sent(ChildSet& children, std::chrono::steady_clock::time_point give_up)
{
    if (children.max_queued_bytes() > 0 && std::chrono::steady_clock::now() < give_up) {
        send_timer_.expires_after(std::chrono::milliseconds(5));
        send_timer_.async_wait([this, &children, give_up](const boost::system::error_code& error) {
            if (!error)
                stop_once_sent(children, give_up);
        });
        return;
    }
    ::raise(SIGSTOP);   // returns when the shell continues us
    children.broadcast(wire::to_frame(wire::Signal{SIGCONT}));
    suspending_ = false;
}

} // namespace canopy
