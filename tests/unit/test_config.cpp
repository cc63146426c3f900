// Unit tests for canopy.toml: defaults, layer order, profiles, and errors that point at file:line:col.
#include "config/config.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#if __has_include("build_config.hpp")
#include "build_config.hpp" // for CANOPY_SOURCE_CONFIG_DIR: checks the files that ship
#endif

namespace canopy {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text)
{
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
}

std::string apply_error(const std::string& text, const std::string& name = "/x/canopy.toml")
{
    auto applied = apply_config(text, name, Config{});
    EXPECT_FALSE(applied.ok());
    return applied.ok() ? "" : applied.error().message;
}

// Each test gets its own directories and an environment with no user or $CANOPY_CONFIG file.
class ConfigFiles : public ::testing::Test {
protected:
    void SetUp() override
    {
        std::string pattern = (fs::temp_directory_path() / "canopy-test-config-XXXXXX").string();
        ASSERT_NE(mkdtemp(pattern.data()), nullptr);
        root_ = pattern;
        save_env("XDG_CONFIG_HOME");
        save_env("CANOPY_CONFIG");
        setenv("XDG_CONFIG_HOME", (root_ / "xdg").c_str(), 1);
        unsetenv("CANOPY_CONFIG");
        dirs_ = {(root_ / "etc").string(), (root_ / "src").string()};
    }

    void TearDown() override
    {
        for (const auto& [name, value] : saved_env_) {
            if (value) {
                setenv(name.c_str(), value->c_str(), 1);
            } else {
                unsetenv(name.c_str());
            }
        }
        std::error_code ec;
        fs::remove_all(root_, ec);
    }

    void save_env(const char* name)
    {
        const char* value = std::getenv(name);
        saved_env_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    }

    fs::path root_;
    ConfigSources dirs_;
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_env_;
};

TEST(ApplyConfig, EmptyDocumentKeepsDefaults)
{
    auto applied = apply_config("", "empty.toml", Config{});
    ASSERT_TRUE(applied.ok()) << applied.error().message;
    EXPECT_EQ(applied->agent, "ssh");
    EXPECT_EQ(applied->ssh_args, (std::vector<std::string>{"-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-x"}));
    EXPECT_EQ(applied->fanout, 32);
    EXPECT_EQ(applied->window, 32);
    EXPECT_DOUBLE_EQ(applied->connect_timeout, 30.0);
    EXPECT_DOUBLE_EQ(applied->heartbeat_timeout, 30.0);
    EXPECT_DOUBLE_EQ(applied->kill_grace, 3.0);
    EXPECT_EQ(applied->tmpdir, "");
    EXPECT_EQ(applied->loaded_from, std::vector<std::string>{"empty.toml"});
}

TEST(ApplyConfig, EveryKeyIsRead)
{
    auto applied = apply_config(R"(
[launch]
agent = "exec:srun -N1 -n1 -w %h"
ssh_command = "/usr/bin/ssh"
ssh_args = ["-p", "2222"]
rsh_command = "/usr/bin/rsh"
daemon_path = "/opt/canopy/libexec/canopyd"
[tree]
fanout = 8
window = 4
connect_timeout = 12
heartbeat_timeout = 2.5
bind_address = "10.0.0.1"
[job]
kill_grace = 0.5
tmpdir = "/dev/shm"
pmi = "simple"
pmix = false
rank_store_limit = "64MiB"
[stage]
prefixes = ["/soft/venv", "/soft/frameworks"]
manifest = "/home/u/torch.manifest"
cache_dir = "/local/scratch"
interposer = "/opt/canopy/lib/libcanopy_interpose.so"
[fabric]
provider = "cxi"
[health]
enabled = true
command = "/opt/nhc/nhc -a"
timeout = 90
min_free_disk = "10GiB"
min_free_memory = 0
max_clock_offset = 0.25
gpus = 4
)",
                                "full.toml", Config{});
    ASSERT_TRUE(applied.ok()) << applied.error().message;
    EXPECT_EQ(applied->agent, "exec:srun -N1 -n1 -w %h");
    EXPECT_EQ(applied->ssh_command, "/usr/bin/ssh");
    EXPECT_EQ(applied->ssh_args, (std::vector<std::string>{"-p", "2222"}));
    EXPECT_EQ(applied->rsh_command, "/usr/bin/rsh");
    EXPECT_EQ(applied->daemon_path, "/opt/canopy/libexec/canopyd");
    EXPECT_EQ(applied->fanout, 8);
    EXPECT_EQ(applied->window, 4);
    EXPECT_DOUBLE_EQ(applied->connect_timeout, 12.0);
    EXPECT_DOUBLE_EQ(applied->heartbeat_timeout, 2.5);
    EXPECT_EQ(applied->bind_address, "10.0.0.1");
    EXPECT_DOUBLE_EQ(applied->kill_grace, 0.5);
    EXPECT_EQ(applied->tmpdir, "/dev/shm");
    EXPECT_EQ(applied->pmix, PmixMode::off);
    EXPECT_EQ(applied->pmi, PmiInterfaces::simple);
    EXPECT_EQ(applied->rank_store_limit, std::uint64_t{64} << 20);
    EXPECT_EQ(applied->stage_prefixes, (std::vector<std::string>{"/soft/venv", "/soft/frameworks"}));
    EXPECT_EQ(applied->stage_manifest, "/home/u/torch.manifest");
    EXPECT_EQ(applied->stage_cache_dir, "/local/scratch");
    EXPECT_EQ(applied->stage_interposer, "/opt/canopy/lib/libcanopy_interpose.so");
    EXPECT_EQ(applied->fabric, "cxi");
    EXPECT_TRUE(applied->health.enabled);
    EXPECT_EQ(applied->health.command, "/opt/nhc/nhc -a");
    EXPECT_DOUBLE_EQ(applied->health.command_timeout, 90.0);
    EXPECT_EQ(applied->health.min_free_disk, std::uint64_t{10} << 30);
    EXPECT_EQ(applied->health.min_free_memory, 0u);
    EXPECT_DOUBLE_EQ(applied->health.max_clock_offset, 0.25);
    EXPECT_EQ(applied->health.gpus, 4u);
}

TEST(ApplyConfig, HealthValuesAreChecked)
{
    EXPECT_EQ(apply_error("[health]\nenabled = \"yes\"\n"), "config /x/canopy.toml:2:11: enabled must be true or false");
    EXPECT_EQ(apply_error("[health]\ntimeout = 0\n"),
              "config /x/canopy.toml:2:11: timeout must be a number of seconds above 0, at most 86400 (a day)");
    EXPECT_EQ(apply_error("[health]\nmin_free_disk = \"lots\"\n"),
              "config /x/canopy.toml:2:17: min_free_disk must be a size such as \"16MiB\" or \"512K\", a number of bytes, "
              "or 0 for no check, got \"lots\"");
    EXPECT_EQ(apply_error("[health]\ngpus = -1\n"),
              "config /x/canopy.toml:2:8: gpus must be the number of GPUs every node must show, from 0 (no check) to "
              "4096");
    EXPECT_EQ(apply_error("[health]\nmax_clock_offset = -1\n"),
              "config /x/canopy.toml:2:20: max_clock_offset must be a number of seconds from 0 to 86400 (a day)");
}

TEST(ApplyConfig, StageAndPmixValuesAreChecked)
{
    EXPECT_NE(apply_error("[job]\npmix = 1\n").find("pmix must be true, false or \"eager\""), std::string::npos);
    EXPECT_NE(apply_error("[job]\npmix = \"later\"\n").find("pmix must be true, false or \"eager\""),
              std::string::npos);
    EXPECT_NE(apply_error("[job]\npmi = \"mpich\"\n").find("pmi must be \"all\", \"pmix\", \"simple\" or \"none\""),
              std::string::npos);
    EXPECT_NE(apply_error("[job]\npmi = true\n").find("pmi must be"), std::string::npos);
    auto eager = apply_config("[job]\npmix = \"eager\"\n", "eager.toml", Config{});
    ASSERT_TRUE(eager.ok()) << eager.error().message;
    EXPECT_EQ(eager->pmix, PmixMode::eager);
    EXPECT_NE(apply_error("[stage]\nprefixes = [\"venv\"]\n").find("absolute paths"), std::string::npos);
    EXPECT_NE(apply_error("[stage]\ncache_dir = \"\"\n").find("cache_dir must be an absolute path"),
              std::string::npos);
    EXPECT_NE(apply_error("[fabric]\nprovider = \"\"\n").find("provider must be \"auto\", \"off\""),
              std::string::npos);
    EXPECT_NE(apply_error("[fabric]\nprovider = 1\n").find("provider must be a string"), std::string::npos);
}

TEST(ApplyConfig, RankStoreLimitIsASizeOrBytesOrZero)
{
    auto bytes = apply_config("[job]\nrank_store_limit = 1048576\n", "bytes.toml", Config{});
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    EXPECT_EQ(bytes->rank_store_limit, 1048576u);
    auto none = apply_config("[job]\nrank_store_limit = 0\n", "none.toml", Config{});
    ASSERT_TRUE(none.ok()) << none.error().message;
    EXPECT_EQ(none->rank_store_limit, 0u);
    EXPECT_EQ(Config{}.rank_store_limit, std::uint64_t{16} << 20);
    EXPECT_EQ(apply_error("[job]\nrank_store_limit = \"16 MB\"\n"),
              "config /x/canopy.toml:2:20: rank_store_limit must be a size such as \"16MiB\" or \"512K\", a number of "
              "bytes, or 0 for no limit, got \"16 MB\"");
    EXPECT_NE(apply_error("[job]\nrank_store_limit = -1\n").find("rank_store_limit must be a size"), std::string::npos);
    EXPECT_NE(apply_error("[job]\nrank_store_limit = 1.5\n").find("rank_store_limit must be a size"),
              std::string::npos);
}

TEST(ApplyConfig, OnlyKeysPresentOverrideTheBase)
{
    Config base;
    base.window = 7;
    base.tmpdir = "/scratch";
    auto applied = apply_config("[tree]\nfanout = 2\n", "f.toml", base);
    ASSERT_TRUE(applied.ok()) << applied.error().message;
    EXPECT_EQ(applied->fanout, 2);
    EXPECT_EQ(applied->window, 7);
    EXPECT_EQ(applied->tmpdir, "/scratch");
}

TEST(ApplyConfig, UnknownKeySuggestsSpellingWithPosition)
{
    EXPECT_EQ(apply_error("[tree]\nfanout = 3\n\n# comment\n\n\nfan_out = 4\n"),
              "config /x/canopy.toml:7:1: unknown key 'fan_out' in [tree]; did you mean 'fanout'?");
}

TEST(ApplyConfig, KeyInWrongTableNamesItsTable)
{
    EXPECT_EQ(apply_error("[launch]\nfanout = 3\n"),
              "config /x/canopy.toml:2:1: unknown key 'fanout' in [launch]; it belongs in [tree]");
}

TEST(ApplyConfig, UnknownTableSuggestsSpelling)
{
    EXPECT_EQ(apply_error("[lanch]\nagent = \"ssh\"\n"),
              "config /x/canopy.toml:1:2: unknown table [lanch]; did you mean [launch]?");
}

// Issue 38: the list named three of the five tables.
TEST(ApplyConfig, AnUnknownTableOrTopLevelKeyNamesEveryTable)
{
    EXPECT_EQ(apply_error("[x]\na = 1\n"), "config /x/canopy.toml:1:2: unknown table [x]; canopy.toml has [launch], "
                                           "[tree], [job], [bind], [stage], [fabric] and [health]");
    EXPECT_EQ(apply_error("zzz = 1\n"), "config /x/canopy.toml:1:1: unknown key 'zzz' at the top level; settings go "
                                        "in [launch], [tree], [job], [bind], [stage], [fabric] or [health]");
}

// Issue 38: a bind_address that is no address passed, and the launcher failed with 255 once it tried to listen.
TEST(ApplyConfig, BindSettingsAreCheckedByTheOptionsParsers)
{
    auto applied = apply_config("[bind]\ncpu_bind = \"gpu\"\ngpu_bind = \"closest\"\nreserved_cpus = \"0,52\"\n", "/x/canopy.toml",
                                Config{});
    ASSERT_TRUE(applied.ok()) << applied.error().message;
    EXPECT_EQ(applied->cpu_bind, "gpu");
    EXPECT_EQ(applied->gpu_bind, "closest");
    EXPECT_EQ(applied->reserved_cpus, "0,52");
    EXPECT_EQ(apply_error("[bind]\ngpu_bind = \"nearest\"\n"),
              "config /x/canopy.toml:2:12: gpu_bind \"nearest\" is not a binding canopy knows; see --gpu-bind in canopy "
              "--help");
    EXPECT_NE(apply_error("[bind]\nreserved_cpus = \"0-x\"\n").find("reserved_cpus"), std::string::npos);
}

TEST(ApplyConfig, BindAddressMustBeAnIpAddress)
{
    EXPECT_EQ(apply_error("[tree]\nbind_address = \"not-an-address\"\n"),
              "config /x/canopy.toml:2:16: bind_address must be an IP address such as \"10.1.0.5\", or \"\", got "
              "\"not-an-address\"");
    EXPECT_NE(apply_error("[tree]\nbind_address = \"10.0.0.300\"\n").find("must be an IP address"),
              std::string::npos);
    for (const char* good : {"", "127.0.0.1", "0.0.0.0", "::1", "fe80::1"}) {
        auto applied = apply_config(std::string("[tree]\nbind_address = \"") + good + "\"\n", "b.toml", Config{});
        ASSERT_TRUE(applied.ok()) << good << ": " << applied.error().message;
        EXPECT_EQ(applied->bind_address, good);
    }
}

TEST(ApplyConfig, WrongTypePointsAtTheValue)
{
    EXPECT_EQ(apply_error("[tree]\nfanout = \"lots\"\n"), "config /x/canopy.toml:2:10: fanout must be an integer >= 1");
    EXPECT_EQ(apply_error("[tree]\nwindow = 0\n"), "config /x/canopy.toml:2:10: window must be an integer >= 1");
    EXPECT_EQ(apply_error("[tree]\nfanout = 2.5\n"), "config /x/canopy.toml:2:10: fanout must be an integer >= 1");
    EXPECT_EQ(apply_error("[launch]\nssh_args = \"-x\"\n"),
              "config /x/canopy.toml:2:12: ssh_args must be an array of strings, e.g. [\"-o\", \"BatchMode=yes\"]");
    EXPECT_EQ(apply_error("[job]\nkill_grace = -1\n"),
              "config /x/canopy.toml:2:14: kill_grace must be a number of seconds from 0 to 86400 (a day)");
    // Past a timer's range: it once SIGKILLed the daemons at the start of teardown.
    EXPECT_EQ(apply_error("[job]\nkill_grace = 1e308\n"),
              "config /x/canopy.toml:2:14: kill_grace must be a number of seconds from 0 to 86400 (a day)");
}

TEST(ApplyConfig, HeartbeatTimeoutOutsideItsRangeIsRefusedNamingTheKey)
{
    const std::string expected =
        "heartbeat_timeout must be a number of seconds from 0.5 to 86400 (a day)";
    // Zero would declare every node lost at once; past a day the timers lose their meaning (and 1e308 overflows).
    for (const char* value : {"0", "-5", "0.1", "86401", "1e308", "\"ten\"", "nan", "inf", "[1]"})
        EXPECT_EQ(apply_error(std::string("[tree]\nheartbeat_timeout = ") + value + "\n"),
                  "config /x/canopy.toml:2:21: " + expected)
            << value;
    auto edge = apply_config("[tree]\nheartbeat_timeout = 0.5\n", "edge.toml", Config{});
    ASSERT_TRUE(edge.ok()) << edge.error().message;
    EXPECT_DOUBLE_EQ(edge->heartbeat_timeout, 0.5);
}

TEST(ApplyConfig, ExecAgentNeedsHostPlaceholder)
{
    std::string message = apply_error("[launch]\nagent = \"exec:srun -N1\"\n");
    EXPECT_EQ(message, "config /x/canopy.toml:2:9: agent \"exec:srun -N1\" must contain %h where the host name goes");
    message = apply_error("[launch]\nagent = \"telnet\"\n");
    EXPECT_NE(message.find("agent must be ssh, rsh, local"), std::string::npos) << message;
}

TEST(ApplyConfig, RelativeTmpdirIsRejected)
{
    EXPECT_EQ(apply_error("[job]\ntmpdir = \"scratch\"\n"),
              "config /x/canopy.toml:2:10: tmpdir must be an absolute path or \"\", got \"scratch\"");
}

TEST(ApplyConfig, SyntaxErrorNamesLine)
{
    std::string message = apply_error("[tree]\nfanout = 3\nwindow = = 4\n");
    EXPECT_TRUE(message.starts_with("config /x/canopy.toml:3:10: invalid TOML: ")) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ApplyConfig, FirstProblemInTheFileIsReported)
{
    // toml++ keeps keys sorted, not in file order; the user should still see the earliest problem.
    EXPECT_EQ(apply_error("[tree]\nwindow = 0\nfanout = 0\n"),
              "config /x/canopy.toml:2:10: window must be an integer >= 1");
}

TEST_F(ConfigFiles, NoFilesGivesDefaults)
{
    auto config = load_config(dirs_, std::nullopt, std::nullopt);
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->fanout, 32);
    EXPECT_TRUE(config->loaded_from.empty());
}

TEST_F(ConfigFiles, LayersApplyInOrderLaterWinning)
{
    write_file(root_ / "etc/canopy.toml", "[tree]\nfanout = 10\nwindow = 10\n[job]\nkill_grace = 1.0\n");
    write_file(root_ / "etc/profiles/site.toml", "[tree]\nfanout = 20\nwindow = 20\n");
    write_file(root_ / "xdg/canopy/canopy.toml", "[tree]\nfanout = 30\n");
    write_file(root_ / "env.toml", "[job]\ntmpdir = \"/env\"\n[tree]\nfanout = 40\n");
    write_file(root_ / "explicit.toml", "[tree]\nfanout = 50\n");
    setenv("CANOPY_CONFIG", (root_ / "env.toml").c_str(), 1);

    auto config = load_config(dirs_, (root_ / "explicit.toml").string(), "site");
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->fanout, 50);               // explicit file beats everything
    EXPECT_EQ(config->tmpdir, "/env");           // $CANOPY_CONFIG beats the user file
    EXPECT_EQ(config->window, 20);               // profile beats the system file
    EXPECT_DOUBLE_EQ(config->kill_grace, 1.0);   // system file beats built-in defaults
    EXPECT_EQ(config->loaded_from,
              (std::vector<std::string>{(root_ / "etc/canopy.toml").string(), (root_ / "etc/profiles/site.toml").string(),
                                        (root_ / "xdg/canopy/canopy.toml").string(), (root_ / "env.toml").string(),
                                        (root_ / "explicit.toml").string()}));
}

TEST_F(ConfigFiles, UserFileFallsBackToHomeWithoutXdg)
{
    save_env("HOME");
    unsetenv("XDG_CONFIG_HOME");
    setenv("HOME", (root_ / "home").c_str(), 1);
    write_file(root_ / "home/.config/canopy/canopy.toml", "[tree]\nwindow = 3\n");
    auto config = load_config(dirs_, std::nullopt, std::nullopt);
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->window, 3);
}

TEST_F(ConfigFiles, ProfileFallsBackToSourceTree)
{
    write_file(root_ / "src/profiles/dev.toml", "[tree]\nfanout = 4\n");
    auto config = load_config(dirs_, std::nullopt, "dev");
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->fanout, 4);
}

TEST_F(ConfigFiles, InstalledProfileWinsOverSourceTree)
{
    write_file(root_ / "etc/profiles/dev.toml", "[tree]\nfanout = 5\n");
    write_file(root_ / "src/profiles/dev.toml", "[tree]\nfanout = 4\n");
    auto config = load_config(dirs_, std::nullopt, "dev");
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->fanout, 5);
}

TEST_F(ConfigFiles, UnknownProfileListsKnownOnes)
{
    write_file(root_ / "etc/profiles/polaris.toml", "");
    write_file(root_ / "src/profiles/aurora.toml", "");
    write_file(root_ / "src/profiles/perlmutter.toml", "");
    write_file(root_ / "src/profiles/polaris.toml", "");
    auto config = load_config(dirs_, std::nullopt, "aurra");
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.error().message, "profile 'aurra' not found; known: aurora, perlmutter, polaris");
}

TEST_F(ConfigFiles, ProfileNameCannotBeAPath)
{
    write_file(root_ / "secret.toml", "");
    auto config = load_config(dirs_, std::nullopt, "../../secret");
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().message.find("may only contain"), std::string::npos) << config.error().message;
}

TEST_F(ConfigFiles, MissingExplicitFileIsAnError)
{
    auto config = load_config(dirs_, (root_ / "nope.toml").string(), std::nullopt);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.error().message, "config file '" + (root_ / "nope.toml").string() + "' (from --config) not found");
}

TEST_F(ConfigFiles, MissingCanopyConfigFileIsAnError)
{
    setenv("CANOPY_CONFIG", (root_ / "gone.toml").c_str(), 1);
    auto config = load_config(dirs_, std::nullopt, std::nullopt);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().message.find("CANOPY_CONFIG"), std::string::npos) << config.error().message;
}

TEST_F(ConfigFiles, ErrorInALayerNamesThatFile)
{
    write_file(root_ / "xdg/canopy/canopy.toml", "[tree]\n\nwindw = 2\n");
    auto config = load_config(dirs_, std::nullopt, std::nullopt);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.error().message, "config " + (root_ / "xdg/canopy/canopy.toml").string() +
                                          ":3:1: unknown key 'windw' in [tree]; did you mean 'window'?");
}

#ifdef CANOPY_SOURCE_CONFIG_DIR
TEST(ShippedConfig, DefaultFileMatchesBuiltInDefaults)
{
    std::ifstream in(fs::path(CANOPY_SOURCE_CONFIG_DIR) / "canopy.toml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(text.empty());
    Config sentinel; // every field different from the defaults, so each must be set by the file
    sentinel.agent = "rsh";
    sentinel.ssh_command = "x";
    sentinel.ssh_args = {};
    sentinel.rsh_command = "x";
    sentinel.fanout = sentinel.window = 99;
    sentinel.connect_timeout = sentinel.kill_grace = sentinel.heartbeat_timeout = 99;
    sentinel.daemon_path = sentinel.bind_address = sentinel.tmpdir = "/x";
    sentinel.rank_store_limit = 1;
    auto applied = apply_config(text, "canopy.toml", sentinel);
    ASSERT_TRUE(applied.ok()) << applied.error().message;
    Config defaults;
    EXPECT_EQ(applied->agent, defaults.agent);
    EXPECT_EQ(applied->ssh_command, defaults.ssh_command);
    EXPECT_EQ(applied->ssh_args, defaults.ssh_args);
    EXPECT_EQ(applied->rsh_command, defaults.rsh_command);
    EXPECT_EQ(applied->fanout, defaults.fanout);
    EXPECT_EQ(applied->window, defaults.window);
    EXPECT_DOUBLE_EQ(applied->connect_timeout, defaults.connect_timeout);
    EXPECT_DOUBLE_EQ(applied->heartbeat_timeout, defaults.heartbeat_timeout);
    EXPECT_EQ(applied->daemon_path, defaults.daemon_path);
    EXPECT_EQ(applied->bind_address, defaults.bind_address);
    EXPECT_DOUBLE_EQ(applied->kill_grace, defaults.kill_grace);
    EXPECT_EQ(applied->tmpdir, defaults.tmpdir);
    EXPECT_EQ(applied->rank_store_limit, defaults.rank_store_limit);
}

TEST_F(ConfigFiles, ShippedProfilesLoad)
{
    ConfigSources dirs{"", CANOPY_SOURCE_CONFIG_DIR};
    for (const char* profile : {"aurora", "polaris", "perlmutter"}) {
        auto config = load_config(dirs, std::nullopt, std::string(profile));
        ASSERT_TRUE(config.ok()) << profile << ": " << config.error().message;
        EXPECT_EQ(config->loaded_from.size(), 1u) << profile;
    }
}
#endif

} // namespace
} // namespace canopy
