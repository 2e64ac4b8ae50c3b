/*
 * runtime/track.c - row change tracking for delta checkpoints (track.h).
 * A mark is one relaxed atomic store per changed row: an update of k rows
 * costs k stores next to the k rows it writes; a whole update costs one.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/track.h"

/* Epoch 0 marks nothing: the first updates mark 1. */
int dvar_track_init(dvar_track *t, uint64_t rows)
{
	memset(t, 0, sizeof(*t));
	t->rows = rows ? rows : 1;
	atomic_init(&t->epoch, 1);
	atomic_init(&t->whole, 0);
	atomic_init(&t->held, 0);
	if ((size_t)t->rows != t->rows || !(t->marks = calloc((size_t)t->rows, sizeof(*t->marks))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory for the change marks of %llu rows",
		                      (unsigned long long)t->rows);
	return DVAR_OK;
}

void dvar_track_fini(dvar_track *t)
{
	for (size_t i = 0; i < t->num_bases; i++) {
		free(t->bases[i].root);
		free(t->bases[i].ckpt);
	}
	free(t->bases);
	free((void *)t->marks);
	memset(t, 0, sizeof(*t));
}

/* Holds last a save's replica check and are few: one lock serves every
 * tracker, with a condition for releases and one for helpers leaving. */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_done = PTHREAD_COND_INITIALIZER;
static pthread_cond_t help_done = PTHREAD_COND_INITIALIZER;

void dvar_track_hold(dvar_track *t, dvar_track_helper *h)
{
	pthread_mutex_lock(&hold_lock);
	atomic_fetch_add(&t->held, 1);
	if (h)
		t->helper = h;
	pthread_mutex_unlock(&hold_lock);
}

void dvar_track_release(dvar_track *t)
{
	pthread_mutex_lock(&hold_lock);
	if (atomic_fetch_sub(&t->held, 1) == 1)
		t->helper = NULL;
	pthread_cond_broadcast(&hold_done);
	pthread_mutex_unlock(&hold_lock);
}

void dvar_track_wait(dvar_track *t)
{
	if (!atomic_load(&t->held))
		return;
	pthread_mutex_lock(&hold_lock);
	while (atomic_load(&t->held)) {
		dvar_track_helper *h = t->helper;

		if (h) {
			/* Entered under the lock that clears t->helper: h stays until drained. */
			h->active++;
			pthread_mutex_unlock(&hold_lock);
			int helped = h->help(h->arg, t);
			pthread_mutex_lock(&hold_lock);
			if (--h->active == 0)
				pthread_cond_broadcast(&help_done);
			if (helped)
				continue;
		}
		/* Nothing left to take: the last pieces are someone else's. */
		if (atomic_load(&t->held))
			pthread_cond_wait(&hold_done, &hold_lock);
	}
	pthread_mutex_unlock(&hold_lock);
}

void dvar_track_helper_drain(dvar_track_helper *h)
{
	pthread_mutex_lock(&hold_lock);
	while (h->active)
		pthread_cond_wait(&help_done, &hold_lock);
	pthread_mutex_unlock(&hold_lock);
}

void dvar_track_rows(dvar_track *t, const int64_t *rows, size_t n)
{
	dvar_track_wait(t);
	uint32_t e = atomic_load_explicit(&t->epoch, memory_order_relaxed);
	for (size_t k = 0; k < n; k++)
		if (rows[k] >= 0 && (uint64_t)rows[k] < t->rows)
			atomic_store_explicit(&t->marks[rows[k]], e, memory_order_relaxed);
}

void dvar_track_range(dvar_track *t, uint64_t first, uint64_t n)
{
	dvar_track_wait(t);
	uint32_t e = atomic_load_explicit(&t->epoch, memory_order_relaxed);
	for (uint64_t r = first; r < first + n && r < t->rows; r++)
		atomic_store_explicit(&t->marks[r], e, memory_order_relaxed);
}

void dvar_track_all(dvar_track *t)
{
	dvar_track_wait(t);
	atomic_store_explicit(&t->whole, atomic_load_explicit(&t->epoch, memory_order_relaxed),
	                      memory_order_relaxed);
}

uint32_t dvar_track_snapshot(dvar_track *t)
{
	return atomic_fetch_add(&t->epoch, 1);
}

static const dvar_track_base *find_base(const dvar_track *t, const char *root)
{
	for (size_t i = 0; i < t->num_bases; i++)
		if (strcmp(t->bases[i].root, root) == 0)
			return &t->bases[i];
	return NULL;
}

int dvar_track_changes(const dvar_track *t, const char *root, const char *ckpt, uint32_t snap,
                       uint64_t lo, uint64_t hi, dvar_track_kind *kind, int64_t **rows,
                       uint64_t *n)
{
	const dvar_track_base *b = find_base(t, root);
	uint64_t count = 0;
	if (rows)
		*rows = NULL;
	*n = 0;
	if (hi > t->rows)
		hi = t->rows;
	if (!b || !ckpt || strcmp(b->ckpt, ckpt) != 0) {
		*kind = DVAR_TRACK_UNKNOWN;
		return DVAR_OK;
	}
	uint32_t whole = atomic_load_explicit(&t->whole, memory_order_relaxed);
	if (whole > b->epoch && whole <= snap) {
		*kind = DVAR_TRACK_ALL;
		return DVAR_OK;
	}
	*kind = DVAR_TRACK_ROWS;
	for (uint64_t r = lo; r < hi; r++) {
		uint32_t m = atomic_load_explicit(&t->marks[r], memory_order_relaxed);
		count += m > b->epoch && m <= snap;
	}
	*n = count;
	if (!rows || !count)
		return DVAR_OK;
	if (!(*rows = malloc((size_t)count * sizeof(**rows))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory for %llu changed rows",
		                      (unsigned long long)count);
	count = 0;
	for (uint64_t r = lo; r < hi && count < *n; r++) {
		uint32_t m = atomic_load_explicit(&t->marks[r], memory_order_relaxed);
		if (m > b->epoch && m <= snap)
			(*rows)[count++] = (int64_t)r;
	}
	return DVAR_OK;
}

int dvar_track_based(dvar_track *t, const char *root, const char *ckpt, uint32_t snap)
{
	char *c = strdup(ckpt), *r = NULL;
	dvar_track_base *b = (dvar_track_base *)find_base(t, root);
	if (!c)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (!b) {
		dvar_track_base *grown = realloc(t->bases, (t->num_bases + 1) * sizeof(*grown));
		if (!grown || !(r = strdup(root))) {
			if (grown)
				t->bases = grown;
			free(c);
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
		t->bases = grown;
		b = &t->bases[t->num_bases++];
		b->root = r;
		b->ckpt = NULL;
	}
	free(b->ckpt);
	b->ckpt = c;
	b->epoch = snap;
	return DVAR_OK;
}
