/*
 * store/restore.c - dvar_restore: every worker restores the same variables
 * from one checkpoint, each into its own local replicas, whatever R and W
 * the checkpoint was saved with.
 *
 * Three rounds, each ending in an agreement (exchange.c) so that every
 * worker returns the same status:
 *   A. the chief opens the checkpoint (a root resolves to its latest) and
 *      tells the others which directory it is, so a save committing
 *      meanwhile cannot make workers read different checkpoints;
 *   B. every worker opens it and checks every name, dtype and shape before
 *      anything changes;
 *   C. every worker reads each value whole and assigns it.
 * Assigning needs no collective: a cross-replica assign sets this worker's
 * components only (ON_READ SUM taking this worker's share of the exact
 * split), so the workers never wait for each other between agreements.
 *
 * Ownership: everything allocated here is freed before dvar_restore returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "format/format.h"
#include "runtime/input_state.h"
#include "runtime/runtime.h"
#include "store/store.h"

/* One thing to restore: a distributed variable, a plain tensor or a
 * sharded variable. */
typedef struct {
	const char *name;
	int dtype;
	dvar_shape shape;
	size_t nbytes;
	dvar_variable *v;          /* a distributed variable */
	dvar_sharded_variable *sv; /* a sharded variable */
	void *data;                /* a plain tensor's destination */
	size_t index;              /* in the reader */
	dvar_input_iterator *iter; /* an input iterator */
	int64_t *table;            /* its saved table, read in round B */
	int64_t rows;
} target;

static int check_tensor(target *t, const dvar_store_tensor *x, size_t i)
{
	int rc = dvar_store_check_tensor(x, i, &t->shape, &t->nbytes);

	if (rc != DVAR_OK)
		return rc;
	if (t->nbytes && !x->data)
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': data is NULL", x->name);
	t->name = x->name;
	t->dtype = x->dtype;
	t->data = x->data;
	return DVAR_OK;
}

/* The arguments, checked by this worker alone. */
int dvar_restore_options_init(dvar_restore_options *opts, unsigned int version)
{
	static const dvar_restore_options init = DVAR_RESTORE_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_restore_options", version,
	                         DVAR_RESTORE_OPTIONS_VERSION);
}

static int prepare(dvar_strategy *s, const char *path, dvar_variable *const *vars, size_t n,
                   const dvar_restore_options *opts, target *targets)
{
	size_t nt = opts ? opts->num_tensors : 0, ns = opts ? opts->num_sharded : 0;
	size_t ni = opts ? opts->num_iterators : 0;
	int rc;

	if (opts && dvar_check_version("dvar_restore_options", opts->version,
	                               DVAR_RESTORE_OPTIONS_VERSION))
		return DVAR_EINVAL;
	if (!path || path[0] == '\0')
		return dvar_error_set(DVAR_EINVAL, "no checkpoint path given");
	if (n && !vars)
		return dvar_error_set(DVAR_EINVAL, "%zu variables but vars is NULL", n);
	if (nt && !opts->tensors)
		return dvar_error_set(DVAR_EINVAL, "%zu tensors but tensors is NULL", nt);
	if (ns && !opts->sharded)
		return dvar_error_set(DVAR_EINVAL, "%zu sharded variables but sharded is NULL", ns);
	if (ni && !opts->iterators)
		return dvar_error_set(DVAR_EINVAL, "%zu iterators but iterators is NULL", ni);
	if (!targets)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		dvar_variable *v = vars[i];

		if (!v)
			return dvar_error_set(DVAR_EINVAL, "variable #%zu is NULL", i);
		if (dvar_variable_strategy(v) != s)
			return dvar_error_set(DVAR_EINVAL, "variable '%s' belongs to another strategy",
			                      dvar_variable_name(v));
		targets[i].v = v;
		targets[i].name = dvar_variable_name(v);
		targets[i].dtype = dvar_variable_dtype(v);
		targets[i].shape = *dvar_variable_shape(v);
		targets[i].nbytes = dvar_variable_nbytes(v);
	}
	for (size_t i = 0; i < nt; i++)
		if ((rc = check_tensor(&targets[n + i], &opts->tensors[i], i)) != DVAR_OK)
			return rc;
	for (size_t i = 0; i < ns; i++) {
		dvar_sharded_variable *sv = opts->sharded[i];
		target *t = &targets[n + nt + i];
		uint64_t bytes = 0;

		if (!sv)
			return dvar_error_set(DVAR_EINVAL, "sharded variable #%zu is NULL", i);
		if (dvar_sharded_variable_strategy(sv) != s)
			return dvar_error_set(DVAR_EINVAL,
			                      "sharded variable '%s' belongs to another strategy",
			                      dvar_sharded_variable_name(sv));
		t->sv = sv;
		t->name = dvar_sharded_variable_name(sv);
		t->dtype = dvar_sharded_variable_dtype(sv);
		t->shape = *dvar_sharded_variable_shape(sv);
		dvar_shape_num_bytes(&t->shape, t->dtype, &bytes);
		t->nbytes = (size_t)bytes;
	}
	for (size_t i = 0; i < ni; i++) {
		dvar_input_iterator *x = opts->iterators[i];
		target *t = &targets[n + nt + ns + i];

		if (!x)
			return dvar_error_set(DVAR_EINVAL, "iterator #%zu is NULL", i);
		if (!dvar_input_iterator_name(x))
			return dvar_error_set(DVAR_EINVAL,
			                      "iterator #%zu has no name (dvar_input_options.name)", i);
		t->iter = x;
		t->name = dvar_input_iterator_name(x);
		t->dtype = DVAR_INT64;
	}
	return DVAR_OK;
}

/* Round B for an iterator: its entry, read whole (one small table), and
 * whether it can apply; the verdict is agreed like every other check. */
static int check_iterator(dvar_reader *r, target *t)
{
	dvar_var_info info;
	const char *kind = NULL;
	uint64_t bytes;

	if (dvar_reader_var(r, t->index, &info) != DVAR_OK)
		return dvar_error_prefix("'%s' in checkpoint '%s'", t->name, dvar_reader_path(r));
	if (dvar_reader_var_attr(r, t->index, DVAR_STORE_ATTR_KIND, &kind) != DVAR_OK ||
	    strcmp(kind, DVAR_KIND_ITERATOR) != 0 || info.dtype != DVAR_INT64 || info.shape.rank != 2 ||
	    info.shape.dims[0] < 1 || info.shape.dims[1] != DVAR_INPUT__STATE_COLUMNS)
		return dvar_error_set(DVAR_ESHAPE,
		                      "'%s' in checkpoint '%s' is not an input iterator's position "
		                      "(kind \"" DVAR_KIND_ITERATOR "\", int64 [workers, %d])",
		                      t->name, dvar_reader_path(r), DVAR_INPUT__STATE_COLUMNS);
	t->rows = info.shape.dims[0];
	bytes = (uint64_t)t->rows * DVAR_INPUT__STATE_COLUMNS * sizeof(int64_t);
	if (!(t->table = malloc((size_t)bytes)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (dvar_reader_read(r, t->index, NULL, t->table, bytes) != DVAR_OK)
		return dvar_error_prefix("restoring '%s'", t->name);
	return dvar_input_restore_state(t->iter, t->table, t->rows, t->name, 0);
}

/* Shard k of sv's rows as a slice of the full shape; its elements in *data
 * (NULL on workers that do not hold it) and their size. */
static int shard_slice(dvar_sharded_variable *sv, int64_t k, dvar_slice *slice, void **data,
                       uint64_t *bytes)
{
	dvar_shard_info info;
	int rc = dvar_sharded_variable_shard(sv, k, &info);

	if (rc != DVAR_OK)
		return rc;
	dvar_slice_full(slice, dvar_sharded_variable_shape(sv));
	if (slice->rank > 0) {
		slice->start[0] = info.offset;
		slice->length[0] = info.shape.dims[0];
	}
	*data = info.data;
	return dvar_shape_num_bytes(&info.shape, dvar_sharded_variable_dtype(sv), bytes);
}

/*
 * Whether the saved slices of variable index cover want (they never
 * overlap: the writer refuses that). TF's text when they do not.
 */
static int check_coverage(dvar_reader *r, const target *t, const dvar_slice *want)
{
	dvar_var_info info;
	uint64_t need = 0, have = 0;
	char spec[256];

	if (dvar_reader_var(r, t->index, &info) != DVAR_OK ||
	    dvar_slice_num_elements(want, &need) != DVAR_OK)
		return dvar_error_prefix("'%s' in checkpoint '%s'", t->name, dvar_reader_path(r));
	for (size_t j = 0; j < info.num_slices && have < need; j++) {
		dvar_slice saved, both;
		uint64_t k = 0;

		if (dvar_reader_var_slice(r, t->index, j, &saved) != DVAR_OK)
			return dvar_error_prefix("'%s' in checkpoint '%s'", t->name,
			                         dvar_reader_path(r));
		if (dvar_slice_intersect(&saved, want, &both) == 1 &&
		    dvar_slice_num_elements(&both, &k) == DVAR_OK)
			have += k;
	}
	if (have == need)
		return DVAR_OK;
	dvar_slice_format(want, &t->shape, spec, sizeof spec);
	return dvar_error_set(DVAR_ENOTFOUND,
	                      "Does not have sufficient slices for partitioned tensor %s to restore "
	                      "in slice_spec: %s (checkpoint '%s')",
	                      t->name, spec, dvar_reader_path(r));
}

/* Every worker checks every shard, so that all reach the same verdict. */
static int check_target_coverage(dvar_reader *r, const target *t)
{
	dvar_slice slice;
	void *data;
	uint64_t bytes;
	int rc;

	if (!t->sv) {
		dvar_slice_full(&slice, &t->shape);
		return check_coverage(r, t, &slice);
	}
	for (int64_t k = 0; k < dvar_sharded_variable_num_shards(t->sv); k++)
		if ((rc = shard_slice(t->sv, k, &slice, &data, &bytes)) != DVAR_OK ||
		    (rc = check_coverage(r, t, &slice)) != DVAR_OK)
			return rc;
	return DVAR_OK;
}

/* Round B's check: every target is in the checkpoint, with its dtype and shape. */
static int find_all(dvar_reader *r, target *targets, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		target *t = &targets[i];
		dvar_var_info info;
		char a[128], b[128];

		if (dvar_reader_find(r, t->name, &t->index) != DVAR_OK)
			return dvar_error_set(DVAR_ENOTFOUND, "'%s' is not in checkpoint '%s'", t->name,
			                      dvar_reader_path(r));
		if (t->iter) {
			int rc = check_iterator(r, t);

			if (rc != DVAR_OK)
				return rc;
			continue;
		}
		if (dvar_reader_var(r, t->index, &info) != DVAR_OK)
			return dvar_error_prefix("'%s' in checkpoint '%s'", t->name, dvar_reader_path(r));
		if (info.dtype == t->dtype && dvar_shape_equal(&info.shape, &t->shape)) {
			int rc = check_target_coverage(r, t);

			if (rc != DVAR_OK)
				return rc;
			continue;
		}
		dvar_shape_format(&info.shape, a, sizeof a);
		dvar_shape_format(&t->shape, b, sizeof b);
		return dvar_error_set(DVAR_ESHAPE,
		                      "'%s': checkpoint '%s' holds %s %s, the %s is %s %s", t->name,
		                      dvar_reader_path(r), dvar_dtype_name(info.dtype), a,
		                      t->v || t->sv ? "variable" : "tensor", dvar_dtype_name(t->dtype),
		                      b);
	}
	return DVAR_OK;
}

/*
 * Round C: the saved value is the logical one, so what each replica gets
 * follows the target's kind alone, which is exactly what a cross-replica
 * assign does: ON_WRITE and ON_READ MEAN / ONLY_FIRST_REPLICA / NONE give
 * every component the value; ON_READ SUM gives each replica its share of
 * the exact split (dvar_variable_split_sum).
 */
/* A sharded variable: each worker reads its own shards' rows, in place. */
static int read_shards(dvar_reader *r, const target *t)
{
	for (int64_t k = 0; k < dvar_sharded_variable_num_shards(t->sv); k++) {
		dvar_slice slice;
		void *data;
		uint64_t bytes;
		int rc = shard_slice(t->sv, k, &slice, &data, &bytes);

		if (rc == DVAR_OK && data && bytes)
			rc = dvar_reader_read(r, t->index, &slice, data, bytes);
		if (rc != DVAR_OK)
			return dvar_error_prefix("restoring '%s' (shard %lld)", t->name, (long long)k);
	}
	return DVAR_OK;
}

/* Variables and plain tensors are read in batches of about this many bytes
 * (dvar_reader_read_many), so that small ones are read together instead of
 * one after another; a larger one is a batch of its own. */
#define BATCH_BYTES ((size_t)64 << 20)
#define BATCH_MAX 256

/* Read targets[0..n) (variables and plain tensors) together, then assign
 * the variables from their buffers. */
static int assign_batch(dvar_reader *r, target *const *batch, size_t n)
{
	dvar_read_request req[BATCH_MAX] = { { 0 } };
	int rc = DVAR_OK;

	for (size_t k = 0; k < n && rc == DVAR_OK; k++) {
		const target *t = batch[k];
		/* Page-aligned, so that a cold read can land in it with O_DIRECT. */
		req[k] = (dvar_read_request){ t->index, NULL, t->v ? dvar_page_alloc(t->nbytes, 0) : t->data,
		                              t->nbytes };
		if (!req[k].dst)
			rc = dvar_error_set(DVAR_ENOMEM, "restoring '%s': out of memory", t->name);
	}
	if (rc == DVAR_OK && (rc = dvar_reader_read_many(r, req, n)) != DVAR_OK)
		dvar_error_prefix("restoring");
	for (size_t i = 0; i < n && rc == DVAR_OK; i++)
		if (batch[i]->v && (rc = dvar_variable_restore(batch[i]->v, req[i].dst)) != DVAR_OK)
			dvar_error_prefix("restoring '%s'", batch[i]->name);
	for (size_t i = 0; i < n; i++)
		if (batch[i]->v)
			free(req[i].dst); /* NULL where allocation stopped */
	return rc;
}

static int assign_all(dvar_reader *r, target *targets, size_t n)
{
	static unsigned char empty[1];
	target *batch[BATCH_MAX];
	size_t nb = 0, bytes = 0;

	for (size_t i = 0; i < n; i++) {
		target *t = &targets[i];
		int rc;

		if (t->sv) {
			if ((rc = read_shards(r, t)) != DVAR_OK)
				return rc;
			continue;
		}
		if (t->iter) {
			/* Checked in round B: cannot fail now. */
			if ((rc = dvar_input_restore_state(t->iter, t->table, t->rows, t->name, 1)) !=
			    DVAR_OK)
				return rc;
			continue;
		}
		if (t->nbytes == 0) {
			if (t->v && (rc = dvar_variable_restore(t->v, empty)) != DVAR_OK)
				return dvar_error_prefix("restoring '%s'", t->name);
			continue;
		}
		if (nb && (nb == BATCH_MAX || bytes + t->nbytes > BATCH_BYTES)) {
			if ((rc = assign_batch(r, batch, nb)) != DVAR_OK)
				return rc;
			nb = bytes = 0;
		}
		batch[nb++] = t;
		bytes += t->nbytes;
	}
	return nb ? assign_batch(r, batch, nb) : DVAR_OK;
}

static int restore(dvar_strategy *s, const char *path, dvar_variable *const *vars, size_t n,
                   const dvar_restore_options *opts)
{
	int W = dvar_strategy_num_workers(s);
	int chief = dvar_strategy_worker_id(s) == 0;
	int ok = opts && opts->version == DVAR_RESTORE_OPTIONS_VERSION;
	size_t nt = ok ? opts->num_tensors + opts->num_sharded + opts->num_iterators : 0;
	target *targets = calloc(n + nt ? n + nt : 1, sizeof *targets);
	size_t *offs = malloc(((size_t)W + 1) * sizeof *offs);
	const dvar_read_options *ropts = opts && opts->version == DVAR_RESTORE_OPTIONS_VERSION
	                                         ? opts->read
	                                         : NULL;
	dvar_reader *r = NULL;
	unsigned char *paths = NULL;
	const char *dir = NULL;
	char *copy = NULL;
	int rc;

	/* A: the chief resolves the checkpoint. */
	rc = prepare(s, path, vars, n, opts, targets);
	if (rc == DVAR_OK && !offs)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK && chief && (rc = dvar_reader_open(&r, path, ropts)) == DVAR_OK)
		dir = dvar_reader_path(r);
	rc = dvar_store_agree(s, rc, dir, dir ? strlen(dir) : 0, offs ? &paths : NULL, offs);
	if (rc != DVAR_OK)
		goto done;
	if (!(copy = malloc(offs[1] - offs[0] + 1))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else {
		memcpy(copy, paths + offs[0], offs[1] - offs[0]);
		copy[offs[1] - offs[0]] = '\0';
	}

	/* B: every worker opens it and finds everything before changing anything. */
	if (rc == DVAR_OK && !chief)
		rc = dvar_reader_open(&r, copy, ropts);
	if (rc == DVAR_OK)
		rc = find_all(r, targets, n + nt);
	rc = dvar_store_agree(s, rc, NULL, 0, NULL, NULL);

	/* C: read and assign. */
	if (rc == DVAR_OK)
		rc = dvar_store_agree(s, assign_all(r, targets, n + nt), NULL, 0, NULL, NULL);
	/* What was restored is the base of the next delta saved into its root. */
	if (rc == DVAR_OK && !dvar_reader_is_tf(r))
		dvar_store_restored(s, dvar_reader_path(r), vars, n, ok ? opts->sharded : NULL,
		                    ok ? opts->num_sharded : 0);
done:
	for (size_t i = 0; targets && i < n + nt; i++)
		free(targets[i].table);
	dvar_reader_free(r);
	free(paths);
	free(copy);
	free(offs);
	free(targets);
	return rc;
}

int dvar_restore(dvar_strategy *s, const char *path, dvar_variable *const *vars, size_t n,
                 const dvar_restore_options *opts)
{
	int rc;

	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_restore: strategy is NULL");
	rc = restore(s, path, vars, n, opts);
	if (rc != DVAR_OK)
		return dvar_error_prefix("restoring from '%s'", path ? path : "(null)");
	return DVAR_OK;
}
