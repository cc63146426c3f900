// Simple PMI servers of two nodes in this process: each rank's end of its socketpair is the test's client, and a
// fake of the job's exchange completes a fence once both nodes have sent their part.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "collective/store_limit.hpp"
#include "pmi/pmi_server.hpp"
#include "pmi/wire.hpp"

using namespace canopy;
using namespace std::chrono_literals;

namespace {

struct Failure {
    long rank = -1;
    int code = 0;
    std::string message;
};

// Two nodes of two ranks each (ranks 0-1 on node0, 2-3 on node1), the tree between them faked.
class TwoNodes : public ::testing::Test {
protected:
    // One node's view of the job: a fence completes once both nodes have sent their part; names are kept here.
    struct FakeExchange : JobExchange {
        FakeExchange(TwoNodes& job, int node) : job(job), node(node) {}

        void fence(std::vector<long> participants, Bytes local, std::function<void(Status, Bytes)> done,
                   wire::FenceDomain domain, bool local_failed) override
        {
            EXPECT_TRUE(participants.empty());
            EXPECT_EQ(domain, wire::FenceDomain::pmi);
            EXPECT_FALSE(local_failed);
            job.fence_parts_[node] = std::move(local);
            job.fence_done_[node] = std::move(done);
            if (job.fence_parts_.size() < 2)
                return;
            Bytes all = job.fence_parts_[0];
            all.insert(all.end(), job.fence_parts_[1].begin(), job.fence_parts_[1].end());
            auto waiting = std::move(job.fence_done_);
            job.fence_parts_.clear();
            job.fence_done_.clear();
            ++job.fences_;
            for (auto& [n, finish] : waiting)
                finish(Status{}, all);
        }
        void publish(wire::KeyValues entries, std::function<void(Status)> done) override
        {
            for (auto& [key, value] : entries) {
                if (job.published_.contains(key))
                    return done(make_error("'{}' is already published", key));
                job.published_[key] = std::string(value.begin(), value.end());
            }
            done(Status{});
        }
        void lookup(std::vector<std::string> keys, std::function<void(Status, wire::KeyValues)> done,
                    std::size_t) override
        {
            wire::KeyValues found;
            for (const auto& key : keys)
                if (auto it = job.published_.find(key); it != job.published_.end())
                    found.emplace_back(key, Bytes(it->second.begin(), it->second.end()));
            done(Status{}, std::move(found));
        }
        void unpublish(std::vector<std::string> keys, std::function<void(Status)> done) override
        {
            for (const auto& key : keys)
                job.published_.erase(key);
            done(Status{});
        }

        TwoNodes& job;
        int node;
    };

    void SetUp() override
    {
        for (int node = 0; node < 2; ++node) {
            PmiJob job{"canopy.test", {2, 2}, node, "node" + std::to_string(node)};
            exchanges_.push_back(std::make_unique<FakeExchange>(*this, node));
            PmiNode hooks;
            hooks.fail = [this](long rank, int code, std::string message) { failures_.push_back({rank, code, message}); };
            if (store_limit() > 0) {
                // As the daemon does: the first rank over the limit ends the job, with exit code 1.
                StoreLimit* limit = limits_.emplace_back(std::make_unique<StoreLimit>(
                    store_limit(), "node" + std::to_string(node),
                    [this](long rank, const std::string& line) { failures_.push_back({rank, 1, line}); })).get();
                hooks.keep = [limit](long rank, const std::string& key, std::uint64_t bytes, std::string_view how) {
                    return limit->keep(rank, key, bytes, how);
                };
                hooks.drop = [limit](long rank, const std::string& key) { limit->drop(rank, key); };
            }
            servers_.push_back(std::make_unique<PmiServer>(io_, job, *exchanges_.back(), std::move(hooks)));
            for (long local = 0; local < 2; ++local) {
                RankLaunch launch;
                launch.rank = node * 2 + local;
                ASSERT_TRUE(servers_.back()->prepare_rank(launch).ok());
                ASSERT_EQ(launch.inherit_fds.size(), 1u);
                int fd = ::dup(launch.inherit_fds[0]);
                ::fcntl(fd, F_SETFL, O_NONBLOCK);
                ranks_[launch.rank] = fd;
                env_[launch.rank] = launch.env;
            }
            servers_.back()->ranks_started();   // closes the server's copies of the ranks' ends
        }
    }

    // What a rank may store (collective/store_limit.hpp); 0: the servers count nothing.
    virtual std::uint64_t store_limit() const { return 0; }

    void TearDown() override
    {
        servers_.clear();
        for (auto& [rank, fd] : ranks_)
            if (fd >= 0)
                ::close(fd);
    }

    void send(long rank, const std::string& bytes) { ASSERT_EQ(::write(ranks_[rank], bytes.data(), bytes.size()),
                                                               static_cast<ssize_t>(bytes.size())); }

    // Runs the server until the rank has one whole answer (PMI-1 line or PMI-2 command), or 2 s pass.
    std::optional<pmi::Command> answer(long rank, pmi::Wire wire = pmi::Wire::v1)
    {
        auto& decoder = decoders_[rank];
        if (wire == pmi::Wire::v2)
            decoder.use_v2();
        auto deadline = std::chrono::steady_clock::now() + 2s;
        while (std::chrono::steady_clock::now() < deadline) {
            auto next = decoder.next();
            if (!next.ok())
                return std::nullopt;
            if (*next)
                return **next;
            io_.run_for(5ms);
            char buffer[4096];
            ssize_t got = ::read(ranks_[rank], buffer, sizeof buffer);
            if (got == 0)
                return std::nullopt;   // closed
            if (got > 0)
                decoder.feed(std::string_view(buffer, static_cast<std::size_t>(got)));
        }
        return std::nullopt;
    }

    std::optional<pmi::Command> ask(long rank, const std::string& line)
    {
        send(rank, line);
        return answer(rank);
    }

    std::optional<pmi::Command> ask2(long rank, const pmi::Command& command)
    {
        send(rank, pmi::encode_v2(command));
        return answer(rank, pmi::Wire::v2);
    }

    void init_v1(long rank)
    {
        auto init = ask(rank, "cmd=init pmi_version=1 pmi_subversion=1\n");
        ASSERT_TRUE(init);
        ASSERT_EQ(init->name, "response_to_init");
        ASSERT_EQ(init->find("rc"), "0");
    }

    void init_v2(long rank)
    {
        auto init = ask(rank, "cmd=init pmi_version=2 pmi_subversion=0\n");
        ASSERT_TRUE(init);
        ASSERT_EQ(init->find("pmi_version"), "2");
        auto full = ask2(rank, pmi::Command{"fullinit", {{"pmirank", std::to_string(rank)}}});
        ASSERT_TRUE(full);
        ASSERT_EQ(full->name, "fullinit-response");
        ASSERT_EQ(full->find("rc"), "0");
    }

    void run_for(std::chrono::milliseconds time)
    {
        auto until = std::chrono::steady_clock::now() + time;
        while (std::chrono::steady_clock::now() < until)
            io_.run_for(5ms);
    }

    boost::asio::io_context io_;
    std::vector<std::unique_ptr<FakeExchange>> exchanges_;   // a node's, before its server
    std::vector<std::unique_ptr<StoreLimit>> limits_;   // a node's, before its server
    std::vector<std::unique_ptr<PmiServer>> servers_;
    std::map<long, int> ranks_;
    std::map<long, std::vector<std::string>> env_;
    std::map<long, pmi::Decoder> decoders_;
    std::map<int, Bytes> fence_parts_;
    std::map<int, std::function<void(Status, Bytes)>> fence_done_;
    std::map<std::string, std::string> published_;   // as the root keeps PMI's names: "pmi/" and the name
    std::vector<Failure> failures_;
    int fences_ = 0;
};

std::string env_value(const std::vector<std::string>& env, const std::string& name)
{
    for (const auto& entry : env)
        if (entry.starts_with(name + "="))
            return entry.substr(name.size() + 1);
    return "<unset>";
}

} // namespace

// The same two nodes, where a rank may store 4 KiB.
class LimitedTwoNodes : public TwoNodes {
protected:
    std::uint64_t store_limit() const override { return 4096; }
};

TEST_F(TwoNodes, EachRankIsToldItsFdRankAndSize)
{
    EXPECT_EQ(env_value(env_[3], "PMI_RANK"), "3");
    EXPECT_EQ(env_value(env_[3], "PMI_SIZE"), "4");
    EXPECT_EQ(env_value(env_[3], "PMI_LOCAL_RANK"), "1");
    EXPECT_EQ(env_value(env_[3], "PMI_LOCAL_SIZE"), "2");
    EXPECT_NE(env_value(env_[3], "PMI_FD"), "<unset>");
}

TEST_F(TwoNodes, Pmi1PutsCrossTheTreeAtABarrierAndAreReadOnEveryNode)
{
    for (long rank = 0; rank < 4; ++rank) {
        init_v1(rank);
        auto maxes = ask(rank, "cmd=get_maxes\n");
        ASSERT_TRUE(maxes);
        EXPECT_EQ(maxes->name, "maxes");
        EXPECT_EQ(maxes->find("vallen_max"), "1024");
        auto kvs = ask(rank, "cmd=get_my_kvsname\n");
        ASSERT_TRUE(kvs);
        EXPECT_EQ(kvs->find("kvsname"), "canopy.test");
        auto put = ask(rank, "cmd=put kvsname=canopy.test key=card-" + std::to_string(rank) + " value=addr" +
                                 std::to_string(rank) + "\n");
        ASSERT_TRUE(put);
        EXPECT_EQ(put->name, "put_result");
        EXPECT_EQ(put->find("rc"), "0");
    }
    for (long rank = 0; rank < 3; ++rank)
        send(rank, "cmd=barrier_in\n");
    run_for(50ms);
    EXPECT_EQ(fences_, 0);   // node1 still waits for rank 3
    send(3, "cmd=barrier_in\n");
    for (long rank = 0; rank < 4; ++rank) {
        auto out = answer(rank);
        ASSERT_TRUE(out) << rank;
        EXPECT_EQ(out->name, "barrier_out");
    }
    EXPECT_EQ(fences_, 1);
    auto remote = ask(0, "cmd=get kvsname=canopy.test key=card-3\n");
    ASSERT_TRUE(remote);
    EXPECT_EQ(remote->name, "get_result");
    EXPECT_EQ(remote->find("rc"), "0");
    EXPECT_EQ(remote->find("value"), "addr3");
    auto mapping = ask(2, "cmd=get kvsname=canopy.test key=PMI_process_mapping\n");
    ASSERT_TRUE(mapping);
    EXPECT_EQ(mapping->find("value"), "(vector,(0,2,2))");
    auto missing = ask(2, "cmd=get kvsname=canopy.test key=nobody\n");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->find("rc"), "-1");
    auto done = ask(1, "cmd=finalize\n");
    ASSERT_TRUE(done);
    EXPECT_EQ(done->name, "finalize_ack");
    EXPECT_TRUE(failures_.empty());
}

TEST_F(TwoNodes, Pmi2FenceJobAttributesAndNodeAttributes)
{
    for (long rank = 0; rank < 4; ++rank)
        init_v2(rank);
    auto id = ask2(0, pmi::Command{"job-getid", {}});
    ASSERT_TRUE(id);
    EXPECT_EQ(id->find("jobid"), "canopy.test");
    auto mapping = ask2(1, pmi::Command{"info-getjobattr", {{"key", "PMI_process_mapping"}}});
    ASSERT_TRUE(mapping);
    EXPECT_EQ(mapping->find("found"), "TRUE");
    EXPECT_EQ(mapping->find("value"), "(vector,(0,2,2))");
    auto universe = ask2(1, pmi::Command{"info-getjobattr", {{"key", "universeSize"}}});
    ASSERT_TRUE(universe);
    EXPECT_EQ(universe->find("value"), "4");

    // A node attribute waited for is answered when a neighbour puts it, not before.
    send(3, pmi::encode_v2(pmi::Command{"info-getnodeattr", {{"key", "shm"}, {"wait", "TRUE"}}}));
    run_for(30ms);
    auto put = ask2(2, pmi::Command{"info-putnodeattr", {{"key", "shm"}, {"value", "/dev/shm/seg"}}});
    ASSERT_TRUE(put);
    EXPECT_EQ(put->find("rc"), "0");
    auto waited = answer(3, pmi::Wire::v2);
    ASSERT_TRUE(waited);
    EXPECT_EQ(waited->find("value"), "/dev/shm/seg");
    auto other_node = ask2(0, pmi::Command{"info-getnodeattr", {{"key", "shm"}, {"wait", "FALSE"}}});
    ASSERT_TRUE(other_node);
    EXPECT_EQ(other_node->find("found"), "FALSE");   // node attributes stay on their node

    for (long rank = 0; rank < 4; ++rank) {
        auto kvs = ask2(rank, pmi::Command{"kvs-put", {{"key", "k" + std::to_string(rank)}, {"value", "v"}}});
        ASSERT_TRUE(kvs);
        EXPECT_EQ(kvs->name, "kvs-put-response");
        send(rank, pmi::encode_v2(pmi::Command{"kvs-fence", {}}));
    }
    for (long rank = 0; rank < 4; ++rank) {
        auto fenced = answer(rank, pmi::Wire::v2);
        ASSERT_TRUE(fenced);
        EXPECT_EQ(fenced->name, "kvs-fence-response");
        EXPECT_EQ(fenced->find("rc"), "0");
    }
    auto got = ask2(0, pmi::Command{"kvs-get", {{"jobid", "canopy.test"}, {"srcid", "-1"}, {"key", "k3"}}});
    ASSERT_TRUE(got);
    EXPECT_EQ(got->find("found"), "TRUE");
    EXPECT_EQ(got->find("value"), "v");
    // MPICH's PMI-2 barrier is a fence and a get of a key nobody put: it must be answered, not held.
    auto none = ask2(0, pmi::Command{"kvs-get", {{"key", "-NONEXIST-KEY"}}});
    ASSERT_TRUE(none);
    EXPECT_EQ(none->find("found"), "FALSE");
}

TEST_F(TwoNodes, NamesArePublishedLookedUpAndUnpublished)
{
    init_v1(0);
    init_v2(2);
    auto published = ask(0, "cmd=publish_name service=ocean port=tag#0$host#n1\n");
    ASSERT_TRUE(published);
    EXPECT_EQ(published->find("rc"), "0");
    EXPECT_EQ(published->find("info"), "ok");
    auto found = ask2(2, pmi::Command{"name-lookup", {{"name", "ocean"}}});
    ASSERT_TRUE(found);
    EXPECT_EQ(found->find("port"), "tag#0$host#n1");
    EXPECT_EQ(found->find("value"), "tag#0$host#n1");
    auto again = ask(0, "cmd=publish_name service=ocean port=x\n");
    ASSERT_TRUE(again);
    EXPECT_NE(again->find("rc"), "0");
    ask(0, "cmd=unpublish_name service=ocean\n");
    auto gone = ask(0, "cmd=lookup_name service=ocean\n");
    ASSERT_TRUE(gone);
    EXPECT_NE(gone->find("rc"), "0");
    EXPECT_EQ(gone->find("info"), "fail");
}

TEST_F(TwoNodes, BadCommandsGetAnErrorAnswerAndTheServerGoesOn)
{
    auto early = ask(0, "cmd=get kvsname=canopy.test key=x\n");
    ASSERT_TRUE(early);
    EXPECT_EQ(early->name, "get_result");
    EXPECT_EQ(early->find("rc"), "-1");
    EXPECT_NE(std::string(early->find("msg").value_or("")).find("before_init"), std::string::npos);

    init_v1(0);
    auto unknown = ask(0, "cmd=teleport where=mars\n");
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->find("rc"), "-1");
    auto wrong_kvs = ask(0, "cmd=put kvsname=other key=a value=b\n");
    ASSERT_TRUE(wrong_kvs);
    EXPECT_EQ(wrong_kvs->find("rc"), "-1");
    auto huge_value = ask(0, "cmd=put kvsname=canopy.test key=a value=" + std::string(2000, 'v') + "\n");
    ASSERT_TRUE(huge_value);
    EXPECT_EQ(huge_value->find("rc"), "-1");
    ask(0, "cmd=finalize\n");
    auto late = ask(0, "cmd=put kvsname=canopy.test key=a value=b\n");
    ASSERT_TRUE(late);
    EXPECT_EQ(late->find("rc"), "-1");
    EXPECT_NE(std::string(late->find("msg").value_or("")).find("after_finalize"), std::string::npos);
    EXPECT_TRUE(failures_.empty());
}

TEST_F(TwoNodes, AnOversizedLineClosesThatRanksConnection)
{
    init_v1(1);
    send(1, "cmd=put kvsname=canopy.test key=a value=" + std::string(70 * 1024, 'v') + "\n");
    auto error = answer(1);
    ASSERT_TRUE(error);
    EXPECT_EQ(error->find("rc"), "-1");
    EXPECT_NE(std::string(error->find("msg").value_or("")).find("over_the_limit"), std::string::npos);
    EXPECT_FALSE(answer(1));   // then closed
    run_for(PmiServer::exit_grace + 100ms);
    ASSERT_EQ(failures_.size(), 1u);   // it had initialized: its peers would wait for it
    EXPECT_EQ(failures_[0].rank, 1);
    EXPECT_NE(failures_[0].message.find("rank 1 on node0 closed its PMI connection"), std::string::npos);
}

TEST_F(TwoNodes, SpawnIsRefusedAtOnceInBothWires)
{
    init_v1(0);
    send(0, "mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=2\nspawnssofar=1\nendcmd\n");
    send(0, "mcmd=spawn\nnprocs=1\nexecname=b\ntotspawns=2\nspawnssofar=2\nendcmd\n");
    auto refused = answer(0);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->name, "spawn_result");
    EXPECT_EQ(refused->find("rc"), "-1");
    auto next = ask(0, "cmd=get_appnum\n");   // one answer for the two segments: the stream stays in step
    ASSERT_TRUE(next);
    EXPECT_EQ(next->name, "appnum");

    init_v2(2);
    auto refused2 = ask2(2, pmi::Command{"spawn", {{"ncmds", "1"}, {"subcmd", "a"}}});
    ASSERT_TRUE(refused2);
    EXPECT_EQ(refused2->name, "spawn-response");
    EXPECT_NE(refused2->find("rc"), "0");
}

TEST_F(TwoNodes, AbortEndsTheJobWithTheRanksCodeAndMessage)
{
    init_v2(3);
    send(3, pmi::encode_v2(pmi::Command{"abort", {{"isworld", "TRUE"}, {"msg", "out of memory"}}}));
    run_for(30ms);
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_EQ(failures_[0].rank, 3);
    EXPECT_EQ(failures_[0].code, 1);
    EXPECT_EQ(failures_[0].message, "rank 3 on node1 called PMI_Abort with exit code 1: out of memory");

    init_v1(2);
    send(2, "cmd=abort exitcode=7\n");
    run_for(30ms);
    EXPECT_EQ(failures_.size(), 1u);   // one failure from a node: the job is already ending
}

TEST_F(TwoNodes, Pmi1AbortCarriesItsExitCode)
{
    init_v1(0);
    send(0, "cmd=abort exitcode=7\n");
    run_for(30ms);
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_EQ(failures_[0].code, 7);
    EXPECT_EQ(failures_[0].message, "rank 0 on node0 called PMI_Abort with exit code 7");
}

TEST_F(TwoNodes, ARankClosingItsConnectionInABarrierEndsTheJob)
{
    init_v1(0);
    init_v1(1);
    send(0, "cmd=barrier_in\n");
    send(1, "cmd=barrier_in\n");
    run_for(20ms);
    ::close(ranks_[1]);
    ranks_[1] = -1;
    run_for(50ms);
    EXPECT_TRUE(failures_.empty());   // it may be dying: its exit status tells more, so wait a moment
    run_for(PmiServer::exit_grace);
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_EQ(failures_[0].rank, 1);
    EXPECT_NE(failures_[0].message.find("before PMI_Finalize"), std::string::npos);
}

TEST_F(TwoNodes, ADyingRanksExitIsReportedInsteadOfItsClosedConnection)
{
    init_v1(0);
    init_v1(1);
    send(0, "cmd=barrier_in\n");
    ::close(ranks_[1]);
    ranks_[1] = -1;
    run_for(20ms);
    servers_[0]->rank_exited(1, 9);   // killed by SIGKILL: the daemon reports that itself
    run_for(PmiServer::exit_grace + 100ms);
    EXPECT_TRUE(failures_.empty());
}

TEST_F(TwoNodes, ARankThatExitsWithoutJoiningABarrierEndsTheJob)
{
    init_v1(2);
    send(2, "cmd=barrier_in\n");
    run_for(20ms);
    ::close(ranks_[3]);
    ranks_[3] = -1;
    servers_[1]->rank_exited(3, 0);   // never spoke PMI, exited 0
    run_for(20ms);
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_EQ(failures_[0].rank, 3);
    EXPECT_NE(failures_[0].message.find("rank 3 on node1 exited without joining it"), std::string::npos);
}

TEST_F(TwoNodes, RanksThatNeverSpeakPmiCostNothingAndFailNothing)
{
    for (long rank = 0; rank < 4; ++rank) {
        ::close(ranks_[rank]);
        ranks_[rank] = -1;
        servers_[static_cast<std::size_t>(rank / 2)]->rank_exited(rank, 0);
    }
    run_for(PmiServer::exit_grace + 100ms);
    EXPECT_TRUE(failures_.empty());
    EXPECT_EQ(fences_, 0);
}

TEST_F(LimitedTwoNodes, Pmi1PutsPastTheLimitAreRefusedAndEndTheJobNamingTheRank)
{
    init_v1(0);
    init_v1(1);
    std::string value(1000, 'v');
    // Puts count whether or not a barrier has taken them up the tree since: the node keeps every one of them.
    for (int i = 0; i < 4; ++i) {
        auto put = ask(0, "cmd=put kvsname=canopy.test key=k" + std::to_string(i) + " value=" + value + "\n");
        ASSERT_TRUE(put);
        ASSERT_EQ(put->find("rc"), "0") << "put " << i;
        if (i == 1) {
            send(0, "cmd=barrier_in\n");
            send(1, "cmd=barrier_in\n");
            init_v1(2);
            init_v1(3);
            send(2, "cmd=barrier_in\n");
            send(3, "cmd=barrier_in\n");
            for (long rank = 0; rank < 4; ++rank)
                ASSERT_TRUE(answer(rank)) << "barrier, rank " << rank;
        }
    }
    EXPECT_TRUE(failures_.empty());
    auto over = ask(0, "cmd=put kvsname=canopy.test key=k4 value=" + value + "\n");
    ASSERT_TRUE(over);
    EXPECT_EQ(over->name, "put_result");
    EXPECT_EQ(over->find("rc"), "-1");
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_EQ(failures_[0].rank, 0);
    EXPECT_EQ(failures_[0].code, 1);
    EXPECT_EQ(failures_[0].message,
              "rank 0 on node0 would store 4.9 KiB with PMI's put, over the limit of 4 KiB a rank (raise it with "
              "--rank-store-limit or [job] rank_store_limit)");
    auto got = ask(1, "cmd=get kvsname=canopy.test key=k4\n");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->find("rc"), "-1") << "a refused put is not kept";
}

TEST_F(LimitedTwoNodes, APutOfAKeyAgainReplacesWhatItCounted)
{
    init_v1(0);
    for (int i = 0; i < 20; ++i) {
        auto put = ask(0, "cmd=put kvsname=canopy.test key=same value=" + std::string(1000, 'a' + i % 26) + "\n");
        ASSERT_TRUE(put);
        ASSERT_EQ(put->find("rc"), "0") << "put " << i;
    }
    EXPECT_TRUE(failures_.empty());
}

TEST_F(LimitedTwoNodes, Pmi2PutsAndNodeAttributesCountTowardsTheLimit)
{
    init_v2(2);
    std::string value(1000, 'v');
    for (int i = 0; i < 2; ++i) {
        auto put = ask2(2, pmi::Command{"kvs-put", {{"key", "k" + std::to_string(i)}, {"value", value}}});
        ASSERT_TRUE(put);
        ASSERT_EQ(put->find("rc"), "0");
        auto attr = ask2(2, pmi::Command{"info-putnodeattr", {{"key", "a" + std::to_string(i)}, {"value", value}}});
        ASSERT_TRUE(attr);
        ASSERT_EQ(attr->find("rc"), "0");
    }
    auto over = ask2(2, pmi::Command{"info-putnodeattr", {{"key", "a2"}, {"value", value}}});
    ASSERT_TRUE(over);
    EXPECT_EQ(over->name, "info-putnodeattr-response");
    EXPECT_EQ(over->find("rc"), "-1");
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_EQ(failures_[0].rank, 2);
    EXPECT_NE(failures_[0].message.find("rank 2 on node1 would store"), std::string::npos) << failures_[0].message;
    EXPECT_NE(failures_[0].message.find("with PMI's info-putnodeattr"), std::string::npos) << failures_[0].message;
}

TEST_F(LimitedTwoNodes, PublishedNamesCountUntilTheyAreUnpublished)
{
    init_v1(0);
    std::string port(1500, 'p');
    for (int round = 0; round < 3; ++round) {
        for (const char* service : {"a", "b"}) {
            auto published = ask(0, std::string("cmd=publish_name service=") + service + " port=" + port + "\n");
            ASSERT_TRUE(published);
            ASSERT_EQ(published->find("rc"), "0") << service << ", round " << round;
        }
        for (const char* service : {"a", "b"})
            ASSERT_TRUE(ask(0, std::string("cmd=unpublish_name service=") + service + "\n"));
    }
    ASSERT_TRUE(ask(0, "cmd=publish_name service=a port=" + port + "\n"));
    ASSERT_TRUE(ask(0, "cmd=publish_name service=b port=" + port + "\n"));
    auto over = ask(0, "cmd=publish_name service=c port=" + port + "\n");
    ASSERT_TRUE(over);
    EXPECT_NE(over->find("rc"), "0");
    EXPECT_FALSE(published_.contains("pmi/c")) << "a refused name never reaches the root";
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_NE(failures_[0].message.find("with PMI's publish_name"), std::string::npos) << failures_[0].message;
}
