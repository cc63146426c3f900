// canopy-guard: outlives canopyd (or the launcher) only to clean up after it; the other end is NodeGuard
// (node_guard.hpp). It reads messages on stdin until the pipe closes, then kills the process groups and removes the
// paths it was told about.
//
// Every node of every job starts one, so on x86_64 and aarch64 it is a freestanding program: no C library, no
// dynamic loader, no CPU feature probing. Starting it costs about a tenth of a glibc program's start.
#include <errno.h>   // the constants only: system calls here return -errno
#include <fcntl.h>
#include <linux/limits.h>   // PIPE_BUF, which a freestanding <limits.h> lacks
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include "proc/guard_protocol.h"
#include "util/raw_syscall.h"
#include "util/remove_tree.h"

#define MAX_PAYLOAD (PIPE_BUF - CANOPY_GUARD_HEADER_SIZE)

#ifdef CANOPY_SYS_WITH_LIBC
#include <string.h>
#else
// What the compiler may call for copies and zeroing, with no C library to provide them (built with
// -fno-tree-loop-distribute-patterns, so these loops are not turned back into calls to themselves).
void* memcpy(void* to, const void* from, size_t size)
{
    unsigned char* d = to;
    const unsigned char* s = from;
    while (size--)
        *d++ = *s++;
    return to;
}

void* memset(void* to, int value, size_t size)
{
    unsigned char* d = to;
    while (size--)
        *d++ = (unsigned char)value;
    return to;
}
#endif

static size_t length(const char* text)
{
    size_t n = 0;
    while (text[n])
        ++n;
    return n;
}

static int read_exactly(char* data, size_t size)
{
    while (size > 0) {
        long got = canopy_sys(SYS_read, 0, (long)data, (long)size, 0);
        if (got == -EINTR)
            continue;
        if (got <= 0)
            return 0;
        data += got;
        size -= (size_t)got;
    }
    return 1;
}

// argv[1]: the name ps shows. NodeGuard starts it with every signal blocked, in its own process group, stdin the
// pipe and stdout and stderr /dev/null, so a teardown's signals and closed terminals do not end it early.
// A cgroup (the ranks' of a node, proc/rank_cgroup.hpp) is emptied by the kernel, not by us: cgroup.kill ends every
// process in it, escaped ones too, and the directory goes once they have exited. Returns 0 if `path` is no cgroup.
static int remove_cgroup(const char* path)
{
    char kill_file[PATH_MAX];
    size_t size = length(path);
    const char suffix[] = "/cgroup.kill";
    if (size + sizeof suffix > sizeof kill_file)
        return 0;
    memcpy(kill_file, path, size);
    memcpy(kill_file + size, suffix, sizeof suffix);
    long fd = canopy_sys(SYS_openat, AT_FDCWD, (long)kill_file, O_WRONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    canopy_sys(SYS_write, fd, (long)"1", 1, 0);
    canopy_sys(SYS_close, fd, 0, 0, 0);
    // The killed processes leave the cgroup as they exit: rmdir says EBUSY until then. At most 2 s.
    struct { long seconds, nanoseconds; } pause = {0, 10 * 1000 * 1000};
    for (int tries = 0; tries < 200; ++tries) {
        if (canopy_sys(SYS_unlinkat, AT_FDCWD, (long)path, AT_REMOVEDIR, 0) != -EBUSY)
            break;
        canopy_sys(SYS_nanosleep, (long)&pause, 0, 0, 0);
    }
    return 1;
}

static int guard(int argc, char** argv)
{
    if (argc > 1)
        canopy_sys(SYS_prctl, PR_SET_NAME, (long)argv[1], 0, 0);

    static pid_t groups[CANOPY_GUARD_MAX_GROUPS];
    static char paths[CANOPY_GUARD_PATH_SPACE];
    size_t group_count = 0;
    size_t path_used = 0;
    char header[CANOPY_GUARD_HEADER_SIZE];
    char payload[MAX_PAYLOAD];
    // Until the daemon is gone: its end of the pipe closes however it ends.
    while (read_exactly(header, sizeof header)) {
        uint32_t size;
        memcpy(&size, header + 1, sizeof size);
        if (size > sizeof payload || !read_exactly(payload, size))
            break;
        if (header[0] == CANOPY_GUARD_KIND_GROUP && size == sizeof(pid_t) && group_count < CANOPY_GUARD_MAX_GROUPS) {
            memcpy(&groups[group_count++], payload, sizeof(pid_t));
        } else if (header[0] == CANOPY_GUARD_KIND_FORGET_GROUP && size == sizeof(pid_t)) {
            // An emptied group's id may come back as another process's group: never signal it.
            pid_t group;
            memcpy(&group, payload, sizeof group);
            for (size_t i = 0; i < group_count; ++i)
                if (groups[i] == group) {
                    groups[i] = groups[--group_count];
                    break;
                }
        } else if (header[0] == CANOPY_GUARD_KIND_PATH && path_used + size + 1 <= sizeof paths) {
            memcpy(paths + path_used, payload, size);
            paths[path_used + size] = '\0';
            path_used += size + 1;
        }
    }
    for (size_t i = 0; i < group_count; ++i)
        canopy_sys(SYS_kill, -groups[i], SIGKILL, 0, 0);
    for (size_t at = 0; at < path_used; at += length(paths + at) + 1)
        if (!remove_cgroup(paths + at))
            canopy_remove_tree(paths + at);
    return 0;
}

#ifdef CANOPY_SYS_WITH_LIBC
int main(int argc, char** argv) { return guard(argc, argv); }
#else
// The kernel starts us with argc at the stack pointer and argv after it.
void guard_start(long* stack)
{
    canopy_sys(SYS_exit_group, guard((int)stack[0], (char**)(stack + 1)), 0, 0, 0);
    for (;;) {
    }
}

#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n xor %rbp, %rbp\n mov %rsp, %rdi\n and $-16, %rsp\n call guard_start\n hlt\n");
#else
__asm__(".globl _start\n_start:\n mov x29, #0\n mov x0, sp\n bl guard_start\n brk #0\n");
#endif
#endif
