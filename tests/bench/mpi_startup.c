/* Start-up benchmark program: MPI_Init, one checked MPI_Allreduce, MPI_Finalize (built for Open MPI and MPICH).
 * usage: mpi_startup [EXPECTED_SIZE]
 * Rank 0 prints "mpi_startup: N ranks, sum S OK" when its sum (and the world size) is right; any rank whose
 * sum or world size is wrong says so on stderr and exits 1. After MPI_Finalize every rank prints
 *   mpi_startup_times rank R main T0 init T1 allreduce T2 finalize T3 cpu C
 * with T* the wall clock (seconds since the epoch, CLOCK_REALTIME) on entering main and after each call, and C
 * the rank's own user+system CPU seconds, so the benchmark can tell MPI's own start-up from the launcher's. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double t_main = wall();
    MPI_Init(&argc, &argv);
    double t_init = wall();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ok = 1;
    if (argc > 1 && size != atoi(argv[1])) {
        fprintf(stderr, "mpi_startup: rank %d sees world size %d, expected %s\n", rank, size, argv[1]);
        ok = 0;
    }
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    double t_allreduce = wall();
    /* Every rank checks the sum itself: a wrong sum anywhere makes that rank, and so the job, exit non-zero. */
    long expected = (long)size * (size + 1) / 2;
    if (sum != expected) {
        fprintf(stderr, "mpi_startup: rank %d got sum %ld, expected %ld\n", rank, sum, expected);
        ok = 0;
    }
    if (rank == 0 && ok)
        printf("mpi_startup: %d ranks, sum %ld OK\n", size, sum);
    fflush(stdout);
    MPI_Finalize();
    double t_finalize = wall();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    printf("mpi_startup_times rank %d main %.6f init %.6f allreduce %.6f finalize %.6f cpu %.6f\n", rank, t_main,
           t_init, t_allreduce, t_finalize, cpu);
    return ok ? 0 : 1;
}
