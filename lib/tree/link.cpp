// An authenticated, framed TCP connection between a parent and a child in the tree.
#include "tree/link.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "tree/heartbeat.hpp"
#include "util/log.hpp"
#include "wire/messages.hpp"

namespace canopy {
namespace {

spdlog::logger& tree_log() { return area_logger("tree"); }

} // namespace

Link::Link(tcp::socket socket, std::string peer_name)
    : socket_(std::move(socket)), peer_name_(std::move(peer_name)),
      read_buffer_(std::make_unique_for_overwrite<std::uint8_t[]>(read_buffer_size)), linger_(socket_.get_executor())
{
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
}

Link::~Link() = default;

void Link::start(FrameHandler on_frame, CloseHandler on_close)
{
    on_frame_ = std::move(on_frame);
    on_close_ = std::move(on_close);
    read_more();
}

bool Link::move_to(LinkState next)
{
    if (!link_may_move(state_, next)) {
        tree_log().error("link to {}: refused to move from {} to {} (a bug in canopy)", peer_name_,
                         link_state_name(state_), link_state_name(next));
        return false;
    }
    state_ = next;
    return true;
}

void Link::pause_reading()
{
    if (reading_ == Reading::on)
        reading_ = Reading::paused;
}

void Link::resume_reading()
{
    bool parked = reading_ == Reading::parked;
    reading_ = Reading::on;
    if (parked && is_open())
        read_more();
}

tcp::endpoint Link::local_endpoint() const
{
    boost::system::error_code error;
    return socket_.local_endpoint(error);
}

void Link::read_more()
{
    // The rest of a large frame (a chunk of a staged file) is read straight into that frame.
    auto in_frame = decoder_.payload_space();
    bool into_frame = in_frame.size() >= read_buffer_size;
    auto buffer = into_frame ? asio::buffer(in_frame.data(), in_frame.size())
                             : asio::buffer(read_buffer_.get(), read_buffer_size);
    socket_.async_read_some(buffer,
        [self = shared_from_this(), into_frame](const boost::system::error_code& error, std::size_t size) {
            if (!self->is_open())
                return;
            if (error) {
                self->finish(LinkState::closed, error == asio::error::eof ? std::string() : error.message());
                return;
            }
            self->last_received_ = Clock::now();
            if (self->state_ == LinkState::our_side_ended) {   // we said goodbye: what comes now means nothing
                self->read_more();
                return;
            }
            if (into_frame)
                self->decoder_.filled(size);
            else
                self->decoder_.feed(std::span(self->read_buffer_.get(), size));
            for (;;) {
                auto frame = self->decoder_.next();
                if (!frame) {
                    self->finish(LinkState::closed, frame.error().message);
                    return;
                }
                if (!frame->has_value())
                    break;
                // A heartbeat has done its work by arriving.
                if ((*frame)->type == static_cast<std::uint8_t>(wire::MessageType::heartbeat))
                    continue;
                self->on_frame_(std::move(**frame));
                if (!self->is_open())
                    return;
            }
            if (self->reading_ == Reading::paused)
                self->reading_ = Reading::parked;
            else
                self->read_more();
        });
}

void Link::send(std::vector<std::uint8_t> frame, bool urgent)
{
    if (state_ != LinkState::open)
        return;
    send(std::make_shared<const std::vector<std::uint8_t>>(std::move(frame)), urgent);
}

void Link::send(SharedFrame frame, bool urgent)
{
    if (state_ != LinkState::open)
        return;
    queued_bytes_ += frame->size();
    if (urgent && writing_) {
        // The front is being written; urgent frames keep their own order.
        write_queue_.insert(write_queue_.begin() + 1 + static_cast<std::ptrdiff_t>(urgent_queued_), std::move(frame));
        ++urgent_queued_;
        return;
    }
    write_queue_.push_back(std::move(frame));   // an urgent one too: nothing is queued
    if (!writing_)
        write_next();
}

void Link::write_next()
{
    if (write_queue_.empty()) {
        writing_ = false;
        if (state_ == LinkState::flushing)
            end_our_side();
        return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(*write_queue_.front()),
        [self = shared_from_this()](const boost::system::error_code& error, std::size_t) {
            if (!self->is_open())
                return;
            if (error) {
                self->finish(LinkState::closed, error.message());
                return;
            }
            self->last_sent_ = Clock::now();
            self->queued_bytes_ -= self->write_queue_.front()->size();
            self->write_queue_.pop_front();
            if (self->urgent_queued_ > 0)
                --self->urgent_queued_;
            self->write_next();
            self->tell_room();
        });
}

void Link::when_queued_below(std::size_t bytes, std::function<void()> room)
{
    if (!is_open())
        return;
    if (queued_bytes_ < bytes) {
        room();
        return;
    }
    waiting_for_room_.emplace_back(bytes, std::move(room));
}

void Link::tell_room()
{
    if (waiting_for_room_.empty())
        return;
    std::vector<std::function<void()>> ready;
    std::erase_if(waiting_for_room_, [&](auto& waiting) {
        if (queued_bytes_ >= waiting.first)
            return false;
        ready.push_back(std::move(waiting.second));
        return true;
    });
    for (auto& room : ready)
        room();   // may send, and so queue more
}

void Link::close_after_flush(double linger_seconds)
{
    if (state_ != LinkState::open)
        return;
    move_to(LinkState::flushing);
    linger_seconds_ = linger_seconds;
    if (!writing_)
        end_our_side();
}

void Link::end_our_side()
{
    if (heartbeat_)
        heartbeat_->stop();   // nothing may follow our FIN, and the peer's silence no longer matters
    boost::system::error_code error;
    socket_.shutdown(tcp::socket::shutdown_send, error);
    if (error) {
        close();
        return;
    }
    move_to(LinkState::our_side_ended);
    resume_reading();   // the peer's close must be seen, whatever a pacer wanted
    linger_.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(linger_seconds_)));
    linger_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
        if (!error)
            self->close();
    });
}

void Link::close(const std::string& reason) { close_as(LinkState::closed, reason); }

void Link::close_as(LinkState how, const std::string& reason)
{
    if (!is_open())
        return;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    finish(how, reason);
}

void Link::keep_alive(double timeout_seconds)
{
    if (heartbeat_) {
        heartbeat_->set_timeout(timeout_seconds);
        return;
    }
    // The heartbeat dies with the link, so it may call back into it.
    heartbeat_ = std::make_unique<LinkHeartbeat>(socket_.get_executor(), shared_from_this(), timeout_seconds,
                                                 [this](const std::string& reason) {
                                                     close_as(LinkState::peer_silent, reason);
                                                 });
}

void Link::hold_heartbeat_checks(bool held)
{
    if (heartbeat_)
        heartbeat_->hold(held);
}

bool Link::has_unread_bytes() const
{
    boost::system::error_code error;
    return is_open() && socket_.available(error) > 0 && !error;
}

void Link::finish(LinkState how, const std::string& reason)
{
    if (!move_to(how))
        return;
    boost::system::error_code ignored;
    socket_.close(ignored);
    write_queue_.clear();
    urgent_queued_ = 0;
    waiting_for_room_.clear();
    linger_.cancel();
    if (heartbeat_)
        heartbeat_->stop();
    if (auto handler = std::move(on_close_)) {
        on_close_ = nullptr;
        handler(reason);
    }
}

namespace {

using asio::awaitable;
using asio::use_awaitable;

// Closes the socket when the deadline passes, so whatever the handshake awaits fails promptly.
class Deadline {
public:
    Deadline(tcp::socket& socket, double seconds) : timer_(socket.get_executor())
    {
        timer_.expires_after(std::chrono::milliseconds(static_cast<long>(seconds * 1000)));
        timer_.async_wait([&socket, expired = expired_](const boost::system::error_code& error) {
            if (error)
                return;
            *expired = true;
            boost::system::error_code ignored;
            socket.close(ignored);
        });
    }
    ~Deadline() { timer_.cancel(); }
    bool expired() const { return *expired_; }

private:
    asio::steady_timer timer_;
    std::shared_ptr<bool> expired_ = std::make_shared<bool>(false);
};

awaitable<Result<wire::Frame>> read_frame(tcp::socket& socket, std::uint32_t max_payload)
{
    boost::system::error_code error;
    std::array<std::uint8_t, wire::header_size> header;
    co_await asio::async_read(socket, asio::buffer(header), asio::redirect_error(use_awaitable, error));
    if (error)
        co_return make_error("{}", error == asio::error::eof ? "connection closed" : error.message());
    wire::Reader reader(header);
    std::uint32_t length = reader.u32();
    wire::Frame frame;
    frame.type = reader.u8();
    if (length > max_payload)
        co_return make_error("a {} byte frame before authentication", length);
    frame.payload.resize(length);
    co_await asio::async_read(socket, asio::buffer(frame.payload), asio::redirect_error(use_awaitable, error));
    if (error)
        co_return make_error("{}", error.message());
    co_return frame;
}

template <typename M>
awaitable<Result<M>> read_message(tcp::socket& socket)
{
    auto frame = co_await read_frame(socket, wire::max_unauthenticated_frame);
    if (!frame)
        co_return frame.error();
    co_return wire::decode_frame<M>(*frame);
}

template <typename M>
awaitable<Status> write_message(tcp::socket& socket, const M& message)
{
    boost::system::error_code error;
    auto frame = wire::to_frame(message);
    co_await asio::async_write(socket, asio::buffer(frame), asio::redirect_error(use_awaitable, error));
    if (error)
        co_return make_error("{}", error.message());
    co_return Status{};
}

Error timed_out_or(const Deadline& deadline, const Error& error)
{
    return deadline.expired() ? Error{"handshake timed out"} : error;
}

} // namespace

awaitable<Result<std::uint64_t>> accept_child(tcp::socket& socket, const auth::Key& key, double timeout_seconds,
                                              int clock_rounds)
{
    Deadline deadline(socket, timeout_seconds);
    wire::Challenge challenge{auth::generate_nonce()};
    if (auto sent = co_await write_message(socket, challenge); !sent)
        co_return timed_out_or(deadline, sent.error());
    auto hello = co_await read_message<wire::Hello>(socket);
    if (!hello)
        co_return timed_out_or(deadline, hello.error());
    auto expected = auth::child_proof(key, challenge.parent_nonce, hello->child_nonce, hello->position);
    if (!auth::macs_equal(expected, hello->proof))
        co_return make_error("wrong job secret");
    wire::Welcome welcome{auth::parent_proof(key, challenge.parent_nonce, hello->child_nonce, hello->position)};
    if (auto sent = co_await write_message(socket, welcome); !sent)
        co_return timed_out_or(deadline, sent.error());
    for (int round = 0; round < clock_rounds; ++round) {
        auto ping = co_await read_message<wire::ClockPing>(socket);
        if (!ping)
            co_return timed_out_or(deadline, ping.error());
        wire::ClockPong pong{ping->t0, timing::now_ns(), 0};
        pong.t2 = timing::now_ns();
        if (auto sent = co_await write_message(socket, pong); !sent)
            co_return timed_out_or(deadline, sent.error());
    }
    co_return hello->position;
}

awaitable<Result<ParentHandshake>> connect_to_parent(tcp::socket& socket, const auth::Key& key,
                                                     std::uint64_t position, double timeout_seconds,
                                                     int clock_rounds)
{
    Deadline deadline(socket, timeout_seconds);
    auto challenge = co_await read_message<wire::Challenge>(socket);
    if (!challenge)
        co_return timed_out_or(deadline, challenge.error());
    wire::Hello hello;
    hello.position = position;
    hello.child_nonce = auth::generate_nonce();
    hello.proof = auth::child_proof(key, challenge->parent_nonce, hello.child_nonce, position);
    if (auto sent = co_await write_message(socket, hello); !sent)
        co_return timed_out_or(deadline, sent.error());
    auto welcome = co_await read_message<wire::Welcome>(socket);
    if (!welcome)
        co_return timed_out_or(deadline, Error{"the parent refused us: " + welcome.error().message});
    auto expected = auth::parent_proof(key, challenge->parent_nonce, hello.child_nonce, position);
    if (!auth::macs_equal(expected, welcome->proof))
        co_return make_error("the parent does not know the job secret");

    std::vector<timing::ClockSample> samples;
    for (int round = 0; round < clock_rounds; ++round) {
        wire::ClockPing ping{timing::now_ns()};
        if (auto sent = co_await write_message(socket, ping); !sent)
            co_return timed_out_or(deadline, sent.error());
        auto pong = co_await read_message<wire::ClockPong>(socket);
        if (!pong)
            co_return timed_out_or(deadline, pong.error());
        samples.push_back({pong->t0, pong->t1, pong->t2, timing::now_ns()});
    }
    co_return ParentHandshake{timing::estimate_offset(samples)};
}

} // namespace canopy
