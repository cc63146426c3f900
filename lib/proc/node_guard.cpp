// A helper process that outlives canopyd (or the launcher) only to clean up after it.
//
// It is started with clone(CLONE_VM): it borrows our memory instead of copying it, so starting it copies no page
// tables and costs neither side copy-on-write faults (forking the daemon for it was a sixth of a 256-node launch's
// CPU). Borrowed memory sets the rules for the guard's code: it runs on a stack of its own, keeps every signal
// blocked (one of our handlers must never run in it), makes its system calls directly (glibc's wrappers write
// errno, which lives in our thread's storage), and keeps what it is told in buffers on that stack.
#include "proc/node_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace canopy {
namespace {

// A message on the guard's pipe: a kind byte, a 4-byte length, the payload. Each is one write of at most
// PIPE_BUF bytes, so it arrives whole.
constexpr char kind_group = 'g';
constexpr char kind_path = 'p';
constexpr std::size_t header_size = 1 + sizeof(std::uint32_t);
constexpr std::size_t max_payload = PIPE_BUF - header_size;

constexpr std::size_t guard_stack_size = 512 * 1024;
constexpr std::size_t max_groups = 4096;       // rank process groups of one node
constexpr std::size_t path_space = 64 * 1024;  // the node's temp dirs and sockets, NUL-separated
constexpr int max_depth = 48;                   // 4 KiB of stack per level while removing a tree

// System calls that return -errno instead of touching errno.
#if defined(__x86_64__)
constexpr bool borrows_memory = true;
long sys(long number, long a = 0, long b = 0, long c = 0, long d = 0)
{
    long result = number;
    register long r10 asm("r10") = d;
    asm volatile("syscall" : "+a"(result) : "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return result;
}
#elif defined(__aarch64__)
constexpr bool borrows_memory = true;
long sys(long number, long a = 0, long b = 0, long c = 0, long d = 0)
{
    register long x8 asm("x8") = number;
    register long x0 asm("x0") = a;
    register long x1 asm("x1") = b;
    register long x2 asm("x2") = c;
    register long x3 asm("x3") = d;
    asm volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    return x0;
}
#else
constexpr bool borrows_memory = false;   // no direct system calls here: the guard is a plain fork
long sys(long number, long a = 0, long b = 0, long c = 0, long d = 0)
{
    long result = ::syscall(number, a, b, c, d);
    return result < 0 ? -errno : result;
}
#endif

long str(const char* text) { return reinterpret_cast<long>(text); }

// What the parent hands the guard, placed on the guard's own stack so it outlives NodeGuard::start's frame.
struct GuardStart {
    int pipe_fd;
    const char* name;   // a string literal
};

struct Dirent64 {
    std::uint64_t ino;
    std::int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
};

bool read_exactly(int fd, char* data, std::size_t size)
{
    while (size > 0) {
        long got = sys(SYS_read, fd, reinterpret_cast<long>(data), static_cast<long>(size));
        if (got == -EINTR)
            continue;
        if (got <= 0)
            return false;
        data += got;
        size -= static_cast<std::size_t>(got);
    }
    return true;
}

// Empties the open directory `dir`, depth first. Entries removed while we read may shift the rest, so it reads
// again until a pass removes nothing.
void remove_contents(int dir, int depth)
{
    alignas(8) char buffer[4096];
    for (bool removed = true; removed;) {
        removed = false;
        sys(SYS_lseek, dir, 0, SEEK_SET);
        for (long got; (got = sys(SYS_getdents64, dir, reinterpret_cast<long>(buffer), sizeof buffer)) > 0;) {
            for (long offset = 0; offset < got;) {
                auto* entry = reinterpret_cast<Dirent64*>(buffer + offset);
                offset += entry->reclen;
                const char* name = entry->name;
                if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
                    continue;
                bool is_dir = entry->type == DT_DIR;
                if (entry->type == DT_UNKNOWN) {
                    struct stat info;
                    is_dir = sys(SYS_newfstatat, dir, str(name), reinterpret_cast<long>(&info), AT_SYMLINK_NOFOLLOW) ==
                                 0 &&
                             S_ISDIR(info.st_mode);
                }
                if (is_dir && depth < max_depth) {
                    long sub = sys(SYS_openat, dir, str(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                    if (sub >= 0) {
                        remove_contents(static_cast<int>(sub), depth + 1);
                        sys(SYS_close, sub);
                    }
                }
                if (sys(SYS_unlinkat, dir, str(name), is_dir ? AT_REMOVEDIR : 0) == 0)
                    removed = true;
            }
        }
    }
}

void remove_path(const char* path)
{
    long dir = sys(SYS_openat, AT_FDCWD, str(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir == -ENOTDIR || dir == -ELOOP) {
        sys(SYS_unlinkat, AT_FDCWD, str(path), 0);   // a socket or a symlink: removed itself
        return;
    }
    if (dir < 0)
        return;
    remove_contents(static_cast<int>(dir), 0);
    sys(SYS_close, dir);
    sys(SYS_unlinkat, AT_FDCWD, str(path), AT_REMOVEDIR);
}

int guard_main(void* argument)
{
    GuardStart start = *static_cast<GuardStart*>(argument);
    // Its own process group and (with every signal blocked since before it started) deaf to a teardown's signals,
    // so it is still there to clean up.
    sys(SYS_setpgid, 0, 0);
    sys(SYS_prctl, PR_SET_NAME, str(start.name));
    long null_fd = sys(SYS_openat, AT_FDCWD, str("/dev/null"), O_RDWR);
    for (int fd = 0; fd < 3 && null_fd >= 0; ++fd)
        if (fd != null_fd)
            sys(SYS_dup3, null_fd, fd, 0);
    // Hold nothing of the daemon's but the pipe: not its sockets, not its parent's stderr pipe.
    if (start.pipe_fd > 3)
        sys(SYS_close_range, 3, start.pipe_fd - 1, 0);
    sys(SYS_close_range, start.pipe_fd + 1, ~0U, 0);

    pid_t groups[max_groups];
    std::size_t group_count = 0;
    char paths[path_space];
    std::size_t path_used = 0;
    char header[header_size];
    char payload[max_payload];
    // Until the daemon is gone: its end of the pipe closes however it ends.
    while (read_exactly(start.pipe_fd, header, sizeof header)) {
        std::uint32_t size;
        std::memcpy(&size, header + 1, sizeof size);
        if (size > sizeof payload || !read_exactly(start.pipe_fd, payload, size))
            break;
        if (header[0] == kind_group && size == sizeof(pid_t) && group_count < max_groups) {
            std::memcpy(&groups[group_count++], payload, sizeof(pid_t));
        } else if (header[0] == kind_path && path_used + size + 1 <= sizeof paths) {
            std::memcpy(paths + path_used, payload, size);
            paths[path_used + size] = '\0';
            path_used += size + 1;
        }
    }
    for (std::size_t i = 0; i < group_count; ++i)
        sys(SYS_kill, -groups[i], SIGKILL);
    for (std::size_t at = 0; at < path_used; at += std::strlen(paths + at) + 1)
        remove_path(paths + at);
    return 0;
}

} // namespace

Result<NodeGuard> NodeGuard::start(const char* name)
{
    int fds[2];
    if (::pipe(fds) != 0)
        return make_error("cannot create the node guard's pipe: {}", std::strerror(errno));
    void* stack = ::mmap(nullptr, guard_stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                         -1, 0);
    if (stack == MAP_FAILED) {
        ::close(fds[0]);
        ::close(fds[1]);
        return make_error("cannot map the node guard's stack: {}", std::strerror(errno));
    }
    auto* start = new (stack) GuardStart{fds[0], name};
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid;
    if constexpr (borrows_memory) {
        // The stack grows down from the top of the mapping; GuardStart sits at its bottom.
        pid = ::clone(guard_main, static_cast<char*>(stack) + guard_stack_size, CLONE_VM | SIGCHLD, start);
    } else {
        pid = ::fork();
        if (pid == 0)
            ::_exit(guard_main(start));
    }
    int error = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::close(fds[0]);
    if (pid < 0) {
        ::close(fds[1]);
        ::munmap(stack, guard_stack_size);
        return make_error("cannot start the node guard: {}", std::strerror(error));
    }
    ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    return NodeGuard(UniqueFd(fds[1]), pid, stack);
}

NodeGuard::NodeGuard(NodeGuard&& other) noexcept
    : pipe_(std::move(other.pipe_)), pid_(std::exchange(other.pid_, -1)), stack_(std::exchange(other.stack_, nullptr))
{
}

NodeGuard& NodeGuard::operator=(NodeGuard&& other) noexcept
{
    if (this != &other) {
        finish();
        pipe_ = std::move(other.pipe_);
        pid_ = std::exchange(other.pid_, -1);
        stack_ = std::exchange(other.stack_, nullptr);
    }
    return *this;
}

void NodeGuard::finish()
{
    pipe_.reset();
    if (pid_ > 0) {
        int status;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
    }
    if (stack_) {   // the guard has exited: nothing runs on its stack any more
        ::munmap(stack_, guard_stack_size);
        stack_ = nullptr;
    }
}

void NodeGuard::send(char kind, std::string_view payload)
{
    if (!pipe_ || payload.size() > max_payload)
        return;
    char message[PIPE_BUF];
    auto size = static_cast<std::uint32_t>(payload.size());
    message[0] = kind;
    std::memcpy(message + 1, &size, sizeof size);
    std::memcpy(message + header_size, payload.data(), payload.size());
    // One write of at most PIPE_BUF bytes is atomic, and never blocks for long while the guard keeps reading.
    [[maybe_unused]] auto written = ::write(pipe_.get(), message, header_size + payload.size());
}

void NodeGuard::watch_path(std::string_view path)
{
    if (!path.empty())
        send(kind_path, path);
}

void NodeGuard::watch_process_group(pid_t group)
{
    send(kind_group, std::string_view(reinterpret_cast<const char*>(&group), sizeof group));
}

} // namespace canopy
