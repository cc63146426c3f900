/* MPI_Comm_spawn under canopy. usage: mpi_spawn MODE CHILDREN
 *   world: MPI_COMM_WORLD spawns CHILDREN copies of this program (root 0);
 *   self:  every rank spawns CHILDREN of its own over MPI_COMM_SELF;
 *   one:   rank 0 alone spawns CHILDREN over MPI_COMM_SELF while the other ranks wait;
 *   fail:  like world, but every child exits with code 5 right after MPI_Init;
 *   missing: like world, but the program to spawn does not exist.
 * Parents and children merge the intercommunicator and check an Allreduce over it; the children report their
 * nodes, and the parents' rank 0 prints one line that the test checks. */
#include <string.h>
#include <unistd.h>

#include "mpi_common.h"

static int child(MPI_Comm parent, const char *mode)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (strcmp(mode, "fail") == 0) {
        fprintf(stderr, "mpi_spawn child %d: failing on purpose\n", rank);
        exit(5);
    }
    const char *node = getenv("CANOPY_NODE");
    printf("mpi_spawn child %d of %d on %s\n", rank, size, node ? node : "?");
    fflush(stdout);
    MPI_Comm merged;
    MPI_Intercomm_merge(parent, 1, &merged);
    long mine = 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, merged);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&parent);
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    const char *mode = argc > 1 ? argv[1] : "world";
    if (parent != MPI_COMM_NULL)
        return child(parent, mode);

    int rank, size, children = argc > 2 ? atoi(argv[2]) : 2;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *child_argv[] = {(char *)mode, NULL};
    int alone = strcmp(mode, "one") == 0;
    if (alone && rank != 0) {   /* not a spawner: wait for rank 0's verdict */
        int all_ok = 0;
        MPI_Bcast(&all_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Finalize();
        return all_ok ? 0 : 1;
    }
    MPI_Comm spawner = strcmp(mode, "self") == 0 || alone ? MPI_COMM_SELF : MPI_COMM_WORLD;
    int spawner_size;
    MPI_Comm_size(spawner, &spawner_size);
    MPI_Comm inter;
    const char *program = strcmp(mode, "missing") == 0 ? "/nonexistent/canopy-test-program" : argv[0];
    MPI_Comm_spawn(program, child_argv, children, MPI_INFO_NULL, 0, spawner, &inter, MPI_ERRCODES_IGNORE);
    int remote = 0;
    MPI_Comm_remote_size(inter, &remote);
    MPI_Comm merged;
    MPI_Intercomm_merge(inter, 0, &merged);
    long mine = 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, merged);   /* one per process: parents plus children */
    int ok = remote == children && sum == spawner_size + children;
    if (!ok)
        fprintf(stderr, "mpi_spawn: rank %d: %d children (want %d), merged sum %ld (want %d)\n", rank, remote,
                children, sum, spawner_size + children);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    int all_ok = 0;
    if (alone) {
        all_ok = ok;
        MPI_Bcast(&all_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    } else {
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    }
    if (rank == 0 && all_ok)
        printf("mpi_spawn %s: %d parents, %d children each spawn, merged sums OK\n", mode, alone ? 1 : size,
               children);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
