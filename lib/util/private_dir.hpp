// Directories only this user can use, made fresh under a base other users may write to (/dev/shm, /tmp).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace canopy {

// How many random characters end a private dir's name (as mkdtemp's XXXXXX).
constexpr std::size_t private_dir_suffix_length = 6;

// Makes BASE/PREFIX-XXXXXX, where XXXXXX are random letters and digits, with one exclusive mkdir, mode 0700, and
// returns its path. Another user who knows PREFIX (the job id is in every name) can neither guess the name nor
// slip in a dir of his own: a name that exists already is never used, another is drawn. `before_create` hears each
// name just before its mkdir, so that a guard can be told to remove it however this process ends.
Result<std::string> make_private_dir(const std::string& base, std::string_view prefix,
                                     const std::function<void(const std::string& path)>& before_create = {});

// `name` is PREFIX-XXXXXX, as make_private_dir names a dir made with `prefix`.
bool is_private_dir_name(std::string_view name, std::string_view prefix);

} // namespace canopy
