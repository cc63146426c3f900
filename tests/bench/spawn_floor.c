/* The machine's floor for a launch of N nodes x 1 rank: what starting one daemon and one rank per node costs
 * with nothing else, no tree, no sockets, no PMI.
 * usage: spawn_floor N CANOPYD
 * posix_spawns N copies of `CANOPYD --version` and N of `/bin/true`, all at once, then waits for all 2N; exits 0
 * only if every one exited 0. Output of the children goes to /dev/null. tests/bench/launch_bench.py times it as
 * the "floor" row, in the same rounds as the launchers.
 * Build: cc -O2 -o spawn_floor spawn_floor.c */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static pid_t start(const char *path, char *const argv[], const posix_spawn_file_actions_t *actions)
{
    pid_t pid;
    int error = posix_spawn(&pid, path, actions, NULL, argv, environ);
    if (error != 0) {
        fprintf(stderr, "spawn_floor: cannot start %s: %s\n", path, strerror(error));
        exit(1);
    }
    return pid;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: spawn_floor N CANOPYD\n");
        return 2;
    }
    char *end;
    long n = strtol(argv[1], &end, 10);
    if (*end != '\0' || n < 1) {
        fprintf(stderr, "spawn_floor: N must be a positive count, not '%s'\n", argv[1]);
        return 2;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    char *daemon_argv[] = {argv[2], "--version", NULL};
    char *rank_argv[] = {"/bin/true", NULL};
    for (long i = 0; i < n; ++i) {
        start(argv[2], daemon_argv, &actions);
        start("/bin/true", rank_argv, &actions);
    }
    long failed = 0;
    for (long left = 2 * n; left > 0; --left) {
        int status;
        if (wait(&status) < 0) {
            fprintf(stderr, "spawn_floor: wait: %s\n", strerror(errno));
            return 1;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            ++failed;
    }
    if (failed) {
        fprintf(stderr, "spawn_floor: %ld of %ld children failed\n", failed, 2 * n);
        return 1;
    }
    return 0;
}
