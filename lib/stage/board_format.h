/* The node's answer board: on-demand answers the daemon publishes in shared memory for its ranks to read (C). */
#pragma once

/*
 * One file per node, <node cache>/answers, written only by the node's canopyd and mapped read-only by every
 * staged rank on the node. Once any rank has asked the daemon about a path, the others (and the same rank
 * again) read the answer here instead of asking over the socket: no round trip, no context switch.
 *
 * Layout: a header, then `slots` 32-bit offsets (an open-addressed hash table, linear probing, 0 = empty),
 * then the records. A record is written whole, then its offset is stored in its slot with release order, so a
 * reader that loads a slot with acquire order sees a complete record. Records are never changed or removed;
 * a richer answer for the same path (its content arrived after its metadata) is a new record whose offset
 * replaces the old one in the same slot. Readers check every offset and length against the mapping, so a
 * damaged board costs a fallback to the socket, never a crash.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stage/index_format.h"
#include "stage/path_facts.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CANOPY_STAGE_BOARD_MAGIC 0x32425343u /* "CSB2" */
#define CANOPY_STAGE_BOARD_NAME "answers"

struct canopy_stage_board_header {
    uint32_t magic;
    uint32_t slots; /* a power of two */
    uint64_t size;  /* bytes of the whole file */
};

struct canopy_stage_board_record {
    uint64_t hash; /* canopy_stage_hash of the path */
    uint32_t path_len, link_len, mirror_len;
    uint32_t pad;
    struct canopy_stage_path_facts facts;
    /* then the path, the symlink target and the mirror, without NULs; the next record starts 8-aligned */
};

struct canopy_stage_board_view {
    const unsigned char* base;
    uint64_t size;
    uint32_t slots;
};

static inline uint64_t canopy_stage_board_records_start(uint32_t slots)
{
    uint64_t end = sizeof(struct canopy_stage_board_header) + (uint64_t)slots * sizeof(uint32_t);
    return (end + 7) & ~(uint64_t)7;
}

/* 0 when `base` (size bytes) holds a board; the view then reads it. */
static inline int canopy_stage_board_open(struct canopy_stage_board_view* v, const void* base, uint64_t size)
{
    const struct canopy_stage_board_header* h = (const struct canopy_stage_board_header*)base;
    if (size < sizeof *h || h->magic != CANOPY_STAGE_BOARD_MAGIC || h->size != size || h->slots == 0 ||
        (h->slots & (h->slots - 1)) != 0 || canopy_stage_board_records_start(h->slots) > size)
        return -1;
    v->base = (const unsigned char*)base;
    v->size = size;
    v->slots = h->slots;
    return 0;
}

static inline const uint32_t* canopy_stage_board_slot(const struct canopy_stage_board_view* v, uint32_t i)
{
    return (const uint32_t*)(v->base + sizeof(struct canopy_stage_board_header)) + i;
}

static inline const char* canopy_stage_board_path(const struct canopy_stage_board_record* r)
{
    return (const char*)(r + 1);
}
static inline const char* canopy_stage_board_link(const struct canopy_stage_board_record* r)
{
    return canopy_stage_board_path(r) + r->path_len;
}
static inline const char* canopy_stage_board_mirror(const struct canopy_stage_board_record* r)
{
    return canopy_stage_board_link(r) + r->link_len;
}

/* The record at `offset`, or NULL when the offset or its lengths leave the mapping. */
static inline const struct canopy_stage_board_record* canopy_stage_board_record_at(
    const struct canopy_stage_board_view* v, uint64_t offset)
{
    const uint64_t head = sizeof(struct canopy_stage_board_record);
    if (offset < canopy_stage_board_records_start(v->slots) || (offset & 7) != 0 || offset > v->size ||
        v->size - offset < head)
        return NULL;
    const struct canopy_stage_board_record* r = (const struct canopy_stage_board_record*)(v->base + offset);
    uint64_t text = (uint64_t)r->path_len + r->link_len + r->mirror_len;
    if (r->path_len >= CANOPY_STAGE_PATH_MAX || r->link_len >= CANOPY_STAGE_PATH_MAX ||
        r->mirror_len >= CANOPY_STAGE_PATH_MAX || v->size - offset - head < text)
        return NULL;
    return r;
}

/* The published answer for path[0..len), or NULL. */
static inline const struct canopy_stage_board_record* canopy_stage_board_find(const struct canopy_stage_board_view* v,
                                                                              const char* path, size_t len)
{
    uint64_t hash = canopy_stage_hash(path, len);
    uint32_t mask = v->slots - 1;
    for (uint32_t probe = 0, i = (uint32_t)hash & mask; probe < v->slots; ++probe, i = (i + 1) & mask) {
        uint32_t offset = __atomic_load_n(canopy_stage_board_slot(v, i), __ATOMIC_ACQUIRE);
        if (offset == 0)
            return NULL;
        const struct canopy_stage_board_record* r = canopy_stage_board_record_at(v, offset);
        if (!r)
            return NULL;
        if (r->hash == hash && r->path_len == len && memcmp(canopy_stage_board_path(r), path, len) == 0)
            return r;
    }
    return NULL;
}

#ifdef __cplusplus
}
#endif
