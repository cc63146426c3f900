// Fences and routed requests across a whole simulated tree: every node gets every blob, requests find their node.
#include <algorithm>

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <optional>
#include <set>

#include "collective/publish_store.hpp"
#include "collective/tree_collectives.hpp"

namespace canopy {
namespace {

// A tree of TreeCollectives wired through an in-memory queue: frames are delivered in order, one at a time. With
// `bulk_route`, each position also has a bulk route to its children (a fabric), slower than the links: its frames
// are delivered only when no link frame is waiting, so link frames overtake them.
class Tree {
public:
    static constexpr std::uint64_t large_blob = 1000;

    Tree(long nodes, long fanout, std::vector<std::uint64_t> ranks_per_node, bool bulk_route = false)
        : topology_(nodes, fanout)
    {
        for (long position = 0; position <= nodes; ++position) {
            TreeCollectives::Links links;
            if (position > 0)
                links.to_parent = [this, position](std::vector<std::uint8_t> frame) {
                    queue_.push_back({topology_.parent(position), position, std::move(frame)});
                };
            links.to_child = [this, position](long child, std::vector<std::uint8_t> frame) {
                ++down_frames_[{decode(frame).type, false}];
                queue_.push_back({child, position, std::move(frame)});
            };
            if (bulk_route)
                links.to_children_bulk = [this, position](const std::vector<long>& children,
                                                          std::vector<std::uint8_t> frame) {
                    for (long child : children) {
                        ++down_frames_[{decode(frame).type, true}];
                        bulk_queue_.push_back({child, position, frame});
                    }
                };
            nodes_.push_back(std::make_unique<TreeCollectives>(topology_, ranks_per_node, position, std::move(links),
                                                               "position " + std::to_string(position)));
            // Direct modex stand-in: the node answers with its own name and the rank asked for, or with a blob of
            // `rank` bytes for a rank of large_blob or more.
            at(position).services().serve<wire::DirectModexRequest>(
                [this, position](long from, wire::DirectModexRequest request, auto reply) {
                    served_from_[position].push_back(from);
                    if (request.rank >= large_blob)
                        return reply(wire::ModexData{Bytes(request.rank, 7)});
                    reply(wire::ModexData{{'n', static_cast<std::uint8_t>(position),
                                           static_cast<std::uint8_t>(request.rank)}});
                });
            if (position == 0)
                store_.serve_on(at(position).services());
        }
    }

    TreeCollectives& at(long position) { return *nodes_[static_cast<std::size_t>(position)]; }

    // Delivers queued frames until none are left; counts frames handled per position.
    void run()
    {
        while (!queue_.empty() || !bulk_queue_.empty()) {
            auto& from = queue_.empty() ? bulk_queue_ : queue_;
            auto message = std::move(from.front());
            from.pop_front();
            if (dead_.contains(message.to))
                continue;   // a daemon that has left: its frames are lost
            auto decoded = decode(message.frame);
            ASSERT_TRUE(at(message.to).handle(message.from, decoded));
            ++handled_[message.to];
        }
    }

    // Frames sent down to children, by type and whether they took the bulk route.
    int down_frames(wire::MessageType type, bool bulk) const
    {
        auto it = down_frames_.find({static_cast<std::uint8_t>(type), bulk});
        return it == down_frames_.end() ? 0 : it->second;
    }

    std::map<long, int> handled_;
    std::map<long, std::vector<long>> served_from_;   // by serving position: the requesters it served
    std::set<long> dead_;

private:
    struct Message {
        long to;
        long from;
        std::vector<std::uint8_t> frame;
    };

    static wire::Frame decode(const std::vector<std::uint8_t>& bytes)
    {
        wire::FrameDecoder decoder(wire::max_frame);
        decoder.feed(bytes);
        auto frame = decoder.next();
        EXPECT_TRUE(frame && *frame);
        return frame && *frame ? **frame : wire::Frame{};
    }

    Topology topology_;
    std::vector<std::unique_ptr<TreeCollectives>> nodes_;
    std::deque<Message> queue_, bulk_queue_;
    std::map<std::pair<std::uint8_t, bool>, int> down_frames_;
    PublishStore store_;
};

// Asks `target` for a rank's modex data; `done` gets the status and the blob.
void ask_modex(TreeCollectives& from, long target, std::uint64_t rank, std::function<void(Status, Bytes)> done)
{
    from.request<wire::DirectModexRequest>(target, {rank}, [done = std::move(done)](Result<wire::ModexData> reply) {
        if (!reply)
            return done(reply.error(), {});
        done(Status{}, std::move(reply->blob));
    });
}

Bytes node_blob(long position, std::size_t size = 3)
{
    return Bytes(size, static_cast<std::uint8_t>(position));
}

// Counts how many bytes of each node's blob a result holds.
std::map<std::uint8_t, std::size_t> tally(const Bytes& blob)
{
    std::map<std::uint8_t, std::size_t> counts;
    for (auto byte : blob)
        ++counts[byte];
    return counts;
}

TEST(TreeCollectives, WholeJobFenceGivesEveryNodeEveryBlob)
{
    Tree tree(13, 3, std::vector<std::uint64_t>(13, 2));
    std::map<long, Bytes> results;
    for (long position = 1; position <= 13; ++position)
        tree.at(position).fence({}, node_blob(position), [&, position](Status status, Bytes blob) {
            ASSERT_TRUE(status.ok());
            results[position] = std::move(blob);
        });
    tree.run();
    ASSERT_EQ(results.size(), 13u);
    for (const auto& [position, blob] : results) {
        auto counts = tally(blob);
        ASSERT_EQ(counts.size(), 13u) << "at position " << position;
        for (const auto& [node, bytes] : counts)
            EXPECT_EQ(bytes, 3u);
    }
    // One message in from each child and one down from the parent, per fence: O(fanout), not O(nodes).
    for (const auto& [position, count] : tree.handled_)
        EXPECT_LE(count, 4) << "position " << position;
    for (long position = 0; position <= 13; ++position) {
        EXPECT_EQ(tree.at(position).waiting(), 0u);
        EXPECT_EQ(tree.at(position).frames_received(), static_cast<std::uint64_t>(tree.handled_[position]));
    }
    // Position 2 (node 1) has children 7, 8 and 9: three up and one down in, one up and three down out.
    EXPECT_EQ(tree.at(2).frames_received(), 4u);
    EXPECT_EQ(tree.at(2).frames_sent(), 4u);
}

TEST(TreeCollectives, AFenceWhoseLocalParticipantDiedFailsOnEveryNode)
{
    // PMIx_Connect after a participant died: no node may see it succeed.
    Tree tree(7, 2, std::vector<std::uint64_t>(7, 1));
    std::map<long, bool> ok;
    for (long position = 1; position <= 7; ++position)
        tree.at(position).fence({}, {}, [&, position](Status status, Bytes) { ok[position] = status.ok(); },
                                wire::FenceDomain::pmix_connect, position == 5);
    tree.run();
    ASSERT_EQ(ok.size(), 7u);
    for (const auto& [position, succeeded] : ok)
        EXPECT_FALSE(succeeded) << "position " << position;
}

TEST(TreeCollectives, TheRootReadsAWatchedDomainsResultOnceItHasGoneDown)
{
    // --health-check: the root names the bad nodes from the same bytes every node gets; other domains pass unseen.
    Tree tree(7, 2, std::vector<std::uint64_t>(7, 1));
    std::vector<Bytes> seen;
    std::map<long, Bytes> results;
    tree.at(0).watch_results(wire::FenceDomain::health, [&](std::int32_t status, const Bytes& result) {
        EXPECT_EQ(status, 0);
        EXPECT_EQ(results.size(), 0u) << "the root reads the result as it turns around, before any node has it";
        seen.push_back(result);
    });
    for (long position = 1; position <= 7; ++position) {
        tree.at(position).fence({}, position == 3 ? node_blob(position) : Bytes{},
                                [&, position](Status status, Bytes blob) {
                                    ASSERT_TRUE(status.ok());
                                    results[position] = std::move(blob);
                                },
                                wire::FenceDomain::health);
        tree.at(position).fence({}, node_blob(position), [](Status, Bytes) {}, wire::FenceDomain::pmix);
    }
    tree.run();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen.front(), node_blob(3));
    ASSERT_EQ(results.size(), 7u);
    for (const auto& [position, blob] : results)
        EXPECT_EQ(blob, node_blob(3)) << "position " << position;
}

TEST(TreeCollectives, ARestartFailsTheOldRanksFencesAndTheNextAttemptsFencesCompleteOnTheirOwn)
{
    // --max-restarts: nodes 1-6 entered a PMI barrier that node 7's rank never joined. As the restart barrier comes
    // down each position forgets the old exchange; the next attempt's barrier (numbered 0 again) must not count
    // the old contributions still held on the way up.
    Tree tree(7, 2, std::vector<std::uint64_t>(7, 1));
    std::map<long, std::string> old_barrier;
    for (long position = 1; position <= 6; ++position)
        tree.at(position).fence({}, Bytes{'o', 'l', 'd', static_cast<std::uint8_t>(position)},
                                [&, position](Status status, Bytes) {
            old_barrier[position] = status.ok() ? "ok" : status.error().message;
        }, wire::FenceDomain::pmi);
    tree.run();
    EXPECT_TRUE(old_barrier.empty());
    int barriers_down = 0;
    tree.at(0).watch_results(wire::FenceDomain::restart, [&](std::int32_t, const Bytes&) {
        tree.at(0).forget_ranks_exchange(1, "restarting");
    });
    for (long position = 1; position <= 7; ++position)
        tree.at(position).fence({}, {}, [&, position](Status status, Bytes) {
            ASSERT_TRUE(status.ok());
            ++barriers_down;
            tree.at(position).forget_ranks_exchange(1, "restarting");
        }, wire::FenceDomain::restart);
    tree.run();
    EXPECT_EQ(barriers_down, 7);
    ASSERT_EQ(old_barrier.size(), 6u);   // answered, not left waiting for ever
    for (const auto& [position, outcome] : old_barrier)
        EXPECT_EQ(outcome, "restarting") << "position " << position;
    std::map<long, Bytes> results;
    for (long position = 1; position <= 7; ++position)
        tree.at(position).fence({}, node_blob(position), [&, position](Status status, Bytes blob) {
            ASSERT_TRUE(status.ok());
            results[position] = std::move(blob);
        }, wire::FenceDomain::pmi);
    tree.run();
    ASSERT_EQ(results.size(), 7u);
    Bytes all;
    for (long position = 1; position <= 7; ++position) {
        auto blob = node_blob(position);
        all.insert(all.end(), blob.begin(), blob.end());
    }
    for (const auto& [position, blob] : results) {
        Bytes sorted_blob = blob, sorted_all = all;
        std::sort(sorted_blob.begin(), sorted_blob.end());
        std::sort(sorted_all.begin(), sorted_all.end());
        EXPECT_EQ(sorted_blob, sorted_all) << "position " << position << ": an old contribution counted again";
    }
    for (long position = 0; position <= 7; ++position)
        EXPECT_EQ(tree.at(position).waiting(), 0u);
}

TEST(TreeCollectives, SubsetFenceInvolvesOnlyItsNodes)
{
    // Ranks 2 and 9: nodes 1 and 4 (positions 2 and 5) of 7 nodes with 2 ranks each.
    Tree tree(7, 2, std::vector<std::uint64_t>(7, 2));
    std::map<long, Bytes> results;
    for (long position : {2L, 5L})
        tree.at(position).fence({2, 9}, node_blob(position), [&, position](Status status, Bytes blob) {
            ASSERT_TRUE(status.ok());
            results[position] = std::move(blob);
        });
    tree.run();
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(tally(results[2]), (std::map<std::uint8_t, std::size_t>{{2, 3}, {5, 3}}));
    EXPECT_EQ(results[2], results[5]);
    // Position 3 (node 2) hosts neither rank and lies on neither path: it never hears of the fence.
    EXPECT_EQ(tree.handled_.count(3), 0u);
}

TEST(TreeCollectives, BackToBackFencesCompleteSeparately)
{
    Tree tree(4, 2, std::vector<std::uint64_t>(4, 1));
    std::vector<std::vector<Bytes>> results(5);
    for (int round = 0; round < 3; ++round)
        for (long position = 1; position <= 4; ++position)
            tree.at(position).fence({}, Bytes{static_cast<std::uint8_t>(round * 10 + position)},
                                    [&, position](Status status, Bytes blob) {
                                        ASSERT_TRUE(status.ok());
                                        results[static_cast<std::size_t>(position)].push_back(std::move(blob));
                                    });
    tree.run();
    for (long position = 1; position <= 4; ++position) {
        auto& rounds = results[static_cast<std::size_t>(position)];
        ASSERT_EQ(rounds.size(), 3u);
        for (int round = 0; round < 3; ++round) {
            auto blob = rounds[static_cast<std::size_t>(round)];
            std::sort(blob.begin(), blob.end());
            Bytes expected;
            for (long node = 1; node <= 4; ++node)
                expected.push_back(static_cast<std::uint8_t>(round * 10 + node));
            EXPECT_EQ(blob, expected) << "position " << position << " round " << round;
        }
    }
}

// A whole-job fence of `each` bytes from every node of a 5-node tree: every node gets all 5 blobs, and each blob
// contiguous (chunks from different subtrees never interleave, nor arrive out of order).
void expect_whole_blobs_everywhere(Tree& tree, std::size_t each)
{
    std::map<long, Bytes> results;
    for (long position = 1; position <= 5; ++position)
        tree.at(position).fence({}, node_blob(position, each), [&, position](Status status, Bytes blob) {
            ASSERT_TRUE(status.ok());
            results[position] = std::move(blob);
        });
    tree.run();
    ASSERT_EQ(results.size(), 5u);
    for (const auto& [position, blob] : results) {
        ASSERT_EQ(blob.size(), 5 * each);
        std::size_t runs = 1;
        for (std::size_t i = 1; i < blob.size(); ++i)
            runs += blob[i] != blob[i - 1];
        EXPECT_EQ(runs, 5u) << "position " << position;
    }
}

TEST(TreeCollectives, LargeBlobsArriveWholeThroughChunks)
{
    Tree tree(5, 2, std::vector<std::uint64_t>(5, 1));
    expect_whole_blobs_everywhere(tree, TreeCollectives::chunk_bytes * 2 + 17);
}

TEST(TreeCollectives, ALargeFenceResultGoesDownTheBulkRouteWholeAndInOrder)
{
    // 5 x 100 KiB: every chunk of the result takes the bulk route, so none of them is overtaken by a link frame.
    Tree tree(5, 2, std::vector<std::uint64_t>(5, 1), true);
    expect_whole_blobs_everywhere(tree, 100 * 1024);
    EXPECT_EQ(tree.down_frames(wire::MessageType::fence_down, false), 0);
    // 500 KiB in 256 KiB chunks is 2 frames for each of the 5 nodes.
    EXPECT_EQ(tree.down_frames(wire::MessageType::fence_down, true), 10);
}

TEST(TreeCollectives, SmallFenceResultsAndRepliesStayOnTheLinks)
{
    Tree tree(5, 2, std::vector<std::uint64_t>(5, 1), true);
    int done = 0;
    for (long position = 1; position <= 5; ++position)
        tree.at(position).fence({}, node_blob(position, 1000), [&](Status status, Bytes) { done += status.ok(); });
    ask_modex(tree.at(4), 5, 1, [&](Status status, Bytes) { done += status.ok(); });
    tree.run();
    EXPECT_EQ(done, 6);
    EXPECT_EQ(tree.down_frames(wire::MessageType::fence_down, false), 5);
    EXPECT_EQ(tree.down_frames(wire::MessageType::fence_down, true), 0);
    EXPECT_EQ(tree.down_frames(wire::MessageType::routed_reply, true), 0);
}

TEST(TreeCollectives, ALargeReplyGoesDownTheBulkRoute)
{
    Tree tree(5, 2, std::vector<std::uint64_t>(5, 1), true);
    Bytes answer;
    // The direct-modex stand-in answers a large rank number with as many bytes. From a leaf under the root's
    // second child (5) to one under its first (3): up to the root, then down over the bulk route.
    ask_modex(tree.at(5), 3, TreeCollectives::bulk_bytes, [&](Status status, Bytes reply) {
        ASSERT_TRUE(status.ok());
        answer = std::move(reply);
    });
    tree.run();
    EXPECT_EQ(answer, Bytes(TreeCollectives::bulk_bytes, 7));
    EXPECT_GE(tree.down_frames(wire::MessageType::routed_reply, true), 1);
    EXPECT_EQ(tree.down_frames(wire::MessageType::routed_reply, false), 0);
}

TEST(TreeCollectives, RequestsReachTheirTargetAndRepliesComeBack)
{
    Tree tree(13, 3, std::vector<std::uint64_t>(13, 1));
    Bytes answer;
    // From a leaf under one child of the root (position 13) to a leaf under another (position 5).
    ask_modex(tree.at(13), 5, 42, [&](Status status, Bytes reply) {
        ASSERT_TRUE(status.ok());
        answer = std::move(reply);
    });
    tree.run();
    EXPECT_EQ(answer, (Bytes{'n', 5, 42}));
    EXPECT_EQ(tree.at(13).waiting(), 0u);
}

TEST(TreeCollectives, PublishAndLookupGoThroughTheRootStore)
{
    Tree tree(7, 2, std::vector<std::uint64_t>(7, 1));
    bool published = false;
    tree.at(7).publish({{"port", Bytes{1, 2}}}, [&](Status status) { published = status.ok(); });
    tree.run();
    ASSERT_TRUE(published);

    std::string duplicate_error;
    tree.at(3).publish({{"port", Bytes{9}}},
                       [&](Status status) { duplicate_error = status.ok() ? "" : status.error().message; });
    KeyValues found;
    tree.at(5).lookup({"port", "missing"}, [&](Status status, KeyValues values) {
        ASSERT_TRUE(status.ok());
        found = std::move(values);
    });
    tree.run();
    EXPECT_NE(duplicate_error.find("'port' is already published"), std::string::npos) << duplicate_error;
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].first, "port");
    EXPECT_EQ(found[0].second, (Bytes{1, 2}));   // the first publisher's value survived the refused one
}

TEST(TreeCollectives, AWaitingLookupIsAnsweredOnceItsKeysArePublished)
{
    // MPI_Comm_accept's side may look up the connecting side's port before it is published (PMIX_WAIT).
    Tree tree(7, 2, std::vector<std::uint64_t>(7, 1));
    std::optional<KeyValues> found;
    tree.at(6).lookup({"a", "b"}, [&](Status status, KeyValues values) {
        ASSERT_TRUE(status.ok());
        found = std::move(values);
    }, 2);
    tree.run();
    EXPECT_FALSE(found);
    tree.at(3).publish({{"a", Bytes{1}}}, [](Status) {});
    tree.run();
    EXPECT_FALSE(found);   // one of two
    tree.at(4).publish({{"b", Bytes{2}}}, [](Status) {});
    tree.run();
    ASSERT_TRUE(found);
    EXPECT_EQ(*found, (KeyValues{{"a", Bytes{1}}, {"b", Bytes{2}}}));
}

TEST(TreeCollectives, WaitingLookupsFailWhenTheJobEnds)
{
    PublishStore store;
    std::optional<Status> answer;
    store.lookup({1, {"never"}}, [&](Result<wire::LookupReply> reply) {
        answer = reply ? Status{} : Status{reply.error()};
    });
    EXPECT_FALSE(answer);
    EXPECT_EQ(store.waiting(), 1u);
    store.fail_waiting("the job is ending");
    ASSERT_TRUE(answer);
    EXPECT_FALSE(answer->ok());
    EXPECT_EQ(store.waiting(), 0u);
}

TEST(TreeCollectives, FailAllAnswersEveryWaiter)
{
    Tree tree(3, 2, std::vector<std::uint64_t>(3, 1));
    int failures = 0;
    tree.at(1).fence({}, Bytes{1}, [&](Status status, Bytes) { failures += !status.ok(); });
    tree.at(1).lookup({"x"}, [&](Status status, KeyValues) { failures += !status.ok(); }, 1);
    tree.at(1).fail_all("the job is ending");
    EXPECT_EQ(failures, 2);
    EXPECT_EQ(tree.at(1).waiting(), 0u);
    tree.run();   // late replies find nothing to answer
    EXPECT_EQ(failures, 2);
}

TEST(TreeCollectives, TheServerLearnsWhichPositionAsked)
{
    Tree tree(13, 3, std::vector<std::uint64_t>(13, 1));
    ask_modex(tree.at(13), 0, 1, [](Status, Bytes) {});
    ask_modex(tree.at(0), 5, 1, [](Status, Bytes) {});
    ask_modex(tree.at(5), 5, 2, [](Status, Bytes) {});
    tree.run();
    EXPECT_EQ(tree.served_from_[0], std::vector<long>{13});
    EXPECT_EQ(tree.served_from_[5], (std::vector<long>{5, 0}));   // its own request is served at once
}

TEST(TreeCollectives, ARequestIntoASubtreeThatLeftFailsInsteadOfHanging)
{
    // 13 nodes, fanout 3: position 5 sits under 1 (children of 1 are 4, 5, 6); the root asks it something.
    Tree tree(13, 3, std::vector<std::uint64_t>(13, 1));
    tree.dead_.insert(5);
    std::optional<Status> answer;
    ask_modex(tree.at(0), 5, 1, [&](Status status, Bytes) { answer = status; });
    tree.run();   // the request reached 1, which passed it into the closed link to 5
    EXPECT_FALSE(answer);
    tree.at(1).child_lost(5);   // 1 sees the link close and answers for it
    tree.run();
    ASSERT_TRUE(answer);
    EXPECT_FALSE(answer->ok());
    EXPECT_NE(answer->error().message.find("position 5 left the job"), std::string::npos) << answer->error().message;
    EXPECT_EQ(tree.at(0).waiting(), 0u);

    // Later requests toward it fail at once, from the root itself when the lost child is its own.
    std::optional<Status> later, own;
    ask_modex(tree.at(0), 5, 2, [&](Status status, Bytes) { later = status; });
    tree.at(0).child_lost(2);
    ask_modex(tree.at(0), 8, 3, [&](Status status, Bytes) { own = status; });
    tree.run();
    ASSERT_TRUE(later && own);
    EXPECT_FALSE(later->ok());
    EXPECT_FALSE(own->ok());
    // Requests elsewhere still work, and a lost child does not disturb the replies already on their way.
    std::optional<Status> fine;
    ask_modex(tree.at(0), 6, 4, [&](Status status, Bytes) { fine = status; });
    tree.run();
    ASSERT_TRUE(fine);
    EXPECT_TRUE(fine->ok());
}

TEST(TreeCollectives, AMalformedRequestIsAnErrorNamingIt)
{
    Tree tree(3, 2, std::vector<std::uint64_t>(3, 1));
    std::optional<Status> result;
    tree.at(0).services().dispatch(2, wire::RoutedOp::publish, Bytes{0xff, 0xff, 0xff},
                                   [&](Status status, Bytes) { result = status; });
    ASSERT_TRUE(result);
    ASSERT_FALSE(result->ok());
    EXPECT_NE(result->error().message.find("publish request"), std::string::npos) << result->error().message;
}

TEST(TreeCollectives, ARequestNoServiceTakesIsAnErrorNamingThePosition)
{
    Tree tree(3, 2, std::vector<std::uint64_t>(3, 1));
    std::optional<Status> answer;
    // Only the root keeps the publish store.
    tree.at(3).request<wire::LookupRequest>(2, {0, {"x"}}, [&](Result<wire::LookupReply> reply) {
        answer = reply ? Status{} : Status{reply.error()};
    });
    tree.run();
    ASSERT_TRUE(answer);
    ASSERT_FALSE(answer->ok());
    EXPECT_NE(answer->error().message.find("position 2 serves no lookup requests"), std::string::npos)
        << answer->error().message;
}

TEST(TreeCollectives, AnOperationHasOneServicePerPosition)
{
    Tree tree(3, 2, std::vector<std::uint64_t>(3, 1));
    EXPECT_THROW(tree.at(1).services().serve<wire::DirectModexRequest>([](long, auto, auto reply) {
        reply(wire::ModexData{});
    }),
                 std::logic_error);
}

} // namespace
} // namespace canopy
