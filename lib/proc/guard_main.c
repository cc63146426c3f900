// canopy-guard: outlives canopyd (or the launcher) only to clean up after it; the other end is NodeGuard
// (node_guard.hpp). It reads messages on stdin until the pipe closes, then kills the process groups and removes the
// paths it was told about.
//
// Every node of every job starts one, so on x86_64 and aarch64 it is a freestanding program: no C library, no
// dynamic loader, no CPU feature probing. Starting it costs about a tenth of a glibc program's start.
#include <dirent.h>
#include <errno.h>   // the constants only: system calls here return -errno
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

// The pipe protocol (node_guard.cpp): a kind byte, a 4-byte length, the payload; one write each.
#define KIND_GROUP 'g'
#define KIND_PATH 'p'
#define HEADER_SIZE 5
#define MAX_PAYLOAD (PIPE_BUF - HEADER_SIZE)

#define MAX_GROUPS 4096         // rank process groups of one node
#define PATH_SPACE (64 * 1024)  // the node's temp dirs and sockets, NUL-separated
#define MAX_DEPTH 48            // 4 KiB of stack per level while removing a tree

// System calls that return -errno.
#if defined(__x86_64__)
static long sys(long number, long a, long b, long c, long d)
{
    long result = number;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "+a"(result) : "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return result;
}
#elif defined(__aarch64__)
static long sys(long number, long a, long b, long c, long d)
{
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    return x0;
}
#else
#include <string.h>
#include <unistd.h>
#define GUARD_WITH_LIBC 1
static long sys(long number, long a, long b, long c, long d)
{
    long result = syscall(number, a, b, c, d);
    return result < 0 ? -errno : result;
}
#endif

#ifndef GUARD_WITH_LIBC
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

static long str(const char* text) { return (long)text; }

static size_t length(const char* text)
{
    size_t n = 0;
    while (text[n])
        ++n;
    return n;
}

struct dirent64_record {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

static int read_exactly(char* data, size_t size)
{
    while (size > 0) {
        long got = sys(SYS_read, 0, (long)data, (long)size, 0);
        if (got == -EINTR)
            continue;
        if (got <= 0)
            return 0;
        data += got;
        size -= (size_t)got;
    }
    return 1;
}

// Empties the open directory `dir`, depth first. Entries removed while we read may shift the rest, so it reads
// again until a pass removes nothing. Symlinks are removed, never followed.
static void remove_contents(int dir, int depth)
{
    _Alignas(8) char buffer[4096];
    for (int removed = 1; removed;) {
        removed = 0;
        sys(SYS_lseek, dir, 0, 0 /* SEEK_SET */, 0);
        long got;
        while ((got = sys(SYS_getdents64, dir, (long)buffer, sizeof buffer, 0)) > 0) {
            for (long offset = 0; offset < got;) {
                struct dirent64_record* entry = (struct dirent64_record*)(buffer + offset);
                offset += entry->reclen;
                const char* name = entry->name;
                if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
                    continue;
                int is_dir = entry->type == DT_DIR;
                if (entry->type == DT_UNKNOWN) {
                    struct stat info;
                    is_dir = sys(SYS_newfstatat, dir, str(name), (long)&info, AT_SYMLINK_NOFOLLOW) == 0 &&
                             S_ISDIR(info.st_mode);
                }
                if (is_dir && depth < MAX_DEPTH) {
                    long sub = sys(SYS_openat, dir, str(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
                    if (sub >= 0) {
                        remove_contents((int)sub, depth + 1);
                        sys(SYS_close, sub, 0, 0, 0);
                    }
                }
                if (sys(SYS_unlinkat, dir, str(name), is_dir ? AT_REMOVEDIR : 0, 0) == 0)
                    removed = 1;
            }
        }
    }
}

static void remove_path(const char* path)
{
    long dir = sys(SYS_openat, AT_FDCWD, str(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (dir == -ENOTDIR || dir == -ELOOP) {
        sys(SYS_unlinkat, AT_FDCWD, str(path), 0, 0);   // a socket or a symlink: removed itself
        return;
    }
    if (dir < 0)
        return;
    remove_contents((int)dir, 0);
    sys(SYS_close, dir, 0, 0, 0);
    sys(SYS_unlinkat, AT_FDCWD, str(path), AT_REMOVEDIR, 0);
}

// argv[1]: the name ps shows. NodeGuard starts it with every signal blocked, in its own process group, stdin the
// pipe and stdout and stderr /dev/null, so a teardown's signals and closed terminals do not end it early.
static int guard(int argc, char** argv)
{
    if (argc > 1)
        sys(SYS_prctl, PR_SET_NAME, str(argv[1]), 0, 0);

    static pid_t groups[MAX_GROUPS];
    static char paths[PATH_SPACE];
    size_t group_count = 0;
    size_t path_used = 0;
    char header[HEADER_SIZE];
    char payload[MAX_PAYLOAD];
    // Until the daemon is gone: its end of the pipe closes however it ends.
    while (read_exactly(header, sizeof header)) {
        uint32_t size;
        memcpy(&size, header + 1, sizeof size);
        if (size > sizeof payload || !read_exactly(payload, size))
            break;
        if (header[0] == KIND_GROUP && size == sizeof(pid_t) && group_count < MAX_GROUPS) {
            memcpy(&groups[group_count++], payload, sizeof(pid_t));
        } else if (header[0] == KIND_PATH && path_used + size + 1 <= sizeof paths) {
            memcpy(paths + path_used, payload, size);
            paths[path_used + size] = '\0';
            path_used += size + 1;
        }
    }
    for (size_t i = 0; i < group_count; ++i)
        sys(SYS_kill, -groups[i], SIGKILL, 0, 0);
    for (size_t at = 0; at < path_used; at += length(paths + at) + 1)
        remove_path(paths + at);
    return 0;
}

#ifdef GUARD_WITH_LIBC
int main(int argc, char** argv) { return guard(argc, argv); }
#else
// The kernel starts us with argc at the stack pointer and argv after it.
void guard_start(long* stack)
{
    sys(SYS_exit_group, guard((int)stack[0], (char**)(stack + 1)), 0, 0, 0);
    for (;;) {
    }
}

#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n xor %rbp, %rbp\n mov %rsp, %rdi\n and $-16, %rsp\n call guard_start\n hlt\n");
#else
__asm__(".globl _start\n_start:\n mov x29, #0\n mov x0, sp\n bl guard_start\n brk #0\n");
#endif
#endif
