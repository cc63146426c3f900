// Unit tests for pdsh-style hostlist expansion and compression, and for HostNames that names hosts from the
// compressed form.
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "hosts/host_names.hpp"
#include "hosts/hostlist.hpp"

namespace canopy {
namespace {

using Names = std::vector<std::string>;

Names expand_ok(std::string_view list)
{
    auto result = expand_hostlist(list);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : Names{};
}

std::string expand_error(std::string_view list)
{
    auto result = expand_hostlist(list);
    EXPECT_FALSE(result.ok()) << "expected an error for \"" << list << "\"";
    return result.ok() ? std::string() : result.error().message;
}

TEST(ExpandHostlist, RangesListsAndPlainNamesKeepZeroPadding)
{
    EXPECT_EQ(expand_ok("nid[001-004,010],login1"),
              (Names{"nid001", "nid002", "nid003", "nid004", "nid010", "login1"}));
}

TEST(ExpandHostlist, PaddingFollowsTheLowEndOfEachRange)
{
    EXPECT_EQ(expand_ok("n[8-10]"), (Names{"n8", "n9", "n10"}));
    EXPECT_EQ(expand_ok("n[08-10]"), (Names{"n08", "n09", "n10"}));
    EXPECT_EQ(expand_ok("n[098-100]"), (Names{"n098", "n099", "n100"}));
}

TEST(ExpandHostlist, BracketInTheMiddleOfACrayName)
{
    EXPECT_EQ(expand_ok("x1000c0s[0-3]b0n0"),
              (Names{"x1000c0s0b0n0", "x1000c0s1b0n0", "x1000c0s2b0n0", "x1000c0s3b0n0"}));
}

TEST(ExpandHostlist, SuffixAfterBracketIsKept)
{
    EXPECT_EQ(expand_ok("foo[0-3]-eth0"), (Names{"foo0-eth0", "foo1-eth0", "foo2-eth0", "foo3-eth0"}));
}

TEST(ExpandHostlist, SeveralBracketGroupsMultiplyInOrder)
{
    EXPECT_EQ(expand_ok("a[1-2]b[3-4]"), (Names{"a1b3", "a1b4", "a2b3", "a2b4"}));
}

TEST(ExpandHostlist, WhitespaceAroundItemsAndRangeElementsIsIgnored)
{
    EXPECT_EQ(expand_ok("  n[1-2] ,\tlogin1  "), (Names{"n1", "n2", "login1"}));
    EXPECT_EQ(expand_ok("n[1, 3 - 4]"), (Names{"n1", "n3", "n4"}));
}

TEST(ExpandHostlist, SingleNameAndSingleValueBracket)
{
    EXPECT_EQ(expand_ok("login1"), (Names{"login1"}));
    EXPECT_EQ(expand_ok("n[7]"), (Names{"n7"}));
    EXPECT_EQ(expand_ok("[1-2]"), (Names{"1", "2"}));
}

TEST(ExpandHostlist, EmptyListIsAnError)
{
    EXPECT_EQ(expand_error(""), "hostlist \"\": empty list; give at least one host name");
    EXPECT_NE(expand_error("   ").find("empty list"), std::string::npos);
}

TEST(ExpandHostlist, EmptyItemIsAnErrorWithItsColumn)
{
    std::string message = expand_error("a,,b");
    EXPECT_NE(message.find("hostlist \"a,,b\""), std::string::npos) << message;
    EXPECT_NE(message.find("empty item at column 3"), std::string::npos) << message;
    EXPECT_NE(expand_error("a,").find("empty item"), std::string::npos);
    EXPECT_NE(expand_error(",a").find("empty item at column 1"), std::string::npos);
}

TEST(ExpandHostlist, ReversedRangeIsAnError)
{
    std::string message = expand_error("nid[5-3]");
    EXPECT_EQ(message.rfind("hostlist \"nid[5-3]\": range 5-3 is reversed", 0), 0u) << message;
}

TEST(ExpandHostlist, UnbalancedBracketsAreErrorsWithColumn)
{
    std::string unclosed = expand_error("nid[1-3");
    EXPECT_NE(unclosed.find("hostlist \"nid[1-3\""), std::string::npos) << unclosed;
    EXPECT_NE(unclosed.find("'[' at column 4 is never closed"), std::string::npos) << unclosed;
    std::string stray = expand_error("nid1-3]");
    EXPECT_NE(stray.find("']' at column 7 has no matching '['"), std::string::npos) << stray;
}

TEST(ExpandHostlist, NestedBracketsAreAnError)
{
    std::string message = expand_error("n[1[2]]");
    EXPECT_NE(message.find("hostlist \"n[1[2]]\""), std::string::npos) << message;
    EXPECT_NE(message.find("nested '[' at column 4"), std::string::npos) << message;
}

TEST(ExpandHostlist, EmptyRangeIsAnError)
{
    EXPECT_NE(expand_error("nid[]").find("empty range"), std::string::npos);
    EXPECT_NE(expand_error("nid[1,]").find("empty range"), std::string::npos);
}

TEST(ExpandHostlist, NonNumericRangeIsAnErrorQuotingTheRange)
{
    std::string message = expand_error("nid[a-3]");
    EXPECT_NE(message.find("hostlist \"nid[a-3]\""), std::string::npos) << message;
    EXPECT_NE(message.find("range \"a-3\""), std::string::npos) << message;
    EXPECT_NE(message.find("not numeric"), std::string::npos) << message;
    EXPECT_NE(expand_error("nid[1-]").find("not numeric"), std::string::npos);
    EXPECT_NE(expand_error("nid[1-2-3]").find("not numeric"), std::string::npos);
}

TEST(ExpandHostlist, RangeOfMoreThanAMillionHostsIsAnError)
{
    std::string message = expand_error("n[0-1000000]");
    EXPECT_NE(message.find("range 0-1000000 has more than 1000000 hosts"), std::string::npos) << message;
    EXPECT_NE(expand_error("n[0-99999999999999999999]").find("too long"), std::string::npos);
}

TEST(ExpandHostlist, ProductOfGroupsOverAMillionIsAnError)
{
    std::string message = expand_error("a[0-999]b[0-999]c[0-1]");
    EXPECT_NE(message.find("more than 1000000 hosts"), std::string::npos) << message;
}

TEST(ExpandHostlist, RangeOfExactlyAMillionHostsIsAccepted)
{
    auto hosts = expand_ok("n[0-999999]");
    ASSERT_EQ(hosts.size(), 1000000u);
    EXPECT_EQ(hosts.back(), "n999999");
}

TEST(ExpandHostlist, WhitespaceInsideANameIsAnError)
{
    EXPECT_NE(expand_error("n1 n2").find("unexpected whitespace in \"n1 n2\""), std::string::npos);
}

TEST(CompressHostlist, GroupsTheLastNumberRunAndKeepsOrder)
{
    EXPECT_EQ(compress_hostlist({"nid001", "nid002", "nid003", "nid010", "login1"}), "nid[001-003,010],login1");
}

TEST(CompressHostlist, SingleNamesStayPlain)
{
    EXPECT_EQ(compress_hostlist({}), "");
    EXPECT_EQ(compress_hostlist({"login1"}), "login1");
    EXPECT_EQ(compress_hostlist({"alpha", "beta"}), "alpha,beta");
}

TEST(CompressHostlist, OnlyTheLastNumberVaries)
{
    EXPECT_EQ(compress_hostlist({"x1000c0s0b0n0", "x1000c0s0b0n1", "x1000c0s1b0n0"}),
              "x1000c0s0b0n[0-1],x1000c0s1b0n0");
    EXPECT_EQ(compress_hostlist({"foo0-eth0", "foo1-eth0"}), "foo0-eth0,foo1-eth0");
}

TEST(CompressHostlist, MixedPaddingStaysExact)
{
    std::vector<std::string> hosts{"n8", "n9", "n10", "n08", "n09", "n099", "n100"};
    std::string compressed = compress_hostlist(hosts);
    EXPECT_EQ(compressed, "n[8-10,08-09,099-100]");
    EXPECT_EQ(expand_ok(compressed), hosts);
}

TEST(CompressHostlist, UnsortedNumbersKeepTheirOrder)
{
    std::vector<std::string> hosts{"n3", "n1", "n2"};
    EXPECT_EQ(compress_hostlist(hosts), "n[3,1-2]");
    EXPECT_EQ(expand_ok(compress_hostlist(hosts)), hosts);
}

// 20 lists of 300-odd names: runs with gaps, zero padding, descending runs, names without digits.
std::vector<Names> generated_host_lists()
{
    std::vector<Names> lists;
    std::mt19937 random(12345);
    const std::vector<std::string> prefixes{"nid", "n", "x1000c0s", "gpu-", "", "login"};
    const std::vector<std::string> suffixes{"", "-ib", "b0n0", "-eth"};
    for (int round = 0; round < 20; ++round) {
        std::vector<std::string> hosts;
        std::set<std::string> seen;
        while (hosts.size() < 300) {
            const std::string& prefix = prefixes[random() % prefixes.size()];
            const std::string& suffix = suffixes[random() % suffixes.size()];
            int width = static_cast<int>(random() % 5);
            long start = static_cast<long>(random() % 2000);
            long run = static_cast<long>(random() % 40) + 1;
            bool descending = random() % 5 == 0;
            for (long i = 0; i < run; ++i) {
                long value = descending ? start + run - i : start + i;
                std::string name = prefix + fmt::format("{:0{}d}", value, width) + suffix;
                if (random() % 7 == 0)
                    continue; // leave gaps
                if (seen.insert(name).second)
                    hosts.push_back(name);
            }
            // Names without digits never join a group.
            std::string plain = "login" + std::string(1, static_cast<char>('a' + random() % 26));
            if (random() % 10 == 0 && seen.insert(plain).second)
                hosts.push_back(plain);
        }
        lists.push_back(std::move(hosts));
    }
    return lists;
}

TEST(CompressHostlist, RoundTripsThousandsOfGeneratedNames)
{
    for (const Names& hosts : generated_host_lists()) {
        std::string compressed = compress_hostlist(hosts);
        EXPECT_LT(compressed.size(), fmt::format("{}", fmt::join(hosts, ",")).size());
        EXPECT_EQ(expand_ok(compressed), hosts) << compressed;
    }
}

HostNames parse_ok(std::string_view list)
{
    auto result = HostNames::parse(list);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : HostNames{};
}

TEST(HostNames, NamesEachGeneratedHostAsExpansionDoes)
{
    for (const Names& hosts : generated_host_lists()) {
        HostNames built(hosts);
        HostNames parsed = parse_ok(compress_hostlist(hosts));
        ASSERT_EQ(built.size(), hosts.size());
        ASSERT_EQ(parsed.size(), hosts.size());
        for (std::size_t i = 0; i < hosts.size(); ++i) {
            EXPECT_EQ(built[i], hosts[i]) << built.compressed();
            EXPECT_EQ(parsed.at(i), hosts[i]) << parsed.compressed();
        }
        EXPECT_EQ(parsed.expand(), hosts);
        EXPECT_EQ(built.compressed(), compress_hostlist(hosts));
        EXPECT_TRUE(built == parsed);
    }
}

TEST(HostNames, NamesEachHostOfListsWithSeveralGroups)
{
    for (std::string_view list : {"a[1-2]b[3-4]", "nid[001-004,010],login1", "x[9-11]y[08-10,7]z,n[0-1],m",
                                  "c[0-1]s[0-2]b[0-1]n[00-01]"}) {
        Names expanded = expand_ok(list);
        HostNames names = parse_ok(list);
        ASSERT_EQ(names.size(), expanded.size()) << list;
        for (std::size_t i = 0; i < expanded.size(); ++i)
            EXPECT_EQ(names[i], expanded[i]) << list << " host " << i;
    }
}

TEST(HostNames, RefusesBadListsWithExpansionsMessage)
{
    for (std::string_view list : {"", "nid[5-3]", "a[1-2", "n[0-99999999]", "a,,b", "x[1-a]"}) {
        auto parsed = HostNames::parse(list);
        ASSERT_FALSE(parsed.ok()) << list;
        EXPECT_EQ(parsed.error().message, expand_error(list));
    }
}

TEST(HostNames, AtPastTheEndThrows)
{
    HostNames names = parse_ok("n[1-3]");
    EXPECT_EQ(names.at(2), "n3");
    EXPECT_THROW(names.at(3), std::out_of_range);
    EXPECT_EQ(HostNames().size(), 0u);
    EXPECT_THROW(HostNames().at(0), std::out_of_range);
}

TEST(HostNames, NamesBuiltFromTheUsersListAnswerExactlyThoseNames)
{
    // Names the hostlist syntax cannot carry as they are stay the user's own, in order.
    const std::vector<std::string> odd{"n1", "a,b", "n[2]", " spaced", "n2"};
    HostNames names(odd);
    ASSERT_EQ(names.size(), odd.size());
    for (std::size_t i = 0; i < odd.size(); ++i)
        EXPECT_EQ(names[i], odd[i]) << "host " << i;
    EXPECT_EQ(names.expand(), odd);
    const std::vector<std::string> plain{"nid001", "nid002", "nid010", "login"};
    EXPECT_EQ(HostNames(plain).expand(), plain);
    EXPECT_EQ(HostNames(plain).compressed(), "nid[001-002,010],login");
}

TEST(HostNames, ListsSpelledDifferentlyAreEqualWhenTheirNamesAre)
{
    EXPECT_TRUE(parse_ok("a1,a2,a3") == parse_ok("a[1-3]"));
    EXPECT_FALSE(parse_ok("a1,a3") == parse_ok("a[1-2]"));
    EXPECT_FALSE(parse_ok("a[1-3]") == parse_ok("a[1-2]"));
}

} // namespace
} // namespace canopy
