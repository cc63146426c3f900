/* What the interposer uses instead of stdio and malloc: strings, numbers, and files by direct system calls. */
#include "interpose/raw_io.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stage/index_format.h"

size_t copy_str(char* dst, size_t cap, const char* src)
{
    size_t n = strlen(src);
    if (n >= cap)
        return (size_t)-1;
    memcpy(dst, src, n + 1);
    return n;
}

char* put_u(char* p, unsigned long v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

char* put_s(char* p, const char* s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

int raw_open(const char* path, int flags, int mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

void raw_close(int fd)
{
    syscall(SYS_close, fd);
}

void append_to_file(const char* file, const char* buf, size_t n)
{
    int fd = raw_open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    while (n > 0) {
        long w = syscall(SYS_write, fd, buf, n);
        if (w <= 0)
            break;
        buf += w;
        n -= (size_t)w;
    }
    raw_close(fd);
}

const void* map_file_in(const char* dir, size_t dir_len, const char* name, uint64_t* size)
{
    char path[CANOPY_STAGE_PATH_MAX];
    size_t name_size = strlen(name) + 1;
    if (dir_len + name_size > sizeof path)
        return NULL;
    memcpy(path, dir, dir_len);
    memcpy(path + dir_len, name, name_size);
    int fd = raw_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0 || st.st_size <= 0) {
        raw_close(fd);
        return NULL;
    }
    void* base = (void*)syscall(SYS_mmap, NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, (off_t)0);
    raw_close(fd);
    if (base == MAP_FAILED || (uintptr_t)base > (uintptr_t)-4096)
        return NULL;
    *size = (uint64_t)st.st_size;
    return base;
}
