// The messages parents and children exchange over the tree, and their wire encoding.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hosts/host_names.hpp"
#include "stage/path_facts.h"
#include "timing/sketch.hpp"
#include "util/pmix_mode.hpp"
#include "util/result.hpp"
#include "wire/codec.hpp"
#include "wire/fields.hpp"
#include "wire/health_check.hpp"
#include "wire/timeouts.hpp"

namespace canopy::wire {

enum class MessageType : std::uint8_t {
    // Handshake, child <-> parent, before anything else.
    challenge = 1,
    hello = 2,
    welcome = 3,
    clock_ping = 4,
    clock_pong = 5,
    // Down the tree.
    launch_plan = 10,
    stdin_data = 11,
    signal = 12,
    shutdown = 13,
    stage_index = 14,
    stage_content = 15,
    stage_fetch_reply = 16,
    output_flow = 17,
    stage_fetch_push = 18,
    restart_ranks = 19,
    // Up the tree.
    subtree_up = 20,
    subtree_spawned = 21,
    subtree_done = 22,
    output = 23,
    rank_failed = 24,
    daemon_error = 25,
    daemon_log = 26,
    stage_fetch = 27,
    fabric_hello = 28,
    stdin_taken = 29,
    // Collectives over the tree (PMIx fences, direct modex, publish/lookup).
    fence_up = 30,
    fence_down = 31,
    routed_request = 32,
    routed_reply = 33,
    // Dynamic processes (PMIx_Spawn): the root starts the namespace on every node.
    // (40, 41 and 43 were spawn requests, replies and late ranks: routed requests now, wire/routed.hpp.)
    namespace_start = 42,
    // Either way on every tree link: proof of life when nothing else was sent (lib/tree/heartbeat).
    heartbeat = 50,
};

const char* message_name(std::uint8_t type);

using Bytes32 = std::array<std::uint8_t, 32>;

// Fields with an encoding of their own (messages.cpp).
// A host list, sent compressed ("nid[0001-4096]"); a list that does not expand fails the message.
struct HostList {
    HostNames& hosts;
};
// Sorted ranks, sent as runs (first, length): a whole node's or a contiguous block's ranks cost a few bytes.
struct RankRuns {
    std::vector<long>& ranks;
};
void wire_put(Writer& writer, const HostList& list);
void wire_get(Decoding& decoding, HostList& list);
void wire_put(Writer& writer, const RankRuns& runs);
void wire_get(Decoding& decoding, RankRuns& runs);
void wire_put(Writer& writer, const timing::PhaseSet& phases);
void wire_get(Decoding& decoding, timing::PhaseSet& phases);
void wire_put(Writer& writer, const canopy_stage_stat& stat);
void wire_get(Decoding& decoding, canopy_stage_stat& stat);
// A path's facts: a C struct (stage/path_facts.h), so its fields are listed here rather than in a fields() member.
template <typename Archive, typename Facts>
void path_facts_fields(Archive& archive, Facts& f)
{
    archive(f.lstat_errno, f.stat_errno, f.open_errno, f.flags, f.lstat, f.stat);
}
void wire_put(Writer& writer, const canopy_stage_path_facts& facts);
void wire_get(Decoding& decoding, canopy_stage_path_facts& facts);

} // namespace canopy::wire

namespace canopy {
// Beside PmixMode, so that argument-dependent lookup finds it.
constexpr wire::EnumLimit wire_limit(PmixMode) { return {static_cast<std::uint8_t>(PmixMode::eager), "PMIx mode"}; }
} // namespace canopy

namespace canopy::wire {

struct Challenge {
    static constexpr MessageType type = MessageType::challenge;
    static constexpr const char* name = "challenge";
    Bytes32 parent_nonce{};

    CANOPY_WIRE_FIELDS(parent_nonce)
};

struct Hello {
    static constexpr MessageType type = MessageType::hello;
    static constexpr const char* name = "hello";
    std::uint64_t position = 0;
    Bytes32 child_nonce{};
    Bytes32 proof{};

    CANOPY_WIRE_FIELDS(position, child_nonce, proof)
};

struct Welcome {
    static constexpr MessageType type = MessageType::welcome;
    static constexpr const char* name = "welcome";
    Bytes32 proof{};

    CANOPY_WIRE_FIELDS(proof)
};

struct ClockPing {
    static constexpr MessageType type = MessageType::clock_ping;
    static constexpr const char* name = "clock-ping";
    std::int64_t t0 = 0;

    CANOPY_WIRE_FIELDS(t0)
};

struct ClockPong {
    static constexpr MessageType type = MessageType::clock_pong;
    static constexpr const char* name = "clock-pong";
    std::int64_t t0 = 0, t1 = 0, t2 = 0;

    CANOPY_WIRE_FIELDS(t0, t1, t2)
};

// What every daemon runs: the same for all nodes, so it is computed once at the root.
// One program of the job and its ranks. An MPMD job (`canopy -n 1 ./a : -n 8 ./b`) has one per program, in rank
// order: program k's ranks follow program k-1's, and k is their app number (PMI's appnum, MPI_APPNUM).
struct AppSpec {
    std::vector<std::string> argv;
    std::vector<std::string> env;   // NAME=VALUE set for this program's ranks over the job's environment
    std::string wdir;
    std::uint64_t ranks = 0;

    CANOPY_WIRE_FIELDS(argv, env, wdir, ranks)
};

// How every node binds its ranks (lib/affinity): the options as given, parsed again by each daemon and planned from
// that node's own topology.
struct BindingSpec {
    std::string cpu_bind = "none";
    std::uint64_t depth = 1;
    std::string gpu_bind = "none";
    bool gpus_optional = false;   // gpu_bind is a site default ([bind]): a node without GPUs binds none
    std::uint64_t gpus_per_rank = 0;        // 0: not given
    std::uint64_t gpu_tiles_per_rank = 0;   // 0: not given
    std::string mem_bind = "none";
    std::string topology_file;   // --topology: plan from this hwloc XML, not the node's own topology
    std::string reserved_cpus;   // [bind] reserved_cpus: CPUs the site keeps for the system, never bound
    bool cpus_shared_ok = false;   // --oversubscribe: a binding may put two ranks on one CPU or GPU
    bool report_bindings = false;  // --report-bindings: each node says what each of its ranks got

    CANOPY_WIRE_FIELDS(cpu_bind, depth, gpu_bind, gpus_optional, gpus_per_rank, gpu_tiles_per_rank, mem_bind, topology_file,
                       reserved_cpus, cpus_shared_ok, report_bindings)
};

struct JobSpec {
    std::vector<AppSpec> apps;
    std::vector<std::string> env;          // NAME=VALUE, the ranks' base environment
    BindingSpec binding;
    std::vector<std::uint64_t> ranks_per_node;   // by node index
    std::string master_addr;
    std::uint32_t master_port = 0;
    PmixMode pmix = PmixMode::on_demand;   // when each node starts a PMIx server for its ranks
    bool simple_pmi = true;                // each node serves PMI-1 and PMI-2 over every rank's PMI_FD
    bool trace = false;                    // --trace: send every node's and rank's events up for a timeline
    // File staging (docs/staging.md): when on, the index and contents follow the plan down the tree, and each
    // node starts its ranks once its cache is installed.
    bool stage = false;
    std::string stage_cache_base;          // node-local directory the cache goes under, e.g. /dev/shm
    std::string stage_interposer;          // libcanopy_interpose.so on the nodes
    // --mark-on-output: when a rank first prints a line matching the regex, stamp app.<name> for it.
    std::vector<std::pair<std::string, std::string>> output_marks;   // (regex, name)
    // --spawn-slots: ranks PMIx_Spawn may start on each node beyond the job's own.
    std::uint64_t spawn_slots = 0;
    bool line_buffer = false;      // --line-buffer: a partial line waits for its newline
    // --fabric: how bulk data (staged files, large fence results and replies) moves parent to child: "off" (the
    // tree's TCP links), "auto" (the best libfabric provider every node offers, else TCP) or a provider's name
    // (docs/fabric.md).
    std::string fabric = "off";
    // --timing-top: how many of the slowest daemons or ranks each phase's sketch names on its way up.
    std::uint64_t timing_top = timing::default_top_k;
    // --rank-store-limit, [job] rank_store_limit: bytes one rank may keep in the job's key-value stores, counted by
    // its node (collective/store_limit.hpp); 0 for no limit.
    std::uint64_t rank_store_limit = 0;
    // --synthetic-ranks (synthetic/synthetic_exchange.hpp): each node drives its ranks in-process through the exchange
    // instead of starting them; empty for a real job.
    std::string synthetic_ranks;
    // --health-check: what every node checks before any rank starts.
    HealthCheckSpec health_check;
    // --max-restarts: how often a failed rank restarts the whole job's ranks in place (RestartRanks).
    std::uint64_t max_restarts = 0;

    CANOPY_WIRE_FIELDS(apps, env, binding, ranks_per_node, master_addr, master_port, pmix, simple_pmi, trace, stage,
                       stage_cache_base, stage_interposer, output_marks, spawn_slots, line_buffer, fabric, timing_top,
                       rank_store_limit, synthetic_ranks, health_check, max_restarts)
};

// Everything a daemon needs to build its part of the tree and run its ranks.
struct LaunchPlan {
    static constexpr MessageType type = MessageType::launch_plan;
    static constexpr const char* name = "launch-plan";
    std::string job_id;
    std::uint64_t position = 0;          // the receiving daemon's position
    HostNames hosts;                     // by node index (compressed hostlist on the wire)
    bool simulated = false;              // sim nodes: each daemon binds its own 127.x address
    std::string agent;
    std::string ssh_command;
    std::vector<std::string> ssh_args;
    std::string rsh_command;
    std::string daemon_path;
    std::string bind_address;
    std::uint64_t fanout = 32;
    std::uint64_t window = 32;
    double connect_timeout = default_connect_timeout;
    double kill_grace = 3;
    double heartbeat_timeout = 30;       // seconds a link may stay silent before its peer is declared lost
    std::string tmpdir;
    std::uint32_t verbosity = 0;
    std::int64_t launcher_start_ns = 0;   // root clock
    std::int64_t root_offset_ns = 0;      // the receiver's clock + this = root clock
    JobSpec job;

    // The fields a parent sets for each child come last: the rest is encoded once for all its children
    // (ChildPlanFrames).
    CANOPY_WIRE_FIELDS(job_id, HostList{hosts}, simulated, agent, ssh_command, ssh_args, rsh_command, daemon_path,
                       bind_address, fanout, window, connect_timeout, kill_grace, heartbeat_timeout, tmpdir, verbosity,
                       launcher_start_ns, job, position, root_offset_ns)
    Status check() const
    {
        if (hosts.size() != job.ranks_per_node.size() || fanout == 0)
            return make_error("launch-plan lists {} hosts but {} rank counts", hosts.size(), job.ranks_per_node.size());
        std::uint64_t node_ranks = 0, app_ranks = 0;
        for (auto count : job.ranks_per_node)
            node_ranks += count;
        for (const auto& app : job.apps) {
            if (app.argv.empty() || app.argv[0].empty())
                return make_error("launch-plan has a program without a name");
            if (app.ranks > node_ranks - app_ranks)   // also keeps the sum from wrapping
                return make_error("launch-plan places {} ranks but its programs have more", node_ranks);
            app_ranks += app.ranks;
        }
        if (job.apps.empty() || app_ranks != node_ranks)
            return make_error("launch-plan places {} ranks but its {} programs have {}", node_ranks, job.apps.size(),
                              app_ranks);
        // Every link arms timers from it: a value the config would refuse could overflow them.
        if (!(heartbeat_timeout >= min_heartbeat_timeout && heartbeat_timeout <= max_heartbeat_timeout))
            return make_error("launch-plan carries heartbeat timeout {} s", heartbeat_timeout);
        return {};
    }
};

// The plan a parent sends each child: the same but for the child's position and clock offset. Everything else (the
// host list, the job) is encoded once, so a parent's work per child does not grow with the job's node count.
class ChildPlanFrames {
public:
    explicit ChildPlanFrames(const LaunchPlan& plan);
    std::vector<std::uint8_t> frame_for(std::uint64_t position, std::int64_t root_offset_ns) const;

private:
    std::vector<std::uint8_t> shared_;   // the plan's payload up to its per-child fields
};

struct StdinData {
    static constexpr MessageType type = MessageType::stdin_data;
    static constexpr const char* name = "stdin";
    std::uint64_t target_position = 0;
    std::string data;
    bool eof = false;

    CANOPY_WIRE_FIELDS(target_position, data, eof)
};

// Rank 0's node to the root: `bytes` of stdin have left the tree, written into rank 0's pipe or, once rank 0 has
// closed its stdin (`closed`), dropped. The launcher keeps no more than a window of stdin on its way
// (launcher/stdin_forwarder.hpp), so a rank that reads slowly, or never, costs no hop more than that.
struct StdinTaken {
    static constexpr MessageType type = MessageType::stdin_taken;
    static constexpr const char* name = "stdin-taken";
    std::uint64_t bytes = 0;
    bool closed = false;

    CANOPY_WIRE_FIELDS(bytes, closed)
};

struct Signal {
    static constexpr MessageType type = MessageType::signal;
    static constexpr const char* name = "signal";
    std::int32_t signo = 0;

    CANOPY_WIRE_FIELDS(signo)
    Status check() const
    {
        if (signo <= 0 || signo >= 65)
            return make_error("signal message carries invalid signal {}", signo);
        return {};
    }
};

struct Shutdown {
    static constexpr MessageType type = MessageType::shutdown;
    static constexpr const char* name = "shutdown";
    bool abort = false;       // failure teardown: short grace before SIGKILL

    CANOPY_WIRE_FIELDS(abort)
};

// --max-restarts (docs/restarts.md): every node stops its ranks, keeping itself, its children and its caches, then
// enters the whole-job fence in the restart domain; as that fence comes down, every node starts attempt `attempt`.
struct RestartRanks {
    static constexpr MessageType type = MessageType::restart_ranks;
    static constexpr const char* name = "restart-ranks";
    std::uint64_t attempt = 0;   // 1 for the first restart

    CANOPY_WIRE_FIELDS(attempt)
};

// What of the ranks' output the daemons hold back, by not reading the ranks' pipes, so that the ranks wait as at a
// stalled terminal. `held`: all of it, while the launcher's reader stalls (a paused pager, a full pipe) and its
// queue is long. A line rank: on that stream (stdout, stderr) only that rank's output goes on, while its line is
// open at the launcher with much of the others' output waiting behind it (launcher/output_lines.hpp); negative for
// none.
struct OutputFlow {
    static constexpr MessageType type = MessageType::output_flow;
    static constexpr const char* name = "output-flow";
    bool held = false;
    std::int64_t stdout_line_rank = -1;
    std::int64_t stderr_line_rank = -1;

    CANOPY_WIRE_FIELDS(held, stdout_line_rank, stderr_line_rank)
};

struct SubtreeUp {
    static constexpr MessageType type = MessageType::subtree_up;
    static constexpr const char* name = "subtree-up";
    std::uint64_t daemons = 0;

    CANOPY_WIRE_FIELDS(daemons)
};

struct SubtreeSpawned {
    static constexpr MessageType type = MessageType::subtree_spawned;
    static constexpr const char* name = "subtree-spawned";
    std::uint64_t ranks = 0;

    CANOPY_WIRE_FIELDS(ranks)
};

// One entry of a --trace timeline: a point (duration < 0) or a slice ending at `end`, on a node's or a rank's track.
struct TraceEvent {
    std::uint32_t node = 0;          // node index
    std::int64_t rank = -1;          // -1: the node's daemon track
    std::string name;
    double end = 0;                  // seconds since launcher start
    double duration = -1;

    CANOPY_WIRE_FIELDS(node, rank, name, end, duration)
};

struct SubtreeDone {
    static constexpr MessageType type = MessageType::subtree_done;
    static constexpr const char* name = "subtree-done";
    std::uint64_t ranks = 0;
    timing::PhaseSet phases;
    std::vector<TraceEvent> trace;   // only with --trace: every node's and rank's events in this subtree

    CANOPY_WIRE_FIELDS(ranks, phases, trace)
};

struct Output {
    static constexpr MessageType type = MessageType::output;
    static constexpr const char* name = "output";
    std::uint64_t rank = 0;
    std::uint8_t stream = 1;   // 1 stdout, 2 stderr
    std::string data;          // whole lines, or a partial one that waited (a progress bar), or one at exit

    CANOPY_WIRE_FIELDS(rank, stream, data)
    Status check() const
    {
        if (stream != 1 && stream != 2)
            return make_error("output message names stream {}", stream);
        return {};
    }
};

enum class RankFailure : std::uint8_t {
    exited = 0,          // non-zero exit code or a signal
    never_started = 1,   // message says why
    aborted = 2,         // the rank asked to end the job (PMIx_Abort, MPI_Abort), or left PMIx without finalizing;
                         // message is the whole line for the user, exit_code the job's status
};
constexpr EnumLimit wire_limit(RankFailure) { return {static_cast<std::uint8_t>(RankFailure::aborted), "failure kind"}; }

struct RankFailed {
    static constexpr MessageType type = MessageType::rank_failed;
    static constexpr const char* name = "rank-failed";
    std::uint64_t rank = 0;
    std::string node;
    std::int32_t exit_code = 0;
    std::int32_t signal = 0;
    std::string message;       // set when the rank never started or aborted
    std::int64_t time_ns = 0;  // root clock
    RankFailure kind = RankFailure::exited;
    std::string exception;     // what torch's @record wrote to the rank's error file: "ValueError: ... (at f:1 in g)"
    std::string traceback;     // and its Python traceback

    CANOPY_WIRE_FIELDS(rank, node, exit_code, signal, message, time_ns, kind, exception, traceback)
};

struct DaemonError {
    static constexpr MessageType type = MessageType::daemon_error;
    static constexpr const char* name = "daemon-error";
    std::string node;
    std::string message;

    CANOPY_WIRE_FIELDS(node, message)
};

struct DaemonLog {
    static constexpr MessageType type = MessageType::daemon_log;
    static constexpr const char* name = "daemon-log";
    std::string node;
    std::string line;

    CANOPY_WIRE_FIELDS(node, line)
};

// Bulk bytes in a message: a view into the frame it was decoded from, or into the sender's buffer, so a chunk is
// not copied on its way through a daemon. Used before that frame or buffer goes, never kept.
using BytesView = std::span<const std::uint8_t>;

// The stage index for the node caches, in chunks; forwarded by every daemon as each chunk arrives.
struct StageIndex {
    static constexpr MessageType type = MessageType::stage_index;
    static constexpr const char* name = "stage-index";
    bool more = false;
    BytesView chunk;

    CANOPY_WIRE_FIELDS(more, chunk)
};

// A piece of a staged file: files come in the index's content order, each in order from its first byte, so a
// daemon writes and forwards chunks as they arrive (a pipelined broadcast, not a store-and-forward per file).
struct StageContent {
    static constexpr MessageType type = MessageType::stage_content;
    static constexpr const char* name = "stage-content";
    std::uint32_t file = 0;           // position in Index::content_files()
    bool last = false;                // the file's final chunk
    BytesView chunk;

    CANOPY_WIRE_FIELDS(file, last, chunk)
};

// A child's libfabric endpoint, sent to its parent once, before it reports its subtree up: the parent sends it
// bulk data there from then on (lib/fabric/fabric_plane.hpp). Travels on the authenticated link, so only this
// job's daemons can name an endpoint. An empty address: the child has no fabric, and bulk data stays on the link.
struct FabricHello {
    static constexpr MessageType type = MessageType::fabric_hello;
    static constexpr const char* name = "fabric-hello";
    std::string provider;
    std::vector<std::uint8_t> address;
    std::string why_not;         // no address: why (no libfabric, no such provider, ...)

    CANOPY_WIRE_FIELDS(provider, address, why_not)
};

// On-demand staging (docs/staging.md): a daemon asks its parent about a path none of its caches could answer.
struct StageFetch {
    static constexpr MessageType type = MessageType::stage_fetch;
    static constexpr const char* name = "stage-fetch";
    std::uint64_t id = 0;        // unique per requesting daemon; the reply carries it back
    std::uint8_t kind = 1;       // 1 metadata, 2 content (a file's bytes, a directory's listing)
    std::string path;            // absolute, normalized, as the program spelled it

    CANOPY_WIRE_FIELDS(id, kind, path)
    Status check() const
    {
        if (kind < 1 || kind > 2)
            return make_error("stage-fetch message with unknown kind {}", kind);
        return {};
    }
};

struct StageListedName {
    std::string name;
    std::uint8_t type = 0;       // DT_*
    std::string link_target;     // DT_LNK

    CANOPY_WIRE_FIELDS(name, type, link_target)
};

// The answer, from the parent's cache or the root's filesystem. A file's content follows in chunks: the first
// reply carries the answer and the first chunk, the next ones only chunks, the final one `last`.
struct StageFetchReply {
    static constexpr MessageType type = MessageType::stage_fetch_reply;
    static constexpr const char* name = "stage-fetch-reply";
    std::uint64_t id = 0;
    std::string error;           // non-empty: no answer (the requester falls back); nothing else is set
    bool has_answer = false;
    canopy_stage_path_facts facts{}; // CANOPY_STAGE_CONTENT in flags: a regular file whose bytes follow
    std::string link;
    std::string mirror;
    std::vector<StageListedName> listing;
    // A content answer this position pushed down already (StageFetchPush, on the same link before this reply):
    // the asker has the bytes, and no chunk follows.
    bool pushed = false;
    bool last = true;            // content: this chunk ends the file
    BytesView chunk;

    template <typename Archive>
    void fields(Archive& a)
    {
        a(id, error, has_answer);
        if (has_answer)
            a(facts, link, mirror, listing, pushed);
        a(last, chunk);
    }
};

// An answer the root read ahead of any request (docs/staging.md, "Read-ahead"). A small file's whole content
// travels with it; a larger file's answer carries only its metadata (no CANOPY_STAGE_CONTENT).
struct StagePushedAnswer {
    std::string path;            // absolute, normalized, as a program would spell it
    canopy_stage_path_facts facts{};
    std::string link;
    std::string mirror;
    std::vector<StageListedName> listing;
    std::vector<std::uint8_t> content;   // CANOPY_STAGE_CONTENT in facts.flags: the whole file
    // A large file the ranks are about to load (a library another needs): the parent has it whole, and every node
    // fetches it now, before its ranks ask.
    bool fetch = false;

    CANOPY_WIRE_FIELDS(path, facts, link, mirror, listing, content, fetch)
};

// Read-ahead answers, down the whole tree: every daemon passes them to its children before it uses them, keeps
// them in its cache and publishes them for its ranks, so a path read ahead costs the ranks no question at all.
struct StageFetchPush {
    static constexpr MessageType type = MessageType::stage_fetch_push;
    static constexpr const char* name = "stage-fetch-push";
    std::vector<StagePushedAnswer> answers;
    // A node waits for one of these answers: every daemon passes the push on ahead of the read-ahead queued on
    // its links, as the root did.
    bool awaited = false;

    CANOPY_WIRE_FIELDS(answers, awaited)
};

// Which protocol a fence serves: each numbers its fences on its own, so a job whose ranks speak PMIx and simple
// PMI at once (libcanopy in an MPICH program) never pairs one protocol's fence with the other's.
// Each domain numbers its fences apart: PMIx fences, simple-PMI barriers, PMIx connects and disconnects, and the
// nodes' health verdicts before the ranks start (wire/health_check.hpp).
// A restart's barrier (RestartRanks) is a fence of its own domain, which alone keeps its numbering across attempts.
enum class FenceDomain : std::uint8_t { pmix = 0, pmi = 1, pmix_connect = 2, health = 3, restart = 4 };
constexpr EnumLimit wire_limit(FenceDomain)
{
    return {static_cast<std::uint8_t>(FenceDomain::restart), "domain"};
}

// One chunk of a fence going up (a subtree's contribution, sent when every participant below has arrived) or
// down (the result, broadcast from the root to the subtrees that took part). Blobs travel in chunks: each
// subtree's last chunk has more = false, and the down-sweep forwards each chunk as it arrives.
struct FenceChunk {
    FenceDomain domain = FenceDomain::pmix;
    std::vector<long> participants;   // sorted ranks; empty = the whole job
    std::uint64_t sequence = 0;
    std::int32_t status = 0;          // non-zero: a participant failed, the fence fails everywhere
    bool more = false;
    // Down only: the result is large, and every chunk of it goes on the bulk route (a fabric where there is one),
    // so that its chunks stay in order.
    bool bulk = false;
    // The whole blob's size, in every chunk: a receiver reserves it once instead of growing by doubling, which
    // would hold twice the result at the last growth.
    std::uint64_t total = 0;
    std::vector<std::uint8_t> blob;

    CANOPY_WIRE_FIELDS(domain, RankRuns{participants}, sequence, status, more, bulk, total, blob)
};

struct FenceUp : FenceChunk {
    static constexpr MessageType type = MessageType::fence_up;
    static constexpr const char* name = "fence-up";
};

struct FenceDown : FenceChunk {
    static constexpr MessageType type = MessageType::fence_down;
    static constexpr const char* name = "fence-down";
};

// What a routed request asks for: each operation's request and reply are described in wire/routed.hpp.
enum class RoutedOp : std::uint8_t {
    direct_modex = 1, publish = 2, lookup = 3, unpublish = 4, store = 5, spawn = 6, late_ranks = 7,
    store_invalidate = 8
};
constexpr EnumLimit wire_limit(RoutedOp)
{
    return {static_cast<std::uint8_t>(RoutedOp::store_invalidate), "operation", 1};
}

// A request for one position (the root for the job-wide store, a rank's node for direct modex), carried hop by
// hop along tree links; the reply goes back to `from` the same way.
struct RoutedRequest {
    static constexpr MessageType type = MessageType::routed_request;
    static constexpr const char* name = "routed-request";
    std::uint64_t id = 0;          // unique per requester
    std::uint64_t from = 0;        // requester's position
    std::uint64_t target = 0;      // position that answers
    RoutedOp op = RoutedOp::direct_modex;
    std::vector<std::uint8_t> payload;

    CANOPY_WIRE_FIELDS(id, from, target, op, payload)
};

struct RoutedReply {
    static constexpr MessageType type = MessageType::routed_reply;
    static constexpr const char* name = "routed-reply";
    std::uint64_t id = 0;
    std::uint64_t to = 0;          // the requester's position
    std::int32_t status = 0;
    std::vector<std::uint8_t> payload;

    CANOPY_WIRE_FIELDS(id, to, status, payload)
};

// Down the tree from the root to every daemon, before the root answers the spawn: every position adds the
// namespace's ranks to its tree ranks, every PMIx server learns the namespace, and the nodes it uses start ranks.
struct NamespaceStart {
    static constexpr MessageType type = MessageType::namespace_start;
    static constexpr const char* name = "namespace-start";
    std::string nspace;
    std::uint64_t first = 0;                      // first tree rank
    std::vector<std::uint64_t> ranks_per_node;    // by node index of the job; ranks in blocks, node 0 first
    std::uint64_t parent_rank = 0;                // the spawning rank's tree rank
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::string wdir;

    CANOPY_WIRE_FIELDS(nspace, first, ranks_per_node, parent_rank, argv, env, wdir)
    Status check() const
    {
        if (argv.empty())
            return make_error("namespace-start {} has no program", nspace);
        return {};
    }
};

// Sent on a tree link by a side that has sent nothing else for a while (a quarter of the heartbeat timeout), so
// that the peer can tell a quiet link from a hung node. The link itself takes it; no owner sees it.
struct Heartbeat {
    static constexpr MessageType type = MessageType::heartbeat;
    static constexpr const char* name = "heartbeat";
    std::uint64_t sequence = 0;   // how many this side has sent on the link: a debug log can tell gaps apart

    CANOPY_WIRE_FIELDS(sequence)
};

// Every message, listed once: the name table, the encoders and decoders and their round-trip test come from it.
#define CANOPY_WIRE_MESSAGES(X)                                                                                  \
    X(Challenge) X(Hello) X(Welcome) X(ClockPing) X(ClockPong) X(LaunchPlan) X(StdinData) X(Signal) X(Shutdown)     \
    X(StageIndex) X(StageContent) X(StageFetchReply) X(SubtreeUp) X(SubtreeSpawned) X(SubtreeDone) X(Output)       \
    X(RankFailed) X(DaemonError) X(DaemonLog) X(StageFetch) X(FenceUp) X(FenceDown) X(RoutedRequest) X(RoutedReply) \
    X(NamespaceStart) X(Heartbeat) X(OutputFlow) X(FabricHello) X(StageFetchPush) X(StdinTaken) X(RestartRanks)

// A listing name takes at least 3 bytes on the wire (two empty strings and its type).
template <>
inline constexpr std::size_t min_wire_size<StageListedName> = 3;
// A pushed answer takes at least its facts and five empty fields.
template <>
inline constexpr std::size_t min_wire_size<StagePushedAnswer> = 5;

// Encodes or decodes a message's fields; instantiated in messages.cpp for every message in the list. decode
// leaves trailing-byte checks to decode_frame.
template <typename M>
void encode(Writer& writer, const M& message);
template <typename M>
Status decode(Reader& reader, M& message);

template <typename M>
std::vector<std::uint8_t> to_frame(const M& message)
{
    Writer writer;
    start_frame(writer, static_cast<std::uint8_t>(M::type));
    encode(writer, message);
    return finish_frame(writer);
}

// Decodes a frame's payload as M; a wrong type, short payload or trailing bytes is an error. M's BytesView fields
// point into the frame.
template <typename M>
Result<M> decode_frame(FrameView frame)
{
    if (frame.type != static_cast<std::uint8_t>(M::type))
        return make_error("expected a {} message, got {}", message_name(static_cast<std::uint8_t>(M::type)),
                          message_name(frame.type));
    M message;
    Reader reader(frame.payload);
    if (auto status = decode(reader, message); !status)
        return status.error();
    if (!reader.ok() || !reader.at_end())
        return make_error("malformed {} message ({} bytes)", message_name(frame.type), frame.payload.size());
    return message;
}
template <typename M>
Result<M> decode_frame(const Frame& frame)
{
    return decode_frame<M>(FrameView{frame.type, frame.payload});
}

// A whole frame carried as bytes inside another message (a routed request's payload), decoded as M.
template <typename M>
Result<M> decode_frame_bytes(std::span<const std::uint8_t> bytes)
{
    auto frame = view_frame(bytes);
    if (!frame)
        return make_error("malformed {} message ({} bytes): {}", M::name, bytes.size(), frame.error().message);
    return decode_frame<M>(*frame);
}

} // namespace canopy::wire
