// Launch agents: the command each agent runs to start canopyd on a host.
#include <gtest/gtest.h>

#include "tree/agent.hpp"

namespace canopy {
namespace {

const std::vector<std::string> daemon{"/opt/canopy/bin/canopyd", "--parent", "10.0.0.1:4000", "--node", "nid001"};

TEST(Agent, SshPassesOptionsHostAndOneQuotedRemoteCommand)
{
    AgentSettings settings{"ssh", "ssh", {"-o", "BatchMode=yes"}, "rsh"};
    auto argv = agent_command(settings, "nid001", daemon);
    ASSERT_TRUE(argv.ok());
    EXPECT_EQ(*argv, (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "nid001",
                                               "/opt/canopy/bin/canopyd --parent 10.0.0.1:4000 --node nid001"}));
}

TEST(Agent, ExecSubstitutesTheHostWhereAsked)
{
    AgentSettings settings{"exec:ssh -p 2222 %h", "ssh", {}, "rsh"};
    auto argv = agent_command(settings, "nid007", {"canopyd"});
    ASSERT_TRUE(argv.ok());
    EXPECT_EQ(*argv, (std::vector<std::string>{"ssh", "-p", "2222", "nid007", "canopyd"}));
}

TEST(Agent, ExecWithoutPlaceholderPutsTheHostFirstLikeHydra)
{
    AgentSettings settings{"exec:/usr/bin/my-rsh -q", "ssh", {}, "rsh"};
    auto argv = agent_command(settings, "nid007", {"canopyd", "--position", "3"});
    ASSERT_TRUE(argv.ok());
    EXPECT_EQ(*argv, (std::vector<std::string>{"/usr/bin/my-rsh", "-q", "nid007", "canopyd", "--position", "3"}));
}

TEST(Agent, SplitWordsHonoursQuotes)
{
    auto words = split_words(R"(sh -c 'echo "a b" >&2' x\ y "q\"uote")");
    ASSERT_TRUE(words.ok());
    EXPECT_EQ(*words, (std::vector<std::string>{"sh", "-c", "echo \"a b\" >&2", "x y", "q\"uote"}));
    EXPECT_FALSE(split_words("ssh 'unterminated").ok());
    EXPECT_FALSE(parse_agent("exec:").ok());
    EXPECT_FALSE(parse_agent("telnet").ok());
}

TEST(Agent, ShellQuoteSurvivesTheRemoteShell)
{
    EXPECT_EQ(shell_quote("plain-word_1.2:3"), "plain-word_1.2:3");
    EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
    EXPECT_EQ(shell_quote(""), "''");
}

TEST(Agent, SimulatedNodesGetDistinctLoopbackAddresses)
{
    EXPECT_EQ(simulated_node_name(7), "sim0007");
    EXPECT_EQ(simulated_node_address(0), "127.1.0.1");
    EXPECT_EQ(simulated_node_address(253), "127.1.0.254");
    EXPECT_EQ(simulated_node_address(254), "127.1.1.1");
}

} // namespace
} // namespace canopy
