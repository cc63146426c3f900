// How callbacks that may outlive their owner reach it (PMIx's thread, tree replies, timers): the work runs on the
// io thread only while the owner lives and is open. An owner answers everything as it closes, so late work has
// nothing left to do and is dropped. Lifetime (lifetime.hpp) is the same idea for owners no shared_ptr holds.
#pragma once

#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace canopy {

// Owner: anything with `bool is_open() const`, owned by a shared_ptr, used on the io thread.
template <typename Owner>
class LiveLink {
public:
    LiveLink(boost::asio::io_context& io, std::weak_ptr<Owner> owner) : io_(&io), owner_(std::move(owner)) {}

    // On the io thread, now: `work(owner)`.
    template <typename Work>
    void run(Work&& work) const
    {
        if (auto owner = owner_.lock(); owner && owner->is_open())
            work(*owner);
    }

    // From any thread: `work(owner)` later, on the io thread.
    template <typename Work>
    void post(Work work) const
    {
        boost::asio::post(*io_, [link = *this, work = std::move(work)]() mutable { link.run(work); });
    }

private:
    boost::asio::io_context* io_;
    std::weak_ptr<Owner> owner_;
};

} // namespace canopy
