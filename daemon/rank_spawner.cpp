// Starts this node's ranks, forwards their output line by line, feeds rank 0's stdin, and reports their exits.
#include "rank_spawner.hpp"

#include <signal.h>

#include <boost/asio/write.hpp>

#include "timing/clock.hpp"
#include "util/log.hpp"

namespace canopy {
namespace {

// A line longer than this is forwarded in pieces rather than buffered without bound.
constexpr std::size_t max_pending_output = 64 * 1024;
// After a rank exits, a background process it left may still hold its pipes; stop waiting after this.
constexpr auto drain_grace = std::chrono::seconds(1);

} // namespace

RankSpawner::RankSpawner(asio::io_context& io, ProcessReaper& reaper, Events events)
    : io_(io), reaper_(reaper), events_(std::move(events))
{
}

RankSpawner::~RankSpawner() { *alive_ = false; }

void RankSpawner::spawn(const std::string& program, const std::vector<std::string>& argv, const std::string& wdir,
                        std::vector<RankLaunch> ranks)
{
    for (auto& launch : ranks) {
        auto rank = std::make_unique<Rank>();
        rank->rank = launch.rank;
        Rank& r = *rank;
        ranks_.emplace(launch.rank, std::move(rank));

        auto out = make_pipe();
        auto err = make_pipe();
        std::optional<Pipe> in;
        if (launch.takes_stdin) {
            auto pipe = make_pipe();
            if (pipe)
                in = std::move(*pipe);
        }
        if (!out || !err) {
            r.finished = true;
            ++finished_;
            events_.failed_to_start(r.rank, (out ? err.error() : out.error()).message);
            continue;
        }
        SpawnRequest request;
        request.argv = argv;
        request.argv[0] = program;
        request.env = std::move(launch.env);
        request.wdir = wdir;
        request.stdout_fd = out->write_end.get();
        request.stderr_fd = err->write_end.get();
        request.stdin_fd = in ? in->read_end.get() : -1;
        request.cpus = std::move(launch.cpus);
        request.parent_death_signal = SIGKILL;
        auto pid = spawn_process(request);
        if (!pid) {
            r.finished = true;
            ++finished_;
            events_.failed_to_start(r.rank, pid.error().message);
            continue;
        }
        r.pid = *pid;
        events_.spawned(r.rank, r.pid, timing::now_ns());
        r.out.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, out->read_end.release());
        r.err.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, err->read_end.release());
        if (in) {
            stdin_pipe_ = std::make_unique<asio::posix::stream_descriptor>(io_, in->write_end.release());
            write_next_stdin();
        }
        read(r, r.out, 1);
        read(r, r.err, 2);
        long id = r.rank;
        reaper_.watch(r.pid, [this, alive = alive_, id](int status) {
            if (!*alive)
                return;
            Rank& rank = *ranks_.at(id);
            rank.reaped = true;
            rank.wait_status = status;
            rank.exit_ns = timing::now_ns();
            rank.drain_timer = std::make_unique<asio::steady_timer>(io_, drain_grace);
            rank.drain_timer->async_wait([this, alive, id](const boost::system::error_code& error) {
                if (error || !*alive)
                    return;
                Rank& rank = *ranks_.at(id);
                if (rank.out.pipe)
                    rank.out.pipe->close();
                if (rank.err.pipe)
                    rank.err.pipe->close();
            });
            maybe_finish(rank);
        });
    }
}

void RankSpawner::reject(std::vector<RankLaunch> ranks, const std::string& message)
{
    for (auto& launch : ranks) {
        auto rank = std::make_unique<Rank>();
        rank->rank = launch.rank;
        rank->finished = true;
        ranks_.emplace(launch.rank, std::move(rank));
        ++finished_;
        events_.failed_to_start(launch.rank, message);
    }
}

void RankSpawner::read(Rank& rank, Stream& stream, std::uint8_t id)
{
    long rank_id = rank.rank;
    stream.pipe->async_read_some(asio::buffer(stream.buffer),
        [this, alive = alive_, rank_id, id](const boost::system::error_code& error, std::size_t size) {
            if (!*alive)
                return;
            Rank& rank = *ranks_.at(rank_id);
            Stream& stream = id == 1 ? rank.out : rank.err;
            stream.pending.append(stream.buffer.data(), size);
            std::size_t last_newline = stream.pending.rfind('\n');
            if (error) {
                if (!stream.pending.empty())
                    events_.output(rank_id, id, std::move(stream.pending));
                stream.pending.clear();
                stream.pipe.reset();
                maybe_finish(rank);
                return;
            }
            if (last_newline != std::string::npos) {
                events_.output(rank_id, id, stream.pending.substr(0, last_newline + 1));
                stream.pending.erase(0, last_newline + 1);
            } else if (stream.pending.size() >= max_pending_output) {
                events_.output(rank_id, id, std::move(stream.pending));
                stream.pending.clear();
            }
            read(rank, stream, id);
        });
}

void RankSpawner::maybe_finish(Rank& rank)
{
    if (rank.finished || !rank.reaped || rank.out.pipe || rank.err.pipe)
        return;
    rank.finished = true;
    ++finished_;
    if (rank.drain_timer)
        rank.drain_timer->cancel();
    events_.exited(rank.rank, rank.wait_status, rank.exit_ns);
}

void RankSpawner::write_stdin(const std::string& data)
{
    stdin_queue_.push_back(data);
    write_next_stdin();
}

void RankSpawner::close_stdin()
{
    stdin_eof_ = true;
    write_next_stdin();
}

void RankSpawner::write_next_stdin()
{
    if (!stdin_pipe_ || stdin_writing_)
        return;
    if (stdin_queue_.empty()) {
        if (stdin_eof_)
            stdin_pipe_.reset();
        return;
    }
    stdin_writing_ = true;
    asio::async_write(*stdin_pipe_, asio::buffer(stdin_queue_.front()),
        [this, alive = alive_](const boost::system::error_code& error, std::size_t) {
            if (!*alive)
                return;
            stdin_writing_ = false;
            if (error) {
                // The rank closed its stdin; what is left has nowhere to go.
                stdin_queue_.clear();
                stdin_pipe_.reset();
                return;
            }
            stdin_queue_.pop_front();
            write_next_stdin();
        });
}

void RankSpawner::signal_all(int signo)
{
    for (auto& [id, rank] : ranks_)
        if (rank->pid > 0 && !rank->reaped)
            ::kill(-rank->pid, signo);
}

void RankSpawner::terminate(double grace_seconds)
{
    signal_all(SIGTERM);
    kill_timer_ = std::make_unique<asio::steady_timer>(io_);
    kill_timer_->expires_after(std::chrono::milliseconds(static_cast<long>(grace_seconds * 1000)));
    kill_timer_->async_wait([this, alive = alive_](const boost::system::error_code& error) {
        if (!error && *alive)
            kill_all();
    });
}

void RankSpawner::kill_all()
{
    // Exited ranks too: their process group may hold background processes that must not outlive the job.
    for (auto& [id, rank] : ranks_)
        if (rank->pid > 0)
            ::kill(-rank->pid, SIGKILL);
}

} // namespace canopy
