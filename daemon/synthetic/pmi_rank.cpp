// One synthetic rank's PMI-1 client, inside the daemon.
#include "synthetic/pmi_rank.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

namespace canopy {

namespace asio = boost::asio;

SyntheticPmiRank::SyntheticPmiRank(asio::io_context& io, long rank, int fd, const synthetic::Spec& spec,
                                   long world_size)
    : rank_(rank), spec_(spec), world_size_(world_size), socket_(io)
{
    boost::system::error_code ignored;
    socket_.assign(asio::local::stream_protocol(), fd, ignored);
}

void SyntheticPmiRank::close()
{
    boost::system::error_code ignored;
    socket_.close(ignored);
}

asio::awaitable<Result<pmi::Command>> SyntheticPmiRank::call(const pmi::Command& request, std::string_view answer)
{
    auto self = shared_from_this();   // the socket outlives a service that stops while this waits
    std::string line = pmi::encode_v1(request);
    boost::system::error_code error;
    co_await asio::async_write(socket_, asio::buffer(line), asio::redirect_error(asio::use_awaitable, error));
    for (;;) {
        if (error)
            co_return make_error("synthetic rank {}: its PMI connection failed during '{}': {}", rank_, request.name,
                                 error.message());
        auto next = decoder_.next();
        if (!next)
            co_return make_error("synthetic rank {}: unreadable answer to '{}': {}", rank_, request.name,
                                 next.error().message);
        if (*next) {
            pmi::Command got = std::move(**next);
            if (got.name != answer)
                co_return make_error("synthetic rank {}: '{}' was answered with '{}', not '{}'", rank_, request.name,
                                     got.name, answer);
            if (auto rc = got.find("rc"); rc && *rc != "0")
                co_return make_error("synthetic rank {}: '{}' failed: {}", rank_, request.name,
                                     got.find("msg").value_or("(no message)"));
            co_return got;
        }
        std::size_t n = co_await socket_.async_read_some(asio::buffer(buffer_),
                                                         asio::redirect_error(asio::use_awaitable, error));
        if (!error)
            decoder_.feed(std::string_view(buffer_.data(), n));
    }
}

asio::awaitable<Status> SyntheticPmiRank::run(Events events)
{
    auto self = shared_from_this();
    auto command = [](std::string name) { return pmi::Command{std::move(name), {}}; };
    auto init = co_await call(command("init").add("pmi_version", "1").add("pmi_subversion", "1"), "response_to_init");
    if (!init)
        co_return init.error();
    auto kvs = co_await call(command("get_my_kvsname"), "my_kvsname");
    if (!kvs)
        co_return kvs.error();
    std::string kvsname(kvs->find("kvsname").value_or(""));
    std::string value = rank_ == spec_.corrupt_rank ? synthetic::corrupted_value_of(rank_, spec_.bytes)
                                                    : synthetic::value_of(rank_, spec_.bytes);
    auto put = co_await call(
        command("put").add("kvsname", kvsname).add("key", synthetic::key_of(rank_)).add("value", std::move(value)),
        "put_result");
    if (!put)
        co_return put.error();
    events.entered_barrier();
    auto barrier = co_await call(command("barrier_in"), "barrier_out");
    if (!barrier)
        co_return barrier.error();
    events.left_barrier();
    for (long peer : synthetic::peers_of(rank_, world_size_, spec_.ranks_per_node, spec_.gets)) {
        auto got = co_await call(command("get").add("kvsname", kvsname).add("key", synthetic::key_of(peer)),
                                 "get_result");
        if (!got)
            co_return got.error();
        if (auto wrong = synthetic::check_value(rank_, peer, got->find("value").value_or(""), spec_.bytes);
            !wrong.empty())
            co_return Error{wrong};
    }
    auto finalize = co_await call(command("finalize"), "finalize_ack");
    if (!finalize)
        co_return finalize.error();
    co_return Status{};
}

} // namespace canopy
