// Unit tests for the node's answer board: what canopyd publishes is what a rank's reader (board_format.h) finds.
#include "stage/answer_board.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "stage/board_format.h"
#include "stage/fetch_protocol.h"
#include "temp_dir.hpp"

namespace canopy::stage {
namespace {

namespace fs = std::filesystem;

// A rank's view: the file mapped read-only, as the interposer maps it.
class Reader {
public:
    explicit Reader(const std::string& path)
    {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        if (fd < 0 || ::fstat(fd, &st) != 0)
            return;
        size_ = static_cast<std::size_t>(st.st_size);
        base_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        if (base_ == MAP_FAILED || canopy_stage_board_open(&view_, base_, size_) != 0)
            view_.base = nullptr;
    }
    ~Reader()
    {
        if (base_ && base_ != MAP_FAILED)
            ::munmap(base_, size_);
    }
    bool open() const { return view_.base != nullptr; }
    const canopy_stage_board_record* find(const std::string& path) const
    {
        return canopy_stage_board_find(&view_, path.data(), path.size());
    }

private:
    void* base_ = nullptr;
    std::size_t size_ = 0;
    canopy_stage_board_view view_{};
};

class Board : public ::testing::Test {
protected:
    void SetUp() override
    {
        dir_ = temp_.path();
        path_ = dir_ + "/" CANOPY_STAGE_BOARD_NAME;
    }

    static FetchAnswer file(std::int64_t size, bool content)
    {
        FetchAnswer a;
        a.facts.lstat.mode = a.facts.stat.mode = S_IFREG | 0644;
        a.facts.lstat.size = a.facts.stat.size = size;
        a.facts.stat.mtime_sec = 1700000000;
        if (content) {
            a.facts.flags |= CANOPY_STAGE_CONTENT;
            a.mirror = "/real/pkg/mod.py";
        }
        return a;
    }

    TempDir temp_{"canopy-test-board"};
    std::string dir_, path_;
};

TEST_F(Board, ARankFindsWhatTheDaemonPublished)
{
    auto board = AnswerBoard::create(path_);
    ASSERT_TRUE(board) << board.error().message;
    Reader reader(path_);
    ASSERT_TRUE(reader.open());
    EXPECT_EQ(reader.find("/soft/pkg/mod.py"), nullptr);

    FetchAnswer link;
    link.facts.lstat.mode = S_IFLNK | 0777;
    link.facts.stat = file(5, false).facts.stat;
    link.link = "mod.py";
    ASSERT_TRUE((*board)->publish("/soft/pkg/alias.py", link));
    FetchAnswer missing;
    missing.facts.lstat_errno = missing.facts.stat_errno = ENOENT;
    ASSERT_TRUE((*board)->publish("/soft/pkg/gone.py", missing));

    // Published after the rank mapped the file: a shared mapping sees it at once.
    const auto* found = reader.find("/soft/pkg/alias.py");
    ASSERT_NE(found, nullptr);
    EXPECT_TRUE(S_ISLNK(found->facts.lstat.mode));
    EXPECT_EQ(found->facts.stat.size, 5);
    EXPECT_EQ(std::string(canopy_stage_board_link(found), found->link_len), "mod.py");
    EXPECT_EQ(found->mirror_len, 0u);
    const auto* gone = reader.find("/soft/pkg/gone.py");
    ASSERT_NE(gone, nullptr);
    EXPECT_EQ(gone->facts.stat_errno, ENOENT);
    EXPECT_EQ(reader.find("/soft/pkg/gone"), nullptr);
}

TEST_F(Board, TheCopyReplacesMetadataButMetadataNeverHidesTheCopy)
{
    auto board = AnswerBoard::create(path_);
    ASSERT_TRUE(board) << board.error().message;
    Reader reader(path_);
    ASSERT_TRUE((*board)->publish("/soft/pkg/mod.py", file(3, false)));
    ASSERT_NE(reader.find("/soft/pkg/mod.py"), nullptr);
    EXPECT_EQ(reader.find("/soft/pkg/mod.py")->facts.flags & CANOPY_STAGE_CONTENT, 0u);

    ASSERT_TRUE((*board)->publish("/soft/pkg/mod.py", file(3, true)));
    const auto* rich = reader.find("/soft/pkg/mod.py");
    ASSERT_NE(rich, nullptr);
    EXPECT_NE(rich->facts.flags & CANOPY_STAGE_CONTENT, 0u);
    EXPECT_EQ(std::string(canopy_stage_board_mirror(rich), rich->mirror_len), "/real/pkg/mod.py");

    EXPECT_TRUE((*board)->publish("/soft/pkg/mod.py", file(3, false)));
    EXPECT_NE(reader.find("/soft/pkg/mod.py")->facts.flags & CANOPY_STAGE_CONTENT, 0u);
    EXPECT_EQ((*board)->published(), 2u);
}

TEST_F(Board, AFullBoardRefusesNewPathsAndKeepsTheOldOnes)
{
    auto board = AnswerBoard::create(path_, 8, 64 << 10);
    ASSERT_TRUE(board) << board.error().message;
    int accepted = 0;
    for (int i = 0; i < 8; ++i)
        accepted += (*board)->publish("/soft/f" + std::to_string(i), file(i, false)) ? 1 : 0;
    EXPECT_EQ(accepted, 3);   // at most half the slots, less one: probe chains stay short, a miss ends
    Reader reader(path_);
    for (int i = 0; i < 8; ++i) {
        const auto* r = reader.find("/soft/f" + std::to_string(i));
        if (i < accepted) {
            ASSERT_NE(r, nullptr) << i;
            EXPECT_EQ(r->facts.stat.size, i);
        } else {
            EXPECT_EQ(r, nullptr) << i;
        }
    }
}

TEST_F(Board, WhenItsFilesystemIsFullTheBoardStopsGrowingInsteadOfFaulting)
{
    // A full /dev/shm, played by a 64 KiB tmpfs in a private mount namespace of a child process: a store into an
    // unreserved page of the mapping would kill it with SIGBUS; the board must refuse the answer instead.
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=64k") != 0)
            ::_exit(77);   // no privilege for a mount namespace here
        auto board = AnswerBoard::create(path_, 256, 1 << 20);
        if (!board)
            ::_exit(2);
        {
            // Leave about two pages free.
            std::ofstream filler(dir_ + "/filler", std::ios::binary);
            filler << std::string(64 * 1024 - 3 * 4096, 'x');
        }
        int accepted = 0;
        for (int i = 0; i < 100; ++i)   // about 30 KiB of records
            accepted += (*board)->publish("/soft/f" + std::to_string(i), file(i, false)) ? 1 : 0;
        Reader reader(path_);
        bool first_found = reader.find("/soft/f0") != nullptr;
        std::fprintf(stderr, "accepted %d of 100, first %s\n", accepted, first_found ? "found" : "missing");
        ::_exit(accepted > 0 && accepted < 100 && first_found ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs root)";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
}

TEST_F(Board, ADamagedBoardIsNotReadPastItsEnd)
{
    auto board = AnswerBoard::create(path_, 16, 64 << 10);
    ASSERT_TRUE(board) << board.error().message;
    ASSERT_TRUE((*board)->publish("/soft/a", file(1, false)));
    Reader before(path_);
    ASSERT_NE(before.find("/soft/a"), nullptr);

    // Point every slot past the end of the file, as a corrupted board might.
    int fd = ::open(path_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    for (std::uint32_t i = 0; i < 16; ++i) {
        std::uint32_t bad = (64u << 10) - 8;
        ASSERT_EQ(::pwrite(fd, &bad, sizeof bad, static_cast<off_t>(sizeof(canopy_stage_board_header) + 4 * i)), 4);
    }
    std::uint32_t wrong_magic = 0;
    Reader damaged(path_);
    EXPECT_EQ(damaged.find("/soft/a"), nullptr);
    ASSERT_EQ(::pwrite(fd, &wrong_magic, sizeof wrong_magic, 0), 4);
    ::close(fd);
    EXPECT_FALSE(Reader(path_).open());
}

} // namespace
} // namespace canopy::stage
