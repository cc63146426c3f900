// Where the stage index's requests come from: a walk of the prefixes, or the interposer's record files.
#include "stage/index.hpp"
#include "stage/filesystem_probe.hpp"
#include "stage/index_internal.hpp"
#include "stage/record_format.h"
#include "util/read_file.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

namespace canopy::stage {

namespace {

std::string unescape(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            char c = s[++i];
            out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

} // namespace

Result<std::vector<PathRequest>> walk_prefixes(const std::vector<std::string>& prefixes)
{
    std::vector<PathRequest> out;
    std::set<std::string> seen_dirs;
    std::vector<std::string> stack;
    for (const auto& p : prefixes) {
        std::string n = normalize(p);
        if (n.empty())
            return make_error("stage prefix '{}' is not an absolute path; give --stage absolute directories", p);
        struct stat s {};
        if (::stat(n.c_str(), &s) != 0)
            return make_error("stage prefix {}: {}; check the path given to --stage", n, std::strerror(errno));
        stack.push_back(n);
    }
    while (!stack.empty()) {
        std::string dir = std::move(stack.back());
        stack.pop_back();
        out.push_back({dir, false}); // a symlink to a directory seen already still needs its own entry
        std::string real = real_path(dir);
        if (real.empty() || !seen_dirs.insert(real).second)
            continue;
        bool ok = false;
        for (const auto& l : list_directory(dir, ok)) {
            std::string child = dir == "/" ? "/" + l.name : dir + "/" + l.name;
            struct stat s {};
            bool is_dir = ::stat(child.c_str(), &s) == 0 && S_ISDIR(s.st_mode);
            if (is_dir)
                stack.push_back(child);
            else
                out.push_back({child, l.type == DT_REG || (l.type == DT_LNK && S_ISREG(s.st_mode))});
        }
    }
    return out;
}

Result<std::vector<PathRequest>> read_records(const std::vector<std::string>& files)
{
    std::map<std::string, bool> merged;
    for (const auto& file : files) {
        auto text = read_file(file, std::size_t{4} << 30, "stage record");
        if (!text)
            return make_error("{}; was the command run with the interposer?", text.error().message);
        std::istringstream in(*text);
        std::string line;
        while (std::getline(in, line)) {
            // "OP<TAB>RESULT<TAB>PATH" (record_format.h).
            auto t1 = line.find('\t');
            auto t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
            if (t1 != 1 || t2 == std::string::npos)
                continue; // a line cut by a crash, or a future field: skip it rather than fail the job
            char op = line[0];
            std::string path = unescape(std::string_view(line).substr(t2 + 1));
            if (path.empty() || path[0] != '/' || op == CANOPY_STAGE_RECORD_WRITE)
                continue;
            // An open for reading means the program wants the content: stage it if the file exists when the
            // index is built, even if it did not exist yet while recording (a .pyc written by that same run).
            bool read = op == CANOPY_STAGE_RECORD_OPEN || op == CANOPY_STAGE_RECORD_LOAD;
            merged[path] = merged[path] || read;
        }
    }
    std::vector<PathRequest> out;
    for (auto& [path, read] : merged)
        out.push_back({path, read});
    return out;
}

Result<Index> index_from_records(const std::vector<std::string>& files, const BuildOptions& options)
{
    auto requests = read_records(files);
    if (!requests)
        return requests.error();
    return build_index(*requests, options);
}

} // namespace canopy::stage
