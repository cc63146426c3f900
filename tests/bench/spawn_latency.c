/* Spawn-latency benchmark program (Open MPI): how long MPI_Comm_spawn of K new ranks takes until they are up.
 * usage: spawn_latency K
 * The parent job (every rank of MPI_COMM_WORLD) meets in MPI_Barrier; rank 0 takes t0; all parents call
 * MPI_Comm_spawn(this program, "child", K, root 0, MPI_COMM_WORLD) and then MPI_Barrier on the
 * intercommunicator, which returns once every child has called it too; rank 0 takes t1 and prints
 *   spawn_latency K=<K> seconds=<t1 - t0> children=<remote size> start=<t0, wall clock>
 * with start the wall clock (seconds since the epoch, CLOCK_REALTIME) at t0, so the benchmark can place the spawn
 * in the launcher's own timeline.
 * Children: MPI_Comm_get_parent, MPI_Barrier on the parent intercommunicator, disconnect, finalize.
 * A parent that gets a wrong number of children says so on stderr and the job exits 1.
 *
 * Simulated hosts share one machine, and Open MPI names its shared-memory segments after the real host name:
 * ranks of two fake hosts would collide. So, unless the launcher already chose (canopy --sim-nodes does),
 * each process puts them in its host's TMPDIR (local_agent.sh gives each fake host its own), before MPI_Init.
 * Doing it here rather than through `sh -c` in the launch command also covers the children, which mpirun's
 * daemons start directly. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *tmpdir = getenv("TMPDIR");
    if (tmpdir && *tmpdir)
        setenv("OMPI_MCA_btl_vader_backing_directory", tmpdir, 0);   /* 0: keep the launcher's choice */
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        MPI_Barrier(parent);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }

    int rank, k = argc > 1 ? atoi(argv[1]) : 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *child_argv[] = {"child", NULL};
    MPI_Comm inter;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), start = wall();
    MPI_Comm_spawn(argv[0], child_argv, k, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    MPI_Barrier(inter);   /* every child is up and connected */
    double t1 = MPI_Wtime();
    int remote = 0;
    MPI_Comm_remote_size(inter, &remote);
    int ok = remote == k;
    if (!ok)
        fprintf(stderr, "spawn_latency: rank %d got %d children, asked for %d\n", rank, remote, k);
    if (rank == 0 && ok)
        printf("spawn_latency K=%d seconds=%.6f children=%d start=%.6f\n", k, t1 - t0, remote, start);
    fflush(stdout);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return ok ? 0 : 1;
}
