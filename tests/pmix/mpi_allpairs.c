/* MPI test (built with Open MPI and with MPICH): every pair of ranks exchanges a message both ways (all-pairs connectivity).
 * usage: mpi_allpairs [EXPECTED_SIZE] */
#include "mpi_common.h"

int main(int argc, char **argv)
{
    int rank, size;
    int ok = mpi_test_start(&argc, &argv, "mpi_allpairs", &rank, &size);
    for (int peer = 0; peer < size; ++peer) {
        if (peer == rank)
            continue;
        int out = rank * 10000 + peer, in = -1;
        MPI_Sendrecv(&out, 1, MPI_INT, peer, 7, &in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (in != peer * 10000 + rank) {
            fprintf(stderr, "mpi_allpairs: rank %d got %d from %d\n", rank, in, peer);
            ok = 0;
        }
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_allpairs: %d ranks, %d pairs %s\n", size, size * (size - 1) / 2, all_ok ? "OK" : "FAILED");
    MPI_Finalize();
    return ok ? 0 : 1;
}
