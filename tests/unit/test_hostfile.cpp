// Unit tests for hostfile parsing and SLURM host lists.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "hosts/hostfile.hpp"

namespace canopy {

// Lets GoogleTest print entries in failure messages.
static void PrintTo(const HostEntry& entry, std::ostream* out) { *out << "{" << entry.name << "," << entry.slots << "}"; }

namespace {

using Entries = std::vector<HostEntry>;

Entries parse_ok(std::string_view text)
{
    auto result = parse_hostfile(text, "hosts.txt");
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : Entries{};
}

std::string parse_error(std::string_view text)
{
    auto result = parse_hostfile(text, "hosts.txt");
    EXPECT_FALSE(result.ok()) << "expected an error for:\n" << text;
    return result.ok() ? std::string() : result.error().message;
}

TEST(ParseHostfile, PlainNamesHaveNoSlots)
{
    EXPECT_EQ(parse_ok("n1\nn2\n"), (Entries{{"n1", 0}, {"n2", 0}}));
}

TEST(ParseHostfile, AHugeLineIsNotTakenAsAHostName)
{
    // A 10 MB line once became a 10 MB host name, sent to every daemon.
    std::string text = "n1\n" + std::string(10 << 20, 'x') + "\n";
    EXPECT_EQ(parse_error(text), "hostfile hosts.txt:2: a host name of 10485760 characters (\"xxxxxxxxxxxxxxxxxxxx...\"); "
                                 "host names have at most 253");
    EXPECT_EQ(parse_error(std::string(254, 'a')).find("254 characters") != std::string::npos, true);
}

TEST(ParseHostfile, ColonAndSlotsEqualsGiveSlots)
{
    EXPECT_EQ(parse_ok("n1:4\nn2 slots=8\nn3 slots = 2\n"), (Entries{{"n1", 4}, {"n2", 8}, {"n3", 2}}));
}

TEST(ParseHostfile, MaxSlotsIsAcceptedAndIgnored)
{
    EXPECT_EQ(parse_ok("n1 slots=4 max_slots=8\nn2 max_slots=2\n"), (Entries{{"n1", 4}, {"n2", 0}}));
}

TEST(ParseHostfile, CommentsBlankLinesAndWhitespaceAreSkipped)
{
    EXPECT_EQ(parse_ok("# cluster A\n\n   n1   # the first\n\t n2:2 \r\n   \n#n3\n"),
              (Entries{{"n1", 0}, {"n2", 2}}));
}

TEST(ParseHostfile, HostlistSyntaxExpandsWithTheSameSlots)
{
    EXPECT_EQ(parse_ok("nid[001-003] slots=4\nlogin1\n"),
              (Entries{{"nid001", 4}, {"nid002", 4}, {"nid003", 4}, {"login1", 0}}));
    EXPECT_EQ(parse_ok("n[1, 3]:2\n"), (Entries{{"n1", 2}, {"n3", 2}}));
}

TEST(ParseHostfile, ConsecutiveDuplicatesCountAsSlotsLikePbsNodefile)
{
    EXPECT_EQ(parse_ok("n1\nn1\nn2"), (Entries{{"n1", 2}, {"n2", 1}}));
    EXPECT_EQ(parse_ok("n1\nn1\nn1\nn2\nn2\n"), (Entries{{"n1", 3}, {"n2", 2}}));
}

TEST(ParseHostfile, ConsecutiveDuplicatesWithExplicitSlotsAddUp)
{
    EXPECT_EQ(parse_ok("n1:2\nn1 slots=3\nn2:1\n"), (Entries{{"n1", 5}, {"n2", 1}}));
}

TEST(ParseHostfile, MixingSlotsAndBareLinesForOneHostIsAnError)
{
    EXPECT_EQ(parse_error("n1:2\nn1\n"),
              "hostfile hosts.txt:2: host \"n1\" has slots on line 1 but not on line 2; give slots on both "
              "lines or on neither");
}

TEST(ParseHostfile, NonConsecutiveDuplicateNamesBothLines)
{
    std::string message = parse_error("n1\nn2\n# gap\nn1\n");
    EXPECT_EQ(message.rfind("hostfile hosts.txt:4: host \"n1\" is already listed on line 1", 0), 0u) << message;
}

TEST(ParseHostfile, DuplicateFromAHostlistRangeIsDetected)
{
    std::string message = parse_error("n[1-3]\nn2\n");
    EXPECT_NE(message.find("hosts.txt:2: host \"n2\" is already listed on line 1"), std::string::npos) << message;
}

TEST(ParseHostfile, BadSlotsNameFileAndLine)
{
    EXPECT_EQ(parse_error("n1\nn2\nn3 slots=x\n"), "hostfile hosts.txt:3: slots must be a positive integer, got \"x\"");
    EXPECT_EQ(parse_error("n1:0\n"), "hostfile hosts.txt:1: slots must be a positive integer, got \"0\"");
    EXPECT_EQ(parse_error("n1:-2\n"), "hostfile hosts.txt:1: slots must be a positive integer, got \"-2\"");
    EXPECT_EQ(parse_error("n1:\n"), "hostfile hosts.txt:1: slots must be a positive integer, got \"\"");
    EXPECT_NE(parse_error("n1 slots=99999999999\n").find("got \"99999999999\""), std::string::npos);
}

TEST(ParseHostfile, SlotsGivenTwiceIsAnError)
{
    EXPECT_NE(parse_error("n1:2 slots=2\n").find("hosts.txt:1: slots given twice"), std::string::npos);
}

TEST(ParseHostfile, UnknownFieldIsAnError)
{
    std::string message = parse_error("n1\nn2 cpus=4\n");
    EXPECT_NE(message.find("hosts.txt:2: unknown field \"cpus=4\""), std::string::npos) << message;
}

TEST(ParseHostfile, BadHostlistNamesFileLineAndInput)
{
    std::string message = parse_error("n1\nnid[5-3]\n");
    EXPECT_EQ(message.rfind("hostfile hosts.txt:2: hostlist \"nid[5-3]\": range 5-3 is reversed", 0), 0u) << message;
}

TEST(ParseHostfile, MissingNameBeforeColonIsAnError)
{
    EXPECT_NE(parse_error(":4\n").find("hosts.txt:1: missing host name"), std::string::npos);
}

TEST(ParseHostfile, EmptyTextGivesNoEntries)
{
    EXPECT_TRUE(parse_ok("# nothing\n\n").empty());
}

class ReadHostfile : public ::testing::Test {
protected:
    void SetUp() override
    {
        char pattern[] = "/tmp/canopy_test_hostfile_XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        dir_ = pattern;
    }
    void TearDown() override
    {
        for (const std::string& file : files_)
            ::unlink(file.c_str());
        ::rmdir(dir_.c_str());
    }
    std::string write(const std::string& name, const std::string& text)
    {
        std::string path = dir_ + "/" + name;
        std::ofstream(path) << text;
        files_.push_back(path);
        return path;
    }
    std::string dir_;
    std::vector<std::string> files_;
};

TEST_F(ReadHostfile, ReadsAndParsesTheFile)
{
    std::string path = write("hosts", "n1 slots=2\nn2:3\n");
    auto entries = read_hostfile(path);
    ASSERT_TRUE(entries.ok()) << entries.error().message;
    EXPECT_EQ(*entries, (Entries{{"n1", 2}, {"n2", 3}}));
}

TEST_F(ReadHostfile, ErrorsNameThePathAndLine)
{
    std::string path = write("bad", "n1\nn2:x\n");
    auto entries = read_hostfile(path);
    ASSERT_FALSE(entries.ok());
    EXPECT_EQ(entries.error().message, "hostfile " + path + ":2: slots must be a positive integer, got \"x\"");
}

TEST_F(ReadHostfile, MissingFileSaysWhy)
{
    std::string path = dir_ + "/missing";
    auto entries = read_hostfile(path);
    ASSERT_FALSE(entries.ok());
    EXPECT_EQ(entries.error().message, "hostfile " + path + ": cannot read: No such file or directory");
}

TEST_F(ReadHostfile, DirectoryIsUnreadable)
{
    auto entries = read_hostfile(dir_);
    ASSERT_FALSE(entries.ok());
    EXPECT_EQ(entries.error().message, "hostfile " + dir_ + ": is a directory, not a file");
}

TEST_F(ReadHostfile, FileWithoutHostsIsAnError)
{
    std::string path = write("empty", "# only a comment\n\n");
    auto entries = read_hostfile(path);
    ASSERT_FALSE(entries.ok());
    EXPECT_EQ(entries.error().message.rfind("hostfile " + path + ": no hosts listed", 0), 0u)
        << entries.error().message;
}

TEST(ParseHostsOption, SlotsApplyToEveryHostOfTheirItem)
{
    auto hosts = parse_hosts_option("a:2, nid[01-02]:4,b");
    ASSERT_TRUE(hosts.ok()) << hosts.error().message;
    EXPECT_EQ(hosts.value(), (Entries{{"a", 2}, {"nid01", 4}, {"nid02", 4}, {"b", 0}}));
}

TEST(ParseHostsOption, AnIpv6AddressHasNoSlots)
{
    auto hosts = parse_hosts_option("::1");
    ASSERT_TRUE(hosts.ok()) << hosts.error().message;
    EXPECT_EQ(hosts.value(), (Entries{{"::1", 0}}));
}

TEST(ParseHostsOption, ErrorsQuoteTheItem)
{
    auto bad_slots = parse_hosts_option("a:2,b:x");
    ASSERT_FALSE(bad_slots.ok());
    EXPECT_EQ(bad_slots.error().message, "--hosts \"b:x\": slots must be a positive integer, got \"x\"");
    EXPECT_FALSE(parse_hosts_option("a:0").ok());
    EXPECT_FALSE(parse_hosts_option(":3").ok());
    auto unclosed = parse_hosts_option("a,nid[001-");
    ASSERT_FALSE(unclosed.ok());
    EXPECT_NE(unclosed.error().message.find("nid[001-"), std::string::npos) << unclosed.error().message;
}

TEST(HostsFromSlurm, RepeatCountsExpandPerNode)
{
    auto entries = hosts_from_slurm("nid[001-003],login1", "2(x3),1");
    ASSERT_TRUE(entries.ok()) << entries.error().message;
    EXPECT_EQ(*entries, (Entries{{"nid001", 2}, {"nid002", 2}, {"nid003", 2}, {"login1", 1}}));
}

TEST(HostsFromSlurm, PlainCountsAndSingleNode)
{
    auto entries = hosts_from_slurm("n[1-2]", "4,8");
    ASSERT_TRUE(entries.ok()) << entries.error().message;
    EXPECT_EQ(*entries, (Entries{{"n1", 4}, {"n2", 8}}));
    auto single = hosts_from_slurm("n7", "36");
    ASSERT_TRUE(single.ok());
    EXPECT_EQ(*single, (Entries{{"n7", 36}}));
}

TEST(HostsFromSlurm, EmptyTasksLeavesSlotsUnset)
{
    auto entries = hosts_from_slurm("n[1-2]", "");
    ASSERT_TRUE(entries.ok()) << entries.error().message;
    EXPECT_EQ(*entries, (Entries{{"n1", 0}, {"n2", 0}}));
}

TEST(HostsFromSlurm, CountMismatchIsAnError)
{
    auto entries = hosts_from_slurm("n[1-4]", "2(x3)");
    ASSERT_FALSE(entries.ok());
    EXPECT_NE(entries.error().message.find("SLURM_TASKS_PER_NODE \"2(x3)\" describes 3 nodes but "
                                           "SLURM_JOB_NODELIST \"n[1-4]\" has 4"),
              std::string::npos)
        << entries.error().message;
}

TEST(HostsFromSlurm, MalformedTasksIsAnError)
{
    for (std::string_view bad : {"2(x)", "2(3)", "x", "2,,1", "0", "2(x3"}) {
        auto entries = hosts_from_slurm("n[1-4]", bad);
        ASSERT_FALSE(entries.ok()) << bad;
        EXPECT_NE(entries.error().message.find(fmt::format("SLURM_TASKS_PER_NODE \"{}\"", bad)), std::string::npos)
            << entries.error().message;
    }
}

TEST(HostsFromSlurm, BadNodelistIsAnError)
{
    auto entries = hosts_from_slurm("n[4-1]", "1");
    ASSERT_FALSE(entries.ok());
    EXPECT_EQ(entries.error().message.rfind("SLURM_JOB_NODELIST: hostlist \"n[4-1]\": range 4-1 is reversed", 0), 0u)
        << entries.error().message;
}

} // namespace
} // namespace canopy
