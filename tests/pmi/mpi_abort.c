/* MPI test: rank RANK calls MPI_Abort(MPI_COMM_WORLD, CODE) after MPI_Init; the others wait in a barrier.
 * usage: mpi_abort RANK CODE */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 2 && rank == atoi(argv[1])) {
        fprintf(stderr, "mpi_abort: rank %d aborts with %s\n", rank, argv[2]);
        MPI_Abort(MPI_COMM_WORLD, atoi(argv[2]));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
