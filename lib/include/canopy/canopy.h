/* libcanopy: rank information, phase marks, PMIx key-value exchange and the job-wide store for applications. */
#ifndef CANOPY_CANOPY_H
#define CANOPY_CANOPY_H

/*
 * One library state per process, like PMIx and MPI: no handle to pass around.
 * Every function returns a status (CANOPY_OK or a CANOPY_ERR_* code); after a failure,
 * canopy_last_error() gives a one-line message for the calling thread that names the key, rank or node
 * involved and says what to do. No call aborts the process or prints anything.
 *
 * The same binary runs under any of these launchers (canopy_mode()):
 *   CANOPY_MODE_CANOPY     started by canopy: rank information comes from the environment, PMIx is
 *                          connected on the first call that needs it, marks and the store go to the node's
 *                          canopyd over a unix socket. canopy's variables win over every other launcher's;
 *   CANOPY_MODE_TORCHRUN, CANOPY_MODE_OPEN_MPI, CANOPY_MODE_HYDRA, CANOPY_MODE_SLURM, CANOPY_MODE_PALS
 *                          started by torchrun, Open MPI's mpirun, MPICH's mpiexec.hydra, Slurm's srun or
 *                          PALS: rank information comes from that launcher's variables (node_rank and
 *                          num_nodes are -1 where it gives none, e.g. Hydra across several nodes). Exchange
 *                          goes over the launcher's PMIx server where it has one (mpirun, srun --mpi=pmix),
 *                          else it is CANOPY_ERR_NOT_AVAILABLE in a job of more than one rank. Marks are
 *                          accepted and dropped; the store is CANOPY_ERR_NOT_AVAILABLE;
 *   CANOPY_MODE_PMIX       started by another PMIx launcher (prterun): everything over PMIx; marks are
 *                          accepted and dropped, the store is CANOPY_ERR_NOT_AVAILABLE;
 *   CANOPY_MODE_SINGLETON  started alone: rank 0 of 1; fences are immediate, the store lives in this process.
 * A launcher's variables that contradict each other (a rank not below the size), or a world size with no
 * launcher libcanopy knows, make canopy_init fail: libcanopy never calls a rank of a larger job a singleton.
 * A job of one rank under any launcher works as a singleton does (local exchange and store).
 *
 * Every call initialises the library on demand; call canopy_init() first to see its status.
 * Functions are thread-safe. Buffers the library returns are freed with canopy_free().
 */

#include <stddef.h>
#include <stdint.h>

#include <canopy/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CANOPY_API __attribute__((visibility("default")))
#else
#define CANOPY_API
#endif

/* Status codes. */
#define CANOPY_OK 0
#define CANOPY_ERR_NOT_FOUND 1       /* the key does not exist (a get that does not wait) */
#define CANOPY_ERR_TIMEOUT 2         /* the wait ended before the key(s) appeared, or the daemon did not answer */
#define CANOPY_ERR_NOT_AVAILABLE 3   /* a canopy-only feature (the store) outside canopy */
#define CANOPY_ERR_INVALID 4         /* a bad argument: NULL, a malformed name, a rank out of range */
#define CANOPY_ERR_NOT_INITIALIZED 5 /* called after canopy_finalize() */
#define CANOPY_ERR_PMIX 6            /* a PMIx call failed */
#define CANOPY_ERR_DAEMON 7          /* the connection to canopyd failed, or canopyd reported an error */
#define CANOPY_ERR_NO_MEMORY 8

/* What started this process (canopy_mode()). */
#define CANOPY_MODE_NONE 0 /* not initialised, or initialisation failed */
#define CANOPY_MODE_CANOPY 1
#define CANOPY_MODE_PMIX 2
#define CANOPY_MODE_SINGLETON 3
#define CANOPY_MODE_TORCHRUN 4
#define CANOPY_MODE_OPEN_MPI 5
#define CANOPY_MODE_HYDRA 6
#define CANOPY_MODE_SLURM 7
#define CANOPY_MODE_PALS 8

/* A timeout that never ends, for canopy_store_get and canopy_store_wait. */
#define CANOPY_WAIT_FOREVER (-1)

/* The longest mark name, in bytes; names use only [A-Za-z0-9_.:-]. */
#define CANOPY_MARK_NAME_MAX 64

/* --- Life cycle ------------------------------------------------------------------------------------- */

/* Reads the rank information (from canopy's environment, else another launcher's, else from PMIx, else
 * singleton). Cheap under canopy: no PMIx connection until a call needs it. Calling it again returns the
 * first call's status. */
CANOPY_API int canopy_init(void);
/* Disconnects from PMIx (a rank that used PMIx must finalize, or canopy reports it as lost) and from the
 * daemon. Also run at exit if the program forgets. Later calls fail with CANOPY_ERR_NOT_INITIALIZED. */
CANOPY_API int canopy_finalize(void);
/* The message of the last failing call on this thread; "" if none. Valid until the thread's next call. */
CANOPY_API const char* canopy_last_error(void);
/* A short name for a status code: "ok", "not found", "timeout", ... */
CANOPY_API const char* canopy_status_string(int status);
/* The macro's name of a status code ("CANOPY_ERR_TIMEOUT"); NULL past the last. The codes run from 0 without
 * gaps, so bindings (the Python package) read them from here instead of copying the numbers. */
CANOPY_API const char* canopy_status_name(int status);
/* CANOPY_MODE_*; CANOPY_MODE_NONE until initialised. */
CANOPY_API int canopy_mode(void);
/* A mode's name: "none", "canopy", "pmix", "singleton", "torchrun", "open-mpi", "hydra", "slurm", "pals";
 * NULL past the last (they too run from 0). */
CANOPY_API const char* canopy_mode_name(int mode);

/* --- Where this rank is (fixed at init; -1 or NULL if initialisation failed) ------------------------ */

CANOPY_API int canopy_rank(void);
CANOPY_API int canopy_size(void);
CANOPY_API int canopy_local_rank(void);  /* index among this node's ranks */
CANOPY_API int canopy_local_size(void);  /* ranks on this node */
CANOPY_API int canopy_node_rank(void);   /* index of this node in the job, 0 .. num_nodes-1 */
CANOPY_API int canopy_num_nodes(void);
CANOPY_API const char* canopy_node_name(void);

/* --- Phase marks: stamp "this rank reached NAME now" into the job's timing report --------------------- */

/* One message on an open socket (a few microseconds). Shown in canopy's report as phase "app.NAME".
 * Outside canopy a valid mark is accepted and dropped (CANOPY_OK) without any I/O. */
CANOPY_API int canopy_mark(const char* name);
/* The same, for a phase that ended now after duration_ns nanoseconds; the report also shows
 * "app.NAME.duration". */
CANOPY_API int canopy_mark_duration(const char* name, int64_t duration_ns);

/* --- PMIx key-value exchange and collectives (every rank of the job) ------------------------------- */

/* Keys: 1..500 bytes, not starting with "pmix." or "canopy." (reserved). Values: any bytes. */
CANOPY_API int canopy_put(const char* key, const void* value, size_t len);
CANOPY_API int canopy_commit(void);
/* Collective over all ranks; afterwards every value committed before it can be read with canopy_get
 * without further messages. */
CANOPY_API int canopy_fence(void);
/* The value `rank` put under `key` before the last fence, in a new buffer (free with canopy_free);
 * answered by this node's PMIx server without waiting: CANOPY_ERR_NOT_FOUND if no fence brought it. */
CANOPY_API int canopy_get(int rank, const char* key, void** value, size_t* len);
/* Collective over all ranks, without data. */
CANOPY_API int canopy_barrier(void);
/* Collective: every rank contributes `len` bytes (lengths may differ). `*out` receives one new buffer
 * (free with canopy_free) holding the contributions in rank order; `lens` (canopy_size() entries, the
 * caller's) receives each one's length. Built from put, commit, fence and a get per rank: fine for the
 * kilobytes a start-up exchanges, not a data-path collective. */
CANOPY_API int canopy_allgather(const void* data, size_t len, void** out, size_t* lens);

/* --- The job-wide store (canopy only: held at the root daemon, reached through this node's daemon) -- */
/* Semantics follow torch.distributed's HashStore; values are bytes, keys are C strings. In a singleton (or
 * a job of one rank) the store lives in this process. Under another launcher: CANOPY_ERR_NOT_AVAILABLE. */

CANOPY_API int canopy_store_set(const char* key, const void* value, size_t len);
/* timeout_ms: 0 = answer at once (CANOPY_ERR_NOT_FOUND if missing), > 0 = wait up to that long for the
 * key (CANOPY_ERR_TIMEOUT), CANOPY_WAIT_FOREVER = wait. The value is a new buffer (canopy_free). */
CANOPY_API int canopy_store_get(const char* key, int timeout_ms, void** value, size_t* len);
/* Adds delta to the decimal integer stored at key (a missing key counts as 0); *value = the new value. */
CANOPY_API int canopy_store_add(const char* key, int64_t delta, int64_t* value);
/* Sets key to desired if its value equals expected (a missing key matches an empty expected); *value =
 * the value after the call (for a missing key and a non-empty expected: expected), as HashStore does. */
CANOPY_API int canopy_store_compare_set(const char* key, const void* expected, size_t expected_len,
                                        const void* desired, size_t desired_len, void** value, size_t* len);
/* *all_exist = 1 if every one of the n keys exists, else 0. */
CANOPY_API int canopy_store_check(const char* const* keys, size_t n, int* all_exist);
/* *existed = 1 if the key existed (and is now gone), else 0. existed may be NULL. */
CANOPY_API int canopy_store_delete(const char* key, int* existed);
CANOPY_API int canopy_store_num_keys(int64_t* count);
/* Waits until every one of the n keys exists; timeout_ms as for canopy_store_get (0: check once). */
CANOPY_API int canopy_store_wait(const char* const* keys, size_t n, int timeout_ms);

/* Frees a buffer returned by canopy_get, canopy_allgather, canopy_store_get or canopy_store_compare_set. */
CANOPY_API void canopy_free(void* buffer);

#ifdef __cplusplus
}
#endif

#endif
