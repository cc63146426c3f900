// Functions of a library canopy loads at run time (libfabric, hwloc), so a node without it still runs jobs that do
// not need it: each pointer found by name, and the first name the library lacks kept for the error line.
#pragma once

#include <dlfcn.h>

#include <type_traits>

namespace canopy {

class LibrarySymbols {
public:
    explicit LibrarySymbols(void* library) : library_(library) {}

    // Sets `function` to the library's `name`, or to null.
    template <typename Function>
    void find(Function*& function, const char* name)
    {
        function = reinterpret_cast<Function*>(::dlsym(library_, name));
        if (function == nullptr && missing_ == nullptr)
            missing_ = name;
    }

    // The first name not found, or null when every one was.
    const char* missing() const { return missing_; }

private:
    void* library_;
    const char* missing_ = nullptr;
};

} // namespace canopy
