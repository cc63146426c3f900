/* A C program using libcanopy: where am I, a phase mark, an allgather and the job store.
 * Build: cc hello.c $(pkg-config --cflags --libs canopy) -o hello
 * Run:   canopy --sim-nodes 4 --ppn 2 -l ./hello      (or ./hello alone, as a singleton) */
#include <canopy/canopy.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(int status, const char* what)
{
    if (status != CANOPY_OK) {
        fprintf(stderr, "hello: %s: %s (%s)\n", what, canopy_last_error(), canopy_status_string(status));
        exit(1);
    }
    return status;
}

int main(void)
{
    check(canopy_init(), "canopy_init");
    int rank = canopy_rank(), size = canopy_size();
    printf("hello from rank %d of %d (local %d of %d) on node %d of %d, %s\n", rank, size, canopy_local_rank(),
           canopy_local_size(), canopy_node_rank(), canopy_num_nodes(), canopy_node_name());
    check(canopy_mark("hello_started"), "canopy_mark");

    /* Every rank's name, in rank order: one put, one fence, a get per rank. */
    char mine[64];
    snprintf(mine, sizeof(mine), "rank%d@%s", rank, canopy_node_name());
    void* all = NULL;
    size_t* lens = calloc((size_t)size, sizeof(size_t));
    check(canopy_allgather(mine, strlen(mine), &all, lens), "canopy_allgather");
    if (rank == 0) {
        const char* p = all;
        for (int r = 0; r < size; ++r) {
            printf("  rank %d says %.*s\n", r, (int)lens[r], p);
            p += lens[r];
        }
    }
    canopy_free(all);
    free(lens);

    /* The job store counts the ranks (under canopy, or alone; not under another launcher). */
    int64_t count = 0;
    int status = canopy_store_add("hello.ranks", 1, &count);
    if (status == CANOPY_OK) {
        const char* key = "hello.ranks";
        check(canopy_barrier(), "canopy_barrier");
        void* value = NULL;
        size_t len = 0;
        check(canopy_store_get(key, 10000, &value, &len), "canopy_store_get");
        if (rank == 0)
            printf("  the store counted %.*s ranks\n", (int)len, (const char*)value);
        canopy_free(value);
    } else if (status != CANOPY_ERR_NOT_AVAILABLE) {
        check(status, "canopy_store_add");
    }

    check(canopy_mark("hello_done"), "canopy_mark");
    check(canopy_finalize(), "canopy_finalize");
    return 0;
}
