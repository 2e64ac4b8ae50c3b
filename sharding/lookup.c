/*
 * sharding/lookup.c - embedding lookup in a sharded variable: each worker
 * looks up its own ids, the ids go to the workers that own their rows and
 * the rows come back (dvar_sharded_fetch: one all-to-all each way), in the
 * order of the ids, clipped to max_norm as TF's _clip does.
 *
 * Only "div" can be right: the shards hold contiguous rows (the div
 * layout), and "mod" would send id k to shard k % n, row k / n, which holds
 * another row whenever there is more than one shard. TF's v1 lookup
 * defaults to "mod" and, with equal shard sizes, reads those wrong rows
 * without an error; dvar refuses instead (docs/SHARDING.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/runtime.h"
#include "sharding/sharded.h"

/* Everything this worker can check alone; rows receives where the ids live. */
static int prepare(const dvar_sharded_variable *v, int strategy, const int64_t *ids, size_t count,
                   double max_norm, const void *dst, size_t dst_bytes, int64_t **rows,
                   const char *what)
{
	int64_t *shard, *row;
	uint64_t need;
	int rc;

	*rows = NULL;
	if (v->shape.rank == 0)
		return dvar_error_set(DVAR_EINVAL, "%s: a scalar has no rows to look up", what);
	if (strategy != DVAR_PARTITION_MOD && strategy != DVAR_PARTITION_DIV) {
		/* dvar_embedding_locate words it as TF does. */
		rc = dvar_embedding_locate(strategy, v->rows, v->n, NULL, 0, NULL, NULL);
		if (rc == DVAR_OK)
			rc = dvar_error_set(DVAR_EINVAL, "Unrecognized partition strategy: %d", strategy);
		return dvar_error_prefix("%s", what);
	}
	if (strategy == DVAR_PARTITION_MOD && v->n > 1)
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: partition strategy \"mod\" does not match the variable's %lld "
		                      "shards, which hold contiguous rows (the \"div\" layout): \"mod\" "
		                      "would read row id / %lld of shard id %% %lld, another row than id "
		                      "(TensorFlow's v1 embedding_lookup, whose default is \"mod\", "
		                      "returns those wrong rows without an error); use "
		                      "DVAR_PARTITION_DIV",
		                      what, (long long)v->n, (long long)v->n, (long long)v->n);
	if (strategy == DVAR_PARTITION_DIV && !dvar_div_layout_is(v->offsets, v->n))
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: the shards do not conform to \"div\" sharding", what);
	if (isnan(max_norm) || max_norm < 0)
		return dvar_error_set(DVAR_EINVAL, "%s: max_norm %g is not a norm (use 0 for none)", what,
		                      max_norm);
	if (max_norm > 0 && !dvar_kernel_is_floating(v->dtype))
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: max_norm needs a floating dtype, and the variable is %s", what,
		                      dvar_dtype_name(v->dtype));
	if (count > 0 && !ids)
		return dvar_error_set(DVAR_EINVAL, "%s: ids is NULL", what);
	need = (uint64_t)count * v->row_bytes;
	if (count > 0 && v->row_bytes > 0 && need / v->row_bytes != count)
		return dvar_error_set(DVAR_EINVAL, "%s: %zu ids are too many", what, count);
	if (need > 0 && !dst)
		return dvar_error_set(DVAR_EINVAL, "%s: dst is NULL", what);
	if (dst_bytes < need)
		return dvar_error_set(DVAR_ESHAPE,
		                      "%s: dst holds %llu bytes, %zu rows of %zu bytes need %llu", what,
		                      (unsigned long long)dst_bytes, count, v->row_bytes,
		                      (unsigned long long)need);
	if (count == 0)
		return DVAR_OK;

	shard = malloc(count * sizeof *shard);
	row = malloc(count * sizeof *row);
	if (!shard || !row) {
		free(shard);
		free(row);
		return dvar_error_set(DVAR_ENOMEM, "%s: out of memory for %zu ids", what, count);
	}
	/* With one shard "mod" and "div" agree (a plain gather). */
	rc = dvar_embedding_locate(DVAR_PARTITION_DIV, v->rows, v->n, ids, count, shard, row);
	if (rc != DVAR_OK) {
		free(shard);
		free(row);
		return dvar_error_prefix("%s", what);
	}
	for (size_t k = 0; k < count; k++)
		row[k] += v->offsets[shard[k]];
	free(shard);
	*rows = row;
	return DVAR_OK;
}

int dvar_embedding_lookup(dvar_sharded_variable *v, int strategy, const int64_t *ids,
                          size_t count, double max_norm, void *dst, size_t dst_bytes)
{
	char what[DVAR_ERROR_MESSAGE_MAX];
	int64_t *rows = NULL;
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_embedding_lookup: variable is NULL");
	snprintf(what, sizeof what, "embedding lookup in sharded variable '%s'", v->name);
	rc = prepare(v, strategy, ids, count, max_norm, dst, dst_bytes, &rows, what);
	rc = dvar_sharded_fetch(v, rc, rows, rc == DVAR_OK ? count : 0, NULL, dst, what);
	free(rows);
	if (rc != DVAR_OK || max_norm <= 0 || v->row_bytes == 0)
		return rc;
	/* TF clips after the stitch; each row on its own. */
	for (size_t k = 0; k < count; k++)
		dvar_kernel_clip_norm(v->dtype, (unsigned char *)dst + k * v->row_bytes,
		                      (size_t)v->row_elems, max_norm);
	return DVAR_OK;
}
