// A relay's reading from its parent, paced on its children.
#include "tree/relay_pacing.hpp"

#include "tree/link.hpp"

namespace canopy {
namespace {

// How often a paused relay looks at its children's queues: a 256 KiB chunk takes about this long to go out on
// loopback, and a link gives no notice when several children drain.
constexpr std::chrono::milliseconds check_interval{2};

} // namespace

RelayPacing::RelayPacing(boost::asio::io_context& io, std::shared_ptr<Link> parent,
                         std::function<std::size_t()> children_queued, Marks marks)
    : parent_(std::move(parent)), children_queued_(std::move(children_queued)), marks_(marks), timer_(io)
{
}

RelayPacing::~RelayPacing()
{
    timer_.cancel();
}

void RelayPacing::frame_handled()
{
    if (paused_ || !parent_->is_open() || children_queued_() <= marks_.high)
        return;
    paused_ = true;
    ++pauses_;
    paused_at_ = std::chrono::steady_clock::now();
    parent_->pause_reading();
    check_soon();
}

void RelayPacing::check_soon()
{
    timer_.expires_after(check_interval);
    timer_.async_wait([this](const boost::system::error_code& error) {
        if (error || !paused_)
            return;
        bool drained = children_queued_() <= marks_.low;
        if (drained || !parent_->is_open() || std::chrono::steady_clock::now() - paused_at_ >= marks_.longest)
            resume();
        else
            check_soon();
    });
}

void RelayPacing::resume()
{
    paused_ = false;
    parent_->resume_reading();
}

} // namespace canopy
