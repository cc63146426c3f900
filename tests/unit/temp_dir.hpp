// A directory of a test's own under the temp dir, removed with everything in it when the object goes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

class TempDir {
public:
    // Named PREFIX-XXXXXX; a failure throws, which fails the test that made it.
    explicit TempDir(const std::string& prefix)
        : path_((std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string())
    {
        if (::mkdtemp(path_.data()) == nullptr)
            throw std::runtime_error("cannot make a temp dir like " + path_);
    }
    ~TempDir()
    {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::string& path() const { return path_; }

private:
    std::string path_;
};
