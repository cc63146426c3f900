// A parent's view of its children's reports.
#include "position/subtree_progress.hpp"

namespace canopy {

bool SubtreeProgress::record(long position, SubtreeStep step)
{
    SubtreeStep& current = steps_[position];
    if (static_cast<int>(step) != static_cast<int>(current) + 1)
        return false;
    current = step;
    ++reached_[static_cast<int>(step)];
    return true;
}

void SubtreeProgress::back_to_up()
{
    for (auto& [position, step] : steps_)
        if (step > SubtreeStep::up)
            step = SubtreeStep::up;
    reached_[static_cast<int>(SubtreeStep::spawned)] = 0;
    reached_[static_cast<int>(SubtreeStep::done)] = 0;
}

bool SubtreeProgress::is_done(long position) const
{
    auto it = steps_.find(position);
    return it != steps_.end() && it->second == SubtreeStep::done;
}

} // namespace canopy
