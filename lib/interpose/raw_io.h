/* What the interposer uses instead of stdio and malloc: it runs inside them, and in the audit namespace. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the string src into dst (cap bytes); its length, or (size_t)-1 when it does not fit. */
size_t copy_str(char* dst, size_t cap, const char* src);

/* Writes v in decimal, or s, at p; returns the end (no NUL). */
char* put_u(char* p, unsigned long v);
char* put_s(char* p, const char* s);

int raw_open(const char* path, int flags, int mode);
void raw_close(int fd);

/* Appends buf[0..n) to file with one open/write/close: O_APPEND keeps concurrent writers' lines whole, and no
 * descriptor is held that a program closing "all other fds" could reuse under us. */
void append_to_file(const char* file, const char* buf, size_t n);

/* Maps dir[0..dir_len) followed by name ("/index") read-only: its base and *size, or NULL. */
const void* map_file_in(const char* dir, size_t dir_len, const char* name, uint64_t* size);

#ifdef __cplusplus
}
#endif
