/* The pipe protocol between NodeGuard (node_guard.cpp) and canopy-guard (guard_main.c), and the guard's limits:
 * a kind byte, a 4-byte length, the payload; each message one write of at most PIPE_BUF bytes, so it arrives whole. */
#ifndef CANOPY_PROC_GUARD_PROTOCOL_H
#define CANOPY_PROC_GUARD_PROTOCOL_H

#define CANOPY_GUARD_KIND_GROUP 'g'   /* payload: a pid_t, a rank's process group */
#define CANOPY_GUARD_KIND_PATH 'p'    /* payload: a path to remove, without its NUL */
#define CANOPY_GUARD_KIND_FORGET_GROUP 'f'   /* payload: a pid_t, a group now empty whose id may be reused */
#define CANOPY_GUARD_HEADER_SIZE 5

#define CANOPY_GUARD_MAX_GROUPS 4096          /* rank process groups of one node with processes in them */
#define CANOPY_GUARD_PATH_SPACE (64 * 1024)   /* the paths, NUL-separated */

#endif
