// The simple PMI wire codec: PMI-1 lines, PMI-2 framed commands, limits, and the process mapping.
#include <gtest/gtest.h>

#include "pmi/process_mapping.hpp"
#include "pmi/wire.hpp"

using namespace canopy;
using namespace canopy::pmi;

namespace {

std::vector<Command> decode_all(Decoder& decoder)
{
    std::vector<Command> out;
    for (;;) {
        auto next = decoder.next();
        EXPECT_TRUE(next.ok()) << (next.ok() ? "" : next.error().message);
        if (!next.ok() || !*next)
            return out;
        out.push_back(**next);
    }
}

} // namespace

TEST(PmiWire, ParsesAPmi1LineWithTheCommandFirst)
{
    auto command = parse_v1("cmd=put kvsname=canopy.j1 key=-bcast-1-0 value=2F6465");
    ASSERT_TRUE(command.ok());
    EXPECT_EQ(command->name, "put");
    EXPECT_EQ(command->find("kvsname"), "canopy.j1");
    EXPECT_EQ(command->find("key"), "-bcast-1-0");
    EXPECT_EQ(command->find("value"), "2F6465");
    EXPECT_FALSE(command->find("missing"));
}

TEST(PmiWire, RejectsALineThatDoesNotStartWithCmd)
{
    auto command = parse_v1("key=x cmd=get");
    ASSERT_FALSE(command.ok());
    EXPECT_NE(command.error().message.find("does not start with cmd="), std::string::npos);
    EXPECT_FALSE(parse_v1("").ok());
    EXPECT_FALSE(parse_v1("cmd=").ok());
    EXPECT_FALSE(parse_v1("cmd=get =x").ok());
}

TEST(PmiWire, DecoderSplitsLinesFedAByteAtATime)
{
    Decoder decoder;
    std::string stream = "cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\n";
    std::vector<Command> got;
    for (char c : stream) {
        decoder.feed(std::string_view(&c, 1));
        auto more = decode_all(decoder);
        got.insert(got.end(), more.begin(), more.end());
    }
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].name, "init");
    EXPECT_EQ(got[0].find("pmi_version"), "1");
    EXPECT_EQ(got[1].name, "get_maxes");
    EXPECT_EQ(decoder.wire(), Wire::v1);
}

TEST(PmiWire, Pmi1SpawnIsOneCommandUpToEndcmd)
{
    Decoder decoder;
    decoder.feed("mcmd=spawn\nnprocs=2\nexecname=/bin/a b\ntotspawns=1\nspawnssofar=1\nendcmd\ncmd=get_maxes\n");
    auto got = decode_all(decoder);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].name, "spawn");
    EXPECT_EQ(got[0].find("execname"), "/bin/a b");   // one value a line: spaces allowed
    EXPECT_EQ(got[0].find("nprocs"), "2");
    EXPECT_EQ(got[1].name, "get_maxes");
}

// The decoder resumes its search where it stopped, so a rank trickling a long command costs linear time; what it
// decodes must not change with that.
TEST(PmiWire, LongCommandsTrickledAByteAtATimeDecodeWhole)
{
    Decoder decoder;
    std::string value(60000, 'x');
    std::string stream = "mcmd=spawn\nnprocs=2\nexecname=" + value + "\nendcmd\ncmd=put kvsname=k key=a value=" + value +
                         "\nmcm";
    std::vector<Command> got;
    for (char c : stream) {
        decoder.feed(std::string_view(&c, 1));
        auto more = decode_all(decoder);
        got.insert(got.end(), more.begin(), more.end());
    }
    decoder.feed("d=spawn\nnprocs=1\nendcmd\n");   // "mcm" began a multi-line command after all
    auto last = decode_all(decoder);
    got.insert(got.end(), last.begin(), last.end());
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].name, "spawn");
    EXPECT_EQ(got[0].find("execname"), value);
    EXPECT_EQ(got[1].name, "put");
    EXPECT_EQ(got[1].find("value"), value);
    EXPECT_EQ(got[2].name, "spawn");
    EXPECT_EQ(got[2].find("nprocs"), "1");
}

TEST(PmiWire, AnOversizedLineIsAnErrorThatStaysAnError)
{
    Decoder decoder(Limits{.max_message = 64});
    decoder.feed("cmd=put key=" + std::string(100, 'x'));
    auto next = decoder.next();
    ASSERT_FALSE(next.ok());
    EXPECT_NE(next.error().message.find("over the limit of 64 bytes"), std::string::npos);
    decoder.feed("\ncmd=get_maxes\n");
    EXPECT_FALSE(decoder.next().ok());   // the stream cannot be trusted again
}

TEST(PmiWire, TooManyFieldsIsAnError)
{
    std::string line = "cmd=put";
    for (int i = 0; i < 20; ++i)
        line += " k" + std::to_string(i) + "=v";
    auto command = parse_v1(line, Limits{.max_message = 4096, .max_fields = 10});
    ASSERT_FALSE(command.ok());
    EXPECT_NE(command.error().message.find("more than 10 fields"), std::string::npos);
}

TEST(PmiWire, Pmi2CommandsAreLengthPrefixedWithEitherPadding)
{
    std::string body = "cmd=kvs-put;key=k1;value=a=b c;";   // 31 bytes
    ASSERT_EQ(body.size(), 31u);
    for (const char* prefix : {"    31", "31    ", "000031"}) {
        Decoder decoder;
        decoder.use_v2();
        decoder.feed(std::string(prefix) + body);
        auto got = decode_all(decoder);
        ASSERT_EQ(got.size(), 1u) << prefix;
        EXPECT_EQ(got[0].name, "kvs-put");
        EXPECT_EQ(got[0].find("key"), "k1");
        EXPECT_EQ(got[0].find("value"), "a=b c");   // '=' and spaces are fine inside a PMI-2 value
    }
}

TEST(PmiWire, Pmi2DoubledSemicolonIsALiteralOne)
{
    auto command = parse_v2("cmd=abort;isworld=TRUE;msg=a;;b;");
    ASSERT_TRUE(command.ok());
    EXPECT_EQ(command->find("msg"), "a;b");
    auto unterminated = parse_v2("cmd=finalize");
    ASSERT_TRUE(unterminated.ok());
    EXPECT_EQ(unterminated->name, "finalize");
}

TEST(PmiWire, AStreamThatOpensWithALengthIsPmi2)
{
    Decoder decoder;
    decoder.feed(encode_v2(Command{"fullinit", {{"pmirank", "3"}}}));
    auto got = decode_all(decoder);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(decoder.wire(), Wire::v2);
    EXPECT_EQ(got[0].find("pmirank"), "3");
}

TEST(PmiWire, Pmi2InitComesAsALineThenFramedCommandsFollow)
{
    Decoder decoder;
    decoder.feed("cmd=init pmi_version=2 pmi_subversion=0\n");
    auto init = decode_all(decoder);
    ASSERT_EQ(init.size(), 1u);
    decoder.use_v2();
    decoder.feed(encode_v2(Command{"fullinit", {{"pmirank", "0"}}}) + encode_v2(Command{"job-getid", {}}));
    auto rest = decode_all(decoder);
    ASSERT_EQ(rest.size(), 2u);
    EXPECT_EQ(rest[0].name, "fullinit");
    EXPECT_EQ(rest[1].name, "job-getid");
}

TEST(PmiWire, Pmi2LengthOverTheLimitOrNotDigitsIsAnError)
{
    Decoder big(Limits{.max_message = 100});
    big.use_v2();
    big.feed("999999cmd=");
    auto next = big.next();
    ASSERT_FALSE(next.ok());
    EXPECT_NE(next.error().message.find("over the limit of 100"), std::string::npos);

    Decoder garbage;
    garbage.use_v2();
    garbage.feed("12a456cmd=x;");
    EXPECT_FALSE(garbage.next().ok());
}

TEST(PmiWire, EncodesEachWireAsItsClientsRead)
{
    Command answer{"get_result", {{"rc", "0"}, {"msg", "key not found"}}};
    EXPECT_EQ(encode_v1(answer), "cmd=get_result rc=0 msg=key_not_found\n");   // PMI-1 values hold no spaces
    std::string framed = encode_v2(Command{"kvs-get-response", {{"rc", "0"}, {"found", "TRUE"}, {"value", "x;y"}}});
    std::string body = "cmd=kvs-get-response;rc=0;found=TRUE;value=x;;y;";
    EXPECT_EQ(framed, std::to_string(body.size()) + std::string(6 - std::to_string(body.size()).size(), ' ') + body);
    auto back = parse_v2(framed.substr(6));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->find("value"), "x;y");
}

TEST(PmiProcessMapping, OneTriplePerRunOfEqualNodes)
{
    EXPECT_EQ(process_mapping({2, 2, 2, 2}), "(vector,(0,4,2))");
    EXPECT_EQ(process_mapping({8}), "(vector,(0,1,8))");
    EXPECT_EQ(process_mapping({4, 4, 2}), "(vector,(0,2,4),(2,1,2))");
    EXPECT_EQ(process_mapping({3, 2, 3}), "(vector,(0,1,3),(1,1,2),(2,1,3))");
    EXPECT_EQ(process_mapping(std::vector<std::uint64_t>(16, 1)), "(vector,(0,16,1))");
}
