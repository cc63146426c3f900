// --trace: the job's startup as Chrome trace events, one track per node and per rank.
#include "trace_file.hpp"

#include <map>
#include <set>

namespace canopy {
namespace {

double micros(double seconds) { return seconds * 1e6; }

nlohmann::json name_event(const char* what, int pid, long tid, const std::string& name, long sort)
{
    nlohmann::json event = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", {{"name", name}}}};
    if (tid >= 0)
        event["tid"] = tid;
    nlohmann::json order = {{"ph", "M"},
                            {"name", tid >= 0 ? "thread_sort_index" : "process_sort_index"},
                            {"pid", pid},
                            {"args", {{"sort_index", sort}}}};
    if (tid >= 0)
        order["tid"] = tid;
    return nlohmann::json::array({event, order});
}

} // namespace

nlohmann::json chrome_trace(const timing::JobTiming& timing, const std::vector<wire::TraceEvent>& events,
                            const std::vector<std::string>& hosts)
{
    // pid 0 is the launcher; node i is pid i + 1. Within a node, tid 0 is the daemon, tid r + 1 is rank r.
    nlohmann::json out = nlohmann::json::array();
    auto add_all = [&out](const nlohmann::json& list) {
        for (const auto& item : list)
            out.push_back(item);
    };
    add_all(name_event("process_name", 0, -1, "canopy (launcher)", 0));
    add_all(name_event("thread_name", 0, 0, "launcher steps", 0));
    for (std::size_t i = 1; i < timing.timeline.size(); ++i) {
        const auto& previous = timing.timeline[i - 1];
        const auto& step = timing.timeline[i];
        out.push_back({{"ph", "X"}, {"name", step.name}, {"pid", 0}, {"tid", 0},
                       {"ts", micros(previous.seconds)}, {"dur", micros(step.seconds - previous.seconds)}});
    }

    std::set<std::uint32_t> nodes;
    std::map<std::uint32_t, std::set<std::int64_t>> ranks;
    for (const auto& event : events) {
        int pid = static_cast<int>(event.node) + 1;
        long tid = event.rank < 0 ? 0 : static_cast<long>(event.rank) + 1;
        if (nodes.insert(event.node).second) {
            std::string host = event.node < hosts.size() ? hosts[event.node] : "node " + std::to_string(event.node);
            add_all(name_event("process_name", pid, -1, host, pid));
            add_all(name_event("thread_name", pid, 0, "canopyd", 0));
        }
        if (event.rank >= 0 && ranks[event.node].insert(event.rank).second)
            add_all(name_event("thread_name", pid, tid, "rank " + std::to_string(event.rank), tid));
        if (event.duration >= 0)
            out.push_back({{"ph", "X"}, {"name", event.name}, {"pid", pid}, {"tid", tid},
                           {"ts", micros(event.end - event.duration)}, {"dur", micros(event.duration)}});
        else
            out.push_back({{"ph", "i"}, {"s", "t"}, {"name", event.name}, {"pid", pid}, {"tid", tid},
                           {"ts", micros(event.end)}});
    }
    return {{"traceEvents", out},
            {"displayTimeUnit", "ms"},
            {"otherData", {{"job_id", timing.job_id}, {"command", timing.command}, {"started_at", timing.started_at}}}};
}

} // namespace canopy
