/*
 * restore/copy.c - what reshard, export and import share: which variables
 * are sharded, the div layout and the attributes a variable gets when it is
 * written as n shards, and copying any region of a variable from a reader
 * into a streamed writer slice (or any other sink) in bounded pieces, so
 * that memory does not grow with the variable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "restore/restore.h"

int dvar_var_is_sharded(const dvar_reader *r, size_t i)
{
	dvar_var_info v;
	const char *kind;

	if (dvar_reader_var(r, i, &v) != DVAR_OK)
		return 0;
	if (v.num_slices > 1)
		return 1;
	return dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_KIND, &kind) == DVAR_OK &&
	       strcmp(kind, DVAR_KIND_SHARDED) == 0;
}

int dvar_error_tf_dtype(const char *name, int dtype)
{
	return dvar_error_set(DVAR_ENOTSUPP, "variable '%s' has dtype %d, a TensorFlow DataType dvar "
	                                     "has no type for: its values cannot be read", name, dtype);
}

int dvar_shard_layout(const char *name, const dvar_shape *shape, int64_t want,
                      int64_t **offsets, int64_t *n)
{
	int64_t rows = shape->rank ? shape->dims[0] : 1;

	if (want < 1 || want > DVAR_MAX_SHARDS)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': %lld shards asked for; a variable "
		                                   "takes 1 to %d", name, (long long)want,
		                      DVAR_MAX_SHARDS);
	int64_t cap = want < rows ? want : rows;
	*offsets = malloc((size_t)(cap > 0 ? cap + 1 : 2) * sizeof(int64_t));
	if (!*offsets)
		return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", name);
	if (shape->rank == 0) {
		/* A scalar has no rows to split: one shard, the whole of it. */
		(*offsets)[0] = 0;
		(*offsets)[1] = 1;
		*n = 1;
		return DVAR_OK;
	}
	int rc = dvar_div_layout(rows, want, *offsets, n);
	if (rc != DVAR_OK) {
		free(*offsets);
		*offsets = NULL;
		return dvar_error_prefix("variable '%s'", name);
	}
	return DVAR_OK;
}

void dvar_shard_slice(const dvar_shape *shape, const int64_t *offsets, int64_t k, dvar_slice *out)
{
	dvar_slice_full(out, shape);
	if (shape->rank) {
		out->start[0] = offsets[k];
		out->length[0] = offsets[k + 1] - offsets[k];
	}
}

void dvar_shard_note(const dvar_op *op, const char *name, const dvar_shape *shape, int64_t want,
                     int64_t n)
{
	if (n >= want)
		return;
	if (shape->rank == 0)
		dvar_op_note(op, "variable '%s' is a scalar: 1 shard, not %lld", name, (long long)want);
	else
		dvar_op_note(op, "variable '%s' has %lld row%s: %lld shard%s, not %lld", name,
		             (long long)shape->dims[0], shape->dims[0] == 1 ? "" : "s", (long long)n,
		             n == 1 ? "" : "s", (long long)want);
}

/* The attributes a layout of n shards owns. */
static int is_layout_attr(const char *key, const char *value)
{
	return strcmp(key, DVAR_SHARDING_ATTR_SHARDS) == 0 ||
	       strcmp(key, DVAR_SHARDING_ATTR_LAYOUT) == 0 ||
	       (strcmp(key, DVAR_STORE_ATTR_KIND) == 0 && strcmp(value, DVAR_KIND_SHARDED) == 0);
}

int dvar_set_shard_attrs(dvar_writer *w, const char *name, int64_t n)
{
	char count[32];

	if (n <= 1)
		return DVAR_OK;
	snprintf(count, sizeof(count), "%lld", (long long)n);
	int rc = dvar_writer_set_attr(w, name, DVAR_STORE_ATTR_KIND, DVAR_KIND_SHARDED);
	if (rc == DVAR_OK)
		rc = dvar_writer_set_attr(w, name, DVAR_SHARDING_ATTR_SHARDS, count);
	if (rc == DVAR_OK)
		rc = dvar_writer_set_attr(w, name, DVAR_SHARDING_ATTR_LAYOUT, DVAR_LAYOUT_DIV);
	return rc;
}

int dvar_var_is_replicated(const dvar_reader *r, size_t i)
{
	const char *kind;

	return dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_KIND, &kind) == DVAR_OK &&
	       (strcmp(kind, DVAR_KIND_MIRRORED) == 0 || strcmp(kind, DVAR_KIND_SYNC_ON_READ) == 0);
}

/* What a replicated variable's copies agree on, which a sharded one has not. */
static int is_replica_attr(const char *key)
{
	return strcmp(key, DVAR_STORE_ATTR_SYNCHRONIZATION) == 0 ||
	       strcmp(key, DVAR_STORE_ATTR_AGGREGATION) == 0 ||
	       strcmp(key, DVAR_STORE_ATTR_REPLICA_CHECK) == 0;
}

int dvar_copy_attrs(const dvar_reader *r, size_t i, dvar_writer *w, const char *name, int64_t n)
{
	size_t count = dvar_reader_var_num_attrs(r, i);
	int unreplicate = n > 1 && dvar_var_is_replicated(r, i);
	const char *key, *value;
	int rc = DVAR_OK;

	for (size_t k = 0; rc == DVAR_OK && k < count; k++) {
		if ((rc = dvar_reader_var_attr_at(r, i, k, &key, &value)) != DVAR_OK)
			break;
		/* A new layout replaces the old one's attributes. One shard has none
		 * and is a plain variable, as dvar_save writes a one-shard variable. */
		if (n > 0 && is_layout_attr(key, value)) {
			if (n == 1 && strcmp(key, DVAR_STORE_ATTR_KIND) == 0)
				rc = dvar_writer_set_attr(w, name, key, DVAR_KIND_PLAIN);
			continue;
		}
		/* A replicated variable cut into shards becomes a sharded variable,
		 * as dvar_save writes one: kind=sharded, no synchronization. */
		if (unreplicate && (is_replica_attr(key) || strcmp(key, DVAR_STORE_ATTR_KIND) == 0))
			continue;
		rc = dvar_writer_set_attr(w, name, key, value);
	}
	if (rc == DVAR_OK && n > 0)
		rc = dvar_set_shard_attrs(w, name, n);
	return rc;
}

/* ------------------------------------------------------------- copying */

void dvar_copier_init(dvar_copier *c, dvar_op *op)
{
	memset(c, 0, sizeof(*c));
	c->op = op;
}

void dvar_copier_free(dvar_copier *c)
{
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

int dvar_copy_pieces(dvar_copier *c, dvar_reader *r, size_t i, int dtype,
                     const dvar_slice *region, dvar_piece_fn fn, void *ctx)
{
	size_t esize = dvar_dtype_size(dtype);
	uint64_t budget = DVAR_PIECE_BYTES / (esize ? esize : 1), n, total;
	dvar_slice piece;
	dvar_slice_walk walk;
	int rc;

	if ((rc = dvar_slice_num_elements(region, &total)) != DVAR_OK)
		return rc;
	uint64_t need = (total < budget ? total : budget) * esize;
	if (need > c->cap) {
		free(c->buf);
		c->cap = 0;
		if (!(c->buf = malloc((size_t)need)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory (%llu bytes of read buffer)",
			                      (unsigned long long)need);
		c->cap = need;
	}
	dvar_slice_walk_init(&walk, region, budget);
	while (dvar_slice_walk_next(&walk, &piece, &n)) {
		if ((rc = dvar_op_check(c->op, dvar_reader_path(r))) != DVAR_OK ||
		    (rc = dvar_reader_read(r, i, &piece, c->buf, n * esize)) != DVAR_OK ||
		    (rc = fn(ctx, c->buf, n * esize)) != DVAR_OK)
			return rc;
		dvar_op_advance(c->op, n * esize);
	}
	return DVAR_OK;
}

static int to_writer(void *ctx, const void *data, uint64_t bytes)
{
	return dvar_writer_write(ctx, data, (size_t)bytes);
}

int dvar_copy_region(dvar_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                     const char *name, dvar_writer *w, const dvar_slice *region)
{
	int rc = dvar_writer_begin_slice(w, name ? name : v->name, v->dtype, &v->shape, region);

	if (rc == DVAR_OK)
		rc = dvar_copy_pieces(c, r, i, v->dtype, region, to_writer, w);
	if (rc == DVAR_OK)
		rc = dvar_writer_end_slice(w);
	return rc;
}
