// Wire codec and message encoding: what one side writes the other reads back, and bad input is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <numeric>
#include <random>
#include <set>

#include "wire/codec.hpp"
#include "wire/messages.hpp"
#include "wire/routed.hpp"

namespace canopy::wire {
namespace {

TEST(Codec, PrimitivesRoundTrip)
{
    Writer writer;
    writer.u8(7);
    writer.u32(0xdeadbeef);
    writer.u64(1ull << 60);
    writer.i64(-42);
    writer.varint(300);
    writer.f64(2.5);
    writer.string("hello");
    writer.strings({"a", "", "ccc"});
    Reader reader(writer.data());
    EXPECT_EQ(reader.u8(), 7);
    EXPECT_EQ(reader.u32(), 0xdeadbeefu);
    EXPECT_EQ(reader.u64(), 1ull << 60);
    EXPECT_EQ(reader.i64(), -42);
    EXPECT_EQ(reader.varint(), 300u);
    EXPECT_EQ(reader.f64(), 2.5);
    EXPECT_EQ(reader.string(), "hello");
    EXPECT_EQ(reader.strings(), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_TRUE(reader.ok());
    EXPECT_TRUE(reader.at_end());
}

TEST(Codec, ShortInputFailsInsteadOfReadingPastTheEnd)
{
    Writer writer;
    writer.varint(1000);   // claims a 1000-byte string that is not there
    writer.raw(std::vector<std::uint8_t>{'x'});
    Reader reader(writer.data());
    EXPECT_EQ(reader.string(), "");
    EXPECT_FALSE(reader.ok());
}

TEST(Codec, OverlongVarintIsRejected)
{
    std::vector<std::uint8_t> bytes(11, 0xff);
    Reader reader(bytes);
    reader.varint();
    EXPECT_FALSE(reader.ok());
}

TEST(FrameDecoder, SplitsFramesFedByteByByte)
{
    auto first = to_frame(Signal{15});
    auto second = to_frame(Output{3, 2, "line\n"});
    std::vector<std::uint8_t> stream(first);
    stream.insert(stream.end(), second.begin(), second.end());
    FrameDecoder decoder(max_frame);
    std::vector<Frame> frames;
    for (auto byte : stream) {
        decoder.feed(std::span(&byte, 1));
        for (;;) {
            auto next = decoder.next();
            ASSERT_TRUE(next.ok());
            if (!next->has_value())
                break;
            frames.push_back(std::move(**next));
        }
    }
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(decode_frame<Signal>(frames[0])->signo, 15);
    auto output = decode_frame<Output>(frames[1]);
    ASSERT_TRUE(output.ok());
    EXPECT_EQ(output->rank, 3u);
    EXPECT_EQ(output->stream, 2);
    EXPECT_EQ(output->data, "line\n");
}

// Pulls every complete frame out of the decoder.
void drain(FrameDecoder& decoder, std::vector<Frame>& frames)
{
    for (;;) {
        auto next = decoder.next();
        ASSERT_TRUE(next.ok()) << next.error().message;
        if (!next->has_value())
            return;
        frames.push_back(std::move(**next));
    }
}

TEST(FrameDecoder, ALargeFrameIsAssembledInPlaceWhetherFedOrReadIntoItsSpace)
{
    // A staged file's chunk between two small frames, arriving in pieces that straddle the frames' edges.
    std::vector<std::uint8_t> content(300 * 1024 + 7);
    for (std::size_t i = 0; i < content.size(); ++i)
        content[i] = static_cast<std::uint8_t>(i * 131 + i / 977);
    StageContent chunk;
    chunk.file = 4;
    chunk.chunk = content;
    std::vector<std::uint8_t> stream = to_frame(Signal{15});
    auto large = to_frame(chunk);
    auto small = to_frame(Signal{9});
    stream.insert(stream.end(), large.begin(), large.end());
    stream.insert(stream.end(), small.begin(), small.end());

    for (bool read_into_space : {false, true}) {
        SCOPED_TRACE(read_into_space ? "read into its space" : "fed");
        FrameDecoder decoder(max_frame);
        std::vector<Frame> frames;
        std::size_t offset = 0;
        bool used_space = false;
        while (offset < stream.size()) {
            auto space = decoder.payload_space();
            if (read_into_space && !space.empty()) {
                std::size_t n = std::min({space.size(), stream.size() - offset, std::size_t{50000}});
                std::copy_n(stream.begin() + static_cast<std::ptrdiff_t>(offset), n, space.begin());
                decoder.filled(n);
                offset += n;
                used_space = true;
            } else {
                std::size_t n = std::min<std::size_t>(stream.size() - offset, 4093);   // crosses every edge
                decoder.feed(std::span(stream).subspan(offset, n));
                offset += n;
            }
            drain(decoder, frames);
        }
        EXPECT_EQ(used_space, read_into_space);
        EXPECT_TRUE(decoder.payload_space().empty());
        ASSERT_EQ(frames.size(), 3u);
        EXPECT_EQ(decode_frame<Signal>(frames[0])->signo, 15);
        auto decoded = decode_frame<StageContent>(frames[1]);
        ASSERT_TRUE(decoded.ok()) << decoded.error().message;
        EXPECT_EQ(decoded->file, 4u);
        EXPECT_TRUE(std::ranges::equal(decoded->chunk, content));
        EXPECT_EQ(decode_frame<Signal>(frames[2])->signo, 9);
    }
}

TEST(FrameDecoder, OversizedFrameIsAnError)
{
    Writer header;
    header.u32(max_unauthenticated_frame + 1);
    header.u8(static_cast<std::uint8_t>(MessageType::hello));
    FrameDecoder decoder(max_unauthenticated_frame);
    decoder.feed(header.data());
    auto next = decoder.next();
    ASSERT_FALSE(next.ok());
    EXPECT_NE(next.error().message.find("exceeds"), std::string::npos);
}

TEST(Messages, EveryChildsPlanIsTheSameBytesAsThePlanEncodedForItAlone)
{
    LaunchPlan plan;
    plan.job_id = "abc";
    std::vector<std::string> hosts;
    for (int i = 0; i < 40; ++i)
        hosts.push_back("nid" + std::to_string(1000 + i));
    plan.hosts = HostNames(hosts);
    plan.job.ranks_per_node.assign(40, 4);
    plan.job.apps = {{{"python3", "train.py"}, {"A=1"}, "/w", 160}};
    plan.position = 3;
    plan.root_offset_ns = 99;
    ChildPlanFrames frames(plan);
    for (auto [position, offset] : {std::pair<std::uint64_t, std::int64_t>{1, 0}, {33, -123456789}, {1u << 20, 1}}) {
        LaunchPlan alone = plan;
        alone.position = position;
        alone.root_offset_ns = offset;
        EXPECT_EQ(frames.frame_for(position, offset), to_frame(alone)) << "position " << position;
    }
}

TEST(Messages, ADecodedPlanNamesAnyOfAMillionHostsFromItsCompressedList)
{
    LaunchPlan plan;
    plan.job_id = "abc";
    plan.hosts = HostNames::parse("sim[000000-999999]").value();
    plan.job.ranks_per_node.assign(1'000'000, 1);
    plan.job.apps = {{{"true"}, {}, "/w", 1'000'000}};
    auto frame_bytes = to_frame(plan);
    Frame frame{static_cast<std::uint8_t>(MessageType::launch_plan),
                std::vector<std::uint8_t>(frame_bytes.begin() + header_size, frame_bytes.end())};
    auto decoded = decode_frame<LaunchPlan>(frame);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->hosts.size(), 1'000'000u);
    EXPECT_EQ(decoded->hosts[0], "sim000000");
    EXPECT_EQ(decoded->hosts.at(123456), "sim123456");
    EXPECT_EQ(decoded->hosts[999'999], "sim999999");
    // It forwards to its children the list it received.
    EXPECT_EQ(decoded->hosts.compressed(), "sim[000000-999999]");
}

TEST(Messages, LaunchPlanRoundTripsWithCompressedHosts)
{
    LaunchPlan plan;
    plan.job_id = "abc";
    plan.position = 7;
    std::vector<std::string> hosts;
    for (int i = 0; i < 100; ++i)
        hosts.push_back("nid" + std::to_string(1000 + i));
    plan.hosts = HostNames(hosts);
    plan.job.ranks_per_node.assign(100, 12);
    plan.job.apps = {{{"python3", "train.py", "--lr", "0.1"}, {"A=1"}, "/w", 1000},
                     {{"./b"}, {}, "/v", 200}};
    plan.job.env = {"PATH=/usr/bin", "HOME=/root"};
    plan.job.master_addr = "nid1000";
    plan.job.master_port = 29500;
    plan.job.pmix = PmixMode::eager;
    plan.simulated = true;
    plan.fanout = 4;
    plan.root_offset_ns = -12345;
    auto frame_bytes = to_frame(plan);
    Frame frame{static_cast<std::uint8_t>(MessageType::launch_plan),
                std::vector<std::uint8_t>(frame_bytes.begin() + header_size, frame_bytes.end())};
    auto decoded = decode_frame<LaunchPlan>(frame);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->hosts.expand(), hosts);
    EXPECT_EQ(decoded->job.ranks_per_node, plan.job.ranks_per_node);
    ASSERT_EQ(decoded->job.apps.size(), 2u);
    EXPECT_EQ(decoded->job.apps[0].argv, plan.job.apps[0].argv);
    EXPECT_EQ(decoded->job.apps[0].env, plan.job.apps[0].env);
    EXPECT_EQ(decoded->job.apps[0].wdir, "/w");
    EXPECT_EQ(decoded->job.apps[1].ranks, 200u);
    EXPECT_TRUE(decoded->check().ok()) << decoded->check().error().message;
    // Programs that do not cover the placed ranks, or one without a name, are refused before anything starts.
    decoded->job.apps[1].ranks = 199;
    EXPECT_FALSE(decoded->check().ok());
    decoded->job.apps[1].ranks = ~0ULL;
    EXPECT_FALSE(decoded->check().ok());
    decoded->job.apps[1].ranks = 200;
    decoded->job.apps[1].argv.clear();
    EXPECT_FALSE(decoded->check().ok());
    decoded->job.apps.clear();
    EXPECT_FALSE(decoded->check().ok());
    EXPECT_EQ(decoded->job.env, plan.job.env);
    EXPECT_EQ(decoded->root_offset_ns, -12345);
    EXPECT_TRUE(decoded->simulated);
    EXPECT_EQ(decoded->job.pmix, PmixMode::eager);
    // A PMIx mode this build does not know is a malformed plan, not a guess.
    plan.job.pmix = static_cast<PmixMode>(7);
    auto unknown_bytes = to_frame(plan);
    Frame unknown{static_cast<std::uint8_t>(MessageType::launch_plan),
                  std::vector<std::uint8_t>(unknown_bytes.begin() + header_size, unknown_bytes.end())};
    EXPECT_FALSE(decode_frame<LaunchPlan>(unknown).ok());
    // 100 host names travel as one short hostlist, not 100 strings.
    EXPECT_LT(frame_bytes.size(), 400u);
}

TEST(Messages, SubtreeDoneCarriesPhaseSketches)
{
    SubtreeDone done;
    done.ranks = 3;
    done.phases.add("rank.spawned", 0.010, "rank 0 on a");
    done.phases.add("rank.spawned", 0.030, "rank 1 on b");
    done.phases.add("rank.exited", 1.5, "rank 1 on b");
    auto bytes = to_frame(done);
    Frame frame{static_cast<std::uint8_t>(MessageType::subtree_done),
                std::vector<std::uint8_t>(bytes.begin() + header_size, bytes.end())};
    auto decoded = decode_frame<SubtreeDone>(frame);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    const auto* spawned = decoded->phases.find("rank.spawned");
    ASSERT_NE(spawned, nullptr);
    EXPECT_EQ(spawned->count(), 2u);
    EXPECT_EQ(spawned->max_who(), "rank 1 on b");
    EXPECT_DOUBLE_EQ(spawned->max(), 0.030);
}

TEST(Messages, WrongTypeAndTrailingBytesAreRejected)
{
    auto bytes = to_frame(Signal{2});
    Frame frame{static_cast<std::uint8_t>(MessageType::signal),
                std::vector<std::uint8_t>(bytes.begin() + header_size, bytes.end())};
    EXPECT_FALSE(decode_frame<Shutdown>(frame).ok());
    frame.payload.push_back(0);
    auto trailing = decode_frame<Signal>(frame);
    ASSERT_FALSE(trailing.ok());
    EXPECT_NE(trailing.error().message.find("malformed signal"), std::string::npos);
}

TEST(Messages, RandomGarbageNeverDecodesIntoACrash)
{
    std::mt19937 random(1234);
    for (int round = 0; round < 2000; ++round) {
        Frame frame;
        frame.type = static_cast<std::uint8_t>(random() % 30);
        frame.payload.resize(random() % 64);
        for (auto& byte : frame.payload)
            byte = static_cast<std::uint8_t>(random());
        (void)decode_frame<LaunchPlan>(frame);
        (void)decode_frame<SubtreeDone>(frame);
        (void)decode_frame<Output>(frame);
        (void)decode_frame<RankFailed>(frame);
        (void)decode_frame<FenceUp>(frame);
        (void)decode_frame<RoutedRequest>(frame);
    }
    SUCCEED();
}

// Encodes and decodes a message; a decoded message's views (BytesView) point into `frame`.
template <typename M>
Result<M> round_trip(const M& message, std::vector<std::uint8_t>& frame)
{
    frame = to_frame(message);
    return decode_frame_bytes<M>(frame);
}

// Gives every field of a message a value of its own (non-default, and valid where a field is checked), so a round
// trip shows that each field listed travels.
class Filler {
public:
    template <typename... Fields>
    void operator()(Fields&&... fields)
    {
        (fill(fields), ...);
    }

private:
    void fill(std::uint64_t& value) { value = next_++; }
    void fill(std::uint32_t& value) { value = static_cast<std::uint32_t>(next_++); }
    void fill(std::int64_t& value) { value = -static_cast<std::int64_t>(next_++); }
    void fill(std::int32_t& value) { value = static_cast<std::int32_t>(1 + next_++ % 60); }   // a valid signal too
    void fill(std::uint8_t& value) { value = 1; }   // a valid stream and stage-fetch kind
    void fill(bool& value) { value = true; }
    void fill(double& value) { value = 0.5 + static_cast<double>(next_++); }
    void fill(std::string& value) { value = "s" + std::to_string(next_++); }
    void fill(std::vector<std::uint8_t>& value) { value = {1, 2, static_cast<std::uint8_t>(next_++)}; }
    void fill(BytesView& value)
    {
        kept_.push_back({3, 4, static_cast<std::uint8_t>(next_++)});
        value = kept_.back();
    }
    void fill(Bytes32& value) { value.fill(static_cast<std::uint8_t>(next_++)); }
    template <typename E>
        requires std::is_enum_v<E>
    void fill(E& value)
    {
        value = static_cast<E>(1);
    }
    template <typename A, typename B>
    void fill(std::pair<A, B>& value)
    {
        fill(value.first);
        fill(value.second);
    }
    template <typename T>
    void fill(std::vector<T>& list)
    {
        list.resize(2);
        for (auto& item : list)
            fill(item);
    }
    template <HasFields T>
    void fill(T& value)
    {
        value.fields(*this);
    }
    void fill(JobSpec& job)
    {
        job.fields(*this);
        // Its programs' ranks are the ranks it places.
        std::uint64_t placed = std::accumulate(job.ranks_per_node.begin(), job.ranks_per_node.end(), 0ULL);
        job.apps.back().ranks = 1;
        job.apps.front().ranks = placed - 1;
    }
    void fill(HostList& list) { list.hosts = HostNames({"nid0001", "nid0002"}); }
    void fill(RankRuns& runs) { runs.ranks = {3, 4, 9}; }
    void fill(timing::PhaseSet& phases) { phases.add("daemon.started", 0.25, "nid0001"); }
    void fill(canopy_stage_stat& stat)
    {
        stat.ino = next_++;
        stat.size = static_cast<std::int64_t>(next_++);
        stat.mtime_nsec = static_cast<std::int64_t>(next_++);
    }
    void fill(canopy_stage_path_facts& facts) { path_facts_fields(*this, facts); }

    std::uint64_t next_ = 1;
    std::deque<std::vector<std::uint8_t>> kept_;   // what the views point at
};

template <typename M>
void expect_every_field_travels()
{
    SCOPED_TRACE(M::name);
    M message;
    Filler filler;
    message.fields(filler);
    auto frame = to_frame(message);
    EXPECT_NE(frame, to_frame(M{})) << "the filled message must differ from a default one";
    std::vector<std::uint8_t> decoded_from;
    auto decoded = round_trip(message, decoded_from);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(to_frame(*decoded), frame);
    EXPECT_STREQ(message_name(static_cast<std::uint8_t>(M::type)), M::name);
}

TEST(Messages, EveryMessageRoundTripsWithEveryFieldSet)
{
#define CANOPY_ROUND_TRIP(M) expect_every_field_travels<M>();
    CANOPY_WIRE_MESSAGES(CANOPY_ROUND_TRIP)
#undef CANOPY_ROUND_TRIP
}

TEST(Messages, EveryMessageHasItsOwnTypeAndName)
{
    std::set<std::uint8_t> types;
    std::set<std::string> names;
    std::size_t listed = 0;
#define CANOPY_COLLECT(M)                                                                                        \
    types.insert(static_cast<std::uint8_t>(M::type));                                                          \
    names.insert(M::name);                                                                                     \
    ++listed;
    CANOPY_WIRE_MESSAGES(CANOPY_COLLECT)
#undef CANOPY_COLLECT
    EXPECT_GE(listed, 27u);
    EXPECT_EQ(types.size(), listed);
    EXPECT_EQ(names.size(), listed);
    EXPECT_STREQ(message_name(99), "unknown");
}

TEST(Messages, FenceParticipantsTravelAsCompactRuns)
{
    FenceUp up;
    for (long rank = 100; rank < 1100; ++rank)
        up.participants.push_back(rank);
    up.participants.push_back(5000);
    up.sequence = 3;
    up.blob = {1, 2, 3};
    std::vector<std::uint8_t> bytes;
    auto decoded = round_trip(up, bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->participants, up.participants);
    EXPECT_EQ(decoded->sequence, 3u);
    EXPECT_EQ(decoded->blob, up.blob);
    // 1001 ranks in two runs: a handful of bytes, not one per rank.
    EXPECT_LT(to_frame(up).size(), 30u);
}

TEST(Messages, FencesKeepTheirDomainSoPmixAndPmiNeverMeet)
{
    FenceDown down;
    down.domain = FenceDomain::pmi;
    down.sequence = 2;
    std::vector<std::uint8_t> bytes;
    auto decoded = round_trip(down, bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->domain, FenceDomain::pmi);
    bytes[header_size] = 7;   // no such domain
    Frame frame{static_cast<std::uint8_t>(MessageType::fence_down),
                std::vector<std::uint8_t>(bytes.begin() + header_size, bytes.end())};
    auto bad = decode_frame<FenceDown>(frame);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("unknown domain 7"), std::string::npos);
}

TEST(Messages, HostileRankRunsAreRejectedBeforeAllocating)
{
    Writer writer;
    writer.u8(0);                  // the PMIx domain
    writer.varint(1);              // one run
    writer.varint(0);              // first rank
    writer.varint(1ull << 40);     // absurd length
    writer.varint(0);
    writer.i64(0);
    writer.bytes(std::vector<std::uint8_t>{});
    Frame frame{static_cast<std::uint8_t>(MessageType::fence_up), writer.take()};
    EXPECT_FALSE(decode_frame<FenceUp>(frame).ok());
}

TEST(Messages, ARunLengthThatWouldWrapTheTotalPastTheCapIsRejected)
{
    // Found by the wire fuzzer: a second run of length 2^64 - 5 made the running total wrap below the cap.
    Writer writer;
    writer.u8(0);
    writer.varint(2);                      // two runs
    writer.varint(0);
    writer.varint(10);                     // ranks 0-9
    writer.varint(20);
    writer.varint(~std::uint64_t{0} - 4);  // 10 + this wraps to 5
    writer.varint(0);
    writer.i64(0);
    writer.bytes(std::vector<std::uint8_t>{});
    Frame frame{static_cast<std::uint8_t>(MessageType::fence_up), writer.take()};
    EXPECT_FALSE(decode_frame<FenceUp>(frame).ok());
}

TEST(Messages, RoutedRequestsAndRepliesRoundTrip)
{
    RoutedRequest request{7, 12, 0, RoutedOp::lookup, {'k', 'e', 'y'}};
    std::vector<std::uint8_t> request_bytes, back_bytes;
    auto decoded = round_trip(request, request_bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->id, 7u);
    EXPECT_EQ(decoded->from, 12u);
    EXPECT_EQ(decoded->op, RoutedOp::lookup);
    RoutedReply reply{7, 12, -46, {'v'}};
    auto back = round_trip(reply, back_bytes);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->status, -46);
    EXPECT_EQ(back->to, 12u);

    auto bytes = to_frame(request);
    bytes[header_size + 3] = 9;    // the op byte: no such operation
    Frame frame{static_cast<std::uint8_t>(MessageType::routed_request),
                std::vector<std::uint8_t>(bytes.begin() + header_size, bytes.end())};
    EXPECT_FALSE(decode_frame<RoutedRequest>(frame).ok());
}

TEST(Messages, AFrameCarriedAsBytesDecodesOnlyWhole)
{
    StdinTaken taken{3, true};
    auto bytes = to_frame(taken);
    auto decoded = decode_frame_bytes<StdinTaken>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_TRUE(decoded->closed);
    EXPECT_EQ(decoded->bytes, 3u);

    auto truncated = bytes;
    truncated.pop_back();
    auto trailing = bytes;
    trailing.push_back(0);
    EXPECT_FALSE(decode_frame_bytes<StdinTaken>({}).ok());
    EXPECT_FALSE(decode_frame_bytes<StdinTaken>(std::vector<std::uint8_t>{1, 2, 3}).ok());
    EXPECT_FALSE(decode_frame_bytes<StdinTaken>(truncated).ok());
    EXPECT_FALSE(decode_frame_bytes<StdinTaken>(trailing).ok());
    EXPECT_FALSE(decode_frame_bytes<StdinTaken>(to_frame(Signal{9})).ok());
}

// A routed request's (or reply's) fields, filled and encoded on their own, decode to the same bytes.
template <typename T>
void expect_routed_fields_travel()
{
    SCOPED_TRACE(T::name);
    T value;
    Filler filler;
    value.fields(filler);
    auto bytes = encode_fields(value);
    auto decoded = decode_fields<T>(bytes, T::name);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(encode_fields(*decoded), bytes);
    if (!bytes.empty()) {
        auto truncated = bytes;
        truncated.pop_back();
        EXPECT_FALSE((decode_fields<T>(truncated, T::name).ok()));
    }
    auto trailing = bytes;
    trailing.push_back(0);
    auto refused = decode_fields<T>(trailing, T::name);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find(T::name), std::string::npos) << refused.error().message;
}

TEST(Routed, EveryRequestAndReplyRoundTripsWithEveryFieldSet)
{
#define CANOPY_ROUTED_ROUND_TRIP(R)                                                                             \
    expect_routed_fields_travel<R>();                                                                            \
    expect_routed_fields_travel<R::Reply>();
    CANOPY_ROUTED_REQUESTS(CANOPY_ROUTED_ROUND_TRIP)
#undef CANOPY_ROUTED_ROUND_TRIP
}

TEST(Routed, EveryOperationHasOneRequestAndAName)
{
    std::set<RoutedOp> ops;
    std::set<std::string> names;
    std::size_t listed = 0;
#define CANOPY_ROUTED_COLLECT(R)                                                                                \
    ops.insert(R::op);                                                                                         \
    names.insert(R::name);                                                                                     \
    EXPECT_STREQ(routed_name(R::op), R::name);                                                                 \
    ++listed;
    CANOPY_ROUTED_REQUESTS(CANOPY_ROUTED_COLLECT)
#undef CANOPY_ROUTED_COLLECT
    EXPECT_EQ(ops.size(), listed);
    EXPECT_EQ(names.size(), listed);
    // Every operation the wire accepts has its request: the enum's range and the list agree.
    EXPECT_EQ(listed, wire_limit(RoutedOp{}).max - wire_limit(RoutedOp{}).min + 1u);
}

} // namespace
} // namespace canopy::wire
