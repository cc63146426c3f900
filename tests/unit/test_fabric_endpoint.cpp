// Unit tests for the fabric endpoint over real providers, both ends in this process (shm, and tcp;ofi_rxm on
// loopback): with registration forced (no provider here needs FI_MR_LOCAL), every message arrives byte for byte
// through the registered buffers, and each area is registered once, however many messages go through it.
#include "fabric/endpoint.hpp"

#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <list>
#include <map>

#include "fabric/fabric_api.hpp"
#include "fabric/fabric_plane.hpp"
#include "util/worker_thread.hpp"

namespace canopy::fabric {
namespace {

using namespace std::chrono_literals;

// tcp reaches no further than loopback. Set before libfabric loads, which the first test to open an endpoint does.
const bool loopback_only = [] { return ::setenv("FI_TCP_IFACE", "lo", 1) == 0; }();

// The plane's sizes: a seal and the largest bulk frame.
constexpr std::size_t buffer_bytes = sizeof(SealHeader) + FabricPlane::max_frame_bytes;
constexpr std::size_t header_bytes = sizeof(SealHeader);

// Message `number`: a header piece and a payload piece, as the plane sends them, every byte depending on both.
struct Message {
    std::vector<std::uint8_t> header, payload;
    std::vector<std::uint8_t> whole() const
    {
        auto bytes = header;
        bytes.insert(bytes.end(), payload.begin(), payload.end());
        return bytes;
    }
};

Message make_message(std::uint64_t number, std::size_t payload_bytes)
{
    Message message{std::vector<std::uint8_t>(header_bytes), std::vector<std::uint8_t>(payload_bytes)};
    std::memcpy(message.header.data(), &number, sizeof number);
    for (std::size_t i = sizeof number; i < header_bytes; ++i)
        message.header[i] = static_cast<std::uint8_t>(number + i);
    for (std::size_t i = 0; i < payload_bytes; ++i)
        message.payload[i] = static_cast<std::uint8_t>(number * 131 + i * 7 + (i >> 12));
    return message;
}

class EndpointPair : public ::testing::TestWithParam<const char*> {
protected:
    // A sender with `slots` staging slots (the root: no receives) and a receiver with the plane's receive buffers
    // (a leaf: no sends), as the fabric plane opens them.
    void open(bool always_register, std::size_t slots = FabricPlane::staged_sends)
    {
        ASSERT_TRUE(loopback_only);
        ProviderChoice choice{false, GetParam(), true};
        auto receiver = Endpoint::open(io_, choice, {FabricPlane::receive_buffers, 0, buffer_bytes, always_register});
        ASSERT_TRUE(receiver.ok()) << receiver.error().message;
        auto sender = Endpoint::open(io_, choice, {0, slots, buffer_bytes, always_register});
        ASSERT_TRUE(sender.ok()) << sender.error().message;
        receiver_ = std::move(*receiver);
        sender_ = std::move(*sender);
        auto peer = sender_->add_peer(receiver_->address());
        ASSERT_TRUE(peer.ok()) << peer.error().message;
        peer_ = *peer;
        receives_.resize(FabricPlane::receive_buffers);
        for (std::size_t i = 0; i < receives_.size(); ++i) {
            receives_[i].done = [this, i](Status status, std::size_t length) { received(i, status, length); };
            ASSERT_TRUE(receiver_->receive(i, receives_[i]).ok());
        }
    }

    void received(std::size_t index, const Status& status, std::size_t length)
    {
        if (!status) {
            errors_.push_back(status.error().message);
            return;
        }
        auto bytes = receiver_->receive_buffer(index).first(length);
        std::uint64_t number = 0;
        std::memcpy(&number, bytes.data(), std::min(sizeof number, bytes.size()));
        arrived_[number].assign(bytes.begin(), bytes.end());
        ++arrivals_;
        if (auto posted = receiver_->receive(index, receives_[index]); !posted)
            errors_.push_back(posted.error().message);
    }

    // Starts as many of the waiting messages as the sender takes.
    void pump()
    {
        while (!waiting_.empty()) {
            Message& message = waiting_.front();
            auto& operation = in_flight_.emplace_back();
            auto at = std::prev(in_flight_.end());
            operation.done = [this, at](Status status, std::size_t) {
                if (!status)
                    errors_.push_back(status.error().message);
                ++completed_;
                in_flight_.erase(at);   // this closure with it: nothing after
            };
            iovec pieces[2] = {{message.header.data(), message.header.size()},
                               {message.payload.data(), message.payload.size()}};
            auto sent = sender_->send(peer_, pieces, operation);
            if (!sent.ok() || !*sent) {
                in_flight_.erase(at);
                if (!sent.ok())
                    errors_.push_back(sent.error().message);
                return;
            }
            sending_.push_back(std::move(message));   // the pieces stay valid until the send completes
            waiting_.pop_front();
        }
    }

    // Queues one message of each payload size.
    void queue(const std::vector<std::size_t>& payload_sizes)
    {
        for (std::size_t size : payload_sizes) {
            auto message = make_message(next_number_, size);
            expected_[next_number_++] = message.whole();
            waiting_.push_back(std::move(message));
        }
    }

    // Sends every queued message and waits, with a deadline, until each has arrived, once and byte for byte, and
    // every send has completed.
    void deliver_all()
    {
        auto deadline = std::chrono::steady_clock::now() + 20s;
        while ((arrivals_ < expected_.size() || completed_ < expected_.size()) && errors_.empty() &&
               std::chrono::steady_clock::now() < deadline) {
            pump();
            io_.run_for(5ms);
        }
        ASSERT_TRUE(errors_.empty()) << errors_.front();
        ASSERT_EQ(completed_, expected_.size()) << "sends not complete after 20 s over " << GetParam();
        ASSERT_EQ(arrivals_, expected_.size()) << "messages missing after 20 s over " << GetParam();
        ASSERT_EQ(arrived_.size(), expected_.size()) << "a message arrived twice";
        for (const auto& [number, bytes] : expected_) {
            ASSERT_EQ(arrived_[number].size(), bytes.size()) << "message " << number;
            EXPECT_TRUE(arrived_[number] == bytes) << "message " << number << " changed on the way";
        }
        expected_.clear();
        arrived_.clear();
        arrivals_ = completed_ = 0;
        sending_.clear();
    }

    void exchange(const std::vector<std::size_t>& payload_sizes)
    {
        queue(payload_sizes);
        deliver_all();
    }

    boost::asio::io_context io_;
    std::unique_ptr<Endpoint> sender_, receiver_;
    fi_addr_t peer_ = FI_ADDR_UNSPEC;
    std::vector<Endpoint::Operation> receives_;
    std::list<Endpoint::Operation> in_flight_;
    std::deque<Message> waiting_, sending_;
    std::map<std::uint64_t, std::vector<std::uint8_t>> expected_, arrived_;
    std::size_t arrivals_ = 0, completed_ = 0;
    std::uint64_t next_number_ = 0;
    std::vector<std::string> errors_;
};

TEST_P(EndpointPair, ForcedRegistrationRegistersEachAreaOnceHoweverManyMessagesGo)
{
    open(true);
    ASSERT_TRUE(sender_->registers_memory());
    ASSERT_TRUE(receiver_->registers_memory());
    // The sender's staging slots and the receiver's buffers: one fi_mr_reg each, when they open.
    EXPECT_EQ(sender_->registrations(), 1u);
    EXPECT_EQ(receiver_->registrations(), 1u);

    exchange(std::vector<std::size_t>(10, 4096));
    EXPECT_EQ(sender_->registrations(), 1u);
    EXPECT_EQ(receiver_->registrations(), 1u);

    // Twenty times as many, more than the slots and buffers many times over: they are reused, not registered again.
    std::vector<std::size_t> sizes;
    for (std::size_t i = 0; i < 200; ++i)
        sizes.push_back(i % 4 == 0 ? FabricPlane::max_frame_bytes : i * 997 % 70000);
    exchange(sizes);
    EXPECT_EQ(sender_->registrations(), 1u);
    EXPECT_EQ(receiver_->registrations(), 1u);
}

TEST_P(EndpointPair, MessagesFromEmptyToAFullBufferArriveIntactThroughRegisteredBuffers)
{
    open(true);
    // Only a header; one byte; around shm's and rxm's switches to other protocols; a full buffer, and one short.
    exchange({0, 1, 4096 - header_bytes, 4096, 16384 + 1, 65536, FabricPlane::max_frame_bytes - 1,
              FabricPlane::max_frame_bytes});
}

TEST_P(EndpointPair, WhenEverySlotIsInFlightASendWaitsForACompletion)
{
    open(true, 2);
    exchange({1});   // connected: a first send may wait for that (EAGAIN)
    queue({100000, 100000, 100000});
    // Completions are read only when the io_context runs: the third send finds both slots taken.
    pump();
    EXPECT_EQ(waiting_.size(), 1u);
    EXPECT_EQ(in_flight_.size(), 2u);
    deliver_all();   // a freed slot takes the third
    EXPECT_EQ(sender_->registrations(), 1u);
}

TEST_P(EndpointPair, AMessageLargerThanABufferIsRefusedNotCut)
{
    open(true);
    auto message = make_message(0, FabricPlane::max_frame_bytes + 1);
    iovec pieces[2] = {{message.header.data(), message.header.size()},
                       {message.payload.data(), message.payload.size()}};
    Endpoint::Operation operation;
    auto sent = sender_->send(peer_, pieces, operation);
    ASSERT_FALSE(sent.ok());
    EXPECT_NE(sent.error().message.find(GetParam()), std::string::npos) << sent.error().message;
    EXPECT_NE(sent.error().message.find("larger than"), std::string::npos) << sent.error().message;
    // The endpoint goes on: the next message fits and arrives.
    exchange({1000});
}

TEST_P(EndpointPair, NoProviderHereNeedsRegistrationAndUnregisteredMessagesArriveIntact)
{
    open(false);
    EXPECT_FALSE(sender_->registers_memory()) << GetParam() << " needs FI_MR_LOCAL here";
    EXPECT_FALSE(receiver_->registers_memory()) << GetParam() << " needs FI_MR_LOCAL here";
    exchange({0, 1, 65536, FabricPlane::max_frame_bytes, 300});
    EXPECT_EQ(sender_->registrations(), 0u);
    EXPECT_EQ(receiver_->registrations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Providers, EndpointPair, ::testing::Values("shm", "tcp;ofi_rxm"),
                         [](const auto& info) { return std::string(info.param) == "shm" ? "shm" : "tcp_rxm"; });

volatile sig_atomic_t canopy_usr1 = 0, intruder_usr1 = 0;
void canopy_handler(int) { canopy_usr1 = canopy_usr1 + 1; }
void intruder_handler(int) { intruder_usr1 = intruder_usr1 + 1; }

// What Debian's psm provider does as libfabric loads it: its own handlers, for a termination signal and a fault.
TEST(SignalHandlersKept, HandlersALibraryInstallsGoAndASignalThatCameMeanwhileReachesTheProcesssOwn)
{
    struct sigaction own {}, before_usr1 {}, before_segv {}, intruder {};
    own.sa_handler = canopy_handler;
    sigemptyset(&own.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &own, &before_usr1), 0);
    ASSERT_EQ(sigaction(SIGSEGV, nullptr, &before_segv), 0);
    intruder.sa_handler = intruder_handler;
    sigemptyset(&intruder.sa_mask);
    {
        SignalHandlersKept kept;
        ASSERT_EQ(raise(SIGUSR1), 0);   // held: neither handler runs while the library loads
        EXPECT_EQ(canopy_usr1, 0);
        ASSERT_EQ(sigaction(SIGUSR1, &intruder, nullptr), 0);
        ASSERT_EQ(sigaction(SIGSEGV, &intruder, nullptr), 0);
    }
    EXPECT_EQ(canopy_usr1, 1);
    EXPECT_EQ(intruder_usr1, 0);
    struct sigaction now {};
    ASSERT_EQ(sigaction(SIGSEGV, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, before_segv.sa_handler);
    sigaction(SIGUSR1, &before_usr1, nullptr);
}

volatile sig_atomic_t usr1_on_main = 0, usr1_elsewhere = 0;
pthread_t main_thread;
void where_handler(int)
{
    if (pthread_equal(pthread_self(), main_thread))
        usr1_on_main = usr1_on_main + 1;
    else
        usr1_elsewhere = usr1_elsewhere + 1;
}

// The kernel gives a process's signal to any thread that does not block it. A worker thread blocks them from its
// start, so while the main thread holds them (as providers load) a handler the library installed cannot run in
// the worker: the signal waits for the main thread and canopy's own handler.
TEST(SignalHandlersKept, AProcessSignalWaitsForTheMainThreadAndNeverReachesAWorkerThread)
{
    main_thread = pthread_self();
    struct sigaction where {}, before {};
    where.sa_handler = where_handler;
    sigemptyset(&where.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &where, &before), 0);
    std::atomic<bool> stop = false;
    std::thread worker = worker_thread([&stop] {
        while (!stop)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    // Runs before the tests that load providers (their threads would be candidates too).
    auto threads = std::distance(std::filesystem::directory_iterator("/proc/self/task"), {});
    ASSERT_EQ(threads, 2) << "threads other than this one and the worker";
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, nullptr, &mask);
    EXPECT_FALSE(sigismember(&mask, SIGUSR1)) << "the creating thread's own mask is put back";
    {
        SignalHandlersKept kept;
        ASSERT_EQ(kill(getpid(), SIGUSR1), 0);   // to the process, not to a thread
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(usr1_elsewhere, 0) << "a worker thread took the signal while the main thread held it";
        EXPECT_EQ(usr1_on_main, 0);
    }
    EXPECT_EQ(usr1_on_main, 1);
    stop = true;
    worker.join();
    EXPECT_EQ(usr1_elsewhere, 0);
    sigaction(SIGUSR1, &before, nullptr);
}

} // namespace
} // namespace canopy::fabric
