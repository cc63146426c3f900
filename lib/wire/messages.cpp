// Wire encoding of the tree messages.
#include "wire/messages.hpp"

#include "hosts/hostlist.hpp"

namespace canopy::wire {

const char* message_name(std::uint8_t type)
{
    switch (static_cast<MessageType>(type)) {
    case MessageType::challenge: return "challenge";
    case MessageType::hello: return "hello";
    case MessageType::welcome: return "welcome";
    case MessageType::clock_ping: return "clock-ping";
    case MessageType::clock_pong: return "clock-pong";
    case MessageType::launch_plan: return "launch-plan";
    case MessageType::stdin_data: return "stdin";
    case MessageType::signal: return "signal";
    case MessageType::shutdown: return "shutdown";
    case MessageType::stage_index: return "stage-index";
    case MessageType::stage_content: return "stage-content";
    case MessageType::stage_fetch_reply: return "stage-fetch-reply";
    case MessageType::stage_fetch: return "stage-fetch";
    case MessageType::subtree_up: return "subtree-up";
    case MessageType::subtree_spawned: return "subtree-spawned";
    case MessageType::subtree_done: return "subtree-done";
    case MessageType::output: return "output";
    case MessageType::rank_failed: return "rank-failed";
    case MessageType::daemon_error: return "daemon-error";
    case MessageType::daemon_log: return "daemon-log";
    case MessageType::fence_up: return "fence-up";
    case MessageType::fence_down: return "fence-down";
    case MessageType::routed_request: return "routed-request";
    case MessageType::routed_reply: return "routed-reply";
    }
    return "unknown";
}

namespace {

void put(Writer& writer, const Bytes32& bytes) { writer.raw(bytes); }
void get(Reader& reader, Bytes32& bytes) { reader.raw(bytes); }

void encode_phases(Writer& writer, const timing::PhaseSet& phases)
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
    }
}

void decode_phases(Reader& reader, timing::PhaseSet& phases)
{
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
        if (reader.ok())
            phases.merge_phase(name, timing::Sketch::from_data(std::move(data)));
    }
}

// Sorted ranks as runs (first, length): a whole node's or a contiguous block's ranks cost a few bytes.
void encode_ranks(Writer& writer, const std::vector<long>& ranks)
{
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

// Caps what a hostile run length can make us allocate.
constexpr std::uint64_t max_ranks_in_a_set = 1u << 24;

void decode_ranks(Reader& reader, std::vector<long>& ranks)
{
    std::size_t runs = reader.count();
    std::uint64_t total = 0;
    long next_allowed = 0;
    for (std::size_t i = 0; i < runs && reader.ok(); ++i) {
        auto first = reader.varint();
        auto length = reader.varint();
        total += length;
        if (length == 0 || total > max_ranks_in_a_set || first < static_cast<std::uint64_t>(next_allowed) ||
            first > max_ranks_in_a_set) {
            reader.fail();   // unsorted, overlapping or oversized: not something we sent
            return;
        }
        for (std::uint64_t r = 0; r < length; ++r)
            ranks.push_back(static_cast<long>(first + r));
        next_allowed = static_cast<long>(first + length);
    }
}

} // namespace

void encode(Writer& writer, const Challenge& message) { put(writer, message.parent_nonce); }
Status decode(Reader& reader, Challenge& message)
{
    get(reader, message.parent_nonce);
    return {};
}

void encode(Writer& writer, const Hello& message)
{
    writer.varint(message.position);
    put(writer, message.child_nonce);
    put(writer, message.proof);
}
Status decode(Reader& reader, Hello& message)
{
    message.position = reader.varint();
    get(reader, message.child_nonce);
    get(reader, message.proof);
    return {};
}

void encode(Writer& writer, const Welcome& message) { put(writer, message.proof); }
Status decode(Reader& reader, Welcome& message)
{
    get(reader, message.proof);
    return {};
}

void encode(Writer& writer, const ClockPing& message) { writer.i64(message.t0); }
Status decode(Reader& reader, ClockPing& message)
{
    message.t0 = reader.i64();
    return {};
}

void encode(Writer& writer, const ClockPong& message)
{
    writer.i64(message.t0);
    writer.i64(message.t1);
    writer.i64(message.t2);
}
Status decode(Reader& reader, ClockPong& message)
{
    message.t0 = reader.i64();
    message.t1 = reader.i64();
    message.t2 = reader.i64();
    return {};
}

void encode(Writer& writer, const LaunchPlan& message)
{
    writer.string(message.job_id);
    writer.varint(message.position);
    writer.string(compress_hostlist(message.hosts));
    writer.boolean(message.simulated);
    writer.string(message.agent);
    writer.string(message.ssh_command);
    writer.strings(message.ssh_args);
    writer.string(message.rsh_command);
    writer.string(message.daemon_path);
    writer.string(message.bind_address);
    writer.varint(message.fanout);
    writer.varint(message.window);
    writer.f64(message.connect_timeout);
    writer.f64(message.kill_grace);
    writer.string(message.tmpdir);
    writer.varint(message.verbosity);
    writer.i64(message.launcher_start_ns);
    writer.i64(message.root_offset_ns);

    const JobSpec& job = message.job;
    writer.strings(job.argv);
    writer.strings(job.env);
    writer.string(job.wdir);
    writer.string(job.cpu_bind);
    writer.varint(job.depth);
    writer.varint(job.ranks_per_node.size());
    for (auto count : job.ranks_per_node)
        writer.varint(count);
    writer.string(job.master_addr);
    writer.u32(job.master_port);
    writer.u8(static_cast<std::uint8_t>(job.pmix));
    writer.boolean(job.simple_pmi);
    writer.boolean(job.trace);
    writer.boolean(job.stage);
    writer.string(job.stage_cache_base);
    writer.string(job.stage_interposer);
    writer.varint(job.output_marks.size());
    for (const auto& [pattern, name] : job.output_marks) {
        writer.string(pattern);
        writer.string(name);
    }
}

Status decode(Reader& reader, LaunchPlan& message)
{
    message.job_id = reader.string();
    message.position = reader.varint();
    std::string hostlist = reader.string();
    message.simulated = reader.boolean();
    message.agent = reader.string();
    message.ssh_command = reader.string();
    message.ssh_args = reader.strings();
    message.rsh_command = reader.string();
    message.daemon_path = reader.string();
    message.bind_address = reader.string();
    message.fanout = reader.varint();
    message.window = reader.varint();
    message.connect_timeout = reader.f64();
    message.kill_grace = reader.f64();
    message.tmpdir = reader.string();
    message.verbosity = static_cast<std::uint32_t>(reader.varint());
    message.launcher_start_ns = reader.i64();
    message.root_offset_ns = reader.i64();

    JobSpec& job = message.job;
    job.argv = reader.strings();
    job.env = reader.strings();
    job.wdir = reader.string();
    job.cpu_bind = reader.string();
    job.depth = reader.varint();
    std::size_t nodes = reader.count();
    job.ranks_per_node.reserve(nodes);
    for (std::size_t i = 0; i < nodes && reader.ok(); ++i)
        job.ranks_per_node.push_back(reader.varint());
    job.master_addr = reader.string();
    job.master_port = reader.u32();
    std::uint8_t pmix = reader.u8();
    if (pmix > static_cast<std::uint8_t>(PmixMode::eager))
        reader.fail();
    job.pmix = static_cast<PmixMode>(pmix);
    job.simple_pmi = reader.boolean();
    job.trace = reader.boolean();
    job.stage = reader.boolean();
    job.stage_cache_base = reader.string();
    job.stage_interposer = reader.string();
    std::size_t marks = reader.count();
    for (std::size_t i = 0; i < marks && reader.ok(); ++i) {
        auto pattern = reader.string();
        auto name = reader.string();
        job.output_marks.emplace_back(std::move(pattern), std::move(name));
    }
    if (!reader.ok())
        return make_error("malformed launch-plan message");

    auto hosts = expand_hostlist(hostlist);
    if (!hosts)
        return make_error("launch-plan carries a bad host list: {}", hosts.error().message);
    message.hosts = std::move(hosts.value());
    if (message.hosts.size() != job.ranks_per_node.size() || message.fanout == 0)
        return make_error("launch-plan lists {} hosts but {} rank counts", message.hosts.size(),
                          job.ranks_per_node.size());
    return {};
}

void encode(Writer& writer, const StdinData& message)
{
    writer.varint(message.target_position);
    writer.string(message.data);
    writer.boolean(message.eof);
}
Status decode(Reader& reader, StdinData& message)
{
    message.target_position = reader.varint();
    message.data = reader.string();
    message.eof = reader.boolean();
    return {};
}

void encode(Writer& writer, const Signal& message) { writer.i64(message.signo); }
Status decode(Reader& reader, Signal& message)
{
    message.signo = static_cast<std::int32_t>(reader.i64());
    if (message.signo <= 0 || message.signo >= 65)
        return make_error("signal message carries invalid signal {}", message.signo);
    return {};
}

void encode(Writer& writer, const Shutdown& message) { writer.boolean(message.abort); }
Status decode(Reader& reader, Shutdown& message)
{
    message.abort = reader.boolean();
    return {};
}

void encode(Writer& writer, const SubtreeUp& message) { writer.varint(message.daemons); }
Status decode(Reader& reader, SubtreeUp& message)
{
    message.daemons = reader.varint();
    return {};
}

void encode(Writer& writer, const SubtreeSpawned& message) { writer.varint(message.ranks); }
Status decode(Reader& reader, SubtreeSpawned& message)
{
    message.ranks = reader.varint();
    return {};
}

void encode(Writer& writer, const SubtreeDone& message)
{
    writer.varint(message.ranks);
    encode_phases(writer, message.phases);
    writer.varint(message.trace.size());
    for (const auto& event : message.trace) {
        writer.varint(event.node);
        writer.i64(event.rank);
        writer.string(event.name);
        writer.f64(event.end);
        writer.f64(event.duration);
    }
}
Status decode(Reader& reader, SubtreeDone& message)
{
    message.ranks = reader.varint();
    decode_phases(reader, message.phases);
    std::size_t events = reader.count();
    for (std::size_t i = 0; i < events && reader.ok(); ++i) {
        TraceEvent event;
        event.node = static_cast<std::uint32_t>(reader.varint());
        event.rank = reader.i64();
        event.name = reader.string();
        event.end = reader.f64();
        event.duration = reader.f64();
        message.trace.push_back(std::move(event));
    }
    return {};
}

void encode(Writer& writer, const Output& message)
{
    writer.varint(message.rank);
    writer.u8(message.stream);
    writer.string(message.data);
}
Status decode(Reader& reader, Output& message)
{
    message.rank = reader.varint();
    message.stream = reader.u8();
    message.data = reader.string();
    if (message.stream != 1 && message.stream != 2)
        return make_error("output message names stream {}", message.stream);
    return {};
}

void encode(Writer& writer, const RankFailed& message)
{
    writer.varint(message.rank);
    writer.string(message.node);
    writer.i64(message.exit_code);
    writer.i64(message.signal);
    writer.string(message.message);
    writer.i64(message.time_ns);
    writer.u8(static_cast<std::uint8_t>(message.kind));
}
Status decode(Reader& reader, RankFailed& message)
{
    message.rank = reader.varint();
    message.node = reader.string();
    message.exit_code = static_cast<std::int32_t>(reader.i64());
    message.signal = static_cast<std::int32_t>(reader.i64());
    message.message = reader.string();
    message.time_ns = reader.i64();
    auto kind = reader.u8();
    if (kind > static_cast<std::uint8_t>(RankFailure::aborted))
        return make_error("rank-failed message names unknown failure kind {}", kind);
    message.kind = static_cast<RankFailure>(kind);
    return {};
}

void encode(Writer& writer, const DaemonError& message)
{
    writer.string(message.node);
    writer.string(message.message);
}
Status decode(Reader& reader, DaemonError& message)
{
    message.node = reader.string();
    message.message = reader.string();
    return {};
}

void encode(Writer& writer, const DaemonLog& message)
{
    writer.string(message.node);
    writer.string(message.line);
}
Status decode(Reader& reader, DaemonLog& message)
{
    message.node = reader.string();
    message.line = reader.string();
    return {};
}

void encode(Writer& writer, const StageIndex& message)
{
    writer.boolean(message.more);
    writer.bytes(message.chunk);
}
Status decode(Reader& reader, StageIndex& message)
{
    message.more = reader.boolean();
    message.chunk = reader.bytes();
    return {};
}

void encode(Writer& writer, const StageContent& message)
{
    writer.varint(message.file);
    writer.boolean(message.last);
    writer.bytes(message.chunk);
}
Status decode(Reader& reader, StageContent& message)
{
    message.file = static_cast<std::uint32_t>(reader.varint());
    message.last = reader.boolean();
    message.chunk = reader.bytes();
    return {};
}

void encode(Writer& writer, const StageFetch& message)
{
    writer.varint(message.id);
    writer.u8(message.kind);
    writer.string(message.path);
}
Status decode(Reader& reader, StageFetch& message)
{
    message.id = reader.varint();
    message.kind = reader.u8();
    message.path = reader.string();
    if (reader.ok() && (message.kind < 1 || message.kind > 2))
        return make_error("stage-fetch message with unknown kind {}", message.kind);
    return {};
}

namespace {

void put_stage_stat(Writer& writer, const canopy_stage_stat& s)
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

void get_stage_stat(Reader& reader, canopy_stage_stat& s)
{
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

} // namespace

void encode(Writer& writer, const StageFetchReply& message)
{
    writer.varint(message.id);
    writer.string(message.error);
    writer.boolean(message.has_answer);
    if (message.has_answer) {
        writer.i64(message.lstat_errno);
        writer.i64(message.stat_errno);
        writer.i64(message.open_errno);
        put_stage_stat(writer, message.lstat);
        put_stage_stat(writer, message.stat);
        writer.string(message.link);
        writer.string(message.mirror);
        writer.boolean(message.content);
        writer.boolean(message.listed);
        writer.varint(message.listing.size());
        for (const auto& name : message.listing) {
            writer.string(name.name);
            writer.u8(name.type);
            writer.string(name.link_target);
        }
    }
    writer.boolean(message.last);
    writer.bytes(message.chunk);
}
Status decode(Reader& reader, StageFetchReply& message)
{
    message.id = reader.varint();
    message.error = reader.string();
    message.has_answer = reader.boolean();
    if (message.has_answer) {
        message.lstat_errno = static_cast<std::int32_t>(reader.i64());
        message.stat_errno = static_cast<std::int32_t>(reader.i64());
        message.open_errno = static_cast<std::int32_t>(reader.i64());
        get_stage_stat(reader, message.lstat);
        get_stage_stat(reader, message.stat);
        message.link = reader.string();
        message.mirror = reader.string();
        message.content = reader.boolean();
        message.listed = reader.boolean();
        auto count = reader.varint();
        // Every name takes at least 3 bytes: a count beyond what is left is a damaged message, not an allocation.
        if (!reader.ok() || count > reader.remaining() / 3)
            return make_error("stage-fetch-reply message with a listing of {} names in {} bytes", count,
                              reader.remaining());
        message.listing.resize(count);
        for (auto& name : message.listing) {
            name.name = reader.string();
            name.type = reader.u8();
            name.link_target = reader.string();
        }
    }
    message.last = reader.boolean();
    message.chunk = reader.bytes();
    return {};
}

namespace {

// fence-up and fence-down carry the same fields; only their direction differs.
template <typename Fence>
void encode_fence(Writer& writer, const Fence& message)
{
    writer.u8(static_cast<std::uint8_t>(message.domain));
    encode_ranks(writer, message.participants);
    writer.varint(message.sequence);
    writer.i64(message.status);
    writer.boolean(message.more);
    writer.bytes(message.blob);
}

template <typename Fence>
Status decode_fence(Reader& reader, Fence& message)
{
    auto domain = reader.u8();
    if (domain > static_cast<std::uint8_t>(FenceDomain::pmi))
        return make_error("fence names unknown domain {}", domain);
    message.domain = static_cast<FenceDomain>(domain);
    decode_ranks(reader, message.participants);
    message.sequence = reader.varint();
    message.status = static_cast<std::int32_t>(reader.i64());
    message.more = reader.boolean();
    message.blob = reader.bytes();
    return {};
}

} // namespace

void encode(Writer& writer, const FenceUp& message) { encode_fence(writer, message); }
Status decode(Reader& reader, FenceUp& message) { return decode_fence(reader, message); }
void encode(Writer& writer, const FenceDown& message) { encode_fence(writer, message); }
Status decode(Reader& reader, FenceDown& message) { return decode_fence(reader, message); }

void encode(Writer& writer, const RoutedRequest& message)
{
    writer.varint(message.id);
    writer.varint(message.from);
    writer.varint(message.target);
    writer.u8(static_cast<std::uint8_t>(message.op));
    writer.bytes(message.payload);
}
Status decode(Reader& reader, RoutedRequest& message)
{
    message.id = reader.varint();
    message.from = reader.varint();
    message.target = reader.varint();
    auto op = reader.u8();
    if (op < 1 || op > 5)
        return make_error("routed request names unknown operation {}", op);
    message.op = static_cast<RoutedOp>(op);
    message.payload = reader.bytes();
    return {};
}

void encode(Writer& writer, const RoutedReply& message)
{
    writer.varint(message.id);
    writer.varint(message.to);
    writer.i64(message.status);
    writer.bytes(message.payload);
}
Status decode(Reader& reader, RoutedReply& message)
{
    message.id = reader.varint();
    message.to = reader.varint();
    message.status = static_cast<std::int32_t>(reader.i64());
    message.payload = reader.bytes();
    return {};
}

} // namespace canopy::wire
