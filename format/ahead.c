/*
 * format/ahead.c - reading ahead of a read through the page cache: one
 * thread, a window of POSIX_FADV_WILLNEED advice ahead of the tasks started.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/ahead.h"

/* How far ahead of the tasks started the advice goes: enough to keep the
 * disk busy while every reading thread copies and checksums (1 GiB read
 * cold on 2 CPUs: 16 and 32 MiB alike), little enough to leave nothing
 * much behind a read that stops. */
#define AHEAD_WINDOW ((uint64_t)32 << 20)
/* Smaller reads are over before the thread is of use. */
#define AHEAD_MIN ((uint64_t)16 << 20)
/* Smaller ranges (packed chunks, the edges of a partial read) are left to
 * the readers: advice costs about what a small read does. */
#define AHEAD_RANGE_MIN ((uint64_t)256 << 10)

static atomic_uint_least64_t ahead_min = AHEAD_MIN, ahead_window = AHEAD_WINDOW;
static atomic_uint_least64_t leads, advised; /* threads started and ranges advised, for tests */

void dvar_ahead__tune(uint64_t min, uint64_t window)
{
	atomic_store(&ahead_min, min ? min : AHEAD_MIN);
	atomic_store(&ahead_window, window ? window : AHEAD_WINDOW);
}

void dvar_ahead__stats(uint64_t *started, uint64_t *ranges)
{
	*started = atomic_load(&leads);
	*ranges = atomic_load(&advised);
}

struct dvar_ahead {
	dvar_ahead_range *ranges; /* owned */
	uint64_t *end;            /* end[i]: the bytes of ranges [0, i] */
	size_t n;
	pthread_mutex_t lock;     /* guards started and stop */
	pthread_cond_t moved;
	size_t started;           /* tasks taken: 1 + the highest index */
	int stop;
	pthread_t thread;
};

/* Whether the page holding byte at of fd is in the page cache. mincore on
 * a mapping of it: a read that would not wait (RWF_NOWAIT) still starts
 * the kernel's readahead, and a probe must fetch nothing. */
static int byte_cached(int fd, uint64_t at)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char in = 0;
	if (page <= 0)
		page = 4096;
	void *m = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, (off_t)(at - at % (uint64_t)page));
	if (m == MAP_FAILED)
		return 0;
	int cached = mincore(m, (size_t)page, &in) == 0 && (in & 1);
	munmap(m, (size_t)page);
	return cached;
}

/* Its first and last byte cached: a warm range, whose advice would cost a
 * walk over pages already there. */
static int cached(const dvar_ahead_range *g)
{
	return g->len && byte_cached(g->fd, g->off) && byte_cached(g->fd, g->off + g->len - 1);
}

static void *lead(void *p)
{
	dvar_ahead *a = p;
	uint64_t window = atomic_load(&ahead_window);
	for (size_t k = 0; k < a->n; k++) {
		pthread_mutex_lock(&a->lock);
		while (!a->stop && k >= a->started &&
		       a->end[k] - (a->started ? a->end[a->started - 1] : 0) > window)
			pthread_cond_wait(&a->moved, &a->lock);
		int stop = a->stop, taken = k < a->started;
		pthread_mutex_unlock(&a->lock);
		if (stop)
			break;
		/* A task already taken is its reader's to fetch. */
		const dvar_ahead_range *g = &a->ranges[k];
		if (!taken && g->fd >= 0 && g->len >= AHEAD_RANGE_MIN && !cached(g) &&
		    posix_fadvise(g->fd, (off_t)g->off, (off_t)g->len, POSIX_FADV_WILLNEED) == 0)
			atomic_fetch_add(&advised, 1);
	}
	return NULL;
}

dvar_ahead *dvar_ahead_start(dvar_ahead_range *ranges, size_t n)
{
	dvar_ahead *a = NULL;
	uint64_t *end = n ? malloc(n * sizeof(*end)) : NULL;
	if (!end)
		goto none;
	for (size_t k = 0; k < n; k++)
		end[k] = (k ? end[k - 1] : 0) + ranges[k].len;
	if (end[n - 1] < atomic_load(&ahead_min) || (cached(&ranges[0]) && cached(&ranges[n - 1])) ||
	    !(a = calloc(1, sizeof(*a))))
		goto none;
	a->ranges = ranges;
	a->end = end;
	a->n = n;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->moved, NULL);
	if (pthread_create(&a->thread, NULL, lead, a) == 0) {
		atomic_fetch_add(&leads, 1);
		return a;
	}
	pthread_cond_destroy(&a->moved);
	pthread_mutex_destroy(&a->lock);
	free(a);
none:
	free(end);
	free(ranges);
	return NULL;
}

void dvar_ahead_started(dvar_ahead *a, size_t i)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	if (i >= a->started) {
		a->started = i + 1;
		pthread_cond_signal(&a->moved);
	}
	pthread_mutex_unlock(&a->lock);
}

void dvar_ahead_stop(dvar_ahead *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stop = 1;
	pthread_cond_signal(&a->moved);
	pthread_mutex_unlock(&a->lock);
	pthread_join(a->thread, NULL);
	pthread_cond_destroy(&a->moved);
	pthread_mutex_destroy(&a->lock);
	free(a->end);
	free(a->ranges);
	free(a);
}
