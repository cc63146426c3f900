/* MPI test for MPMD jobs (built with Open MPI and with MPICH): each rank reports its MPI_APPNUM, the size of its
 * program's part of the world (a split by app number) and a world-wide sum, which shows that every program's ranks
 * share one MPI_COMM_WORLD.
 * usage: mpi_appnum LABEL [EXPECTED_SIZE] */
#include "mpi_common.h"

int main(int argc, char **argv)
{
    const char *label = argc > 1 ? argv[1] : "-";
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *appnum = NULL, found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &found);
    int mine = found ? *appnum : -1;
    MPI_Comm program;
    int program_size, program_rank;
    MPI_Comm_split(MPI_COMM_WORLD, mine < 0 ? 0 : mine, rank, &program);
    MPI_Comm_size(program, &program_size);
    MPI_Comm_rank(program, &program_rank);
    MPI_Comm_free(&program);
    long sum = 0, one = rank;
    MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("mpi_appnum: rank %d of %d runs %s, appnum %d, %d of %d in its program, rank sum %ld\n", rank, size, label,
           mine, program_rank, program_size, sum);
    fflush(stdout);
    int expected = argc > 2 ? atoi(argv[2]) : size;
    return mpi_test_finish(size == expected && found ? 0 : 1);
}
