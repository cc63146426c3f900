// The node's on-demand staging socket: answers the ranks' interposer from the fetch tree (docs/staging.md).
#pragma once

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "stage/answer_board.hpp"
#include "stage_tree/fetch_tree.hpp"
#include "private_socket.hpp"
#include "util/lifetime.hpp"
#include "util/result.hpp"

namespace canopy {

// Protocol: lib/stage/fetch_protocol.h, one lookup per connection. Only this user's processes are served
// (SO_PEERCRED); a malformed request gets a "no answer" reply (the rank falls back) and a log line. Every answer
// is also published on the node's answer board (lib/stage/board_format.h), where ranks look before they ask.
class StageFetcher {
public:
    // Listens on `path` (in the node's 0700 temp dir), answering from `tree`, which must outlive this object.
    static Result<std::unique_ptr<StageFetcher>> start(boost::asio::io_context& io, const std::string& path,
                                                       StageFetchTree& tree);
    const std::string& path() const { return listener_.path(); }
    std::uint64_t requests() const { return requests_; }

    struct Connection;   // one lookup (stage_fetcher.cpp)

private:
    StageFetcher(boost::asio::io_context& io, std::string path, StageFetchTree& tree);
    PrivateListener listener_;
    StageFetchTree& tree_;
    Lifetime lifetime_;
    std::shared_ptr<stage::AnswerBoard> board_;
    std::uint64_t requests_ = 0;
};

} // namespace canopy
