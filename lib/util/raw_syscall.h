/* System calls that return -errno and never touch errno: what canopy-guard (a program with no C library) and
   remove_tree.c use. Other architectures than x86_64 and aarch64 fall back to glibc's syscall(). */
#ifndef CANOPY_RAW_SYSCALL_H
#define CANOPY_RAW_SYSCALL_H

#include <sys/syscall.h>

#if defined(__x86_64__)
static inline long canopy_sys(long number, long a, long b, long c, long d)
{
    long result = number;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "+a"(result) : "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return result;
}
#elif defined(__aarch64__)
static inline long canopy_sys(long number, long a, long b, long c, long d)
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
#define CANOPY_SYS_WITH_LIBC 1
#include <errno.h>
#include <unistd.h>
static inline long canopy_sys(long number, long a, long b, long c, long d)
{
    long result = syscall(number, a, b, c, d);
    return result < 0 ? -errno : result;
}
#endif

#endif
