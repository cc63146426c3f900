/* MPI test (built with Open MPI and with MPICH): each rank reports its rank, the world size, its host and how many
 * ranks share its node (MPI_COMM_TYPE_SHARED, what shared memory needs); exits 1 if the size is not EXPECTED.
 * usage: mpi_hello [EXPECTED_SIZE] */
#include "mpi_common.h"

int main(int argc, char **argv)
{
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    MPI_Comm node;
    int node_size;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    printf("mpi_hello: rank %d of %d on %s, %d on this node\n", rank, size, host, node_size);
    fflush(stdout);
    int expected = argc > 1 ? atoi(argv[1]) : size;
    int ok = size == expected;
    if (!ok)
        fprintf(stderr, "mpi_hello: rank %d sees world size %d, expected %d\n", rank, size, expected);
    return mpi_test_finish(ok ? 0 : 1);
}
