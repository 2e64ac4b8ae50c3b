/*
 * sharding/sharded.h - what sharded.c (sharded variables: creation, reads,
 * updates) and lookup.c (embedding lookup) share: the variable's structure
 * and the collective that fetches rows from their owners. Not installed.
 */
#ifndef DVAR_SHARDING_SHARDED_H
#define DVAR_SHARDING_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "dvar/sharding.h"
#include "runtime/track.h"

struct dvar_sharded_variable {
	dvar_strategy *s;
	char *name;
	int dtype;
	dvar_shape shape;
	size_t esize;
	/* Rows along axis 0. A scalar is one "row" of one element internally
	 * (its public offsets are still { 0, 0 }). */
	int64_t rows;
	uint64_t row_elems; /* elements per row */
	size_t row_bytes;
	int64_t n;          /* shards */
	int64_t *offsets;   /* n + 1: shard i holds rows [offsets[i], offsets[i + 1]) */
	char **names;       /* n: "name/part_i" */
	unsigned char **data; /* n: the shard's elements on its owner, NULL elsewhere */
	int W, worker;
	dvar_track track;   /* this worker's shards' rows changed since each root's checkpoint */
};

/** v's row change tracker (runtime/track.h): rows of the shards this worker
 * owns, by their rows in the full variable. The store reads it; a restore
 * that writes shards in place marks them with dvar_track_all. */
dvar_track *dvar_sharded_variable_track(dvar_sharded_variable *v);

/** Which elements of a row to take along dimension d (1..rank-1). */
typedef struct {
	int64_t start, step, count;
} dvar_sharded_sel;

/** The worker that owns shard i. */
static inline int dvar_sharded_owner(const dvar_sharded_variable *v, int64_t i)
{
	return (int)(i % v->W);
}

/**
 * Collective across workers (two all-to-alls): every worker receives, in
 * dst, m rows of v (rows[0..m), numbers along axis 0 in [0, v->rows); a
 * scalar's only row is 0), each reduced to the elements sel selects (rank -
 * 1 entries; NULL: whole rows), in the order of rows. The owners cut the
 * elements out, so only the selected bytes travel. local_rc != DVAR_OK (a
 * failure before the call, message set) joins the exchange and fails it on
 * every worker. what names the step and must be the same on every worker.
 */
int dvar_sharded_fetch(dvar_sharded_variable *v, int local_rc, const int64_t *rows, size_t m,
                        const dvar_sharded_sel *sel, void *dst, const char *what);

#endif
