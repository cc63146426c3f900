// On-demand staging over the tree: misses go to the parent (or the root's readers), answers to the children.
#include "stage/fetch_tree.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <boost/asio/post.hpp>

#include "util/log.hpp"

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

wire::StageFetchReply to_reply(std::uint64_t id, const stage::FetchAnswer& answer)
{
    wire::StageFetchReply reply;
    reply.id = id;
    reply.has_answer = true;
    reply.facts = answer.facts;
    reply.link = answer.link;
    reply.mirror = answer.mirror;
    reply.listing.reserve(answer.listing.size());
    for (const auto& name : answer.listing)
        reply.listing.push_back({name.name, name.type, name.link_target});
    return reply;
}

stage::FetchAnswer from_reply(wire::StageFetchReply& reply)
{
    stage::FetchAnswer answer;
    answer.facts = reply.facts;
    answer.link = std::move(reply.link);
    answer.mirror = std::move(reply.mirror);
    answer.listing.reserve(reply.listing.size());
    for (auto& name : reply.listing)
        answer.listing.push_back({std::move(name.name), name.type, std::move(name.link_target)});
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

StageFetchTree::StageFetchTree(asio::io_context& io, ChildSet& children) : io_(io), children_(children), timer_(io) {}

Result<std::unique_ptr<StageFetchTree>> StageFetchTree::for_daemon(asio::io_context& io, const std::string& cache_dir,
                                                                   ChildSet& children, SendUp send_up)
{
    auto cache = stage::NodeCache::create(cache_dir);
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
                                                                 ChildSet& children, int reader_threads)
{
    auto cache = stage::NodeCache::create(cache_dir);
    if (!cache)
        return cache.error();
    std::unique_ptr<StageFetchTree> tree(new StageFetchTree(io, children));
    auto* self = tree.get();
    tree->cache_ = std::make_unique<stage::FetchCache>(
        *cache, [self](std::uint64_t id, stage::FetchKind kind, const std::string& path) {
            {
                std::lock_guard lock(self->mutex_);
                self->jobs_.push_back({id, kind, path});
            }
            self->wake_.notify_one();
        });
    tree->start_readers(cache->dir(), std::max(1, reader_threads));
    return tree;
}

StageFetchTree::~StageFetchTree()
{
    *alive_ = false;
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
    for (int i = 0; i < count; ++i) {
        auto cache = stage::NodeCache::create(cache_dir);
        if (!cache)
            continue;
        readers_.emplace_back([this, cache = std::move(*cache)]() mutable { read_loop(std::move(cache)); });
    }
}

void StageFetchTree::read_loop(stage::NodeCache cache)
{
    stage::DirectoryHandles directories;   // this thread's: the directories of the paths it read, open
    for (;;) {
        Job job;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (stopping_)
                return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        auto answer = stage::read_local(job.kind, job.path, cache, &directories);
        asio::post(io_, [this, alive = alive_, id = job.id, answer = std::move(answer)]() mutable {
            if (!*alive)
                return;
            if (!answer) {
                stage_log().warn("on-demand staging: {}", answer.error().message);
                cache_->fail(id, answer.error().message);
                return;
            }
            if (auto taken = cache_->answer(id, std::move(*answer), false); !taken)
                stage_log().warn("on-demand staging: {}", taken.error().message);
        });
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
                  [this, alive = alive_, position, kind, id = request->id](const Status& status,
                                                                           const stage::FetchAnswer& answer) {
                      if (*alive)
                          answer_child(position, id, kind, status, answer);
                  });
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
    if (!(reply.facts.flags & CANOPY_STAGE_CONTENT)) {
        children_.send(position, wire::to_frame(reply));
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
        if (children_.max_queued_bytes() > max_queued_bytes) {
            // A child is behind: look again shortly rather than queue without bound.
            pumping_ = true;
            timer_.expires_after(std::chrono::milliseconds(1));
            timer_.async_wait([this, alive = alive_](const boost::system::error_code& error) {
                if (error || !*alive)
                    return;
                pumping_ = false;
                pump();
            });
            return;
        }
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
    reply.chunk.resize(static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, remaining)));
    std::size_t filled = 0;
    while (filled < reply.chunk.size()) {
        ssize_t got = ::pread(stream.file.get(), reply.chunk.data() + filled, reply.chunk.size() - filled,
                              static_cast<off_t>(stream.offset + filled));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            children_.send(stream.position, refused(reply.id, "the staged copy shrank while it was being sent"));
            return false;
        }
        filled += static_cast<std::size_t>(got);
    }
    stream.offset += filled;
    reply.last = stream.offset == stream.size;
    children_.send(stream.position, wire::to_frame(reply));
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
        bool content = reply->facts.flags & CANOPY_STAGE_CONTENT;
        taken = cache_->answer(reply->id, from_reply(*reply), content);
        if (taken && content)
            taken = cache_->content(reply->id, reply->chunk, reply->last);
    } else {
        taken = cache_->content(reply->id, reply->chunk, reply->last);
    }
    if (!taken)
        stage_log().warn("on-demand staging: {}", taken.error().message);
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
    cache_->fail_all(why);
}

} // namespace canopy
