/*
 * store/delta.c - what a delta save decides (docs/STORE.md, "Delta
 * checkpoints"): each writer looks up, in its items' change trackers, the
 * rows changed since the base; the workers exchange the counts; and every
 * worker takes the same decision for every variable: unchanged, its changed
 * rows, or whole. A sharded variable is decided as one, over all its shards,
 * since a checkpoint holds a variable in one way.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "store/save.h"

char *dvar_store_root_key(const char *root)
{
	char *real = realpath(root, NULL);
	return real ? real : strdup(root);
}

/* What a writer reports of one item: a dvar_track_kind, or -1 when it is
 * not this worker's to report; and the changed rows. */
typedef struct {
	int64_t kind;
	uint64_t rows;
} report;

/* The first row of it and how many it has along axis 0. */
static void rows_of(const item *it, uint64_t *lo, uint64_t *n)
{
	*lo = 0;
	*n = it->shape.rank ? (uint64_t)it->shape.dims[0] : 1;
	if (it->kind == KIND_SHARDED && it->shape.rank) {
		*lo = (uint64_t)it->slice.start[0];
		*n = (uint64_t)it->slice.length[0];
	}
}

static int find_changes(save_job *j, report *mine)
{
	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];
		dvar_track_kind kind;
		uint64_t lo, n;
		int rc;

		mine[i].kind = -1;
		mine[i].rows = 0;
		if (it->writer != j->worker)
			continue;
		if (!it->track) {
			mine[i].kind = DVAR_TRACK_UNKNOWN;
			continue;
		}
		rows_of(it, &lo, &n);
		if ((rc = dvar_track_changes(it->track, j->root_key, j->base, it->snap, lo, lo + n, &kind,
		                             &it->rows, &it->nrows)) != DVAR_OK)
			return dvar_error_prefix("saving '%s'", it->name);
		mine[i].kind = kind;
		mine[i].rows = it->nrows;
	}
	return DVAR_OK;
}

/* Items [a, b) are one variable's: the same decision for all. */
static void decide(item *items, const report *got, size_t a, size_t b)
{
	uint64_t rows = 0, patch = 0, whole = 0;
	int untracked = 0, delta;

	/* Bytes on disk: each piece is two streams (ids, rows), each padded
	 * as the format pads a slice of its size. */
	for (size_t i = a; i < b; i++) {
		untracked |= got[i].kind != DVAR_TRACK_ROWS;
		rows += got[i].rows;
		if (got[i].rows)
			patch += dvar_disk_bytes(got[i].rows * 8) +
			         dvar_disk_bytes(got[i].rows * items[i].row_bytes);
		whole += dvar_disk_bytes(items[i].nbytes);
	}
	if (untracked)
		delta = DVAR_DELTA_WHOLE;
	else if (rows == 0)
		delta = DVAR_DELTA_SAME;
	else if (patch >= whole || items[a].shape.rank == 0)
		delta = DVAR_DELTA_WHOLE;
	else
		delta = DVAR_DELTA_ROWS;
	for (size_t i = a; i < b; i++) {
		items[i].delta = delta;
		/* Every worker knows the counts; only the writer keeps the rows. */
		items[i].nrows = delta == DVAR_DELTA_ROWS ? got[i].rows : 0;
		if (delta != DVAR_DELTA_ROWS) {
			free(items[i].rows);
			items[i].rows = NULL;
		}
	}
}

int dvar_store_decide_delta(save_job *j)
{
	report *mine, *got;
	unsigned char *all = NULL;
	size_t *offs;
	int rc;

	if (!j->base)
		return DVAR_OK; /* everything whole: the same on every worker */
	mine = calloc(j->n ? j->n : 1, sizeof *mine);
	got = calloc(j->n ? j->n : 1, sizeof *got);
	offs = malloc(((size_t)j->W + 1) * sizeof *offs);
	rc = mine && got && offs ? find_changes(j, mine)
	                         : dvar_error_set(DVAR_ENOMEM, "out of memory");
	rc = dvar_store_agree(j->s, rc, mine, rc == DVAR_OK ? j->n * sizeof *mine : 0,
	                      offs ? &all : NULL, offs);
	if (rc == DVAR_OK) {
		/* Each item as its writer reported it. */
		for (size_t i = 0; i < j->n; i++)
			memcpy(&got[i], all + offs[j->items[i].writer] + i * sizeof *got, sizeof *got);
		for (size_t a = 0, b; a < j->n; a = b) {
			for (b = a + 1; b < j->n && strcmp(j->items[b].name, j->items[a].name) == 0; b++)
				;
			decide(j->items, got, a, b);
		}
	}
	free(all);
	free(offs);
	free(mine);
	free(got);
	return rc;
}

void dvar_store_gather_rows(const item *it, const unsigned char *src, unsigned char *dst)
{
	uint64_t lo = 0, n;

	rows_of(it, &lo, &n);
	for (uint64_t k = 0; k < it->nrows; k++)
		memcpy(dst + k * it->row_bytes, src + ((uint64_t)it->rows[k] - lo) * it->row_bytes,
		       it->row_bytes);
}
