/* MPI test (built with Open MPI and with MPICH): a token goes around the ring LAPS times, each rank adding its rank; rank 0 checks the sum.
 * usage: mpi_ring [EXPECTED_SIZE] */
#include "mpi_common.h"

#define LAPS 3

int main(int argc, char **argv)
{
    int rank, size;
    int ok = mpi_test_start(&argc, &argv, "mpi_ring", &rank, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long token = 0;
    for (int lap = 0; lap < LAPS; ++lap) {
        if (rank == 0) {
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        long expected = (long)LAPS * size * (size - 1) / 2;
        if (token != expected) {
            fprintf(stderr, "mpi_ring: token %ld, expected %ld\n", token, expected);
            ok = 0;
        } else {
            printf("mpi_ring: %d ranks, %d laps, token %ld OK\n", size, LAPS, token);
        }
    }
    MPI_Finalize();
    return ok ? 0 : 1;
}
