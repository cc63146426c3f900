// canopy-stage-tool: builds, checks and installs stage indexes by hand (tests, debugging, before `canopy stage`).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "stage/index.hpp"
#include "stage/node_cache.hpp"

namespace {

using namespace canopy::stage;

int usage()
{
    std::fprintf(stderr,
                 "usage: canopy-stage-tool build --prefix DIR [--prefix DIR...] [--records FILE...] [--walk] -o INDEX\n"
                 "       canopy-stage-tool install --cache DIR INDEX      copy contents, skeletons, then the index\n"
                 "       canopy-stage-tool validate INDEX                 one line per change; exit 1 if any\n"
                 "       canopy-stage-tool refresh INDEX -o INDEX\n"
                 "       canopy-stage-tool dump INDEX\n");
    return 2;
}

int fail(const canopy::Error& error)
{
    std::fprintf(stderr, "canopy-stage-tool: %s\n", error.message.c_str());
    return 1;
}

int build(const std::vector<std::string>& args)
{
    BuildOptions options;
    std::vector<std::string> records;
    std::string out;
    bool walk = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--prefix" && i + 1 < args.size())
            options.prefixes.push_back(args[++i]);
        else if (args[i] == "--records") {
            while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0 && args[i + 1] != "-o")
                records.push_back(args[++i]);
        } else if (args[i] == "--walk")
            walk = true;
        else if (args[i] == "-o" && i + 1 < args.size())
            out = args[++i];
        else
            return usage();
    }
    if (out.empty() || options.prefixes.empty())
        return usage();
    std::vector<PathRequest> requests;
    if (!records.empty()) {
        auto r = read_records(records);
        if (!r)
            return fail(r.error());
        requests = std::move(*r);
    }
    if (walk) {
        auto w = walk_prefixes(options.prefixes);
        if (!w)
            return fail(w.error());
        requests.insert(requests.end(), w->begin(), w->end());
    }
    auto index = build_index(requests, options);
    if (!index)
        return fail(index.error());
    if (auto st = index->save(out); !st)
        return fail(st.error());
    std::printf("%zu entries, %zu files staged (%llu bytes), %zu bytes of index\n", index->size(),
                index->content_files().size(), static_cast<unsigned long long>(index->content_bytes()),
                index->blob().size());
    return 0;
}

int install(const std::vector<std::string>& args)
{
    if (args.size() != 3 || args[0] != "--cache")
        return usage();
    auto index = Index::load(args[2]);
    if (!index)
        return fail(index.error());
    auto cache = NodeCache::create(args[1]);
    if (!cache)
        return fail(cache.error());
    if (auto st = cache->copy_all_content(*index); !st)
        return fail(st.error());
    if (auto st = cache->install_index(*index); !st)
        return fail(st.error());
    return 0;
}

int validate_cmd(const std::vector<std::string>& args)
{
    if (args.size() != 1)
        return usage();
    auto index = Index::load(args[0]);
    if (!index)
        return fail(index.error());
    auto changes = validate(*index);
    for (const auto& c : changes)
        std::printf("%s %s%s%s\n", std::string(to_string(c.kind)).c_str(), c.path.c_str(), c.detail.empty() ? "" : ": ",
                    c.detail.c_str());
    return changes.empty() ? 0 : 1;
}

int refresh_cmd(const std::vector<std::string>& args)
{
    if (args.size() != 3 || args[1] != "-o")
        return usage();
    auto index = Index::load(args[0]);
    if (!index)
        return fail(index.error());
    auto fresh = refresh(*index);
    if (!fresh)
        return fail(fresh.error());
    if (auto st = fresh->save(args[2]); !st)
        return fail(st.error());
    return 0;
}

int dump(const std::vector<std::string>& args)
{
    if (args.size() != 1)
        return usage();
    auto index = Index::load(args[0]);
    if (!index)
        return fail(index.error());
    for (const auto& p : index->prefixes())
        std::printf("prefix %s\n", p.c_str());
    for (const auto& e : index->entries()) {
        const auto& f = e.facts;
        std::string flags;
        if (f.flags & CANOPY_STAGE_REQUESTED)
            flags += "requested,";
        if (f.flags & CANOPY_STAGE_READ)
            flags += "read,";
        if (f.flags & CANOPY_STAGE_CONTENT)
            flags += "content,";
        if (f.flags & CANOPY_STAGE_LISTED)
            flags += "listed(" + std::to_string(e.listing.size()) + "),";
        if (f.lstat_errno)
            std::printf("miss %s errno=%d %s\n", e.path.c_str(), f.lstat_errno, flags.c_str());
        else
            std::printf("%s %s size=%lld mode=%o%s%s %s\n", S_ISLNK(f.lstat.mode) ? "link" : "hit", e.path.c_str(),
                        static_cast<long long>(f.stat.size), f.stat.mode, e.link_target.empty() ? "" : " -> ",
                        e.link_target.c_str(), flags.c_str());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
        return usage();
    std::string cmd = argv[1];
    std::vector<std::string> args(argv + 2, argv + argc);
    if (cmd == "build")
        return build(args);
    if (cmd == "install")
        return install(args);
    if (cmd == "validate")
        return validate_cmd(args);
    if (cmd == "refresh")
        return refresh_cmd(args);
    if (cmd == "dump")
        return dump(args);
    return usage();
}
