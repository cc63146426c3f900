// Unit tests for reading what an ELF file needs from the loader: this test program's own dynamic section, as the
// loader mapped it, is the expected answer; files that are not ELF or are cut short give none, and never crash.
#include "stage_tree/elf_needs.hpp"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.hpp"

extern ElfW(Dyn) _DYNAMIC[];   // this program's dynamic section, as mapped

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

// The names the loader itself reads for this program: DT_NEEDED and DT_RUNPATH (or DT_RPATH) from memory.
ElfNeeds mapped_needs()
{
    const char* strings = nullptr;
    std::vector<ElfW(Xword)> needed;
    std::optional<ElfW(Xword)> search;
    for (const ElfW(Dyn)* entry = _DYNAMIC; entry->d_tag != DT_NULL; ++entry) {
        if (entry->d_tag == DT_STRTAB)
            strings = reinterpret_cast<const char*>(entry->d_un.d_ptr);   // the loader relocated it
        else if (entry->d_tag == DT_NEEDED)
            needed.push_back(entry->d_un.d_val);
        else if (entry->d_tag == DT_RUNPATH || (entry->d_tag == DT_RPATH && !search))
            search = entry->d_un.d_val;
    }
    ElfNeeds needs;
    for (auto at : needed)
        needs.needed.emplace_back(strings + at);
    if (search) {
        std::string path = strings + *search;
        for (std::size_t start = 0; start <= path.size();) {
            auto colon = std::min(path.find(':', start), path.size());
            if (colon > start)
                needs.search_path.push_back(path.substr(start, colon - start));
            start = colon + 1;
        }
    }
    return needs;
}

void write(const std::string& path, const std::string& bytes)
{
    std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_prefix(const std::string& path, std::size_t size)
{
    std::ifstream in(path, std::ios::binary);
    std::string bytes(size, '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(size));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
    return bytes;
}

TEST(ElfNeeds, ThisProgramNeedsWhatTheLoaderReadForIt)
{
    auto expected = mapped_needs();
    auto needs = read_elf_needs("/proc/self/exe");
    ASSERT_TRUE(needs);
    EXPECT_EQ(needs->needed, expected.needed);
    EXPECT_NE(std::find(needs->needed.begin(), needs->needed.end(), "libc.so.6"), needs->needed.end());
    // tests/meson.build links this test with a RUNPATH of its own.
    EXPECT_EQ(needs->search_path, expected.search_path);
    EXPECT_NE(std::find(needs->search_path.begin(), needs->search_path.end(), "$ORIGIN/../canopy-elf-needs-test"),
              needs->search_path.end());
}

TEST(ElfNeeds, AFileThatIsNotAWholeElfFileOfThisMachineNeedsNothingKnown)
{
    TempDir temp("canopy-test-elf");
    std::string dir = temp.path();
    std::string self = fs::read_symlink("/proc/self/exe").string();
    write(dir + "/empty", "");
    write(dir + "/text", "#!/bin/sh\necho not a library\n");
    write(dir + "/magic-only", "\x7f" "ELF");
    write(dir + "/headers-only", read_prefix(self, sizeof(ElfW(Ehdr))));
    std::string other_class = read_prefix(self, 4096);
    other_class[EI_CLASS] = sizeof(void*) == 8 ? ELFCLASS32 : ELFCLASS64;
    write(dir + "/other-class", other_class);
    for (const char* name : {"empty", "text", "magic-only", "headers-only", "other-class", "missing"})
        EXPECT_FALSE(read_elf_needs(dir + "/" + name)) << name;
    EXPECT_FALSE(read_elf_needs(dir));   // a directory
}

TEST(ElfNeeds, AScriptOrAShortFileIsNoBinaryToMap)
{
    TempDir temp("canopy-test-elf");
    std::string dir = temp.path();
    write(dir + "/script", "#!/bin/sh\necho not mapped\n");
    write(dir + "/short", "\x7f" "EL");
    EXPECT_TRUE(read_elf_needs(fs::read_symlink("/proc/self/exe").string()));
    for (const char* name : {"script", "short", "missing"})
        EXPECT_FALSE(read_elf_needs(dir + "/" + name)) << name;
}

TEST(ElfNeeds, ATruncatedCopyNeverReadsPastItsEnd)
{
    TempDir temp("canopy-test-elf");
    std::string self = fs::read_symlink("/proc/self/exe").string();
    auto whole = read_elf_needs(self);
    ASSERT_TRUE(whole);
    std::size_t size = fs::file_size(self);
    // Every cut either still holds all the names (the same answer) or fails; none crashes or reads garbage.
    for (std::size_t cut = 64; cut < size; cut = cut * 3 / 2) {
        std::string path = temp.path() + "/cut";
        write(path, read_prefix(self, cut));
        auto needs = read_elf_needs(path);
        if (needs) {
            EXPECT_EQ(needs->needed, whole->needed) << "cut at " << cut;
        }
    }
}

} // namespace
} // namespace canopy::stage
