/* Open MPI test program for cleanup after a killed job: every rank initialises MPI (so shared-memory segments
 * exist), says it is ready, and then rank VICTIM SIGKILLs itself while the others sleep until they are killed.
 * VICTIM -1 kills no rank: the test kills something else. usage: mpi_linger VICTIM */
#include <signal.h>
#include <unistd.h>

#include "mpi_common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int victim = argc > 1 ? atoi(argv[1]) : -1;
    int one = 1, ready = 0;
    MPI_Allreduce(&one, &ready, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("mpi_linger: rank %d of %d ready\n", rank, ready);
    fflush(stdout);
    if (rank == victim) {
        usleep(200 * 1000);
        raise(SIGKILL);
    }
    sleep(120);
    MPI_Finalize();
    return 0;
}
