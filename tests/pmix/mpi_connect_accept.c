/* Two halves of one job meet through MPI_Open_port / MPI_Comm_accept / MPI_Comm_connect, merge the intercommunicator
 * and check an Allreduce over it. Usage: mpi_connect_accept [EXPECTED_SIZE]. */
#include "mpi_common.h"

int main(int argc, char **argv)
{
    int rank, size;
    if (!mpi_test_start(&argc, &argv, "mpi_connect_accept", &rank, &size))
        return 1;
    if (size < 2) {
        fprintf(stderr, "mpi_connect_accept: needs at least 2 ranks, has %d\n", size);
        return 1;
    }
    int upper = rank >= size / 2;
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, upper, rank, &half);

    char port[MPI_MAX_PORT_NAME] = "";
    if (rank == 0)
        MPI_Open_port(MPI_INFO_NULL, port);
    MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);

    MPI_Comm inter;
    if (upper)
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, half, &inter);
    else
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, half, &inter);
    int remote = 0;
    MPI_Comm_remote_size(inter, &remote);

    MPI_Comm merged;
    MPI_Intercomm_merge(inter, upper, &merged);
    int merged_size = 0;
    MPI_Comm_size(merged, &merged_size);
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, merged);
    long expected = (long)size * (size + 1) / 2;
    int expected_remote = upper ? size / 2 : size - size / 2;
    if (remote != expected_remote || merged_size != size || sum != expected) {
        fprintf(stderr, "mpi_connect_accept: rank %d: remote %d (want %d), merged %d (want %d), sum %ld (want %ld)\n",
                rank, remote, expected_remote, merged_size, size, sum, expected);
        return 1;
    }
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    if (rank == 0) {
        MPI_Close_port(port);
        printf("mpi_connect_accept: %d ranks, two halves of %d and %d, merged sum %ld OK\n", size, size / 2,
               size - size / 2, sum);
    }
    MPI_Comm_free(&half);
    MPI_Finalize();
    return 0;
}
