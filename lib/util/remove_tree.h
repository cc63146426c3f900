/* Removing a node's temp dirs and stage caches: by canopyd and the launcher at the end of a job, and by
   canopy-guard after one that died. One implementation in C with direct system calls, so the guard, which has
   no C library, runs the same code. */
#ifndef CANOPY_REMOVE_TREE_H
#define CANOPY_REMOVE_TREE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Removes `path` and everything under it, without following symlinks; a path that is not there is not an error.
   Directories are made writable first (a read-only one would keep its entries) and removed with rmdir alone:
   remove() tries unlink first, which takes the parent directory's lock once more, and with every simulated node
   tearing down under one /tmp the waits for that lock were a seventh of a launch's CPU. Trees deeper than
   CANOPY_REMOVE_TREE_MAX_DEPTH levels keep their deepest part. Returns 0, or the negated errno of the first
   thing it could not remove (it carries on with the rest). */
int canopy_remove_tree(const char* path);

#define CANOPY_REMOVE_TREE_MAX_DEPTH 256 /* 4 KiB of stack per level */

#ifdef __cplusplus
}
#endif

#endif
