// On-demand staging over the tree: a position's fetch cache, fed by its parent or (at the root) the filesystem.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "proc/process.hpp"
#include "stage/fetch_cache.hpp"
#include "stage_tree/read_ahead.hpp"
#include "tree/children.hpp"
#include "util/lifetime.hpp"
#include "util/result.hpp"
#include "wire/messages.hpp"

namespace canopy {

// One per tree position of a staged job. A daemon sends its misses to the parent (stage-fetch messages); the
// root reads them from its filesystem on many threads (the reads wait on a metadata server, not on a CPU), into
// its own cache, and reads ahead what the ranks are likely to ask next (stage::ReadAheadPolicy), pushing those
// answers down the whole tree. Either way a position answers its child daemons from its cache, streaming a
// file's content in chunks paced by the children's send queues, so memory stays bounded whatever the file size.
class StageFetchTree {
public:
    static constexpr std::size_t chunk_bytes = 1 << 20;
    static constexpr std::size_t max_queued_bytes = 4 * chunk_bytes;
    static constexpr int default_readers = 16;

    using SendUp = std::function<void(std::vector<std::uint8_t> frame)>;
    // An answer this position learned from a push (the daemon publishes it for its ranks).
    using Pushed = std::function<void(const std::string& path, const stage::FetchAnswer& answer)>;

    // `children` are the position's child daemons, which this tree answers; they must outlive it. `cache_dir` is
    // a node cache this process created (stage::NodeCache::create).
    static Result<std::unique_ptr<StageFetchTree>> for_daemon(asio::io_context& io, const std::string& cache_dir,
                                                              ChildSet& children, SendUp send_up);
    // `prefixes`: the staged prefixes, where the root reads ahead (none: no read-ahead).
    static Result<std::unique_ptr<StageFetchTree>> for_root(asio::io_context& io, const std::string& cache_dir,
                                                            ChildSet& children, std::vector<std::string> prefixes,
                                                            int reader_threads = default_readers);
    ~StageFetchTree();
    StageFetchTree(const StageFetchTree&) = delete;
    StageFetchTree& operator=(const StageFetchTree&) = delete;

    // The root, before any rank starts: reads ahead the programs the ranks will run, `argv` each
    // (ReadAheadPolicy::before_ranks).
    void read_ahead_program(const std::vector<std::string>& argv, const std::string& path_variable,
                            const std::string& library_path_variable);
    // A lookup for a local rank (or a test): answered from the cache, or once the parent answers.
    void fetch(stage::FetchKind kind, const std::string& path, stage::FetchCache::Done done);
    // A stage-fetch-reply from the parent (daemons only).
    void on_parent_reply(const wire::Frame& frame);
    // A stage-fetch-push from the parent (daemons only): passed to the children first, then learned.
    void on_parent_push(const wire::Frame& frame);
    void on_pushed(Pushed pushed) { on_pushed_ = std::move(pushed); }
    // The parent is gone or the job ends: every waiter gets "no answer" and falls back.
    void fail_all(const std::string& why);
    // A stage-fetch from the child at `position`, for the root and daemons alike: answered by `tree`, or, where
    // there is none (staging without on-demand here), refused so that the asker falls back instead of waiting.
    static void serve_child(StageFetchTree* tree, ChildSet& children, long position, const wire::Frame& frame);

    const stage::FetchCache::Counters& counters() const { return cache_->counters(); }
    const std::string& cache_dir() const { return cache_->cache().dir(); }
    const std::map<std::string, stage::FetchAnswer>& answers() const { return cache_->answers(); }
    std::size_t in_flight() const { return cache_->in_flight(); }

private:
    // A stage-fetch from the child at `position` (through serve_child). A malformed one is one log line naming
    // `peer`.
    void on_child_request(long position, const wire::Frame& frame, const std::string& peer);
    struct Stream {
        long position = 0;
        wire::StageFetchReply first;   // the answer, sent with the first chunk
        bool first_sent = false;
        UniqueFd file;
        std::uint64_t offset = 0, size = 0;
    };
    struct Job {
        std::uint64_t id;
        stage::FetchKind kind;
        std::string path;
        bool ahead = false;   // read ahead: a small file whole, a larger one's metadata only
        bool whole = false;   // read ahead whole whatever its size: a library the ranks will load
        bool soon = false;    // read ahead before the neighbours (stage::Ahead::next, load or program)
        bool program = false;   // a program the ranks run (stage::Ahead::program): a binary's headers only
    };
    // A read done at the root, back on the event loop.
    struct Read {
        Job job;
        Result<stage::FetchAnswer> answer;
        std::vector<std::uint8_t> content;   // read ahead: a small file's whole bytes, for the push
        bool fetch_below = false;            // read ahead whole, too large to push: the nodes fetch it
        std::optional<stage::ElfNeeds> needs;   // a binary program's, from its headers (its answer: metadata)
    };

    StageFetchTree(asio::io_context& io, ChildSet& children);
    void answer_child(long position, std::uint64_t id, stage::FetchKind kind, const Status& status,
                      const stage::FetchAnswer& answer);
    void pump();
    // True when a child has too much queued: `retry` then runs again shortly, with `waiting` set meanwhile.
    bool children_behind(asio::steady_timer& timer, bool& waiting, void (StageFetchTree::*retry)());
    // false when the stream is finished (sent or failed)
    bool send_chunk(Stream& stream);
    void start_readers(const std::string& cache_dir, int count);
    void read_loop(stage::NodeCache cache);
    void queue(Job job);
    void queue_next(Job job);   // under mutex_
    // What the next read queues goes to the front of next_jobs_, before what earlier reads queued (depth first).
    void start_next_group();
    void promote(std::uint64_t id);
    void hasten(std::uint64_t id);
    void on_read(Read read);
    // Sends the read-ahead answers down in batches, paced by the children's send queues, and only then answers
    // the callers who joined them: a reply can then say "pushed" and leave the bytes out.
    void push_ready();
    static std::size_t push_size(const Read& read);
    // One push frame for `batch`; `urgent` goes ahead of what the links have queued (Link::send).
    void push(std::vector<Read> batch, bool urgent);
    // An answer a node waits for: alone, and ahead of the read-ahead queued on the links.
    void push_now(Read read);
    // A caller joined a read-ahead that is read and waits in ready_next_ or ready_: pushed now.
    void push_awaited(std::uint64_t id);
    void after_read(const Job& job, const stage::FetchAnswer& answer);
    stage::ReadAheadPolicy::Read read_ahead_into_cache();

    asio::io_context& io_;
    std::unique_ptr<stage::FetchCache> cache_;
    ChildSet& children_;
    asio::steady_timer timer_;
    std::deque<Stream> streams_;
    std::vector<std::uint8_t> chunk_buffer_ = std::vector<std::uint8_t>(chunk_bytes);   // read into, then framed
    bool pumping_ = false;
    Lifetime lifetime_;
    Pushed on_pushed_;

    // The root's read-ahead, and its answers waiting to be pushed.
    std::unique_ptr<stage::ReadAheadPolicy> read_ahead_;
    std::deque<Read> ready_;
    std::deque<Read> ready_next_;
    asio::steady_timer push_timer_;
    bool push_waiting_ = false;

    // The root's readers: what the ranks asked first, then what they are about to ask for, then the rest of
    // read-ahead.
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> jobs_;
    std::deque<Job> next_jobs_;
    std::size_t next_group_ = 0;   // the front of next_jobs_ that the latest read queued (queue_next)
    std::deque<Job> ahead_jobs_;
    std::unique_ptr<stage::DirectoryHandles> directories_;   // shared: each directory looked up once per job
    bool stopping_ = false;
    std::vector<std::thread> readers_;
};

} // namespace canopy
