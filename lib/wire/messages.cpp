// Wire encoding of the tree messages: each message's field list (messages.hpp) read by the archives of
// wire/fields.hpp, and the few fields with an encoding of their own.
#include "wire/messages.hpp"

#include <numeric>

namespace canopy::wire {

const char* message_name(std::uint8_t type)
{
#define CANOPY_MESSAGE_NAME(M)                                                                                  \
    if (type == static_cast<std::uint8_t>(M::type))                                                              \
        return M::name;
    CANOPY_WIRE_MESSAGES(CANOPY_MESSAGE_NAME)
#undef CANOPY_MESSAGE_NAME
    return "unknown";
}

template <typename M>
void encode(Writer& writer, const M& message)
{
    Encoding encoding(writer);
    encoding(message);
}

template <typename M>
Status decode(Reader& reader, M& message)
{
    Decoding decoding(reader, M::name);
    decoding(message);
    if (decoding.error())
        return *decoding.error();
    if constexpr (requires { message.check(); }) {
        if (reader.ok())
            return message.check();
    }
    return {};
}

#define CANOPY_INSTANTIATE(M)                                                                                   \
    template void encode<M>(Writer&, const M&);                                                                  \
    template Status decode<M>(Reader&, M&);
CANOPY_WIRE_MESSAGES(CANOPY_INSTANTIATE)
#undef CANOPY_INSTANTIATE

ChildPlanFrames::ChildPlanFrames(const LaunchPlan& plan)
{
    Writer whole;
    encode(whole, plan);
    Writer tail;
    Encoding tail_fields(tail);
    tail_fields(plan.position, plan.root_offset_ns);
    shared_ = whole.take();
    shared_.resize(shared_.size() - tail.data().size());
}

std::vector<std::uint8_t> ChildPlanFrames::frame_for(std::uint64_t position, std::int64_t root_offset_ns) const
{
    Writer writer;
    start_frame(writer, static_cast<std::uint8_t>(LaunchPlan::type));
    writer.raw(shared_);
    Encoding child_fields(writer);
    child_fields(position, root_offset_ns);
    return finish_frame(writer);
}

void wire_put(Writer& writer, const HostList& list) { writer.string(list.hosts.compressed()); }

void wire_get(Decoding& decoding, HostList& list)
{
    std::string text = decoding.reader().string();
    if (!decoding.reader().ok())
        return;
    auto hosts = HostNames::parse(text);
    if (!hosts) {
        decoding.fail(make_error("{} carries a bad host list: {}", decoding.message(), hosts.error().message));
        return;
    }
    list.hosts = std::move(*hosts);
}

void wire_put(Writer& writer, const timing::PhaseSet& phases)
{
    writer.varint(phases.phases().size());
    for (const auto& [name, sketch] : phases.phases()) {
        auto data = sketch.data();
        writer.string(name);
        writer.varint(data.count);
        writer.f64(data.sum);
        writer.f64(data.min);
        writer.f64(data.max);
        writer.string(data.min_who);
        writer.string(data.max_who);
        writer.varint(data.zero_count);
        writer.varint(data.buckets.size());
        for (const auto& [key, count] : data.buckets) {
            writer.i64(key);
            writer.varint(count);
        }
        writer.varint(data.top_k);
        writer.varint(data.top.size());
        for (const auto& entry : data.top) {
            writer.f64(entry.value);
            writer.string(entry.who);
        }
    }
}

void wire_get(Decoding& decoding, timing::PhaseSet& phases)
{
    Reader& reader = decoding.reader();
    std::size_t phase_count = reader.count();
    for (std::size_t i = 0; i < phase_count && reader.ok(); ++i) {
        std::string name = reader.string();
        timing::SketchData data;
        data.count = reader.varint();
        data.sum = reader.f64();
        data.min = reader.f64();
        data.max = reader.f64();
        data.min_who = reader.string();
        data.max_who = reader.string();
        data.zero_count = reader.varint();
        std::size_t bucket_count = reader.count();
        for (std::size_t b = 0; b < bucket_count && reader.ok(); ++b) {
            auto key = static_cast<std::int32_t>(reader.i64());
            data.buckets.emplace_back(key, reader.varint());
        }
        data.top_k = reader.varint();
        std::size_t top_count = reader.count();
        for (std::size_t t = 0; t < top_count && reader.ok(); ++t) {
            double value = reader.f64();
            data.top.push_back({value, reader.string()});
        }
        if (reader.ok())
            phases.merge_phase(name, timing::Sketch::from_data(std::move(data)));
    }
}

// Sorted ranks as runs (first, length): a whole node's or a contiguous block's ranks cost a few bytes.
void wire_put(Writer& writer, const RankRuns& runs_of)
{
    const auto& ranks = runs_of.ranks;
    std::vector<std::pair<long, long>> runs;
    for (long rank : ranks) {
        if (!runs.empty() && runs.back().first + runs.back().second == rank)
            ++runs.back().second;
        else
            runs.emplace_back(rank, 1);
    }
    writer.varint(runs.size());
    for (const auto& [first, length] : runs) {
        writer.varint(static_cast<std::uint64_t>(first));
        writer.varint(static_cast<std::uint64_t>(length));
    }
}

// Caps what a few bytes of run lengths can make us expand: 4M ranks (32 MiB) in one set, ten times the largest
// jobs run today, and a decode of under a second even in the fuzzers' instrumented build.
namespace {
constexpr std::uint64_t max_ranks_in_a_set = 1u << 22;
} // namespace

void wire_get(Decoding& decoding, RankRuns& runs_of)
{
    Reader& reader = decoding.reader();
    auto& ranks = runs_of.ranks;
    std::size_t runs = reader.count();
    std::uint64_t total = 0;
    long next_allowed = 0;
    for (std::size_t i = 0; i < runs && reader.ok(); ++i) {
        auto first = reader.varint();
        auto length = reader.varint();
        // Compared before adding: a length near 2^64 would wrap the sum below the cap.
        if (length == 0 || length > max_ranks_in_a_set - total || first < static_cast<std::uint64_t>(next_allowed) ||
            first > max_ranks_in_a_set) {
            reader.fail();   // unsorted, overlapping or oversized: not something we sent
            return;
        }
        total += length;
        std::size_t start = ranks.size();
        ranks.resize(start + length);
        std::iota(ranks.begin() + static_cast<std::ptrdiff_t>(start), ranks.end(), static_cast<long>(first));
        next_allowed = static_cast<long>(first + length);
    }
}

void wire_put(Writer& writer, const canopy_stage_stat& s)
{
    writer.varint(s.dev);
    writer.varint(s.ino);
    writer.varint(s.nlink);
    writer.varint(s.rdev);
    writer.varint(s.mode);
    writer.varint(s.uid);
    writer.varint(s.gid);
    for (std::int64_t v : {s.size, s.blksize, s.blocks, s.atime_sec, s.atime_nsec, s.mtime_sec, s.mtime_nsec,
                           s.ctime_sec, s.ctime_nsec})
        writer.i64(v);
}

void wire_get(Decoding& decoding, canopy_stage_stat& s)
{
    Reader& reader = decoding.reader();
    s.dev = reader.varint();
    s.ino = reader.varint();
    s.nlink = reader.varint();
    s.rdev = reader.varint();
    s.mode = static_cast<std::uint32_t>(reader.varint());
    s.uid = static_cast<std::uint32_t>(reader.varint());
    s.gid = static_cast<std::uint32_t>(reader.varint());
    for (std::int64_t* v : {&s.size, &s.blksize, &s.blocks, &s.atime_sec, &s.atime_nsec, &s.mtime_sec, &s.mtime_nsec,
                            &s.ctime_sec, &s.ctime_nsec})
        *v = reader.i64();
}

void wire_put(Writer& writer, const canopy_stage_path_facts& facts)
{
    Encoding encoding(writer);
    path_facts_fields(encoding, facts);
}

void wire_get(Decoding& decoding, canopy_stage_path_facts& facts)
{
    path_facts_fields(decoding, facts);
}

} // namespace canopy::wire
