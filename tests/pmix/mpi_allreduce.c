/* MPI test (built with Open MPI and with MPICH): allreduce of rank+1 (sum, max) and of a 1000-double vector; every rank checks the result.
 * usage: mpi_allreduce [EXPECTED_SIZE] */
#include "mpi_common.h"

#define LEN 1000

int main(int argc, char **argv)
{
    int rank, size;
    int ok = mpi_test_start(&argc, &argv, "mpi_allreduce", &rank, &size);
    long mine = rank + 1, sum = 0, max = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &max, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (sum != (long)size * (size + 1) / 2 || max != size) {
        fprintf(stderr, "mpi_allreduce: rank %d got sum %ld max %ld, expected %ld and %d\n", rank, sum, max,
                (long)size * (size + 1) / 2, size);
        ok = 0;
    }
    static double in[LEN], out[LEN];
    for (int i = 0; i < LEN; ++i)
        in[i] = rank * 0.5 + i;
    MPI_Allreduce(in, out, LEN, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < LEN; ++i) {
        double expected = 0.5 * size * (size - 1) / 2 + (double)i * size;
        if (out[i] != expected) {
            fprintf(stderr, "mpi_allreduce: rank %d element %d = %f, expected %f\n", rank, i, out[i], expected);
            ok = 0;
            break;
        }
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_allreduce: %d ranks, sum %ld max %ld vector %s\n", size, sum, max, all_ok ? "OK" : "WRONG");
    return mpi_test_finish(ok ? 0 : 1);
}
