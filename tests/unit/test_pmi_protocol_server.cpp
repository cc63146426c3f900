// The simple PMI protocol server in memory: commands in as bytes, answers and the tree's work out through a fake
// PmiProtocolOps, with no sockets and no event loop.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pmi/node_puts.hpp"
#include "pmi/pmi_protocol_server.hpp"
#include "pmi/wire.hpp"

using namespace canopy;

namespace {

struct Failure {
    long rank = -1;
    int code = 0;
    std::string message;
};

// Records everything the server asks for; a test answers the fence and the name service itself.
class RecordingOps : public PmiProtocolOps {
public:
    void send(long rank, std::string answer) override { sent[rank].push_back(std::move(answer)); }
    void hang_up(long rank, std::string last_words) override { hung_up[rank] = std::move(last_words); }
    void await_exit(long rank) override { awaiting_exit.push_back(rank); }
    void fence(Bytes local, std::function<void(Status, Bytes)> done) override
    {
        fence_parts.push_back(std::move(local));
        fence_done = std::move(done);
    }
    void publish(std::string name, std::string port, std::function<void(Status)> done) override
    {
        published[name] = port;
        done(Status{});
    }
    void unpublish(std::string name, std::function<void(Status)> done) override
    {
        published.erase(name);
        done(Status{});
    }
    void lookup(std::string name, std::function<void(Status, std::optional<std::string>)> done) override
    {
        lookup_done = std::move(done);   // answered later, as the root would
        looked_up = name;
    }
    void fail(long rank, int exit_code, std::string message) override
    {
        failures.push_back({rank, exit_code, std::move(message)});
    }
    void mark(long rank, std::string_view what) override { marks.emplace_back(rank, std::string(what)); }
    bool keep(long, const std::string&, std::uint64_t, std::string_view) override { return true; }
    void drop(long, const std::string&) override {}

    std::map<long, std::vector<std::string>> sent;
    std::map<long, std::string> hung_up;
    std::vector<long> awaiting_exit;
    std::vector<Bytes> fence_parts;
    std::function<void(Status, Bytes)> fence_done;
    std::map<std::string, std::string> published;
    std::string looked_up;
    std::function<void(Status, std::optional<std::string>)> lookup_done;
    std::vector<Failure> failures;
    std::vector<std::pair<long, std::string>> marks;
};

// One answer as the rank's client reads it: a PMI-1 line, or a PMI-2 command after its length prefix.
pmi::Command parsed(const std::string& answer)
{
    pmi::Decoder decoder;
    if (!answer.starts_with("cmd="))
        decoder.use_v2();
    decoder.feed(answer);
    auto command = decoder.next();
    EXPECT_TRUE(command.ok() && *command) << answer;
    return command.ok() && *command ? **command : pmi::Command{};
}

// Node 0 of a job of two nodes with two ranks each: ranks 0 and 1 are served here.
class ProtocolServer : public ::testing::Test {
protected:
    ProtocolServer()
    {
        server_.add_rank(0, 0);
        server_.add_rank(1, 0);
    }

    // The answer the command got; empty if it got none.
    pmi::Command ask(long rank, const std::string& bytes)
    {
        std::size_t before = ops_.sent[rank].size();
        server_.receive(rank, bytes);
        if (ops_.sent[rank].size() == before)
            return {};
        return parsed(ops_.sent[rank].back());
    }
    pmi::Command ask2(long rank, const pmi::Command& command) { return ask(rank, pmi::encode_v2(command)); }

    void init_v1(long rank) { ASSERT_EQ(ask(rank, "cmd=init pmi_version=1 pmi_subversion=1\n").find("rc"), "0"); }

    void init_v2(long rank)
    {
        ASSERT_EQ(ask(rank, "cmd=init pmi_version=2 pmi_subversion=0\n").find("pmi_version"), "2");
        auto full = ask2(rank, {"fullinit", {{"pmirank", std::to_string(rank)}}});
        ASSERT_EQ(full.name, "fullinit-response");
        ASSERT_EQ(full.find("rc"), "0");
    }

    // Completes the running fence with this node's part and another node's puts.
    void finish_fence(const std::map<std::string, std::string, std::less<>>& other_node)
    {
        ASSERT_TRUE(ops_.fence_done);
        pmi::Bytes all = ops_.fence_parts.back();
        pmi::Bytes other = pmi::encode_node_puts(other_node);
        all.insert(all.end(), other.begin(), other.end());
        std::exchange(ops_.fence_done, nullptr)(Status{}, std::move(all));
    }

    RecordingOps ops_;
    PmiProtocolServer server_{PmiJob{"canopy.test", {2, 2}, 0, "node0"}, ops_};
};

} // namespace

TEST_F(ProtocolServer, Pmi1InitMaxesPutBarrierAndGet)
{
    init_v1(0);
    init_v1(1);
    EXPECT_EQ(ops_.marks, (std::vector<std::pair<long, std::string>>{{0, "pmi_init"}, {1, "pmi_init"}}));
    auto maxes = ask(0, "cmd=get_maxes\n");
    EXPECT_EQ(maxes.name, "maxes");
    EXPECT_EQ(maxes.find("keylen_max"), "64");
    EXPECT_EQ(maxes.find("vallen_max"), "1024");
    EXPECT_EQ(ask(0, "cmd=put kvsname=canopy.test key=a value=1\n").find("rc"), "0");
    EXPECT_EQ(ask(1, "cmd=put kvsname=canopy.test key=b value=2\n").find("rc"), "0");
    EXPECT_EQ(ask(0, "cmd=barrier_in\n").name, "");   // waits for rank 1
    EXPECT_TRUE(ops_.fence_parts.empty());
    ask(1, "cmd=barrier_in\n");
    ASSERT_EQ(ops_.fence_parts.size(), 1u);
    EXPECT_EQ(ops_.fence_parts[0], pmi::encode_node_puts({{"a", "1"}, {"b", "2"}}));
    finish_fence({{"c", "3"}});
    for (long rank : {0, 1}) {
        auto out = parsed(ops_.sent[rank].back());
        EXPECT_EQ(out.name, "barrier_out");
        EXPECT_EQ(out.find("rc"), "0");
    }
    auto remote = ask(0, "cmd=get kvsname=canopy.test key=c\n");
    EXPECT_EQ(remote.name, "get_result");
    EXPECT_EQ(remote.find("value"), "3");
    EXPECT_EQ(ask(1, "cmd=get kvsname=canopy.test key=a\n").find("value"), "1");
    EXPECT_EQ(ask(1, "cmd=get kvsname=canopy.test key=nobody\n").find("rc"), "-1");
}

TEST_F(ProtocolServer, Pmi2FullinitKvsPutFenceAndGet)
{
    init_v2(0);
    init_v2(1);
    EXPECT_EQ(ask2(0, {"fullinit", {}}).find("rc"), "-1");   // a second one
    auto id = ask2(1, {"job-getid", {}});
    EXPECT_EQ(id.find("jobid"), "canopy.test");
    EXPECT_EQ(ask2(0, {"kvs-put", {{"key", "card-0"}, {"value", "addr0"}}}).name, "kvs-put-response");
    ask2(0, {"kvs-fence", {}});
    ask2(1, {"kvs-fence", {}});
    finish_fence({{"card-2", "addr2"}});
    EXPECT_EQ(parsed(ops_.sent[1].back()).name, "kvs-fence-response");
    auto got = ask2(1, {"kvs-get", {{"key", "card-2"}}});
    EXPECT_EQ(got.find("found"), "TRUE");
    EXPECT_EQ(got.find("value"), "addr2");
    EXPECT_EQ(ask2(1, {"kvs-get", {{"key", "card-9"}}}).find("found"), "FALSE");
}

TEST_F(ProtocolServer, AFullinitForAnotherRankIsRefusedNamingThisOne)
{
    ask(0, "cmd=init pmi_version=2 pmi_subversion=0\n");
    auto refused = ask2(0, {"fullinit", {{"pmirank", "3"}}});
    EXPECT_EQ(refused.find("rc"), "-1");
    EXPECT_EQ(refused.find("errmsg"), "fullinit claims rank 3, but this connection is rank 0");
}

TEST_F(ProtocolServer, AMalformedStreamIsHungUpWithAnErrorAndTheOtherRanksGoOn)
{
    init_v1(0);
    init_v1(1);
    server_.receive(1, "no command here\n");
    ASSERT_TRUE(ops_.hung_up.contains(1));
    auto last = parsed(ops_.hung_up[1]);
    EXPECT_EQ(last.name, "error");
    EXPECT_EQ(last.find("rc"), "-1");
    EXPECT_FALSE(server_.open(1));
    EXPECT_EQ(ops_.awaiting_exit, std::vector<long>{1});   // it had initialized: it may be dying
    EXPECT_EQ(ask(0, "cmd=get_appnum\n").find("appnum"), "0");
    server_.exit_overdue(1);
    ASSERT_EQ(ops_.failures.size(), 1u);
    EXPECT_EQ(ops_.failures[0].message, "rank 1 on node0 closed its PMI connection (PMI_FD) before PMI_Finalize");
}

TEST_F(ProtocolServer, AFailedFenceAnswersTheBarrierWithItsError)
{
    init_v1(0);
    init_v1(1);
    ask(0, "cmd=barrier_in\n");
    ask(1, "cmd=barrier_in\n");
    std::exchange(ops_.fence_done, nullptr)(make_error("node7 is gone"), {});
    auto out = parsed(ops_.sent[0].back());
    EXPECT_EQ(out.name, "barrier_out");
    EXPECT_EQ(out.find("rc"), "-1");
    EXPECT_EQ(out.find("msg"), "node7_is_gone");
}

TEST_F(ProtocolServer, AbortEndsTheJobOnceWithTheRanksCode)
{
    init_v1(0);
    init_v2(1);
    server_.receive(0, "cmd=abort exitcode=7\n");
    ask2(1, {"abort", {{"isworld", "TRUE"}, {"msg", "out of memory"}}});
    ASSERT_EQ(ops_.failures.size(), 1u);
    EXPECT_EQ(ops_.failures[0].rank, 0);
    EXPECT_EQ(ops_.failures[0].code, 7);
    EXPECT_EQ(ops_.failures[0].message, "rank 0 on node0 called PMI_Abort with exit code 7");
}

TEST_F(ProtocolServer, FinalizeIsAcknowledgedAndEndsWhatTheRankMayAsk)
{
    init_v1(0);
    auto done = ask(0, "cmd=finalize\n");
    EXPECT_EQ(done.name, "finalize_ack");
    EXPECT_EQ(ops_.marks.back(), (std::pair<long, std::string>{0, "pmi_finalize"}));
    auto late = ask(0, "cmd=get_appnum\n");
    EXPECT_EQ(late.find("rc"), "-1");
    EXPECT_EQ(late.find("msg"), "'get_appnum'_after_finalize");
}

TEST_F(ProtocolServer, ABarrierWaitingOnAFinalizedRankEndsTheJob)
{
    init_v1(0);
    init_v1(1);
    ask(0, "cmd=finalize\n");
    ask(1, "cmd=barrier_in\n");
    ASSERT_EQ(ops_.failures.size(), 1u);
    EXPECT_EQ(ops_.failures[0].message,
              "rank 0 on node0 has called PMI_Finalize, but ranks on node0 wait for it in a PMI barrier");
}

TEST_F(ProtocolServer, AnExitInTimeIsReportedInsteadOfTheClosedConnection)
{
    init_v1(0);
    server_.connection_closed(0, "");
    EXPECT_EQ(ops_.awaiting_exit, std::vector<long>{0});
    server_.rank_exited(0, 9);
    server_.exit_overdue(0);   // the timer fired anyway
    EXPECT_TRUE(ops_.failures.empty());
    EXPECT_TRUE(server_.rank_left_in_mpi());
}

TEST_F(ProtocolServer, ALookupAnsweredAfterTheRankLeftIsDropped)
{
    init_v1(0);
    EXPECT_EQ(ask(0, "cmd=publish_name service=ocean port=p1\n").find("info"), "ok");
    EXPECT_EQ(ops_.published["ocean"], "p1");
    ask(0, "cmd=lookup_name service=ocean\n");
    EXPECT_EQ(ops_.looked_up, "ocean");
    ops_.lookup_done(Status{}, std::string("p1"));
    auto found = parsed(ops_.sent[0].back());
    EXPECT_EQ(found.name, "lookup_result");
    EXPECT_EQ(found.find("port"), "p1");
    std::size_t answers = ops_.sent[0].size();
    ask(0, "cmd=lookup_name service=ocean\n");
    server_.stop();
    ops_.lookup_done(Status{}, std::string("p1"));
    EXPECT_EQ(ops_.sent[0].size(), answers);
}
