/* Shared start of the MPI test programs (Open MPI and MPICH builds): MPI_Init, rank and size, and the optional EXPECTED_SIZE check. */
#ifndef CANOPY_TESTS_MPI_COMMON_H
#define CANOPY_TESTS_MPI_COMMON_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Returns 1 when the world size is as expected (or nothing was expected), 0 after saying why not. */
static inline int mpi_test_start(int *argc, char ***argv, const char *name, int *rank, int *size)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    if (*argc > 1 && *size != atoi((*argv)[1])) {
        fprintf(stderr, "%s: rank %d sees world size %d, expected %s\n", name, *rank, *size, (*argv)[1]);
        return 0;
    }
    return 1;
}

/* MPI_Finalize, then `code` for main to return. With MPI_TEST_SKIP_FINALIZE set, a barrier and _exit instead: MPICH
 * 4.0.2 over UCX's TCP transport can hang in MPI_Finalize across hosts (pmodels/mpich#6596; docs/cluster.md). */
static inline int mpi_test_finish(int code)
{
    if (getenv("MPI_TEST_SKIP_FINALIZE")) {
        MPI_Barrier(MPI_COMM_WORLD);
        fflush(stdout);
        _exit(code);
    }
    MPI_Finalize();
    return code;
}

#endif
