/*
 * format/ahead.h - private to reader.c: a thread that asks the kernel to
 * read ahead of a read through the page cache.
 *
 * The reader's threads each read a chunk, then copy and checksum it; while
 * they all do that, nothing is on its way from the disk, and a cold read of
 * a large variable leaves the disk idle a quarter of the time. This thread
 * walks the read's file ranges in the order the tasks are taken and asks for
 * each (POSIX_FADV_WILLNEED) a bounded window ahead of the tasks started, so
 * the disk always has the next chunks to fetch. Ranges already in the page
 * cache, and ranges under 256 KiB, are left to the readers; the window
 * bounds what a stopped read leaves behind.
 */
#ifndef DVAR_FORMAT_AHEAD_H
#define DVAR_FORMAT_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "dvar/common.h"

DVAR_BEGIN_DECL

/* One task's bytes: [off, off + len) of the file open at fd. */
typedef struct {
	int fd;
	uint64_t off, len;
} dvar_ahead_range;

typedef struct dvar_ahead dvar_ahead;

/*
 * Starts reading ahead of ranges[0, n), the tasks of a read in the order
 * they are taken; ranges (malloc'ed, NULL when n is 0) is taken, and freed
 * by dvar_ahead_stop or at once when NULL is returned: the read too small
 * to gain, its first and last ranges already cached, or no thread could
 * start. The read then goes on without it, as it would have.
 */
dvar_ahead *dvar_ahead_start(dvar_ahead_range *ranges, size_t n);

/* A reader took task i. NULL: a no-op. */
void dvar_ahead_started(dvar_ahead *a, size_t i);

/* Stops the thread and frees it (NULL: a no-op). */
void dvar_ahead_stop(dvar_ahead *a);

/* For tests: the smallest read worth the thread and the window ahead of the
 * tasks started (0: the defaults); the threads started and the ranges
 * advised so far. */
void dvar_ahead__tune(uint64_t min, uint64_t window);
void dvar_ahead__stats(uint64_t *started, uint64_t *ranges);

DVAR_END_DECL

#endif
