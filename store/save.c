/*
 * store/save.c - dvar_save and dvar_save_async: every worker calls them with
 * the same variables at the same step, and one checkpoint comes out, each
 * value written once.
 *
 * A save is a job in two halves. begin(), collective, before the call
 * returns:
 *   1. local checks (arguments, the open function scope) and, from the
 *      chief, the save's token; every worker's list digest must match
 *      worker 0's;
 *   2. the plan (one writer per item, plan.c) and the staging run
 *      (stage.c): in replica context, ON_READ SUM and MEAN aggregates
 *      (collectives every worker takes part in) and, for an asynchronous
 *      save, the copies of what this worker writes;
 *   3. every worker opens its part (data file); the replicas are checked
 *      while it is written (stage.c), and the checksums travel to every
 *      worker, which all reach the same verdict on the replicas (for an
 *      asynchronous save, in round 4).
 * Then this worker's items are written into its part: inline for dvar_save,
 * in a background thread for dvar_save_async. finish(), collective:
 *   4. every part finished, its entries to the chief;
 *   5. the chief commits (or, after any failure, removes the staging
 *      directory) and every worker receives its result.
 * A worker that fails locally keeps taking part in every collective step, so
 * no peer waits for it; its failure surfaces at the next agreement.
 *
 * Ownership: a job owns copies of everything it needs after begin()
 * returns, except the values its replica check still reads, which it holds
 * (track.h) instead; the strategy's store slot owns a pending asynchronous
 * job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/runtime.h"
#include "sharding/sharded.h"
#include "store/plan.h"
#include "store/save.h"

#define NAME_MAX_BYTES 1024

static const char *const kind_names[] = { DVAR_KIND_MIRRORED, DVAR_KIND_SYNC_ON_READ,
	                                   DVAR_KIND_PLAIN, DVAR_KIND_SHARDED, DVAR_KIND_ITERATOR };

static int keep(saved_error *e, int code)
{
	e->code = code;
	snprintf(e->message, sizeof e->message, "%s", code ? dvar_error_last()->message : "");
	return code;
}

/*
 * What the store keeps in the strategy between calls: the pending
 * asynchronous save, and the staging arena of the last save, whose pages are
 * already touched, so that the next save's copy costs a memcpy and not page
 * faults (on a VM, faulting fresh pages in runs at a fraction of memcpy's
 * speed).
 */
typedef struct {
	char *root; /* dvar_store_root_key's */
	char *ckpt; /* its checkpoint this strategy last committed or restored */
} root_base;

typedef struct {
	dvar_strategy *s;
	save_job *pending;
	unsigned char *arena;
	size_t arena_cap;
	root_base *bases;     /* the bases of delta saves, per root */
	size_t num_bases;
	int have_last;
	dvar_save_info last;  /* dvar_save_last */
} store_state;

static store_state *state_of(dvar_strategy *s);

static const char *base_of(const store_state *st, const char *root)
{
	for (size_t i = 0; st && i < st->num_bases; i++)
		if (strcmp(st->bases[i].root, root) == 0)
			return st->bases[i].ckpt; /* NULL: forgotten (note_base) */
	return NULL;
}

/* root's checkpoint ckpt is the base of the next delta into it. Out of
 * memory, root's base is forgotten rather than left at the one before,
 * which the other workers no longer share. */
static int note_base(store_state *st, const char *root, const char *ckpt)
{
	char *c = strdup(ckpt);
	for (size_t i = 0; i < st->num_bases; i++)
		if (strcmp(st->bases[i].root, root) == 0) {
			free(st->bases[i].ckpt);
			st->bases[i].ckpt = c;
			return c ? DVAR_OK : dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
	root_base *grown = c ? realloc(st->bases, (st->num_bases + 1) * sizeof *grown) : NULL;
	char *r = grown ? strdup(root) : NULL;
	if (grown)
		st->bases = grown;
	if (!r) {
		free(c);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	st->bases[st->num_bases].root = r;
	st->bases[st->num_bases++].ckpt = c;
	return DVAR_OK;
}

static int every_worker(const save_job *j)
{
	return (j->flags & DVAR_SAVE_EVERY_WORKER) != 0;
}

/* ---------------------------------------------------------------- local checks */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int check_unique(const item *items, size_t n)
{
	const char **names = malloc((n ? n : 1) * sizeof *names);
	int rc = DVAR_OK;

	if (!names)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (items[i].shard == 0)
			names[k++] = items[i].name;
	qsort(names, k, sizeof *names, name_cmp);
	for (size_t i = 1; i < k && rc == DVAR_OK; i++)
		if (strcmp(names[i - 1], names[i]) == 0)
			rc = dvar_error_set(DVAR_EINVAL, "the name '%s' is given twice", names[i]);
	free(names);
	return rc;
}

static int copy_name(item *it, const char *name)
{
	if (!(it->name = strdup(name)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	return DVAR_OK;
}

static int add_variable(save_job *j, item *it, dvar_variable *v, size_t i)
{
	if (!v)
		return dvar_error_set(DVAR_EINVAL, "variable #%zu is NULL", i);
	if (dvar_variable_strategy(v) != j->s)
		return dvar_error_set(DVAR_EINVAL, "variable '%s' belongs to another strategy",
		                      dvar_variable_name(v));
	it->v = v;
	it->dtype = dvar_variable_dtype(v);
	it->shape = *dvar_variable_shape(v);
	it->nbytes = dvar_variable_nbytes(v);
	it->sync = dvar_variable_synchronization(v);
	it->agg = dvar_variable_aggregation(v);
	it->kind = it->sync == DVAR_SYNC_ON_READ ? KIND_SYNC_ON_READ : KIND_MIRRORED;
	/* An aggregate over every worker's replicas changes where no one
	 * tracker sees it: sync-on-read values are saved whole. */
	if ((j->flags & DVAR_SAVE_DELTA) && it->kind == KIND_MIRRORED)
		it->track = dvar_variable_track(v);
	it->row_bytes = it->shape.rank && it->shape.dims[0] ? it->nbytes / (size_t)it->shape.dims[0]
	                                                     : it->nbytes;
	return copy_name(it, dvar_variable_name(v));
}

int dvar_store_check_tensor(const dvar_store_tensor *t, size_t i, dvar_shape *shape,
                             size_t *nbytes)
{
	uint64_t n = 0;

	if (!t->name || t->name[0] == '\0' || strnlen(t->name, NAME_MAX_BYTES + 1) > NAME_MAX_BYTES)
		return dvar_error_set(DVAR_EINVAL, "tensor #%zu: a name of 1 to %d bytes is needed", i,
		                      NAME_MAX_BYTES);
	if (dvar_dtype_size(t->dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': unknown dtype %d", t->name, t->dtype);
	if (dvar_shape_init(shape, t->shape.rank, t->shape.dims) != DVAR_OK ||
	    dvar_shape_num_bytes(shape, t->dtype, &n) != DVAR_OK)
		return dvar_error_prefix("tensor '%s'", t->name);
	if ((uint64_t)(size_t)n != n)
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': too large for this machine", t->name);
	*nbytes = (size_t)n;
	return DVAR_OK;
}

static int add_tensor(save_job *j, item *it, const dvar_store_tensor *t, size_t i)
{
	int rc = dvar_store_check_tensor(t, i, &it->shape, &it->nbytes);

	if (rc != DVAR_OK)
		return rc;
	/* Only writers read plain data: the chief, or everyone for EVERY_WORKER. */
	if ((j->worker == 0 || every_worker(j)) && it->nbytes && !t->data)
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': data is NULL", t->name);
	it->dtype = t->dtype;
	it->kind = KIND_PLAIN;
	it->src = t->data;
	return copy_name(it, t->name);
}

/* An iterator: a [W, columns] int64 table, filled by gather_iterators(). */
static int add_iterator(save_job *j, item *it, dvar_input_iterator *x, size_t i)
{
	int64_t dims[2] = { j->W, DVAR_INPUT__STATE_COLUMNS };

	if (!x)
		return dvar_error_set(DVAR_EINVAL, "iterator #%zu is NULL", i);
	if (!dvar_input_iterator_name(x))
		return dvar_error_set(DVAR_EINVAL, "iterator #%zu has no name (dvar_input_options.name)",
		                      i);
	it->kind = KIND_ITERATOR;
	it->dtype = DVAR_INT64;
	it->iter = x;
	if (dvar_shape_init(&it->shape, 2, dims) != DVAR_OK)
		return dvar_error_prefix("iterator '%s'", dvar_input_iterator_name(x));
	it->nbytes = (size_t)j->W * DVAR_INPUT__STATE_COLUMNS * sizeof(int64_t);
	if (!(it->table = malloc(it->nbytes)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	it->src = it->table;
	return copy_name(it, dvar_input_iterator_name(x));
}

/* One item per shard; each is written by the worker that holds it. */
static int add_sharded(save_job *j, item *items, dvar_sharded_variable *sv, size_t i)
{
	const dvar_shape *full;
	int64_t n;

	if (!sv)
		return dvar_error_set(DVAR_EINVAL, "sharded variable #%zu is NULL", i);
	if (dvar_sharded_variable_strategy(sv) != j->s)
		return dvar_error_set(DVAR_EINVAL, "sharded variable '%s' belongs to another strategy",
		                      dvar_sharded_variable_name(sv));
	n = dvar_sharded_variable_num_shards(sv);
	if (every_worker(j) && j->W > 1 && n > 1)
		return dvar_error_set(DVAR_ENOTSUPP,
		                      "sharded variable '%s': DVAR_SAVE_EVERY_WORKER needs every value "
		                      "on every worker, and each worker holds only its own shards",
		                      dvar_sharded_variable_name(sv));
	full = dvar_sharded_variable_shape(sv);
	for (int64_t k = 0; k < n; k++) {
		item *it = &items[k];
		dvar_shard_info info;
		uint64_t bytes = 0;
		int rc = dvar_sharded_variable_shard(sv, k, &info);

		if (rc != DVAR_OK)
			return rc;
		it->kind = KIND_SHARDED;
		it->dtype = dvar_sharded_variable_dtype(sv);
		it->shape = *full;
		it->shard = k;
		it->nshards = n;
		it->writer = info.owner;
		it->src = info.data;
		dvar_slice_full(&it->slice, full);
		if (full->rank > 0) {
			it->slice.start[0] = info.offset;
			it->slice.length[0] = info.shape.dims[0];
		}
		if (dvar_shape_num_bytes(&info.shape, it->dtype, &bytes) != DVAR_OK)
			return dvar_error_prefix("sharded variable '%s'", info.name);
		it->nbytes = (size_t)bytes;
		if (j->flags & DVAR_SAVE_DELTA)
			it->track = dvar_sharded_variable_track(sv);
		it->row_bytes = full->rank && info.shape.dims[0] ? it->nbytes / (size_t)info.shape.dims[0]
		                                                : it->nbytes;
		if ((rc = copy_name(it, dvar_sharded_variable_name(sv))) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

static int choose_base(save_job *j);

/* Everything this worker can check on its own, before talking to the others. */
static int prepare(save_job *j, const char *root, dvar_variable *const *vars, size_t n,
                   const dvar_save_options *opts)
{
	size_t nt = opts ? opts->num_tensors : 0, ns = opts ? opts->num_sharded : 0, total;
	size_t ni = opts ? opts->num_iterators : 0;
	const unsigned int known = DVAR_SAVE_ALLOW_REPLICA_MISMATCH | DVAR_SAVE_SKIP_REPLICA_CHECK |
	                           DVAR_SAVE_EVERY_WORKER | DVAR_SAVE_DELTA | DVAR_SAVE_NEW_CHAIN;
	int rc;

	if (opts &&
	    dvar_check_version("dvar_save_options", opts->version, DVAR_SAVE_OPTIONS_VERSION))
		return DVAR_EINVAL;
	if (opts && (opts->flags & ~known))
		return dvar_error_set(DVAR_EINVAL, "unknown save flags 0x%x", opts->flags & ~known);
	if (!root || root[0] == '\0')
		return dvar_error_set(DVAR_EINVAL, "no checkpoint root given");
	if (j->step < 0)
		return dvar_error_set(DVAR_EINVAL, "step %lld is negative", (long long)j->step);
	if (n && !vars)
		return dvar_error_set(DVAR_EINVAL, "%zu variables but vars is NULL", n);
	if (nt && !opts->tensors)
		return dvar_error_set(DVAR_EINVAL, "%zu tensors but tensors is NULL", nt);
	if (ns && !opts->sharded)
		return dvar_error_set(DVAR_EINVAL, "%zu sharded variables but sharded is NULL", ns);
	if (ni && !opts->iterators)
		return dvar_error_set(DVAR_EINVAL, "%zu iterators but iterators is NULL", ni);
	if (!(j->root = strdup(root)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (opts) {
		j->flags = opts->flags;
		if (opts->write)
			j->wopts = *opts->write;
	}
	if ((j->flags & DVAR_SAVE_DELTA) && every_worker(j))
		return dvar_error_set(DVAR_ENOTSUPP, "DVAR_SAVE_DELTA and DVAR_SAVE_EVERY_WORKER "
		                      "cannot be combined: each worker's own checkpoint has no "
		                      "shared base");
	if ((rc = choose_base(j)) != DVAR_OK)
		return rc;
	j->late_verdict = j->async && !(j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH);
	if (j->worker != 0 && !every_worker(j)) {
		/* Publishing and retention are the chief's, and so is reporting. */
		j->wopts.progress = NULL;
		j->wopts.progress_userdata = NULL;
	}
	total = n + nt + ni;
	for (size_t i = 0; i < ns; i++)
		total += opts->sharded[i] ? (size_t)dvar_sharded_variable_num_shards(opts->sharded[i])
		                          : 0;
	if (!(j->items = calloc(total ? total : 1, sizeof *j->items)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		if ((rc = add_variable(j, &j->items[j->n++], vars[i], i)) != DVAR_OK)
			return rc;
	for (size_t i = 0; i < nt; i++)
		if ((rc = add_tensor(j, &j->items[j->n++], &opts->tensors[i], i)) != DVAR_OK)
			return rc;
	for (size_t i = 0; i < ns; i++) {
		if ((rc = add_sharded(j, &j->items[j->n], opts->sharded[i], i)) != DVAR_OK)
			return rc;
		j->n += (size_t)dvar_sharded_variable_num_shards(opts->sharded[i]);
	}
	for (size_t i = 0; i < ni; i++)
		if ((rc = add_iterator(j, &j->items[j->n++], opts->iterators[i], i)) != DVAR_OK)
			return rc;
	if ((rc = check_unique(j->items, j->n)) != DVAR_OK)
		return rc;
	/* One snapshot per tracker: a sharded variable's items share theirs. */
	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];
		if (!it->track)
			continue;
		it->snap = i && j->items[i - 1].track == it->track ? j->items[i - 1].snap
		                                                    : dvar_track_snapshot(it->track);
	}
	return dvar_strategy_check_saveable(j->s);
}

/* A delta save's root as trackers know it, and its base: the checkpoint of
 * it this strategy last committed or restored, while it is still there. */
static int choose_base(save_job *j)
{
	const char *b;
	char *dir, *index;
	int rc = DVAR_OK;

	if (!(j->flags & DVAR_SAVE_DELTA))
		return DVAR_OK;
	if (!(j->root_key = dvar_store_root_key(j->root)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	b = base_of(dvar_strategy_store_slot(j->s), j->root_key);
	if (!b || (j->flags & DVAR_SAVE_NEW_CHAIN))
		return DVAR_OK;
	dir = dvar_path_join(j->root, b);
	index = dir ? dvar_path_join(dir, DVAR_INDEX_NAME) : NULL;
	if (!index)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	else if (dvar_fs_exists(index) && !(j->base = strdup(b)))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	free(index);
	free(dir);
	return rc;
}

/* ---------------------------------------------------------------- agreeing on the list */

/* FNV-1a, 64 bits: enough to tell two workers' descriptions apart. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* What every worker must agree on about an item. */
static uint64_t digest(const item *it)
{
	int64_t d[9 + DVAR_MAX_RANK] = { it->kind,    it->sync,           it->agg,
		                         it->dtype,   it->shape.rank,     it->shard,
		                         it->nshards, it->slice.start[0], it->slice.length[0] };
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < it->shape.rank; i++)
		d[9 + i] = it->shape.dims[i];
	h = fnv(h, d, sizeof d);
	return fnv(h, it->name, strlen(it->name) + 1);
}

/* Round 1's payload: the token (NUL-padded), the flags, the item count, the
 * base's digest, then the items'. */
#define LIST_HEAD (TOKEN_BYTES + 24)
/* The base's digest in it: 0 without a base. */
#define LIST_BASE (TOKEN_BYTES + 16)

/* Whether some worker has no base for a delta. */
static int a_worker_without_base(const save_job *j, const unsigned char *all, const size_t *offs)
{
	for (int w = 0; w < j->W; w++) {
		uint64_t d;

		memcpy(&d, all + offs[w] + LIST_BASE, 8);
		if (d == 0)
			return 1;
	}
	return 0;
}

/* bases: every worker has a base, which must then be the same one. */
static int compare_lists(const save_job *j, const unsigned char *all, const size_t *offs, int bases)
{
	for (int w = 1; w < j->W; w++) {
		const unsigned char *a = all + offs[0] + TOKEN_BYTES;
		const unsigned char *b = all + offs[w] + TOKEN_BYTES;
		uint64_t fa, fb, na, nb;

		memcpy(&fa, a, 8);
		memcpy(&fb, b, 8);
		memcpy(&na, a + 8, 8);
		memcpy(&nb, b + 8, 8);
		if (bases && memcmp(all + offs[0] + LIST_BASE, all + offs[w] + LIST_BASE, 8) != 0)
			return dvar_error_set(DVAR_EINVAL,
			                      "the workers would save deltas over different checkpoints: "
			                      "worker %d's last save or restore into this root is not "
			                      "worker 0's",
			                      w);
		if (fa != fb)
			return dvar_error_set(DVAR_EINVAL,
			                      "the workers save with different flags: worker 0 passes "
			                      "0x%llx, worker %d passes 0x%llx",
			                      (unsigned long long)fa, w, (unsigned long long)fb);
		if (na != nb)
			return dvar_error_set(DVAR_EINVAL,
			                      "the workers save different lists: worker 0 passes %llu "
			                      "variables and tensors, worker %d passes %llu",
			                      (unsigned long long)na, w, (unsigned long long)nb);
		for (uint64_t i = 0; i < na; i++)
			if (memcmp(a + 24 + 8 * i, b + 24 + 8 * i, 8) != 0)
				return dvar_error_set(DVAR_EINVAL,
				                      "the workers save different lists: item #%llu ('%s' on "
				                      "worker %d) differs between worker 0 and worker %d in "
				                      "name, kind, dtype, shape, synchronization or "
				                      "aggregation",
				                      (unsigned long long)i,
				                      i < j->n ? j->items[i].name : "none", j->worker, w);
	}
	return DVAR_OK;
}

/*
 * Round 1. On success j->token is the chief's token on every worker (each
 * worker's own with DVAR_SAVE_EVERY_WORKER, whose staging is its own).
 */
static int agree_on_list(save_job *j, int rc)
{
	size_t len = LIST_HEAD + 8 * j->n;
	unsigned char *mine = rc == DVAR_OK ? malloc(len) : NULL;
	unsigned char *all = NULL;
	size_t *offs = malloc(((size_t)j->W + 1) * sizeof *offs);
	uint64_t head[3] = { j->flags, j->n, 0 };

	if (rc == DVAR_OK && (!mine || !offs))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK) {
		memset(j->token, 0, sizeof j->token);
		dvar_tmp_tag(j->token);
		memcpy(mine, j->token, TOKEN_BYTES);
		if (j->base)
			head[2] = fnv(0xcbf29ce484222325ull, j->base, strlen(j->base) + 1);
		memcpy(mine + TOKEN_BYTES, head, 24);
		for (size_t i = 0; i < j->n; i++) {
			uint64_t h = digest(&j->items[i]);

			memcpy(mine + LIST_HEAD + 8 * i, &h, 8);
		}
	}
	rc = dvar_store_agree(j->s, rc, mine, rc == DVAR_OK ? len : 0, offs ? &all : NULL, offs);
	free(mine);
	if (rc == DVAR_OK && !offs)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK) {
		if (!every_worker(j))
			memcpy(j->token, all, TOKEN_BYTES);
		j->token[TOKEN_BYTES] = '\0';
		/* A worker that lost track of the base (out of memory when the last
		 * save was noted) makes this save whole everywhere, not an error. */
		int bases = !a_worker_without_base(j, all, offs);
		/* Every worker compares every list with worker 0's: the same verdict everywhere. */
		rc = compare_lists(j, all, offs, bases);
		if (rc == DVAR_OK && !bases) {
			free(j->base);
			j->base = NULL;
		}
	}
	free(all);
	free(offs);
	return rc;
}

/* Checks that depend only on the agreed list: the same outcome everywhere. */
static int check_saveable_kinds(const save_job *j)
{
	for (size_t i = 0; i < j->n; i++) {
		const item *it = &j->items[i];
		char what[DVAR_ERROR_MESSAGE_MAX];
		int rc;

		if (it->kind != KIND_SYNC_ON_READ)
			continue;
		/* ReduceOp.from_variable_aggregation, TF's text. */
		if (it->agg == DVAR_AGG_NONE)
			return dvar_error_set(DVAR_EINVAL,
			                      "saving variable '%s': Could not convert from "
			                      "`tf.VariableAggregation` VariableAggregation.NONE "
			                      "to`tf.distribute.ReduceOp` type",
			                      it->name);
		snprintf(what, sizeof what, "saving variable '%s' (aggregation %s)", it->name,
		         dvar_store_agg_name(it->agg));
		if (it->agg != DVAR_AGG_ONLY_FIRST_REPLICA &&
		    (rc = dvar_kernel_check(it->dtype, DVAR_KOP_ADD, what)) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

/*
 * After round 1, when the agreed list has iterators (the same decision on
 * every worker): every worker's row of each, to every worker, so that the
 * writer (the chief, or each worker for DVAR_SAVE_EVERY_WORKER) holds the
 * whole table. The rows are the positions the callers have consumed.
 */
static int gather_iterators(save_job *j)
{
	const size_t row = DVAR_INPUT__STATE_COLUMNS * sizeof(int64_t);
	size_t ni = 0, k = 0, *offs = malloc(((size_t)j->W + 1) * sizeof *offs);
	unsigned char *mine, *all = NULL;
	int rc = DVAR_OK;

	for (size_t i = 0; i < j->n; i++)
		ni += j->items[i].kind == KIND_ITERATOR;
	if (!ni) {
		free(offs);
		return DVAR_OK;
	}
	mine = malloc(ni * row);
	if (!mine || !offs)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < j->n && rc == DVAR_OK; i++)
		if (j->items[i].kind == KIND_ITERATOR)
			dvar_input_state_row(j->items[i].iter, (int64_t *)(void *)(mine + row * k++));
	rc = dvar_store_agree(j->s, rc, mine, rc == DVAR_OK ? ni * row : 0, offs ? &all : NULL,
	                       offs);
	for (size_t i = 0, q = 0; i < j->n && rc == DVAR_OK; i++) {
		if (j->items[i].kind != KIND_ITERATOR)
			continue;
		for (int w = 0; w < j->W; w++)
			memcpy((unsigned char *)j->items[i].table + row * (size_t)w,
			       all + offs[w] + row * q, row);
		q++;
	}
	free(mine);
	free(all);
	free(offs);
	return rc;
}

/* ---------------------------------------------------------------- the plan */

/* Values only worker 0 holds (replica 0's, the chief's plain data). */
static int pinned_to_chief(const item *it)
{
	return it->kind == KIND_PLAIN || it->kind == KIND_ITERATOR ||
	       (it->kind == KIND_SYNC_ON_READ && it->agg == DVAR_AGG_ONLY_FIRST_REPLICA);
}

/*
 * One writer per item (plan.c): every item on its own worker for
 * DVAR_SAVE_EVERY_WORKER; otherwise a shard on its owner and the values only
 * the chief holds on worker 0, the rest balanced. A function of the agreed
 * list and W alone, so every worker computes the same plan.
 */
static int make_plan(save_job *j)
{
	dvar_plan_value *values;
	int *writers, rc;

	if (every_worker(j)) {
		for (size_t i = 0; i < j->n; i++)
			j->items[i].writer = j->worker;
		return DVAR_OK;
	}
	values = malloc((j->n ? j->n : 1) * sizeof *values);
	writers = malloc((j->n ? j->n : 1) * sizeof *writers);
	if (!values || !writers) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else {
		for (size_t i = 0; i < j->n; i++) {
			const item *it = &j->items[i];

			values[i].nbytes = it->nbytes;
			values[i].holder = DVAR_PLAN_ANY_WORKER;
			if (it->kind == KIND_SHARDED)
				values[i].holder = it->writer; /* its owner (add_sharded) */
			else if (pinned_to_chief(it))
				values[i].holder = 0;
		}
		rc = dvar_store_plan(values, j->n, j->W, writers);
		for (size_t i = 0; i < j->n && rc == DVAR_OK; i++)
			j->items[i].writer = writers[i];
	}
	free(values);
	free(writers);
	return rc;
}

/* ---------------------------------------------------------------- writing a part */

/* A delta's item: the rows it changed (gathered from the whole value unless
 * staged so), or, once per variable and part, the variable unchanged. */
static int add_delta(dvar_writer *w, const item *it, int declared)
{
	unsigned char *rows = NULL;
	int rc;

	if (it->delta == DVAR_DELTA_SAME)
		return declared ? DVAR_OK : dvar_writer_add_unchanged(w, it->name, it->dtype, &it->shape);
	if (!it->packed && it->nrows && !(rows = malloc((size_t)it->nrows * it->row_bytes)))
		return dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory for %llu changed rows",
		                      it->name, (unsigned long long)it->nrows);
	if (rows)
		dvar_store_gather_rows(it, it->data, rows);
	rc = dvar_writer_add_rows(w, it->name, it->dtype, &it->shape, it->rows, (size_t)it->nrows,
	                          rows ? rows : it->data);
	free(rows);
	return rc;
}

/* One shard is a plain entry, as TF writes a full slice. */
static int sliced(const item *it)
{
	return it->kind == KIND_SHARDED && it->nshards > 1;
}

/* An item saved whole, as a request of dvar_writer_add_many. */
static dvar_write_request whole_request(const item *it)
{
	return (dvar_write_request){ it->name, it->dtype, &it->shape, sliced(it) ? &it->slice : NULL,
		                     it->data };
}

/* An item's attributes, once its value is added. */
static int set_attrs(dvar_writer *w, const item *it)
{
	int kind = it->kind == KIND_SHARDED && !sliced(it) ? KIND_PLAIN : it->kind;
	int rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_KIND, kind_names[kind]);
	char count[24];

	if (rc == DVAR_OK && sliced(it)) {
		snprintf(count, sizeof count, "%lld", (long long)it->nshards);
		rc = dvar_writer_set_attr(w, it->name, DVAR_SHARDING_ATTR_SHARDS, count);
		if (rc == DVAR_OK)
			rc = dvar_writer_set_attr(w, it->name, DVAR_SHARDING_ATTR_LAYOUT, DVAR_LAYOUT_DIV);
	}
	if (rc == DVAR_OK && it->v)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_SYNCHRONIZATION,
		                          dvar_store_sync_name(it->sync));
	if (rc == DVAR_OK && it->v)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_AGGREGATION,
		                          dvar_store_agg_name(it->agg));
	if (rc == DVAR_OK && it->kind == KIND_ITERATOR)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_ITERATOR_COLUMNS,
		                          DVAR_INPUT__STATE_NAMES);
	if (rc == DVAR_OK && it->mismatch)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_REPLICA_CHECK,
		                          DVAR_REPLICA_CHECK_MISMATCH);
	return rc;
}

/* This worker's items saved whole, all in one dvar_writer_add_many: the
 * chunks of many small variables in flight together. */
static int add_whole_items(save_job *j)
{
	dvar_write_request *req = malloc((j->n ? j->n : 1) * sizeof *req);
	size_t n = 0;
	int rc;

	if (!req)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < j->n; i++)
		if (j->items[i].writer == j->worker && j->items[i].delta == DVAR_DELTA_WHOLE)
			req[n++] = whole_request(&j->items[i]);
	rc = dvar_writer_add_many(j->w, req, n);
	free(req);
	return rc;
}

/* This worker's items into its part, then the part's entries: no MPI, so
 * it may run in the background while the coordinator goes on. */
static void *write_part(void *arg)
{
	save_job *j = arg;
	int rc;

	dvar_store_checksum_deferred(j);
	rc = add_whole_items(j);
	const char *last = NULL; /* the variable this part wrote last */
	for (size_t i = 0; i < j->n && rc == DVAR_OK; i++) {
		const item *it = &j->items[i];

		if (it->writer != j->worker)
			continue;
		/* An unchanged sharded variable is declared once per part (its
		 * items are consecutive). */
		if (it->delta != DVAR_DELTA_WHOLE)
			rc = add_delta(j->w, it, last && strcmp(last, it->name) == 0);
		if (rc == DVAR_OK)
			rc = set_attrs(j->w, it);
		last = it->name;
	}
	if (rc == DVAR_OK)
		j->bytes = dvar_writer_data_bytes(j->w);
	if (rc == DVAR_OK)
		rc = dvar_writer_finish_part(j->w, &j->blob, &j->blob_len);
	keep(&j->local, rc);
	atomic_store(&j->written, 1);
	return NULL;
}

/* ---------------------------------------------------------------- the job */

static void job_free(save_job *j)
{
	if (!j)
		return;
	dvar_writer_free(j->w);
	for (size_t i = 0; i < j->n; i++) {
		free(j->items[i].name);
		free(j->items[i].table);
		free(j->items[i].rows);
	}
	dvar_store_arena_free(j->s, j->arena);
	free(j->items);
	free(j->root_key);
	free(j->base);
	free(j->sums);
	free(j->differs);
	dvar_free(j->blob);
	free(j->root);
	free(j);
}

/* Who removes this save's staging directory after a failure. */
static int cleans_up(const save_job *j)
{
	return j->worker == 0 || every_worker(j);
}

static void abort_staging(save_job *j)
{
	/* Never touches a committed checkpoint: only this token's staging. */
	if (cleans_up(j))
		dvar_writer_abort_step_parts(j->root, j->step, j->token);
}

static int new_job(save_job **out, dvar_strategy *s, int64_t step, int async)
{
	dvar_write_options defaults = DVAR_WRITE_OPTIONS_INIT;
	save_job *j = calloc(1, sizeof *j);

	*out = j;
	if (!j)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	j->s = s;
	j->step = step;
	j->async = async;
	j->W = dvar_strategy_num_workers(s);
	j->R = dvar_strategy_num_replicas_in_sync(s) / j->W;
	j->worker = dvar_strategy_worker_id(s);
	j->wopts = defaults;
	j->t0 = dvar_now();
	atomic_init(&j->written, 0);
	atomic_init(&j->check_from, 0);
	atomic_init(&j->unchecked, 0);
	return DVAR_OK;
}

/* The part's writes: in a thread of their own (sync too, so that the replica
 * check overlaps them), inline when no thread is to be had. */
static void start_writing(save_job *j)
{
	if (pthread_create(&j->thread, NULL, write_part, j) == 0)
		j->threaded = 1;
	else
		write_part(j);
}

/* The part's writes and, asynchronous, the replica check: both stopped. */
static void stop_writing(save_job *j)
{
	if (j->threaded)
		pthread_join(j->thread, NULL);
	j->threaded = 0;
	dvar_store_check_join(j);
}

/*
 * Rounds 1 to 3: on success this worker's part is being written (for a
 * synchronous save too: finish() waits for it). Returns the agreed status;
 * on failure nothing is left behind and the job may be freed.
 */
static int begin(save_job *j, const char *root, dvar_variable *const *vars, size_t n,
                 const dvar_save_options *opts)
{
	int rc, opened;

	/* Round 1: checks, token, the same list everywhere. */
	rc = agree_on_list(j, prepare(j, root, vars, n, opts));
	if (rc == DVAR_OK)
		rc = check_saveable_kinds(j);
	/* The plan comes out the same everywhere, but its allocations can fail
	 * on one worker alone: agreed, or the others would wait for it in the
	 * next round (a hang, found by failing allocations in turn). */
	if (rc == DVAR_OK)
		rc = dvar_store_agree(j->s, make_plan(j), NULL, 0, NULL, NULL);
	if (rc != DVAR_OK)
		return rc; /* the same verdict everywhere; nothing was created */
	if ((rc = gather_iterators(j)) != DVAR_OK)
		return rc; /* agreed */
	if ((rc = dvar_store_decide_delta(j)) != DVAR_OK)
		return rc; /* agreed */

	/* Round 2: aggregates (and, asynchronous, the copies). */
	keep(&j->stage_error, dvar_store_stage_alloc(j));
	if ((rc = dvar_store_stage(j, PHASE_VALUES)) != DVAR_OK)
		return rc;

	/* Round 3: every worker opens its part and starts writing; the
	 * replicas are judged meanwhile (a synchronous save checksums them now).
	 * A staging failure that no run reported (the list gave the run nothing
	 * to do) fails here, in the agreement. */
	if (j->stage_error.code != DVAR_OK) {
		rc = dvar_error_set(j->stage_error.code, "%s", j->stage_error.message);
	} else {
		dvar_store_point_at_data(j);
		rc = every_worker(j) ? dvar_writer_open_step_part(&j->w, j->root, j->step, j->token,
		                                                  0, 1, &j->wopts)
		                     : dvar_writer_open_step_part(&j->w, j->root, j->step, j->token,
		                                                  j->worker, j->W, &j->wopts);
		if (rc == DVAR_OK && j->base)
			rc = dvar_writer_set_base(j->w, j->base);
	}
	opened = rc == DVAR_OK;
	rc = dvar_store_agree(j->s, rc, NULL, 0, NULL, NULL);
	if (rc == DVAR_OK) {
		/* Marks (DVAR_SAVE_ALLOW_REPLICA_MISMATCH) go into the entries:
		 * judge before writing. A verdict that can only fail the save may
		 * come while the part is written. */
		int marks = (j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH) != 0;

		if (marks)
			rc = dvar_store_agree_on_replicas(j, j->async ? DVAR_OK
			                                               : dvar_store_stage(j, PHASE_CHECK));
		if (rc == DVAR_OK) {
			dvar_store_check_start(j);
			start_writing(j);
		}
		if (rc == DVAR_OK && !marks && !j->late_verdict)
			rc = dvar_store_agree_on_replicas(j, dvar_store_stage(j, PHASE_CHECK));
	}
	if (rc != DVAR_OK) {
		/* The chief's open may have created the staging directory another
		 * worker's open failed in. */
		stop_writing(j);
		dvar_writer_free(j->w);
		j->w = NULL;
		if (opened || j->worker == 0)
			abort_staging(j);
		return rc;
	}
	return DVAR_OK;
}

static int commit(save_job *j, const unsigned char *blobs, const size_t *offs)
{
	const void **ptrs = malloc((size_t)j->W * sizeof *ptrs);
	size_t *lens = malloc((size_t)j->W * sizeof *lens);
	int rc;

	if (!ptrs || !lens) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else if (every_worker(j)) {
		ptrs[0] = j->blob;
		lens[0] = j->blob_len;
		rc = dvar_writer_commit_parts(j->w, ptrs, lens, 1);
	} else {
		for (int p = 0; p < j->W; p++) {
			ptrs[p] = blobs + offs[p];
			lens[p] = offs[p + 1] - offs[p];
		}
		rc = dvar_writer_commit_parts(j->w, ptrs, lens, j->W);
	}
	free(ptrs);
	free(lens);
	return rc;
}

/*
 * The save is committed on every worker: what it wrote, for dvar_save_last,
 * and, for DVAR_SAVE_DELTA, the root's checkpoint that the next delta builds
 * on, with each tracker's snapshot as the state it holds.
 */
static void committed(save_job *j, uint64_t bytes)
{
	store_state *st = dvar_strategy_store_slot(j->s);
	dvar_save_info *in = &st->last;
	char ckpt[32];

	snprintf(ckpt, sizeof ckpt, "ckpt-%lld", (long long)j->step);
	memset(in, 0, sizeof *in);
	in->step = j->step;
	in->is_delta = j->base != NULL;
	snprintf(in->base, sizeof in->base, "%s", j->base ? j->base : "");
	in->bytes = bytes;
	in->seconds = dvar_now() - j->t0;
	for (size_t a = 0, b; a < j->n; a = b) {
		for (b = a + 1; b < j->n && strcmp(j->items[b].name, j->items[a].name) == 0; b++)
			in->rows_patched += j->items[b].nrows;
		in->rows_patched += j->items[a].nrows;
		if (j->items[a].delta == DVAR_DELTA_SAME)
			in->vars_unchanged++;
		else if (j->items[a].delta == DVAR_DELTA_ROWS)
			in->vars_patched++;
		else
			in->vars_whole++;
	}
	st->have_last = 1;
	if (!(j->flags & DVAR_SAVE_DELTA))
		return;
	/* Out of memory here only makes the next delta a full save. */
	if (note_base(st, j->root_key, ckpt) != DVAR_OK)
		dvar_error_clear();
	for (size_t i = 0; i < j->n; i++)
		if (j->items[i].track && (i == 0 || j->items[i - 1].track != j->items[i].track) &&
		    dvar_track_based(j->items[i].track, j->root_key, ckpt, j->items[i].snap) != DVAR_OK)
			dvar_error_clear();
}

/* Rounds 4 and 5 (collective): the parts to the chief, the commit, the
 * same status everywhere. */
static int finish(save_job *j)
{
	unsigned char *blobs = NULL;
	size_t *offs = NULL;
	saved_error failed = { DVAR_OK, "" };
	int rc, rc_local, rc_commit = DVAR_OK;

	stop_writing(j);
	if (j->late_verdict)
		keep(&failed, dvar_store_agree_on_replicas(j, DVAR_OK));
	rc_local = j->local.code;
	if (rc_local != DVAR_OK)
		dvar_error_set(rc_local, "%s", j->local.message);
	/* No part writes any more once its worker is past here. */
	if (!cleans_up(j) || rc_local != DVAR_OK) {
		dvar_writer_free(j->w);
		j->w = NULL;
	}
	if (!(offs = malloc(((size_t)j->W + 1) * sizeof *offs)) && rc_local == DVAR_OK)
		rc_local = dvar_error_set(DVAR_ENOMEM, "out of memory");
	/* With EVERY_WORKER the blobs stay home: only the verdict travels. */
	rc = dvar_store_agree(j->s, rc_local, every_worker(j) ? NULL : j->blob,
	                       every_worker(j) ? 0 : j->blob_len, offs ? &blobs : NULL, offs);
	if (failed.code == DVAR_OK)
		keep(&failed, rc);

	if (cleans_up(j)) {
		if (failed.code == DVAR_OK)
			rc_commit = commit(j, blobs, offs);
		if (failed.code != DVAR_OK || rc_commit != DVAR_OK)
			abort_staging(j);
	}
	free(blobs);
	blobs = NULL;
	/* The verdict, with every worker's bytes for dvar_save_last. */
	rc = dvar_store_agree(j->s, rc_commit, &j->bytes, sizeof j->bytes, offs ? &blobs : NULL, offs);
	if (rc == DVAR_OK && failed.code == DVAR_OK && offs) {
		uint64_t total = 0, b;

		for (int w = 0; w < j->W; w++) {
			memcpy(&b, blobs + offs[w], sizeof b);
			total += b;
		}
		committed(j, every_worker(j) ? j->bytes : total);
	}
	free(blobs);
	free(offs);
	if (failed.code != DVAR_OK)
		return dvar_error_set(failed.code, "%s", failed.message);
	return rc;
}

/* ---------------------------------------------------------------- the calls */

static int save_error(int rc, int64_t step, const char *root)
{
	if (rc == DVAR_OK)
		return rc;
	return dvar_error_prefix("saving step %lld to '%s'", (long long)step, root ? root : "(null)");
}

/* The strategy's store state, created on first use (NULL when out of memory). */
static void state_fini(void *p);

static store_state *state_of(dvar_strategy *s)
{
	store_state *st = dvar_strategy_store_slot(s);

	if (!st && (st = calloc(1, sizeof *st))) {
		st->s = s;
		dvar_strategy_set_store_slot(s, st, state_fini);
	}
	return st;
}

/* Free the job, keeping its arena (the larger one) for the next save. */
static void release_job(store_state *st, save_job *j)
{
	if (st && j->arena_cap > st->arena_cap) {
		dvar_store_arena_free(st->s, st->arena);
		st->arena = j->arena;
		st->arena_cap = j->arena_cap;
		j->arena = NULL;
	}
	job_free(j);
}

/* dvar_strategy_free: a pending save is discarded (no collective is
 * possible there): its thread joined, its staging removed. */
static void state_fini(void *p)
{
	store_state *st = p;
	save_job *j = st->pending;

	if (j) {
		stop_writing(j);
		dvar_writer_free(j->w);
		j->w = NULL;
		abort_staging(j);
		job_free(j);
	}
	dvar_store_arena_free(st->s, st->arena);
	for (size_t i = 0; i < st->num_bases; i++) {
		free(st->bases[i].root);
		free(st->bases[i].ckpt);
	}
	free(st->bases);
	free(st);
}

/* Finish the pending asynchronous save, if any (collective). */
static int finish_pending(dvar_strategy *s)
{
	store_state *st = dvar_strategy_store_slot(s);
	save_job *j = st ? st->pending : NULL;
	int rc;

	if (!j)
		return DVAR_OK;
	st->pending = NULL;
	rc = save_error(finish(j), j->step, j->root);
	release_job(st, j);
	return rc;
}

static int start_save(dvar_strategy *s, const char *root, int64_t step,
                      dvar_variable *const *vars, size_t n, const dvar_save_options *opts,
                      int async)
{
	store_state *st;
	save_job *j = NULL;
	int rc;

	if (!s)
		return dvar_error_set(DVAR_EINVAL, "%s: strategy is NULL",
		                      async ? "dvar_save_async" : "dvar_save");
	if ((rc = finish_pending(s)) != DVAR_OK)
		return dvar_error_prefix("step %lld was not saved", (long long)step);
	st = state_of(s);
	if ((rc = st ? new_job(&j, s, step, async)
	             : dvar_error_set(DVAR_ENOMEM, "out of memory")) != DVAR_OK) {
		/* Round 1 still happens here, so that no peer waits for us. */
		rc = dvar_store_agree(s, rc, NULL, 0, NULL, NULL);
		free(j);
		return save_error(rc, step, root);
	}
	/* The last save's staging, already touched. */
	j->arena = st->arena;
	j->arena_cap = st->arena_cap;
	st->arena = NULL;
	st->arena_cap = 0;
	rc = begin(j, root, vars, n, opts);
	if (rc == DVAR_OK && async) {
		st->pending = j;
		return DVAR_OK;
	}
	if (rc == DVAR_OK)
		rc = finish(j);
	rc = save_error(rc, step, root);
	release_job(st, j);
	return rc;
}

int dvar_save_options_init(dvar_save_options *opts, unsigned int version)
{
	static const dvar_save_options init = DVAR_SAVE_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_save_options", version,
	                         DVAR_SAVE_OPTIONS_VERSION);
}

int dvar_save(dvar_strategy *s, const char *root, int64_t step, dvar_variable *const *vars,
              size_t n, const dvar_save_options *opts)
{
	return start_save(s, root, step, vars, n, opts, 0);
}

int dvar_save_async(dvar_strategy *s, const char *root, int64_t step,
                    dvar_variable *const *vars, size_t n, const dvar_save_options *opts)
{
	return start_save(s, root, step, vars, n, opts, 1);
}

int dvar_save_wait(dvar_strategy *s)
{
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_save_wait: strategy is NULL");
	return finish_pending(s);
}

int dvar_save_poll(dvar_strategy *s, int *done)
{
	store_state *st;
	save_job *j;
	unsigned char mine, *all = NULL;
	int rc, every = 1;

	if (!s || !done)
		return dvar_error_set(DVAR_EINVAL, "dvar_save_poll: %s is NULL", s ? "done" : "strategy");
	*done = 0;
	st = dvar_strategy_store_slot(s);
	if (!st || !(j = st->pending)) {
		*done = 1;
		return DVAR_OK;
	}
	mine = (unsigned char)(atomic_load(&j->written) && atomic_load(&j->unchecked) == 0);
	if ((rc = dvar_store_all_gather(s, &mine, 1, &all, NULL)) != DVAR_OK)
		return rc;
	for (int w = 0; w < j->W; w++)
		every &= all[w];
	free(all);
	if (!every)
		return DVAR_OK;
	*done = 1;
	return finish_pending(s);
}

int dvar_save_last(dvar_strategy *s, dvar_save_info *out)
{
	store_state *st = s ? dvar_strategy_store_slot(s) : NULL;

	if (!s || !out)
		return dvar_error_set(DVAR_EINVAL, "dvar_save_last: %s is NULL", s ? "out" : "strategy");
	if (!st || !st->have_last)
		return dvar_error_set(DVAR_ENOTFOUND, "no save of this strategy has been committed yet");
	*out = st->last;
	return DVAR_OK;
}

void dvar_store_restored(dvar_strategy *s, const char *dir, dvar_variable *const *vars, size_t n,
                         dvar_sharded_variable *const *sharded, size_t ns)
{
	store_state *st = state_of(s);
	char *parent = dvar_path_parent(dir), *root = parent ? dvar_store_root_key(parent) : NULL;
	const char *slash = strrchr(dir, '/');
	const char *name = slash ? slash + 1 : dir;

	if (st && root && note_base(st, root, name) == DVAR_OK) {
		for (size_t i = 0; i < n; i++) {
			dvar_track *t = dvar_variable_track(vars[i]);
			dvar_track_based(t, root, name, dvar_track_snapshot(t));
		}
		for (size_t i = 0; i < ns; i++) {
			dvar_track *t = dvar_sharded_variable_track(sharded[i]);
			dvar_track_all(t);
			dvar_track_based(t, root, name, dvar_track_snapshot(t));
		}
	}
	dvar_error_clear();
	free(root);
	free(parent);
}
