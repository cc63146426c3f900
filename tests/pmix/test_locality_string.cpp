// canopy's PMIX_LOCALITY_STRING and PMIX_CPUSET against what PMIx's own server makes of the same CPUs on this
// machine: Open MPI compares these strings between ranks, so they must be PMIx's, character for character.
#include <hwloc.h>
#include <pmix.h>
#include <pmix_server.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "affinity/cpubind.hpp"
#include "affinity/hwloc_loader.hpp"

namespace canopy {
namespace {

class PmixLocality : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        static char tmpdir[] = "/tmp/canopy-locality-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpdir), nullptr);
        pmix_info_t info;
        PMIX_INFO_LOAD(&info, PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
        static pmix_server_module_t module{};
        ASSERT_EQ(PMIx_server_init(&module, &info, 1), PMIX_SUCCESS);
        PMIX_INFO_DESTRUCT(&info);
        directory = tmpdir;
    }
    static void TearDownTestSuite()
    {
        PMIx_server_finalize();
        std::string command = "rm -rf " + directory;
        EXPECT_EQ(std::system(command.c_str()), 0);
    }

    static std::string pmix_says(const CpuList& cpus, bool locality)
    {
        pmix_cpuset_t cpuset;
        PMIX_CPUSET_CONSTRUCT(&cpuset);
        cpuset.source = ::strdup("hwloc");
        cpuset.bitmap = hwloc_bitmap_alloc();
        for (int cpu : cpus)
            hwloc_bitmap_set(static_cast<hwloc_bitmap_t>(cpuset.bitmap), static_cast<unsigned>(cpu));
        char* text = nullptr;
        pmix_status_t rc = locality ? PMIx_server_generate_locality_string(&cpuset, &text)
                                    : PMIx_server_generate_cpuset_string(&cpuset, &text);
        EXPECT_EQ(rc, PMIX_SUCCESS);
        std::string said = text == nullptr ? "" : text;
        std::free(text);
        hwloc_bitmap_free(static_cast<hwloc_bitmap_t>(cpuset.bitmap));
        std::free(cpuset.source);
        return said;
    }

    static std::string directory;
};
std::string PmixLocality::directory;

TEST_F(PmixLocality, EveryCpuAndAllOfThemReadAsPmixReadsThem)
{
    auto topology = load_node_topology("", false);
    ASSERT_TRUE(topology.ok()) << topology.error().message;
    CpuList all = topology->all_cpus();
    ASSERT_FALSE(all.empty());
    for (int cpu : all)
        EXPECT_EQ(locality_string(*topology, {cpu}), pmix_says({cpu}, true)) << "CPU " << cpu;
    EXPECT_EQ(locality_string(*topology, all), pmix_says(all, true));
    EXPECT_EQ("hwloc:" + compress_cpu_list(all), pmix_says(all, false));
}

} // namespace
} // namespace canopy
