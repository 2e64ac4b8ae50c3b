/*
 * core/core.h - private helpers every module of libdvar shares: setting the
 * thread-local error, crc32c, the thread pool and a monotonic clock.
 * Not installed; include/dvar/ is the public API.
 */
#ifndef DVAR_CORE_PRIVATE_H
#define DVAR_CORE_PRIVATE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dvar/common.h"
#include "dvar/core.h"

DVAR_BEGIN_DECL

#if defined(__GNUC__)
#define DVAR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DVAR_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- errors */

/**
 * Record an error on this thread (the message is printf-formatted) and
 * return code, so that `return dvar_error_set(DVAR_EINVAL, "...")` reads well.
 */
int dvar_error_set(int code, const char *fmt, ...) DVAR_PRINTF(2, 3);

/** Like dvar_error_set with errno's text appended: "open 'x': No such file".
 *  A call that failed for want of memory (ENOMEM) is DVAR_ENOMEM whatever code says. */
int dvar_error_set_errno(int code, int errnum, const char *fmt, ...) DVAR_PRINTF(3, 4);

/**
 * Put context in front of the current message: "reading 'w': <old message>".
 * Returns the current code.
 */
int dvar_error_prefix(const char *fmt, ...) DVAR_PRINTF(1, 2);

/** Copy another thread's error (a pool worker's) onto this thread. */
int dvar_error_restore(int code, const char *message);

#define DVAR_ERROR_MESSAGE_MAX 1024

/**
 * Check the version of an options or spec struct (what: its type name): every
 * version from 1 to current is accepted, so that a program built against an
 * older header keeps working when the struct grows; anything else is
 * DVAR_EINVAL with one message for every struct.
 */
int dvar_check_version(const char *what, unsigned int version, unsigned int current);

/**
 * The body of a public dvar_x_options_init: check version as
 * dvar_check_version does, then copy tmpl (the struct's _INIT value, size
 * bytes) to opts and set its first field, version, to the one asked for.
 */
int dvar_options_init(void *opts, size_t size, const void *tmpl, const char *what,
                      unsigned int version, unsigned int current);

/* ---------------------------------------------------------------- crc32c */

/* dvar_crc32c_extend is public (dvar/core.h). */
#define dvar_crc32c(buf, len) dvar_crc32c_extend(0, (buf), (len))

/** The CRC of A||B from crc(A), crc(B) and len(B). */
uint32_t dvar_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* The implementations behind dvar_crc32c_extend, for tests and benchmarks:
 * the portable slice-by-8 tables, and level 1 SSE4.2, level 2 SSE4.2 with
 * AVX-512 VPCLMULQDQ folding or level 3 with AVX2 VPCLMULQDQ folding
 * (DVAR_ENOTSUPP, *out untouched, where the CPU or the build lacks that
 * level). */
uint32_t dvar_crc32c__table(uint32_t crc, const void *buf, size_t len);
int dvar_crc32c__hw(int level, uint32_t crc, const void *buf, size_t len, uint32_t *out);

/* ---------------------------------------------------------------- memory */

/**
 * size bytes (at least one) aligned to a 4096-byte page, zero-filled when
 * zero is set; release with free(). Page alignment lets the writer hand the
 * memory straight to O_DIRECT writes instead of copying it through a bounce
 * buffer. From 2 MiB on, the memory is aligned to 2 MiB and its whole huge
 * pages are advised as such (MADV_HUGEPAGE). NULL when out of memory.
 */
void *dvar_page_alloc(size_t size, int zero);

/**
 * memcpy, with stores that bypass the cache where the CPU has them (SSE2's
 * streaming stores on x86-64): for a copy nobody reads soon, such as the
 * staging of an asynchronous save, which a normal copy would first read
 * into the cache line by line (a third more memory traffic), evicting the
 * source the caller is about to read again. The regions must not overlap.
 */
void dvar_copy_stream(void *dst, const void *src, size_t n);

/**
 * Room for element len of an array that has *cap: arr itself while len <
 * *cap, else arr realloc'ed to twice *cap (first when *cap is 0) with *cap
 * updated; NULL when out of memory (arr untouched, still the caller's).
 * Doubling keeps n appends linear: growing by one element copied the whole
 * array each time (quadratic in a reshard to thousands of slices).
 */
void *dvar_grow(void *arr, size_t len, size_t *cap, size_t elem, size_t first);

/* ---------------------------------------------------------------- thread pool */

typedef struct dvar_pool dvar_pool;

/** The online CPUs (at least 1), counted once per process: a sizing hint for
 *  thread counts, which sysconf would read from /sys on every call (three
 *  system calls on each reader and writer open). */
int dvar_cpus(void);

/** A pool of n threads, the caller's included (n <= 0: one per online CPU);
 *  the other n-1 start as the loops run need them. */
int dvar_pool_create(dvar_pool **out, int n);
void dvar_pool_free(dvar_pool *pool); /* NULL is a no-op */
int dvar_pool_size(const dvar_pool *pool);

/* O_DIRECT reads or writes a pool keeps in flight at least: one per CPU
 * leaves a disk with a deep queue (virtio, NVMe) idle between them. */
#define DVAR_IO_DEPTH 4

/** Threads of a pool doing O_DIRECT I/O: as asked (threads > 0), or
 *  DVAR_IO_DEPTH more than the online CPUs. A thread has no I/O in flight
 *  while it checksums what it read or is about to write, so that many stay
 *  in flight only beside a thread per CPU at work (2 CPUs: 1 GiB saves ran
 *  2-5 % faster with 6 or 8 threads than with 4, in 30 of 36 pairs). */
int dvar_pool_io_threads(int threads);

/**
 * Run fn(ctx, i) for i in [0, n) on the pool's threads and the caller's, and
 * wait for all. Every task runs even when one fails; the first failure (in
 * task order) is returned and its error message copied to the caller's
 * thread. fn returns DVAR_OK or an error set with dvar_error_set.
 * A pool runs one dvar_pool_for at a time (calls from several threads are
 * serialized).
 */
int dvar_pool_for(dvar_pool *pool, size_t n, int (*fn)(void *ctx, size_t i), void *ctx);

/** dvar_pool_for on at most width threads, the caller's included (<= 0: all). */
int dvar_pool_for_width(dvar_pool *pool, size_t n, int width, int (*fn)(void *ctx, size_t i),
                        void *ctx);

/** Of n segments laid end to end, segment k starting at first[k]
 * (ascending): the one holding position pos, the last k with first[k] <=
 * pos (of empty segments, the one after). Tasks of several groups in one
 * pool loop, elements of several buffers in one collective. */
size_t dvar_segment_of(const uint64_t *first, size_t n, uint64_t pos);

/* ---------------------------------------------------------------- stash */

/* A thread-safe stack of reusable buffers (see stash.c). */
typedef struct dvar_stash dvar_stash;

dvar_stash *dvar_stash_create(void);                /* NULL on ENOMEM */
void *dvar_stash_pop(dvar_stash *s);                /* NULL when empty */
/* Keep item for reuse; release it when it cannot be kept. */
void dvar_stash_push(dvar_stash *s, void *item, void (*release)(void *));
void dvar_stash_free(dvar_stash *s, void (*release)(void *)); /* NULL is a no-op */

/* ---------------------------------------------------------------- misc */

/** Monotonic clock in seconds. */
double dvar_now(void);

DVAR_END_DECL

#endif
