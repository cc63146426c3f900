// The node's socket for the ranks' libcanopy: phase marks into the job's timing, store requests up the tree.
#include "app_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <deque>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "private_socket.hpp"
#include "timing/mark_name.hpp"
#include "util/log.hpp"
#include "wire/rank_socket.hpp"

namespace canopy {
namespace {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

spdlog::logger& app_log() { return area_logger("app"); }

} // namespace

struct AppServer::Connection : std::enable_shared_from_this<Connection> {
    Connection(local::socket socket, std::shared_ptr<Handlers> handlers, std::shared_ptr<std::size_t> open)
        : socket(std::move(socket)), handlers(std::move(handlers)), open(std::move(open))
    {
        ++*this->open;
        ucred credentials{};
        socklen_t size = sizeof credentials;
        if (::getsockopt(this->socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0)
            peer = credentials.pid;
    }
    ~Connection()
    {
        if (--*open == 0 && handlers->all_closed)
            asio::post(socket.get_executor(), handlers->all_closed);
    }

    void read_header()
    {
        asio::async_read(socket, asio::buffer(header), [self = shared_from_this()](auto error, std::size_t) {
            if (error)
                return;   // the rank closed its end: normal at exit
            std::uint32_t length = wire::rank_frame_length(self->header);
            if (length > self->handlers->max_request && self->handlers->oversized) {
                self->handlers->oversized(self->peer, length);
                return;
            }
            if (length < wire::rank_frame_header - 4 || length > self->handlers->max_request) {
                app_log().warn("closed a rank's connection: a {}-byte request is malformed", length);
                return;
            }
            self->body.resize(length);
            self->read_body();
        });
    }

    void read_body()
    {
        asio::async_read(socket, asio::buffer(body), [self = shared_from_this()](auto error, std::size_t) {
            if (error)
                return;
            self->dispatch();
            self->read_header();
        });
    }

    void dispatch()
    {
        auto frame = wire::decode_rank_frame(body);
        if (!frame)
            return;   // read_header let only frames that hold a header through
        if (frame->code == static_cast<std::uint8_t>(wire::RankSocketOp::mark)) {
            auto mark = wire::decode_fields<wire::MarkRequest>(frame->body, wire::MarkRequest::name);
            if (!mark) {
                app_log().warn("ignored a malformed mark ({} bytes)", frame->body.size());
                return;
            }
            if (!timing::valid_mark_name(mark->label)) {
                app_log().warn("ignored a mark from rank {} with a bad name (1-64 of A-Z a-z 0-9 _ . : -)", mark->rank);
                return;
            }
            handlers->mark(Mark{mark->rank, mark->time_ns, mark->duration_ns, std::move(mark->label)});
            return;
        }
        handlers->store(peer, frame->code, std::move(frame->body),
                        [weak = weak_from_this(), id = frame->id](std::uint8_t answer, std::vector<std::uint8_t> reply) {
                            if (auto self = weak.lock())
                                self->send(answer, id, reply);
                        });
    }

    void send(std::uint8_t answer, std::uint64_t id, const std::vector<std::uint8_t>& payload)
    {
        queue.push_back(wire::encode_rank_frame(answer, id, payload));
        if (queue.size() == 1)
            write_next();
    }

    void write_next()
    {
        asio::async_write(socket, asio::buffer(queue.front()), [self = shared_from_this()](auto error, std::size_t) {
            if (error)
                return;
            self->queue.pop_front();
            if (!self->queue.empty())
                self->write_next();
        });
    }

    local::socket socket;
    std::shared_ptr<Handlers> handlers;
    std::shared_ptr<std::size_t> open;
    pid_t peer = 0;   // the process that connected
    std::uint8_t header[4];
    std::vector<std::uint8_t> body;
    std::deque<std::vector<std::uint8_t>> queue;
};

AppServer::AppServer(boost::asio::io_context& io, std::string path, Handlers handlers)
    : listener_(io, app_log(), std::move(path)), handlers_(std::make_shared<Handlers>(std::move(handlers)))
{
}

Result<std::unique_ptr<AppServer>> AppServer::start(boost::asio::io_context& io, const std::string& path,
                                                    Handlers handlers)
{
    std::unique_ptr<AppServer> server(new AppServer(io, path, std::move(handlers)));
    if (auto listening = server->listener_.listen("the ranks' libcanopy"); !listening.ok())
        return listening.error();
    server->listener_.accept([handlers = server->handlers_, open = server->open_](local::socket socket) {
        std::make_shared<Connection>(std::move(socket), handlers, open)->read_header();
    });
    return server;
}

AppServer::~AppServer() = default;

} // namespace canopy
