// Unit tests for the HTML timing report: escaping, self-containment, the charts' markup, reading the page back.
#include "timing/html_report.hpp"

#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "timing/analysis.hpp"

namespace canopy::timing {
namespace {

JobTiming sample_timing()
{
    JobTiming timing;
    timing.job_id = "j7";
    timing.command = "python3 train.py --lr 0.1";
    timing.nodes = 8;
    timing.ranks = 16;
    timing.agent = "local";
    timing.wall_seconds = 5.0;
    timing.timeline = {{"start", 0.0},         {"hosts_resolved", 0.001}, {"tree_up", 0.2},
                       {"job_delivered", 0.21}, {"ranks_spawned", 0.3},    {"ranks_exited", 4.8},
                       {"teardown_done", 5.0}};
    for (int node = 0; node < 8; ++node) {
        const std::string host = "sim000" + std::to_string(node);
        timing.phases.add("daemon.connected", 0.1 + node * 0.01, host);
        for (int local = 0; local < 2; ++local) {
            const std::string who = "rank " + std::to_string(node * 2 + local) + " on " + host;
            timing.phases.add("rank.spawned", 0.25 + node * 0.005, who);
            timing.phases.add("app.imports", 2.0, who);
            timing.phases.add("app.imports.duration", 1.7, who);
            timing.phases.add("app.first_step", 3.0, who);   // 1 s after imports that nothing covers
            timing.phases.add("rank.runtime", 4.4, who);
            timing.phases.add("daemon.tree_messages", 3, host);
        }
    }
    return timing;
}

std::size_t occurrences(const std::string& text, const std::string& what)
{
    std::size_t count = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
        ++count;
    return count;
}

TEST(HtmlReport, EscapesEveryCharacterThatMeansSomethingInHtml)
{
    EXPECT_EQ(html_escape(R"(<a href="x" title='y'>&amp;</a>)"),
              "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;");
    EXPECT_EQ(html_escape("rank 3 on sim0001"), "rank 3 on sim0001");
}

TEST(HtmlReport, EmbeddedJsonCannotCloseItsScriptAndReadsBackTheSame)
{
    const nlohmann::json document{{"command", "echo '</script><script>alert(1)</script>' <!-- & >"}};
    const std::string text = script_json(document);
    EXPECT_EQ(text.find('<'), std::string::npos) << text;
    EXPECT_EQ(text.find('>'), std::string::npos) << text;
    EXPECT_EQ(text.find('&'), std::string::npos) << text;
    EXPECT_EQ(nlohmann::json::parse(text), document);
    // Bytes that are not UTF-8 (a command line can hold any) do not throw.
    EXPECT_NO_THROW(script_json(nlohmann::json{{"command", std::string("a\xff" "b")}}));
}

TEST(HtmlReport, ACommandOrHostThatLooksLikeMarkupStaysText)
{
    JobTiming timing = sample_timing();
    timing.command = "sh -c 'echo </script><script>alert(1)</script> <b>bold</b>'";
    timing.phases.add("rank.spawned", 9.0, "rank 99 on <img src=x onerror=alert(1)>");
    const std::string page = format_html_report(timing, "t.json");
    EXPECT_EQ(occurrences(page, "<script"), 1u);     // only the JSON island
    EXPECT_EQ(occurrences(page, "</script>"), 1u);
    EXPECT_EQ(page.find("<img"), std::string::npos);
    EXPECT_EQ(page.find("<b>bold"), std::string::npos);
    EXPECT_NE(page.find("echo &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; &lt;b&gt;bold&lt;/b&gt;"),
              std::string::npos);
    auto embedded = embedded_timing_json(page);
    ASSERT_TRUE(embedded);
    auto parsed = parse_timing_json(*embedded, "page");
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_EQ(parsed->command, timing.command);
    EXPECT_EQ(to_json(*parsed), to_json(timing));
}

TEST(HtmlReport, LoadsNothingFromAnywhere)
{
    const std::string page = format_html_report(sample_timing(), "t.json");
    EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
    for (const char* outside : {"http://", "https://", "//cdn", " src=", "<link", "url(", "@import"})
        EXPECT_EQ(page.find(outside), std::string::npos) << outside;
    EXPECT_NE(page.find(R"(content="default-src 'none'; style-src 'unsafe-inline'")"), std::string::npos);
}

TEST(HtmlReport, DrawsTheWaterfallSpreadsAndSlowestWithTheGapMarked)
{
    const std::string page = format_html_report(sample_timing(), "t.json");
    EXPECT_NE(page.find(R"(<svg class="chart" id="waterfall")"), std::string::npos);
    // One spread chart for each phase, each with bars and a CDF.
    EXPECT_EQ(occurrences(page, R"(<svg class="chart spread-chart")"), sample_timing().phases.phases().size());
    EXPECT_GE(occurrences(page, R"(<rect class="bar")"), sample_timing().phases.phases().size());
    EXPECT_EQ(occurrences(page, R"(<polyline class="cdf")"), sample_timing().phases.phases().size());
    // The unattributed second between the imports and the first step, as a band and as a number.
    EXPECT_EQ(occurrences(page, R"(<rect class="gap")"), 1u);
    EXPECT_NE(page.find("unattributed: 1000 ms after app.imports, before app.first_step"), std::string::npos);
    EXPECT_NE(page.find("<b>1000 ms of 3000 ms (33.3%)</b>"), std::string::npos);
    // The slowest, by name.
    EXPECT_NE(page.find(R"(<table class="slowest"><caption><code>daemon.connected</code>)"), std::string::npos);
    EXPECT_NE(page.find(R"(<td>1</td><td class="mono">sim0007</td><td class="num">170 ms</td>)"), std::string::npos);
}

// Chrome logs an error for each negative or non-numeric length; a degenerate report must draw without one.
TEST(HtmlReport, DegenerateReportsDrawOnlyFiniteNonNegativeLengths)
{
    JobTiming one_value;
    one_value.phases.add("rank.spawned", 0.0, "rank 0 on a");
    JobTiming negative = sample_timing();
    negative.phases.add("daemon.connected", -0.5, "sim0009");   // a clock a fraction off
    for (const JobTiming& timing : {JobTiming{}, one_value, negative}) {
        const std::string page = format_html_report(timing, "");
        EXPECT_FALSE(std::regex_search(page, std::regex(R"(="-?(nan|inf))", std::regex::icase))) << page;
        EXPECT_FALSE(std::regex_search(page, std::regex(R"((width|height)="-)"))) << page;
    }
}

TEST(HtmlReport, ComparisonFlagsThePhaseThatChangedMostAndKeepsIdsUnique)
{
    JobTiming after = sample_timing();
    for (int i = 0; i < 40; ++i)
        after.phases.add("daemon.connected", 1.5, "sim1" + std::to_string(i));
    const std::string page = format_html_comparison(sample_timing(), after, "a.json", "b.json");
    EXPECT_NE(page.find(R"(<svg class="chart" id="comparison")"), std::string::npos);
    EXPECT_NE(page.find(R"(Changed most: <code>daemon.connected</code>)"), std::string::npos);
    EXPECT_EQ(occurrences(page, "&larr; changed most"), 1u);
    EXPECT_NE(page.find(R"(id="a-waterfall")"), std::string::npos);
    EXPECT_NE(page.find(R"(id="b-waterfall")"), std::string::npos);
    std::set<std::string> ids;
    const std::regex id(R"re( id="([^"]*)")re");
    for (auto it = std::sregex_iterator(page.begin(), page.end(), id); it != std::sregex_iterator(); ++it)
        EXPECT_TRUE(ids.insert((*it)[1]).second) << "repeated id " << (*it)[1];

    // Runs with nothing in common still compare.
    JobTiming empty;
    const std::string odd = format_html_comparison(empty, sample_timing(), "x.json", "y.json");
    EXPECT_NE(odd.find("The runs have no timed phase in common."), std::string::npos);
}

TEST(HtmlReport, AnythingButACanopyPageHoldsNoTimingJson)
{
    EXPECT_FALSE(embedded_timing_json("<html><body>hello</body></html>"));
    EXPECT_FALSE(embedded_timing_json(R"({"schema": "canopy.timing/1"})"));
}

} // namespace
} // namespace canopy::timing
