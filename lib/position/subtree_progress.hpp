// A parent's view of its children's reports: each subtree reports up, then spawned, then done, in that order.
#pragma once

#include <cstddef>
#include <map>

namespace canopy {

enum class SubtreeStep { none = 0, up = 1, spawned = 2, done = 3 };

class SubtreeProgress {
public:
    void set_children(std::size_t count) { children_ = count; }

    // Records a child's report; false for one out of order or repeated, which the caller ignores.
    bool record(long position, SubtreeStep step);
    // Every child has reached `step` (true at once for a parent without children).
    bool all(SubtreeStep step) const { return reached_[static_cast<int>(step)] >= children_; }
    bool is_done(long position) const;
    // The job's ranks restart: every subtree, up all along, reports spawned and done again.
    void back_to_up();

private:
    std::size_t children_ = 0;
    std::map<long, SubtreeStep> steps_;
    std::size_t reached_[4] = {};
};

} // namespace canopy
