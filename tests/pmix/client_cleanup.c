/* PMIx client test: each rank creates DIR/file.RANK and DIR/dir.RANK/inner, registers them for cleanup
 * (PMIX_REGISTER_CLEANUP, PMIX_REGISTER_CLEANUP_DIR with PMIX_CLEANUP_RECURSIVE), then ends as MODE says:
 * "finalize" (PMIx_Finalize, exit 0), "exit" (exit 3 without PMIx_Finalize), "kill" (SIGKILL itself) or "wait"
 * (sleep until killed), once every rank has registered.
 * usage: client_cleanup DIR MODE */
#include "client_common.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static int make_file(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fputs("left behind?\n", f);
    return fclose(f) == 0;
}

static void register_cleanup(const char *key, const char *path, int recursive)
{
    pmix_info_t info[2];
    size_t ninfo = 0;
    PMIX_INFO_LOAD(&info[ninfo], key, path, PMIX_STRING);
    ++ninfo;
    if (recursive) {
        PMIX_INFO_LOAD(&info[ninfo], PMIX_CLEANUP_RECURSIVE, NULL, PMIX_BOOL);
        ++ninfo;
    }
    pmix_status_t rc = PMIx_Job_control(NULL, 0, info, ninfo, NULL, NULL);
    /* PMIx's server takes cleanup requests itself: "operation succeeded" means done, nothing more to come. */
    CHECK(rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED, "PMIx_Job_control(%s %s): %s", key, path,
          PMIx_Error_string(rc));
    for (size_t i = 0; i < ninfo; ++i)
        PMIX_INFO_DESTRUCT(&info[i]);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: client_cleanup DIR finalize|exit|kill|wait\n");
        return 2;
    }
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client_cleanup: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    char file[4096], dir[4096], inner[4200];
    snprintf(file, sizeof file, "%s/file.%u", argv[1], me.rank);
    snprintf(dir, sizeof dir, "%s/dir.%u", argv[1], me.rank);
    snprintf(inner, sizeof inner, "%s/inner", dir);
    CHECK(make_file(file), "cannot create %s", file);
    CHECK(mkdir(dir, 0700) == 0 && make_file(inner), "cannot create %s", inner);
    register_cleanup(PMIX_REGISTER_CLEANUP, file, 0);
    register_cleanup(PMIX_REGISTER_CLEANUP_DIR, dir, 1);
    printf("client_cleanup rank %u: registered %s and %s, %d checks, %d failed\n", me.rank, file, dir, checks,
           failures);
    fflush(stdout);
    fence_all(0);   /* every rank has registered before any of them ends */
    if (strcmp(argv[2], "kill") == 0)
        raise(SIGKILL);
    if (strcmp(argv[2], "exit") == 0)
        _exit(3);
    if (strcmp(argv[2], "wait") == 0)
        sleep(120);
    PMIx_Finalize(NULL, 0);
    return failures ? 1 : 0;
}
