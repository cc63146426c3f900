// How an owner's callbacks (timers, socket reads, tree replies) find out it is gone: they share a flag with it and
// do nothing once it has ended, so a late completion never touches a destroyed or stopped object.
#pragma once

#include <memory>
#include <utility>

namespace canopy {

// A member of the owner, declared last so that it ends before the other members go. The flag is not atomic: end
// and check it on the owner's thread; guards and watches may be made on another and posted to it.
class Lifetime {
public:
    // For a callback that calls out (to user code, to a tree) and must check again before touching the owner.
    class Watch {
    public:
        bool alive() const { return *alive_; }

    private:
        friend class Lifetime;
        explicit Watch(std::shared_ptr<const bool> alive) : alive_(std::move(alive)) {}
        std::shared_ptr<const bool> alive_;
    };

    Lifetime() = default;
    Lifetime(const Lifetime&) = delete;
    Lifetime& operator=(const Lifetime&) = delete;
    ~Lifetime() { end(); }

    // The owner stopped (or is going): guarded work from now on is dropped.
    void end() { *alive_ = false; }
    bool ended() const { return !*alive_; }

    // `work`, called with whatever the caller passes, but only while the owner lives; a completion handler too.
    template <class Work>
    auto guard(Work work) const
    {
        return [alive = std::shared_ptr<const bool>(alive_), work = std::move(work)](auto&&... args) mutable {
            if (*alive)
                work(std::forward<decltype(args)>(args)...);
        };
    }

    Watch watch() const { return Watch(alive_); }

private:
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace canopy
