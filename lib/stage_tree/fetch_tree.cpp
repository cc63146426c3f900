// On-demand staging over the tree: misses go to the parent (or the root's readers), answers to the children.
#include "stage_tree/fetch_tree.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <boost/asio/post.hpp>

#include "stage_tree/elf_needs.hpp"
#include "util/log.hpp"
#include "util/read_file.hpp"
#include "util/worker_thread.hpp"

namespace canopy {
namespace {

spdlog::logger& stage_log() { return area_logger("stage"); }

// "No answer" to a child's stage-fetch `id`: the asker falls back instead of waiting.
std::vector<std::uint8_t> refused(std::uint64_t id, std::string why)
{
    wire::StageFetchReply reply;
    reply.id = id;
    reply.error = std::move(why);
    return wire::to_frame(reply);
}

// An answer's facts, symlink target, mirror and listing, into or out of a reply or a pushed answer.
template <typename Wire>
void put_answer(Wire& out, const stage::FetchAnswer& answer)
{
    out.facts = answer.facts;
    out.link = answer.link;
    out.mirror = answer.mirror;
    out.listing.reserve(answer.listing.size());
    for (const auto& name : answer.listing)
        out.listing.push_back({name.name, name.type, name.link_target});
}

template <typename Wire>
stage::FetchAnswer take_answer(Wire& in)
{
    stage::FetchAnswer answer;
    answer.facts = in.facts;
    answer.link = std::move(in.link);
    answer.mirror = std::move(in.mirror);
    answer.listing.reserve(in.listing.size());
    for (auto& name : in.listing)
        answer.listing.push_back({std::move(name.name), name.type, std::move(name.link_target)});
    return answer;
}

wire::StageFetchReply to_reply(std::uint64_t id, const stage::FetchAnswer& answer)
{
    wire::StageFetchReply reply;
    reply.id = id;
    reply.has_answer = true;
    put_answer(reply, answer);
    return reply;
}

stage::FetchAnswer from_reply(wire::StageFetchReply& reply)
{
    stage::FetchAnswer answer = take_answer(reply);
    answer.pushed = reply.pushed;   // pushed to us, so passed on to our children too
    return answer;
}

bool normalized_absolute(const std::string& path)
{
    if (path.empty() || path[0] != '/' || path.size() >= CANOPY_STAGE_PATH_MAX ||
        path.find('\0') != std::string::npos)
        return false;
    char out[CANOPY_STAGE_PATH_MAX];
    int trailing = 0;
    long n = canopy_stage_normalize(path.c_str(), out, &trailing);
    return n == static_cast<long>(path.size()) && path == out;
}

} // namespace

StageFetchTree::StageFetchTree(asio::io_context& io, ChildSet& children)
    : io_(io), children_(children), timer_(io), push_timer_(io)
{
}

Result<std::unique_ptr<StageFetchTree>> StageFetchTree::for_daemon(asio::io_context& io, const std::string& cache_dir,
                                                                   ChildSet& children, SendUp send_up)
{
    auto cache = stage::NodeCache::open(cache_dir);
    if (!cache)
        return cache.error();
    std::unique_ptr<StageFetchTree> tree(new StageFetchTree(io, children));
    auto ask_parent = [send_up = std::move(send_up)](std::uint64_t id, stage::FetchKind kind,
                                                     const std::string& path) {
        send_up(wire::to_frame(wire::StageFetch{id, static_cast<std::uint8_t>(kind), path}));
    };
    tree->cache_ = std::make_unique<stage::FetchCache>(std::move(*cache), std::move(ask_parent));
    return tree;
}

Result<std::unique_ptr<StageFetchTree>> StageFetchTree::for_root(asio::io_context& io, const std::string& cache_dir,
                                                                 ChildSet& children, std::vector<std::string> prefixes,
                                                                 int reader_threads)
{
    auto cache = stage::NodeCache::open(cache_dir);
    if (!cache)
        return cache.error();
    std::unique_ptr<StageFetchTree> tree(new StageFetchTree(io, children));
    auto* self = tree.get();
    tree->cache_ = std::make_unique<stage::FetchCache>(
        *cache, [self](std::uint64_t id, stage::FetchKind kind, const std::string& path) {
            self->queue({id, kind, path, false});
        });
    if (!prefixes.empty()) {
        tree->read_ahead_ = std::make_unique<stage::ReadAheadPolicy>(std::move(prefixes));
        tree->cache_->set_read_ahead(
            [self](std::uint64_t id, stage::FetchKind kind, const std::string& path, stage::Ahead ahead) {
                self->queue({id, kind, path, true, ahead == stage::Ahead::load, ahead != stage::Ahead::neighbour,
                             ahead == stage::Ahead::program});
            },
            [self](std::uint64_t id) { self->promote(id); }, [self](std::uint64_t id) { self->hasten(id); });
    }
    tree->start_readers(cache->dir(), std::max(1, reader_threads));
    return tree;
}

void StageFetchTree::queue(Job job)
{
    {
        std::lock_guard lock(mutex_);
        if (job.ahead && job.soon)
            queue_next(std::move(job));
        else
            (!job.ahead ? jobs_ : ahead_jobs_).push_back(std::move(job));
    }
    wake_.notify_one();
}

void StageFetchTree::promote(std::uint64_t id)
{
    // A caller waits for this read-ahead now: it goes before the rest, and reads a file of any size whole.
    std::lock_guard lock(mutex_);
    for (auto* queue : {&next_jobs_, &ahead_jobs_}) {
        auto it = std::find_if(queue->begin(), queue->end(), [id](const Job& job) { return job.id == id; });
        if (it == queue->end())
            continue;
        if (queue == &next_jobs_ && static_cast<std::size_t>(it - queue->begin()) < next_group_)
            --next_group_;
        Job job = std::move(*it);
        queue->erase(it);
        job.ahead = false;
        jobs_.push_back(std::move(job));
        return;
    }
    // Read already, and waiting to be pushed behind other read-ahead: down at once (outside the caller's fetch).
    asio::post(io_, lifetime_.guard([this, id] { push_awaited(id); }));
    // Otherwise being read, and on_read sees the caller.
}

void StageFetchTree::push_awaited(std::uint64_t id)
{
    for (auto* ready : {&ready_next_, &ready_}) {
        auto it = std::find_if(ready->begin(), ready->end(), [id](const Read& read) { return read.job.id == id; });
        if (it == ready->end())
            continue;
        Read read = std::move(*it);
        ready->erase(it);
        push_now(std::move(read));
        return;
    }
}

void StageFetchTree::hasten(std::uint64_t id)
{
    // Read ahead as a neighbour, now what a rank is about to ask for: before the other neighbours.
    std::lock_guard lock(mutex_);
    auto it = std::find_if(ahead_jobs_.begin(), ahead_jobs_.end(), [id](const Job& job) { return job.id == id; });
    if (it == ahead_jobs_.end())
        return;
    Job job = std::move(*it);
    ahead_jobs_.erase(it);
    job.soon = true;
    queue_next(std::move(job));
}

void StageFetchTree::queue_next(Job job)
{
    // A rank runs what an import names depth first: the imports of the module read last come before the rest of
    // its parent's, in their own order.
    auto at = next_jobs_.begin() + static_cast<std::ptrdiff_t>(std::min(next_group_, next_jobs_.size()));
    next_jobs_.insert(at, std::move(job));
    ++next_group_;
}

void StageFetchTree::start_next_group()
{
    std::lock_guard lock(mutex_);
    next_group_ = 0;
}

StageFetchTree::~StageFetchTree()
{
    lifetime_.end();
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        jobs_.clear();
    }
    wake_.notify_all();
    for (auto& reader : readers_)
        reader.join();
}

void StageFetchTree::start_readers(const std::string& cache_dir, int count)
{
    // As many directories open as a quarter of the descriptor limit allows: a job's software tree stays open.
    struct rlimit limit {};
    std::size_t max_handles = stage::DirectoryHandles::default_max_handles;
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        max_handles = std::max<std::size_t>(max_handles, static_cast<std::size_t>(limit.rlim_cur / 4));
    directories_ = std::make_unique<stage::DirectoryHandles>(max_handles);
    for (int i = 0; i < count; ++i) {
        auto cache = stage::NodeCache::open(cache_dir);
        if (!cache)
            continue;
        readers_.push_back(worker_thread([this, cache = std::move(*cache)]() mutable { read_loop(std::move(cache)); }));
    }
}

void StageFetchTree::read_loop(stage::NodeCache cache)
{
    for (;;) {
        Job job;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [this] {
                return stopping_ || !jobs_.empty() || !next_jobs_.empty() || !ahead_jobs_.empty();
            });
            if (stopping_)
                return;
            auto& from = !jobs_.empty() ? jobs_ : !next_jobs_.empty() ? next_jobs_ : ahead_jobs_;
            if (&from == &next_jobs_ && next_group_ > 0)
                --next_group_;
            job = std::move(from.front());
            from.pop_front();
        }
        auto began = std::chrono::steady_clock::now();
        // A binary the ranks run: its headers say what it loads, and its bytes are never copied, as the kernel
        // maps it from here. Anything else (a script) as any file read ahead.
        std::optional<stage::ElfNeeds> needs;
        if (job.ahead && job.program)
            needs = stage::read_elf_needs(job.path);
        Read read{job,
                  stage::read_local(needs ? stage::FetchKind::metadata : job.kind, job.path, cache, directories_.get(),
                                    job.ahead && !job.whole ? stage::ReadAheadPolicy::small_file_bytes : -1),
                  {},
                  false,
                  std::move(needs)};
        if (job.ahead && read.answer && read.answer->content() &&
                   read.answer->facts.stat.size > stage::ReadAheadPolicy::small_file_bytes) {
            read.fetch_below = true;   // too large for a push: the push says so, and every node fetches it
        } else if (job.ahead && read.answer && read.answer->content()) {
            // The copy was just written: read back from the page cache for the push.
            auto copied = read_file(cache.content_path(read.answer->mirror),
                                    static_cast<std::size_t>(stage::ReadAheadPolicy::small_file_bytes),
                                    "staged copy");
            if (copied)
                read.content.assign(copied->begin(), copied->end());
            else
                read.answer = copied.error();
        }
        stage_log().debug("read {}{} {} in {} us", job.ahead ? "ahead " : "",
                          job.kind == stage::FetchKind::content ? "content" : "metadata", job.path,
                          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                                began)
                              .count());
        asio::post(io_, lifetime_.guard([this, read = std::move(read)]() mutable { on_read(std::move(read)); }));
    }
}

void StageFetchTree::on_read(Read read)
{
    const Job& job = read.job;
    if (!read.answer) {
        stage_log().warn("on-demand staging: {}", read.answer.error().message);
        cache_->fail(job.id, read.answer.error().message);
        return;
    }
    if (job.ahead && job.kind == stage::FetchKind::content && !read.answer->serves(job.kind)) {
        // Too large to read ahead, and a caller joined while it was read: read it whole for them. Or wanted
        // whole meanwhile (a library another needs): read it whole for every node.
        bool waited = cache_->has_waiters(job.id);
        if (waited || cache_->wanted_whole(job.id)) {
            queue({job.id, job.kind, job.path, !waited, true});
            return;
        }
    }
    if (job.ahead) {
        if (cache_->has_waiters(job.id)) {   // a node asked meanwhile
            push_now(std::move(read));
            return;
        }
        (job.soon ? ready_next_ : ready_).push_back(std::move(read));
        push_ready();
        return;
    }
    if (auto taken = cache_->answer(job.id, *read.answer, false); !taken)
        stage_log().warn("on-demand staging: {}", taken.error().message);
    after_read(job, *read.answer);
}

void StageFetchTree::after_read(const Job& job, const stage::FetchAnswer& answer)
{
    if (!read_ahead_)
        return;
    start_next_group();
    read_ahead_->after_read(job.kind, job.path, answer, !job.ahead, *cache_, read_ahead_into_cache());
}

void StageFetchTree::read_ahead_program(const std::vector<std::string>& argv, const std::string& path_variable,
                                        const std::string& library_path_variable)
{
    if (read_ahead_)
        read_ahead_->before_ranks(argv, path_variable, library_path_variable, *cache_, read_ahead_into_cache());
}

stage::ReadAheadPolicy::Read StageFetchTree::read_ahead_into_cache()
{
    return [this](stage::FetchKind kind, const std::string& path, stage::Ahead ahead) {
        cache_->read_ahead(kind, path, ahead);
    };
}

bool StageFetchTree::children_behind(asio::steady_timer& timer, bool& waiting, void (StageFetchTree::*retry)())
{
    if (children_.max_queued_bytes() <= max_queued_bytes)
        return false;
    // A child is behind: look again shortly rather than queue without bound.
    waiting = true;
    timer.expires_after(std::chrono::milliseconds(1));
    timer.async_wait(lifetime_.guard([this, &waiting, retry](const boost::system::error_code& error) {
        if (error)
            return;
        waiting = false;
        (this->*retry)();
    }));
    return true;
}

void StageFetchTree::push_ready()
{
    if (push_waiting_)
        return;
    while (!ready_.empty() || !ready_next_.empty()) {
        if (children_behind(push_timer_, push_waiting_, &StageFetchTree::push_ready))
            return;
        // What a rank is about to ask for before the neighbours.
        auto& from = !ready_next_.empty() ? ready_next_ : ready_;
        std::vector<Read> batch;
        std::size_t bytes = 0;
        // About a chunk per frame, whatever the mix of files and listings.
        while (!from.empty() && (batch.empty() || bytes + push_size(from.front()) <= chunk_bytes)) {
            bytes += push_size(from.front());
            batch.push_back(std::move(from.front()));
            from.pop_front();
        }
        push(std::move(batch), false);
    }
}

std::size_t StageFetchTree::push_size(const Read& read)
{
    std::size_t size = read.content.size() + sizeof(canopy_stage_path_facts) + read.job.path.size() +
                       read.answer->mirror.size() + read.answer->link.size();
    for (const auto& name : read.answer->listing)
        size += name.name.size() + name.link_target.size() + 3;
    return size;
}

void StageFetchTree::push_now(Read read)
{
    std::vector<Read> batch;
    batch.push_back(std::move(read));
    push(std::move(batch), true);
}

void StageFetchTree::push(std::vector<Read> batch, bool urgent)
{
    wire::StageFetchPush push;
    for (auto& read : batch) {
        wire::StagePushedAnswer pushed;
        pushed.path = read.job.path;
        put_answer(pushed, *read.answer);
        pushed.content = std::move(read.content);
        pushed.fetch = read.fetch_below;
        if (pushed.fetch)
            pushed.facts.flags &= ~CANOPY_STAGE_CONTENT;   // the bytes follow on request
        push.answers.push_back(std::move(pushed));
    }
    push.awaited = urgent;
    if (children_.size() > 0)   // to children not up yet too: a reply may say "pushed" to them later
        children_.broadcast_to_late_children_too(wire::to_frame(push), urgent);
    // Down before any reply: the children have these answers, bytes and all, when a reply names them.
    for (auto& read : batch) {
        read.answer->pushed = !read.fetch_below;   // else a reply carries the bytes
        if (auto taken = cache_->answer(read.job.id, *read.answer, false); !taken)
            stage_log().warn("on-demand staging: {}", taken.error().message);
        after_read(read.job, *read.answer);
        if (read.needs && read_ahead_)
            read_ahead_->program_needs(read.job.path, *read.needs, *cache_, read_ahead_into_cache());
    }
}

void StageFetchTree::fetch(stage::FetchKind kind, const std::string& path, stage::FetchCache::Done done)
{
    cache_->fetch(kind, path, std::move(done));
}

void StageFetchTree::on_child_request(long position, const wire::Frame& frame, const std::string& peer)
{
    auto request = wire::decode_frame<wire::StageFetch>(frame);
    if (!request) {
        stage_log().warn("ignored a malformed stage-fetch message from {}: {}", peer, request.error().message);
        return;
    }
    if (!normalized_absolute(request->path)) {
        stage_log().warn("ignored a stage-fetch message from {} for a path that is not absolute and normalized", peer);
        children_.send(position, refused(request->id, "the path is not absolute and normalized"));
        return;
    }
    auto kind = static_cast<stage::FetchKind>(request->kind);
    cache_->fetch(kind, request->path,
                  lifetime_.guard([this, position, kind, id = request->id](const Status& status,
                                                                          const stage::FetchAnswer& answer) {
                      answer_child(position, id, kind, status, answer);
                  }));
}

void StageFetchTree::answer_child(long position, std::uint64_t id, stage::FetchKind kind, const Status& status,
                                  const stage::FetchAnswer& answer)
{
    if (!status.ok()) {
        children_.send(position, refused(id, status.error().message));
        return;
    }
    auto reply = to_reply(id, answer);
    // A stat needs no bytes; a listing is small and saves the child questions.
    if (kind == stage::FetchKind::metadata)
        reply.facts.flags &= ~CANOPY_STAGE_CONTENT;
    // A pushed file's bytes went down with the push, ahead of this reply on the same link.
    reply.pushed = answer.pushed && (reply.facts.flags & CANOPY_STAGE_CONTENT);
    if (reply.pushed) {   // behind the push that carries the bytes
        children_.send(position, wire::to_frame(reply));
        return;
    }
    if (!(reply.facts.flags & CANOPY_STAGE_CONTENT)) {   // waited for, and small
        children_.send(position, wire::to_frame(reply), true);
        return;
    }
    // The copy in our cache is complete (renamed into place): stream it from there, paced.
    auto path = cache_->cache().content_path(answer.mirror);
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) {
        children_.send(position,
                        refused(id, fmt::format("cannot read the staged copy {} ({})", path, std::strerror(errno))));
        return;
    }
    Stream stream;
    stream.position = position;
    stream.size = static_cast<std::uint64_t>(std::max<std::int64_t>(0, answer.facts.stat.size));
    stream.first = std::move(reply);
    stream.file = std::move(file);
    streams_.push_back(std::move(stream));
    pump();
}

void StageFetchTree::pump()
{
    if (pumping_)
        return;
    while (!streams_.empty()) {
        if (children_behind(timer_, pumping_, &StageFetchTree::pump))
            return;
        Stream stream = std::move(streams_.front());
        streams_.pop_front();
        if (send_chunk(stream))
            streams_.push_back(std::move(stream));   // round robin: a big file does not hold up small ones
    }
}

bool StageFetchTree::send_chunk(Stream& stream)
{
    wire::StageFetchReply reply;
    if (!stream.first_sent) {
        reply = std::move(stream.first);
        stream.first_sent = true;
    } else {
        reply.id = stream.first.id;
    }
    std::uint64_t remaining = stream.size - stream.offset;
    auto chunk = std::span(chunk_buffer_).first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes,
                                                                                                 remaining)));
    std::size_t filled = read_at(stream.file.get(), stream.offset, chunk);
    if (filled < chunk.size()) {
        children_.send(stream.position, refused(reply.id, "the staged copy shrank while it was being sent"));
        return false;
    }
    reply.chunk = chunk;
    stream.offset += filled;
    reply.last = stream.offset == stream.size;
    // A file whole in one chunk is an answer someone waits for, not bulk.
    children_.send(stream.position, wire::to_frame(reply), reply.last && reply.has_answer);
    return !reply.last;
}

void StageFetchTree::on_parent_reply(const wire::Frame& frame)
{
    auto reply = wire::decode_frame<wire::StageFetchReply>(frame);
    if (!reply) {
        stage_log().warn("ignored a malformed stage-fetch-reply message from the parent: {}", reply.error().message);
        return;
    }
    Status taken;
    if (!reply->error.empty()) {
        cache_->fail(reply->id, reply->error);
    } else if (reply->has_answer) {
        bool content = (reply->facts.flags & CANOPY_STAGE_CONTENT) && !reply->pushed;
        taken = cache_->answer(reply->id, from_reply(*reply), content);
        if (taken && content)
            taken = cache_->content(reply->id, reply->chunk, reply->last);
    } else {
        taken = cache_->content(reply->id, reply->chunk, reply->last);
    }
    if (!taken)
        stage_log().warn("on-demand staging: {}", taken.error().message);
}

void StageFetchTree::on_parent_push(const wire::Frame& frame)
{
    auto push = wire::decode_frame<wire::StageFetchPush>(frame);
    if (!push) {
        stage_log().warn("ignored a malformed stage-fetch-push message from the parent: {}", push.error().message);
        return;
    }
    // The children first: every position that uses a pushed answer has passed it on, so its replies can say
    // "pushed" and leave the bytes out.
    if (children_.size() > 0)
        children_.broadcast_to_late_children_too(wire::encode_frame(frame), push->awaited);
    for (auto& pushed : push->answers) {
        if (!normalized_absolute(pushed.path)) {
            stage_log().warn("ignored a pushed stage answer for a path that is not absolute and normalized");
            continue;
        }
        bool fetch = pushed.fetch;
        if (auto learned = cache_->learn(pushed.path, take_answer(pushed), pushed.content); !learned) {
            stage_log().warn("on-demand staging: a pushed answer: {}", learned.error().message);
            continue;
        }
        if (on_pushed_)
            if (const auto* kept = cache_->cached(pushed.path))
                on_pushed_(pushed.path, *kept);
        if (fetch)
            cache_->fetch_ahead(pushed.path);
    }
}

void StageFetchTree::serve_child(StageFetchTree* tree, ChildSet& children, long position, const wire::Frame& frame)
{
    if (tree) {
        tree->on_child_request(position, frame, children.host_of(position));
        return;
    }
    auto fetch = wire::decode_frame<wire::StageFetch>(frame);
    if (!fetch) {
        stage_log().warn("ignored a malformed stage-fetch message from {}: {}", children.host_of(position),
                         fetch.error().message);
        return;
    }
    children.send(position, refused(fetch->id, "on-demand staging is off here"));
}

void StageFetchTree::fail_all(const std::string& why)
{
    streams_.clear();
    ready_.clear();
    ready_next_.clear();
    cache_->fail_all(why);
}

} // namespace canopy
