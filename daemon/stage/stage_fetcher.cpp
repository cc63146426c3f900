// The node's on-demand staging socket: one lookup per connection, answered from the node's fetch tree.
#include "stage_fetcher.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "private_socket.hpp"
#include "stage/board_format.h"
#include "stage/fetch_protocol.h"
#include "util/log.hpp"

namespace canopy {
namespace {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

spdlog::logger& stage_log() { return area_logger("stage"); }

} // namespace

struct StageFetcher::Connection : std::enable_shared_from_this<Connection> {
    Connection(local::socket socket, StageFetchTree& tree, Lifetime::Watch fetcher,
               std::shared_ptr<stage::AnswerBoard> board)
        : socket(std::move(socket)), tree(tree), fetcher(std::move(fetcher)), board(std::move(board))
    {
    }

    void read_request()
    {
        auto header = asio::buffer(&request, sizeof request);
        asio::async_read(socket, header, [self = shared_from_this()](auto error, std::size_t) {
            if (error)
                return;
            const auto& r = self->request;
            if (r.magic != CANOPY_STAGE_FETCH_MAGIC || (r.kind != CANOPY_STAGE_FETCH_METADATA &&
                                                        r.kind != CANOPY_STAGE_FETCH_OPEN) ||
                r.path_len == 0 || r.path_len >= CANOPY_STAGE_PATH_MAX) {
                stage_log().warn("a rank sent a malformed on-demand stage request (kind {}, {} path bytes)", r.kind,
                                 r.path_len);
                self->reply_failure(EINVAL);
                return;
            }
            self->path.resize(r.path_len);
            asio::async_read(self->socket, asio::buffer(self->path), [self](auto error, std::size_t) {
                if (!error)
                    self->ask();
            });
        });
    }

    void ask()
    {
        if (!fetcher.alive())
            return;
        auto kind = request.kind == CANOPY_STAGE_FETCH_OPEN ? stage::FetchKind::content : stage::FetchKind::metadata;
        tree.fetch(kind, path, [self = shared_from_this()](const Status& status, const stage::FetchAnswer& answer) {
            if (!status.ok()) {
                stage_log().debug("no on-demand answer for {}: {}", self->path, status.error().message);
                self->reply_failure(EIO);
                return;
            }
            // On the board first: the node's other ranks (and this one, again) read it there without asking.
            if (self->board)
                self->board->publish(self->path, answer);
            self->reply_answer(answer);
        });
    }

    void reply_failure(int status)
    {
        std::memset(&reply, 0, sizeof reply);
        reply.magic = CANOPY_STAGE_FETCH_MAGIC;
        reply.status = status;
        send({});
    }

    // The interposer builds the same reply from the answer board (board_answer in lib/interpose/on_demand.c).
    void reply_answer(const stage::FetchAnswer& answer)
    {
        std::memset(&reply, 0, sizeof reply);
        reply.magic = CANOPY_STAGE_FETCH_MAGIC;
        reply.facts = answer.facts;
        std::string text;
        if (request.kind == CANOPY_STAGE_FETCH_OPEN && (answer.content() || answer.listed()))
            text = answer.mirror;
        else if (request.kind == CANOPY_STAGE_FETCH_METADATA && request.want_text)
            text = answer.link;
        if (text.size() >= CANOPY_STAGE_PATH_MAX) {
            reply_failure(ENAMETOOLONG);
            return;
        }
        send(std::move(text));
    }

    void send(std::string text)
    {
        reply.text_len = static_cast<std::uint32_t>(text.size());
        out.assign(reinterpret_cast<const char*>(&reply), sizeof reply);
        out += text;
        asio::async_write(socket, asio::buffer(out), [self = shared_from_this()](auto, std::size_t) {
            boost::system::error_code ignored;
            self->socket.close(ignored);
        });
    }

    local::socket socket;
    StageFetchTree& tree;
    Lifetime::Watch fetcher;   // once the StageFetcher is gone, `tree` may be too
    std::shared_ptr<stage::AnswerBoard> board;
    canopy_stage_fetch_request request{};
    canopy_stage_fetch_reply reply{};
    std::string path;
    std::string out;
};

StageFetcher::StageFetcher(boost::asio::io_context& io, std::string path, StageFetchTree& tree)
    : listener_(io, stage_log(), std::move(path)), tree_(tree)
{
}

Result<std::unique_ptr<StageFetcher>> StageFetcher::start(boost::asio::io_context& io, const std::string& path,
                                                          StageFetchTree& tree)
{
    std::unique_ptr<StageFetcher> server(new StageFetcher(io, path, tree));
    if (auto listening = server->listener_.listen("on-demand staging"); !listening.ok())
        return listening.error();
    auto board = stage::AnswerBoard::create(tree.cache_dir() + "/" CANOPY_STAGE_BOARD_NAME);
    if (board) {
        server->board_ = std::move(*board);
        // Read-ahead answers go on the board as they arrive: a rank finds them without asking.
        tree.on_pushed(server->lifetime_.guard(
            [board = server->board_](const std::string& path, const stage::FetchAnswer& answer) {
                board->publish(path, answer);
            }));
    } else
        stage_log().warn("{}; every on-demand lookup of a rank goes over the socket", board.error().message);
    server->listener_.accept([self = server.get()](local::socket socket) {
        ++self->requests_;
        std::make_shared<Connection>(std::move(socket), self->tree_, self->lifetime_.watch(), self->board_)
            ->read_request();
    });
    return server;
}

} // namespace canopy
