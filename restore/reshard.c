/*
 * restore/reshard.c - dvar_reshard: a new checkpoint in which the chosen
 * variables are written as M shards in the div layout and every other
 * variable is kept as it was saved. Each target shard is read from whatever
 * slices were saved (dvar_reader_read of the shard's rows, in bounded
 * pieces) and streamed into the writer, so memory stays at a few chunks and
 * the cost is linear in the bytes and the shard count. The writer commits
 * the output atomically: a failure or a cancellation leaves nothing there.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "restore/restore.h"

int dvar_reshard_options_init(dvar_reshard_options *opts, unsigned int version)
{
	static const dvar_reshard_options init = DVAR_RESHARD_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_reshard_options", version,
	                         DVAR_RESHARD_OPTIONS_VERSION);
}

static int check_options(const dvar_reshard_options *o, dvar_partitioner *part)
{
	int rc = dvar_check_version("dvar_reshard_options", o->version,
	                            DVAR_RESHARD_OPTIONS_VERSION);

	if (rc != DVAR_OK)
		return rc;
	if (o->shards < 0 || o->shards > DVAR_MAX_SHARDS)
		return dvar_error_set(DVAR_EINVAL, "%lld shards asked for; a variable takes 1 to %d",
		                      (long long)o->shards, DVAR_MAX_SHARDS);
	if (o->shards && o->partitioner)
		return dvar_error_set(DVAR_EINVAL, "both a shard count and a partitioner say how to "
		                                   "shard every sharded variable: give one of them");
	if (!o->shards && !o->partitioner && !o->num_vars)
		return dvar_error_set(DVAR_EINVAL, "nothing to do: give a shard count, a partitioner "
		                                   "or per-variable shard counts");
	if (o->partitioner && (rc = dvar_partitioner_parse(part, o->partitioner)) != DVAR_OK)
		return dvar_error_prefix("partitioner '%s'", o->partitioner);
	if (o->num_vars && !o->vars)
		return dvar_error_set(DVAR_EINVAL, "dvar_reshard: vars is NULL");
	for (size_t k = 0; k < o->num_vars; k++) {
		const dvar_shard_count *c = &o->vars[k];
		if (!c->name || !c->name[0])
			return dvar_error_set(DVAR_EINVAL, "per-variable shard count #%zu has no name", k);
		if (c->shards < 1 || c->shards > DVAR_MAX_SHARDS)
			return dvar_error_set(DVAR_EINVAL, "variable '%s': %lld shards asked for; a "
			                                   "variable takes 1 to %d", c->name,
			                      (long long)c->shards, DVAR_MAX_SHARDS);
		for (size_t j = 0; j < k; j++)
			if (strcmp(o->vars[j].name, c->name) == 0)
				return dvar_error_set(DVAR_EINVAL, "variable '%s' is given two shard counts",
				                      c->name);
	}
	return DVAR_OK;
}

/*
 * What happens to variable i: *want = the shard count it is written with
 * (0: kept as it was saved; strings, which a dvar checkpoint cannot hold,
 * are left out).
 */
static int plan_var(const dvar_reshard_options *o, const dvar_partitioner *part,
                    const dvar_op *op, const dvar_reader *r, size_t i, const dvar_var_info *v,
                    unsigned char *used, int64_t *want)
{
	*want = 0;
	for (size_t k = 0; k < o->num_vars; k++) {
		if (strcmp(o->vars[k].name, v->name) != 0)
			continue;
		used[k] = 1;
		if (v->dtype == DVAR_DTYPE_STRING)
			return dvar_error_set(DVAR_EINVAL, "variable '%s' is a string tensor, which a "
			                                   "dvar checkpoint cannot hold", v->name);
		/* Asked for by name: more shards than rows is a mistake, not a cap. */
		int64_t rows = v->shape.rank ? v->shape.dims[0] : 1;
		if (o->vars[k].shards > 1 && o->vars[k].shards > rows)
			return dvar_error_set(DVAR_EINVAL, "variable '%s' has %lld row%s%s: it cannot be "
			                                   "cut into %lld shards", v->name, (long long)rows,
			                      rows == 1 ? "" : "s", v->shape.rank ? "" : " (a scalar)",
			                      (long long)o->vars[k].shards);
		*want = o->vars[k].shards;
		return DVAR_OK;
	}
	if (v->dtype == DVAR_DTYPE_STRING)
		return DVAR_OK;
	if (!dvar_dtype_size(v->dtype))
		return dvar_error_tf_dtype(v->name, v->dtype);
	if (!dvar_var_is_sharded(r, i))
		return DVAR_OK;
	if (o->shards) {
		*want = o->shards;
	} else if (o->partitioner) {
		if (dvar_partitioner_apply(part, &v->shape, v->dtype, want) != DVAR_OK)
			return dvar_error_prefix("variable '%s'", v->name);
		if (*want < 1)
			*want = 1;
		/* MinSizePartitioner's max_shards defaults to 1, as TensorFlow's: say
		 * so rather than merge a sharded variable without a word. */
		if (*want == 1)
			dvar_op_note(op, "variable '%s': the partitioner '%s' gives 1 shard%s", v->name,
			             o->partitioner, part->kind == DVAR_PARTITIONER_MIN_SIZE &&
			             part->max_shards == 1 ? " (min-size's MAX_SHARDS defaults to 1, as "
			                                     "TensorFlow's)" : "");
	}
	return DVAR_OK;
}

/* Variable i as want div shards, or (want = 0) slice by slice as it was saved. */
static int copy_var(dvar_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                    int64_t want, dvar_writer *w)
{
	dvar_slice sl;
	int64_t *offsets = NULL, n = 0;
	int rc = DVAR_OK;

	if (v->dtype == DVAR_DTYPE_STRING) {
		dvar_op_note(c->op, "leaving out '%s', a string tensor (a dvar checkpoint holds "
		                    "numeric tensors only)", v->name);
		return DVAR_OK;
	}
	if (want == 0) {
		if (v->num_slices == 0)
			return DVAR_OK; /* nothing saved, nothing to declare */
		for (size_t j = 0; rc == DVAR_OK && j < v->num_slices; j++) {
			if ((rc = dvar_reader_var_slice(r, i, j, &sl)) == DVAR_OK)
				rc = dvar_copy_region(c, r, i, v, NULL, w, &sl);
		}
	} else {
		if ((rc = dvar_shard_layout(v->name, &v->shape, want, &offsets, &n)) != DVAR_OK)
			return rc;
		dvar_shard_note(c->op, v->name, &v->shape, want, n);
		if (n > 1 && dvar_var_is_replicated(r, i))
			dvar_op_note(c->op, "variable '%s' becomes a sharded variable of %lld shards: its "
			                    "synchronization and aggregation (a replicated variable's) are "
			                    "left out", v->name, (long long)n);
		for (int64_t k = 0; rc == DVAR_OK && k < n; k++) {
			dvar_shard_slice(&v->shape, offsets, k, &sl);
			rc = dvar_copy_region(c, r, i, v, NULL, w, &sl);
		}
		free(offsets);
	}
	if (rc == DVAR_OK)
		rc = dvar_copy_attrs(r, i, w, v->name, want ? n : 0);
	if (rc == DVAR_OK)
		dvar_op_written(c->op, v->name, v->raw_bytes);
	return rc;
}

/* Plan every variable (*want, malloc'ed) and count the bytes to copy. */
static int plan(const dvar_reshard_options *o, const dvar_partitioner *part, const dvar_op *op,
                dvar_reader *r, int64_t **want, uint64_t *total)
{
	size_t nv = dvar_reader_num_vars(r);
	unsigned char *used = calloc(o->num_vars + 1, 1);
	dvar_var_info v;
	int rc = DVAR_OK;

	*want = calloc(nv + 1, sizeof(int64_t));
	*total = 0;
	if (!*want || !used) {
		free(used);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; rc == DVAR_OK && i < nv; i++) {
		if ((rc = dvar_reader_var(r, i, &v)) != DVAR_OK ||
		    (rc = plan_var(o, part, op, r, i, &v, used, &(*want)[i])) != DVAR_OK ||
		    v.dtype == DVAR_DTYPE_STRING)
			continue;
		/* Resharded: the whole variable; kept: the slices saved. */
		uint64_t bytes = v.raw_bytes;
		if ((*want)[i])
			dvar_shape_num_bytes(&v.shape, v.dtype, &bytes);
		*total += bytes;
	}
	for (size_t k = 0; rc == DVAR_OK && k < o->num_vars; k++)
		if (!used[k])
			rc = dvar_error_set(DVAR_ENOTFOUND, "variable '%s' not found in checkpoint '%s'",
			                    o->vars[k].name, dvar_reader_path(r));
	free(used);
	return rc;
}

int dvar_reshard(const char *in, const char *out, const dvar_reshard_options *opts)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_partitioner part;
	dvar_reader *r = NULL;
	dvar_writer *w = NULL;
	int64_t *want = NULL;
	uint64_t total = 0;
	struct stat st;
	dvar_copier c;
	dvar_op op;
	int rc;

	if (!in || !out || !opts)
		return dvar_error_set(DVAR_EINVAL, "dvar_reshard: in, out and opts are required");
	if ((rc = check_options(opts, &part)) != DVAR_OK)
		return rc;
	if (lstat(out, &st) == 0)
		return dvar_error_set(DVAR_EEXISTS, "'%s' already exists; give a new directory for "
		                                    "the resharded checkpoint", out);
	ro.threads = dvar_op_threads(opts->threads);
	if ((rc = dvar_reader_open(&r, in, &ro)) != DVAR_OK)
		return rc;
	dvar_op_init(&op, &opts->cb, 0);
	if ((rc = plan(opts, &part, &op, r, &want, &total)) != DVAR_OK)
		goto done;
	op.total = total;
	wo.chunk_size = opts->chunk_size;
	wo.compress = opts->compress;
	wo.threads = ro.threads;
	if ((rc = dvar_writer_open(&w, out, &wo)) != DVAR_OK)
		goto done;
	dvar_copier_init(&c, &op);
	for (size_t i = 0; rc == DVAR_OK && i < dvar_reader_num_vars(r); i++) {
		dvar_var_info v;
		if ((rc = dvar_reader_var(r, i, &v)) == DVAR_OK)
			rc = copy_var(&c, r, i, &v, want[i], w);
	}
	dvar_copier_free(&c);
	if (rc == DVAR_OK && (rc = dvar_op_check(&op, out)) == DVAR_OK)
		rc = dvar_writer_commit(w);
done:
	dvar_writer_free(w);
	dvar_reader_free(r);
	free(want);
	return rc;
}
