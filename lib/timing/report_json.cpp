// The timing report as JSON (docs/timing-json.md): the writer, and a reader that names the offending key.
#include "timing/report.hpp"

#include "timing/analysis.hpp"
#include "timing/report_lines.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace canopy::timing {
namespace {

using nlohmann::json;

// ---- JSON reading: each helper names the full key path in its error. ----

std::string key_path(std::string_view parent, std::string_view key)
{
    return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

Error missing(const std::string& path)
{
    return make_error("timing JSON: key '{}' is missing; the file is incomplete or was not written by canopy",
                      path);
}

Error wrong_type(const std::string& path, std::string_view expected, const json& found)
{
    return make_error("timing JSON: key '{}' must be {} but is {}; the file was not written by this canopy "
                      "version or was edited",
                      path, expected, found.type_name());
}

Result<const json*> member(const json& object, std::string_view parent, std::string_view key)
{
    const auto it = object.find(key);
    if (it == object.end())
        return missing(key_path(parent, key));
    return &*it;
}

Status read_string(const json& object, std::string_view parent, std::string_view key, std::string& out)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    if (!(*value)->is_string())
        return wrong_type(key_path(parent, key), "a string", **value);
    out = (*value)->get<std::string>();
    return {};
}

Status read_number(const json& object, std::string_view parent, std::string_view key, double& out)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    if (!(*value)->is_number())
        return wrong_type(key_path(parent, key), "a number", **value);
    out = (*value)->get<double>();
    return {};
}

template <typename Integer>
Status read_integer(const json& object, std::string_view parent, std::string_view key, Integer& out)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    const json& v = **value;
    const std::string path = key_path(parent, key);
    if (!v.is_number_integer())
        return wrong_type(path, "an integer", v);
    bool fits = false;
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        fits = u <= static_cast<std::uint64_t>(std::numeric_limits<Integer>::max());
    } else {
        const auto s = v.get<std::int64_t>();
        fits = std::cmp_greater_equal(s, std::numeric_limits<Integer>::min()) &&
               std::cmp_less_equal(s, std::numeric_limits<Integer>::max());
    }
    if (!fits)
        return make_error("timing JSON: key '{}' is {}, outside the allowed range {}..{}", path, v.dump(),
                          std::numeric_limits<Integer>::min(), std::numeric_limits<Integer>::max());
    out = v.get<Integer>();
    return {};
}

Result<const json*> read_array(const json& object, std::string_view parent, std::string_view key)
{
    auto value = member(object, parent, key);
    if (!value)
        return value.error();
    if (!(*value)->is_array())
        return wrong_type(key_path(parent, key), "an array", **value);
    return *value;
}

// A phase's "slowest" list: at most top_k entries, in the order canopy writes them (largest first, ties by who).
Status read_slowest(const json& object, const std::string& path, std::uint64_t top_k, SketchData& data)
{
    auto slowest = read_array(object, path, "slowest");
    if (!slowest)
        return slowest.error();
    const std::string list_path = key_path(path, "slowest");
    if ((*slowest)->size() > top_k)
        return make_error("timing JSON: key '{}' has {} entries but top_k is {}", list_path, (*slowest)->size(),
                          top_k);
    for (std::size_t i = 0; i < (*slowest)->size(); ++i) {
        const json& item = (**slowest)[i];
        const std::string entry_path = fmt::format("{}[{}]", list_path, i);
        if (!item.is_object())
            return wrong_type(entry_path, "an object", item);
        TopEntry entry;
        if (auto s = read_number(item, entry_path, "value", entry.value); !s)
            return s.error();
        if (auto s = read_string(item, entry_path, "who", entry.who); !s)
            return s.error();
        if (!data.top.empty() && ranks_before(entry, data.top.back()))
            return make_error("timing JSON: key '{}' is out of order: the list goes from the largest value down",
                              entry_path);
        data.top.push_back(std::move(entry));
    }
    data.top_k = top_k;
    return {};
}

Result<Sketch> read_phase(const json& object, const std::string& path, std::optional<std::uint64_t> top_k,
                          std::string& name)
{
    SketchData data;
    if (!object.is_object())
        return wrong_type(path, "an object", object);
    if (auto s = read_string(object, path, "name", name); !s)
        return s.error();
    if (auto s = read_integer(object, path, "count", data.count); !s)
        return s.error();
    if (auto s = read_number(object, path, "sum", data.sum); !s)
        return s.error();
    if (auto s = read_number(object, path, "min", data.min); !s)
        return s.error();
    if (auto s = read_string(object, path, "min_who", data.min_who); !s)
        return s.error();
    if (auto s = read_number(object, path, "max", data.max); !s)
        return s.error();
    if (auto s = read_string(object, path, "max_who", data.max_who); !s)
        return s.error();
    if (top_k)
        if (auto s = read_slowest(object, path, *top_k, data); !s)
            return s.error();

    auto sketch = member(object, path, "sketch");
    if (!sketch)
        return sketch.error();
    const json& state = **sketch;
    const std::string state_path = key_path(path, "sketch");
    if (!state.is_object())
        return wrong_type(state_path, "an object", state);
    double accuracy = 0;
    if (auto s = read_number(state, state_path, "relative_accuracy", accuracy); !s)
        return s.error();
    // Bucket keys only mean something for the accuracy they were computed with.
    if (std::fabs(accuracy - sketch_relative_accuracy) > 1e-12)
        return make_error("timing JSON: key '{}' is {} but this canopy reads only {}; use the canopy version "
                          "that wrote the file",
                          key_path(state_path, "relative_accuracy"), accuracy, sketch_relative_accuracy);
    if (auto s = read_integer(state, state_path, "zero_count", data.zero_count); !s)
        return s.error();
    auto buckets = read_array(state, state_path, "buckets");
    if (!buckets)
        return buckets.error();
    std::uint64_t total = data.zero_count;
    std::int32_t previous = 0;
    for (std::size_t i = 0; i < (*buckets)->size(); ++i) {
        const json& pair = (**buckets)[i];
        const std::string bucket_path = fmt::format("{}.buckets[{}]", state_path, i);
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
            !pair[1].is_number_unsigned())
            return make_error("timing JSON: key '{}' must be a [key, count] pair of integers with count >= 0",
                              bucket_path);
        const auto key = pair[0].get<std::int64_t>();
        if (key < std::numeric_limits<std::int32_t>::min() || key > std::numeric_limits<std::int32_t>::max())
            return make_error("timing JSON: key '{}' has bucket key {}, outside the 32-bit range", bucket_path,
                              key);
        if (i > 0 && key <= previous)
            return make_error("timing JSON: key '{}' is not sorted by bucket key", bucket_path);
        previous = static_cast<std::int32_t>(key);
        const auto n = pair[1].get<std::uint64_t>();
        data.buckets.emplace_back(previous, n);
        total += n;
    }
    if (total != data.count)
        return make_error("timing JSON: key '{}' is {} but the sketch holds {} values; the file was edited "
                          "or corrupted",
                          key_path(path, "count"), data.count, total);
    return Sketch::from_data(std::move(data));
}

json startup_json(const StartupWindow& window)
{
    json gaps = json::array();
    for (const auto& gap : window.gaps)
        gaps.push_back({{"begin", gap.begin}, {"end", gap.end}, {"after", gap.after}, {"before", gap.before}});
    return {{"end", window.end_name},
            {"end_seconds", window.end},
            {"unattributed_seconds", window.unattributed},
            {"unattributed_share", window.share()},
            {"gaps", std::move(gaps)}};
}

} // namespace

json to_json(const JobTiming& timing)
{
    json timeline = json::array();
    for (const auto& stamp : timing.timeline)
        timeline.push_back({{"name", stamp.name}, {"seconds", stamp.seconds}});

    json phases = json::array();
    for (const auto& [name, sketch] : timing.phases.phases()) {
        json buckets = json::array();
        const SketchData data = sketch.data();
        for (const auto& [key, n] : data.buckets)
            buckets.push_back({key, n});
        json slowest = json::array();
        for (const auto& entry : data.top)
            slowest.push_back({{"value", entry.value}, {"who", entry.who}});
        phases.push_back({
            {"name", name},
            {"count", sketch.count()},
            {"sum", sketch.sum()},
            {"mean", sketch.mean()},
            {"min", sketch.min()},
            {"min_who", sketch.min_who()},
            {"median", sketch.median()},
            {"p90", sketch.quantile(0.9)},
            {"p99", sketch.quantile(0.99)},
            {"max", sketch.max()},
            {"max_who", sketch.max_who()},
            {"slowest", std::move(slowest)},
            {"sketch",
             {{"relative_accuracy", sketch_relative_accuracy},
              {"zero_threshold", sketch_zero_threshold},
              {"zero_count", data.zero_count},
              {"buckets", std::move(buckets)}}},
        });
    }

    json document{
        {"schema", timing_schema},
        {"job_id", timing.job_id},
        {"command", timing.command},
        {"started_at", timing.started_at},
        {"nodes", timing.nodes},
        {"ranks", timing.ranks},
        {"fanout", timing.fanout},
        {"tree_depth", timing.tree_depth},
        {"agent", timing.agent},
        {"wall_seconds", timing.wall_seconds},
        {"exit_code", timing.exit_code},
        {"timeline", std::move(timeline)},
        {"phases", std::move(phases)},
        {"top_k", timing.phases.top_k()},
        {"startup", startup_json(startup_window(timing))},
    };
    if (!timing.top_recorded) {
        document.erase("top_k");
        for (auto& phase : document["phases"])
            phase.erase("slowest");
    }
    if (timing.failure)
        document["failure"] = {{"line", timing.failure->line}, {"traceback", timing.failure->traceback}};
    if (!timing.restarts.empty()) {
        json restarts = json::array();
        double lost = 0;
        for (const auto& restart : timing.restarts) {
            restarts.push_back({{"ended_by", restart.ended_by},
                                {"exit_code", restart.exit_code},
                                {"attempt_running_at", restart.attempt_running_at},
                                {"failed_at", restart.failed_at},
                                {"running_again_at", restart.running_again_at},
                                {"restart_seconds", restart.restart_seconds()},
                                {"lost_seconds", restart.lost_seconds()}});
            lost += std::max(0.0, restart.lost_seconds());
        }
        document["restarts"] = std::move(restarts);
        document["time_lost_seconds"] = lost;   // derived, as the start-up window is
    }
    return document;
}

Result<JobTiming> from_json(const json& document)
{
    try {
        if (!document.is_object())
            return wrong_type("(top level)", "an object", document);
        std::string schema;
        if (auto s = read_string(document, "", "schema", schema); !s)
            return s.error();
        if (schema != timing_schema)
            return make_error("timing JSON: key 'schema' is '{}' but this canopy reads '{}'; use the canopy "
                              "version that wrote the file",
                              fit(schema, 40), timing_schema);

        JobTiming timing;
        for (auto [key, field] : {std::pair{"job_id", &timing.job_id}, std::pair{"command", &timing.command},
                                  std::pair{"started_at", &timing.started_at}, std::pair{"agent", &timing.agent}})
            if (auto s = read_string(document, "", key, *field); !s)
                return s.error();
        for (auto [key, field] : {std::pair{"nodes", &timing.nodes}, std::pair{"ranks", &timing.ranks},
                                  std::pair{"fanout", &timing.fanout}, std::pair{"tree_depth", &timing.tree_depth}})
            if (auto s = read_integer(document, "", key, *field); !s)
                return s.error();
        if (auto s = read_number(document, "", "wall_seconds", timing.wall_seconds); !s)
            return s.error();
        if (auto s = read_integer(document, "", "exit_code", timing.exit_code); !s)
            return s.error();

        // Only a failed job has one, and files from before it have none.
        if (document.contains("failure")) {
            const json& recorded = document.at("failure");
            if (!recorded.is_object())
                return wrong_type("failure", "an object", recorded);
            JobTiming::Failure failure;
            if (auto s = read_string(recorded, "failure", "line", failure.line); !s)
                return s.error();
            if (auto s = read_string(recorded, "failure", "traceback", failure.traceback); !s)
                return s.error();
            timing.failure = std::move(failure);
        }

        // Only a job that restarted has them, and files from before --max-restarts have none.
        if (document.contains("restarts")) {
            auto restarts = read_array(document, "", "restarts");
            if (!restarts)
                return restarts.error();
            for (std::size_t i = 0; i < (*restarts)->size(); ++i) {
                const json& entry = (**restarts)[i];
                const std::string path = fmt::format("restarts[{}]", i);
                if (!entry.is_object())
                    return wrong_type(path, "an object", entry);
                JobTiming::Restart restart;
                if (auto s = read_string(entry, path, "ended_by", restart.ended_by); !s)
                    return s.error();
                if (auto s = read_integer(entry, path, "exit_code", restart.exit_code); !s)
                    return s.error();
                for (auto [key, field] : {std::pair{"attempt_running_at", &restart.attempt_running_at},
                                          std::pair{"failed_at", &restart.failed_at},
                                          std::pair{"running_again_at", &restart.running_again_at}})
                    if (auto s = read_number(entry, path, key, *field); !s)
                        return s.error();
                timing.restarts.push_back(std::move(restart));
            }
        }

        auto timeline = read_array(document, "", "timeline");
        if (!timeline)
            return timeline.error();
        for (std::size_t i = 0; i < (*timeline)->size(); ++i) {
            const json& entry = (**timeline)[i];
            const std::string path = fmt::format("timeline[{}]", i);
            if (!entry.is_object())
                return wrong_type(path, "an object", entry);
            Stamp stamp;
            if (auto s = read_string(entry, path, "name", stamp.name); !s)
                return s.error();
            if (auto s = read_number(entry, path, "seconds", stamp.seconds); !s)
                return s.error();
            timing.timeline.push_back(std::move(stamp));
        }

        // Files from before the top-k lists have neither top_k nor the phases' slowest lists.
        std::optional<std::uint64_t> top_k;
        if (document.contains("top_k")) {
            top_k.emplace();
            if (auto s = read_integer(document, "", "top_k", *top_k); !s)
                return s.error();
            if (*top_k > max_top_k)
                return make_error("timing JSON: key 'top_k' is {}, more than the {} canopy keeps", *top_k,
                                  max_top_k);
            timing.phases.set_top_k(*top_k);
        }
        timing.top_recorded = top_k.has_value();

        auto phases = read_array(document, "", "phases");
        if (!phases)
            return phases.error();
        for (std::size_t i = 0; i < (*phases)->size(); ++i) {
            const std::string path = fmt::format("phases[{}]", i);
            std::string name;
            auto sketch = read_phase((**phases)[i], path, top_k, name);
            if (!sketch)
                return sketch.error();
            if (timing.phases.find(name) != nullptr)
                return make_error("timing JSON: key '{}.name' repeats phase '{}'; each phase may appear once",
                                  path, fit(name, 40));
            timing.phases.merge_phase(name, *sketch);
        }
        return timing;
    } catch (const std::exception& e) {
        return make_error("timing JSON: cannot read the document: {}", e.what());
    }
}

Result<JobTiming> parse_timing_json(std::string_view text, std::string_view origin)
{
    auto document = json::parse(text, nullptr, false);
    if (document.is_discarded())
        return make_error("{} is not JSON; expected a file written by canopy --timing=FILE.json", origin);
    auto timing = from_json(document);
    if (!timing)
        return make_error("{}: {}", origin, timing.error().message);
    return timing;
}

} // namespace canopy::timing
