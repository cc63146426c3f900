/* LD_PRELOAD shim for MPICH ranks: the rank named by CANOPY_TEST_DIE_RANK SIGKILLs itself as it sends its first
 * PMI barrier_in, that is, inside MPI_Init. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ssize_t write(int fd, const void *buffer, size_t count)
{
    static ssize_t (*real_write)(int, const void *, size_t);
    if (!real_write)
        real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    const char *die = getenv("CANOPY_TEST_DIE_RANK");
    const char *rank = getenv("PMI_RANK");
    const char *pmi_fd = getenv("PMI_FD");
    if (die && rank && pmi_fd && strcmp(die, rank) == 0 && fd == atoi(pmi_fd) && count >= 14 &&
        memcmp(buffer, "cmd=barrier_in", 14) == 0)
        raise(SIGKILL);
    return real_write(fd, buffer, count);
}
