// One synthetic rank's PMI-1 client, inside the daemon: it speaks the wire a rank's MPICH would on the PMI_FD the
// node's PmiServer made for it (init, put, barrier, gets of its peers' keys, finalize). No process is made.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "pmi/wire.hpp"
#include "synthetic/synthetic_exchange.hpp"
#include "util/result.hpp"

namespace canopy {

class SyntheticPmiRank : public std::enable_shared_from_this<SyntheticPmiRank> {
public:
    struct Events {
        std::function<void()> entered_barrier;   // just before barrier_in
        std::function<void()> left_barrier;      // barrier_out came
    };

    // `fd`: this rank's end of its PMI connection (the one a rank process would inherit as PMI_FD); owned from now.
    SyntheticPmiRank(boost::asio::io_context& io, long rank, int fd, const synthetic::Spec& spec, long world_size);

    // The rank's whole PMI life; an error names the rank and what went wrong (a wrong value read, a refused call).
    boost::asio::awaitable<Status> run(Events events);
    void close();

private:
    // Sends one command and reads the answer, which must be `answer` with rc=0.
    boost::asio::awaitable<Result<pmi::Command>> call(const pmi::Command& request, std::string_view answer);

    long rank_;
    synthetic::Spec spec_;
    long world_size_;
    boost::asio::local::stream_protocol::socket socket_;
    pmi::Decoder decoder_;
    std::array<char, 4096> buffer_{};
};

} // namespace canopy
