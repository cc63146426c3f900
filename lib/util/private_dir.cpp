// Directories only this user can use, made fresh under a base other users may write to.
#include "util/private_dir.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace canopy {
namespace {

constexpr std::string_view name_characters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
// Each draw collides with a dir someone made on purpose only if he guessed 6 characters out of 62: a run of
// collisions this long means something else is wrong.
constexpr int max_draws = 100;

std::string random_suffix()
{
    unsigned char bytes[private_dir_suffix_length];
    std::size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
        if (n > 0)
            got += static_cast<std::size_t>(n);
        else if (errno != EINTR)
            break;   // never on Linux 3.17+; the bytes left as they were still vary the name
    }
    std::string suffix;
    for (unsigned char byte : bytes)
        suffix += name_characters[byte % name_characters.size()];
    return suffix;
}

} // namespace

Result<std::string> make_private_dir(const std::string& base, std::string_view prefix,
                                     const std::function<void(const std::string& path)>& before_create)
{
    std::string start = base + "/" + std::string(prefix) + "-";
    for (int draw = 0; draw < max_draws; ++draw) {
        std::string path = start + random_suffix();
        if (before_create)
            before_create(path);
        if (::mkdir(path.c_str(), 0700) == 0)
            return path;
        if (errno != EEXIST)
            return make_error("{}", std::strerror(errno));
    }
    return make_error("{} names starting {} were all taken", max_draws, start);
}

bool is_private_dir_name(std::string_view name, std::string_view prefix)
{
    if (name.size() != prefix.size() + 1 + private_dir_suffix_length || !name.starts_with(prefix) ||
        name[prefix.size()] != '-')
        return false;
    auto suffix = name.substr(prefix.size() + 1);
    return std::all_of(suffix.begin(), suffix.end(),
                       [](char c) { return name_characters.find(c) != std::string_view::npos; });
}

} // namespace canopy
