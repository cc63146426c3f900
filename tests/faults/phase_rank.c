/* An MPI rank of the fault campaign (built for Open MPI and for MPICH): it marks each phase it reaches, so a
 * fault can be aimed at MPI_Init, the steady run or the teardown.
 * usage: phase_rank DIR SECONDS   (SECONDS: how long the steady run lasts, between two barriers) */
#include <mpi.h>

#include "phase_marks.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: phase_rank DIR SECONDS\n");
        return 2;
    }
    const char *dir = argv[1];
    mark_phase(dir, "init");
    MPI_Init(&argc, &argv);
    mark_phase(dir, "run");
    MPI_Barrier(MPI_COMM_WORLD);
    usleep((useconds_t)(atof(argv[2]) * 1e6));
    MPI_Barrier(MPI_COMM_WORLD);
    mark_phase(dir, "done");
    MPI_Finalize();
    return 0;
}
