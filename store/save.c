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
 *   2. the plan (one writer per item) and the staging run: in replica
 *      context, ON_READ SUM and MEAN aggregates (collectives every worker
 *      takes part in), each replica's per-chunk checksums of the mirrored
 *      values and, for an asynchronous save, the copies of what this worker
 *      writes;
 *   3. every worker opens its part (data file); the checksums travel to
 *      every worker, which all reach the same verdict on the replicas.
 * Then this worker's items are written into its part: inline for dvar_save,
 * in a background thread for dvar_save_async. finish(), collective:
 *   4. every part finished, its entries to the chief;
 *   5. the chief commits (or, after any failure, removes the staging
 *      directory) and every worker receives its result.
 * A worker that fails locally keeps taking part in every collective step, so
 * no peer waits for it; its failure surfaces at the next agreement.
 *
 * Ownership: a job owns copies of everything it needs after begin()
 * returns; the strategy's store slot owns a pending asynchronous job.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "format/format.h"
#include "runtime/device.h"
#include "runtime/input_state.h"
#include "runtime/runtime.h"
#include "store/store.h"

#define NAME_MAX_BYTES 1024
/* The save's token is its chief's temporary-name tag (<host>-<pid>-<random>,
 * format.h): when the chief dies, the next writer into the root removes the
 * staging directory. */
#define TOKEN_BYTES DVAR_TMP_TAG_MAX
/* The replica check compares checksums of pieces this large, so a mismatch
 * can be located; the copy into staging moves cache-sized blocks, each
 * checksummed while it is still in cache. */
#define CHECK_CHUNK ((size_t)1 << 20)
#define COPY_BLOCK ((size_t)128 << 10)

enum { KIND_MIRRORED, KIND_SYNC_ON_READ, KIND_PLAIN, KIND_SHARDED, KIND_ITERATOR };

static const char *const kind_names[] = { DVAR_KIND_MIRRORED, DVAR_KIND_SYNC_ON_READ,
	                                   DVAR_KIND_PLAIN, DVAR_KIND_SHARDED, DVAR_KIND_ITERATOR };

/* One thing to save: a distributed variable, a plain tensor, or one shard
 * of a sharded variable (the shards of one variable share its name). */
typedef struct {
	char *name; /* owned copy: an asynchronous save outlives the caller's strings */
	int dtype;
	dvar_shape shape;
	size_t nbytes;
	int kind;
	int sync, agg;
	dvar_variable *v;     /* a distributed variable's; not used after begin() */
	const void *src;      /* a plain tensor's or this worker's shard's elements, or
	                         NULL; not used after begin() */
	int64_t shard, nshards; /* KIND_SHARDED: which shard of how many */
	dvar_slice slice;       /* KIND_SHARDED: its rows in the full shape */
	int writer;           /* the worker that writes it */
	int checked;          /* its replicas are compared */
	size_t chunk0;        /* its first checksum in the job's arrays */
	int mismatch;         /* its replicas differ and it is saved anyway */
	const void *data;     /* what the writer adds, once staged */
	unsigned char *owned; /* a staged copy or aggregate in the job's arena, or NULL */
	dvar_input_iterator *iter; /* KIND_ITERATOR: its table, gathered from every worker */
	int64_t *table;
} item;

/* Keep a message across later calls that overwrite the error record. */
typedef struct {
	int code;
	char message[DVAR_ERROR_MESSAGE_MAX];
} saved_error;

typedef struct {
	dvar_strategy *s;
	char *root;
	int64_t step;
	int W, R, worker;
	unsigned int flags;
	int async;
	size_t n;
	item *items;
	char token[TOKEN_BYTES + 1];
	dvar_write_options wopts;
	dvar_writer *w;

	/* Staging: page-aligned, kept between saves (store_state). */
	unsigned char *arena;
	size_t arena_cap;

	/* The replica check: R × nchunks checksums, replica-major. */
	size_t nchunks;
	uint32_t *sums;
	int phase;               /* what a staging run does (PHASE_*) */
	int late_verdict;        /* asynchronous: judged by finish(), see defers() */
	saved_error stage_error; /* a local failure the staging run reports */

	/* The part's write, inline or in the background. */
	pthread_t thread;
	int threaded;
	atomic_int written;
	saved_error local;
	void *blob;
	size_t blob_len;
} save_job;

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
	dvar_strategy *s;
	save_job *pending;
	unsigned char *arena;
	size_t arena_cap;
} store_state;

/* Staging memory: page-locked on a GPU strategy, where device copies land in it. */
static unsigned char *arena_alloc(dvar_strategy *s, size_t bytes)
{
	unsigned char *p = dvar_page_alloc(bytes, 0);

	if (p && dvar_mem_pin(s, p, bytes) != DVAR_OK) {
		free(p);
		return NULL;
	}
	if (!p)
		dvar_error_set(DVAR_ENOMEM, "out of memory for %zu bytes of staging", bytes);
	return p;
}

static void arena_free(dvar_strategy *s, unsigned char *p)
{
	dvar_mem_unpin(s, p);
	free(p);
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
	return copy_name(it, dvar_variable_name(v));
}

int dvar_store__check_tensor(const dvar_store_tensor *t, size_t i, dvar_shape *shape,
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
	int rc = dvar_store__check_tensor(t, i, &it->shape, &it->nbytes);

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
		if ((rc = copy_name(it, dvar_sharded_variable_name(sv))) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

/* Everything this worker can check on its own, before talking to the others. */
static int prepare(save_job *j, const char *root, dvar_variable *const *vars, size_t n,
                   const dvar_save_options *opts)
{
	size_t nt = opts ? opts->num_tensors : 0, ns = opts ? opts->num_sharded : 0, total;
	size_t ni = opts ? opts->num_iterators : 0;
	const unsigned int known = DVAR_SAVE_ALLOW_REPLICA_MISMATCH | DVAR_SAVE_SKIP_REPLICA_CHECK |
	                           DVAR_SAVE_EVERY_WORKER;
	int rc;

	if (opts && opts->version != DVAR_SAVE_OPTIONS_VERSION)
		return dvar_error_set(DVAR_EINVAL, "save options version %u, expected %u", opts->version,
		                      DVAR_SAVE_OPTIONS_VERSION);
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
	return dvar_strategy_check_saveable(j->s);
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

/* Round 1's payload: the token (NUL-padded), the flags, the item count, then the digests. */
#define LIST_HEAD (TOKEN_BYTES + 16)

static int compare_lists(const save_job *j, const unsigned char *all, const size_t *offs)
{
	for (int w = 1; w < j->W; w++) {
		const unsigned char *a = all + offs[0] + TOKEN_BYTES;
		const unsigned char *b = all + offs[w] + TOKEN_BYTES;
		uint64_t fa, fb, na, nb;

		memcpy(&fa, a, 8);
		memcpy(&fb, b, 8);
		memcpy(&na, a + 8, 8);
		memcpy(&nb, b + 8, 8);
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
			if (memcmp(a + 16 + 8 * i, b + 16 + 8 * i, 8) != 0)
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
	uint64_t head[2] = { j->flags, j->n };

	if (rc == DVAR_OK && (!mine || !offs))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK) {
		memset(j->token, 0, sizeof j->token);
		dvar_tmp_tag(j->token);
		memcpy(mine, j->token, TOKEN_BYTES);
		memcpy(mine + TOKEN_BYTES, head, 16);
		for (size_t i = 0; i < j->n; i++) {
			uint64_t h = digest(&j->items[i]);

			memcpy(mine + LIST_HEAD + 8 * i, &h, 8);
		}
	}
	rc = dvar_store__agree(j->s, rc, mine, rc == DVAR_OK ? len : 0, offs ? &all : NULL, offs);
	free(mine);
	if (rc == DVAR_OK && !offs)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK) {
		if (!every_worker(j))
			memcpy(j->token, all, TOKEN_BYTES);
		j->token[TOKEN_BYTES] = '\0';
		/* Every worker compares every list with worker 0's: the same verdict everywhere. */
		rc = compare_lists(j, all, offs);
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
		         dvar_store__agg_name(it->agg));
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
			dvar_input__state_row(j->items[i].iter, (int64_t *)(void *)(mine + row * k++));
	rc = dvar_store__agree(j->s, rc, mine, rc == DVAR_OK ? ni * row : 0, offs ? &all : NULL,
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

typedef struct {
	size_t bytes, index;
} plan_key;

static int plan_cmp(const void *a, const void *b)
{
	const plan_key *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return (x->index > y->index) - (x->index < y->index);
}

/* Values only worker 0 holds (replica 0's, the chief's plain data). */
static int pinned_to_chief(const item *it)
{
	return it->kind == KIND_PLAIN || it->kind == KIND_ITERATOR ||
	       (it->kind == KIND_SYNC_ON_READ && it->agg == DVAR_AGG_ONLY_FIRST_REPLICA);
}

static int reduced(const item *it)
{
	return it->kind == KIND_SYNC_ON_READ && it->agg != DVAR_AGG_ONLY_FIRST_REPLICA &&
	       it->nbytes;
}

/*
 * One writer per item: pinned items on worker 0, the rest largest first
 * onto the least-loaded worker (the lowest id on ties); every item on its
 * own worker for DVAR_SAVE_EVERY_WORKER. A function of the agreed list and W
 * alone, so every worker computes the same plan. Also numbers the checksum
 * chunks of the values whose replicas are compared.
 */
static int make_plan(save_job *j)
{
	uint64_t *load = calloc((size_t)j->W, sizeof *load);
	plan_key *keys = malloc((j->n ? j->n : 1) * sizeof *keys);
	size_t k = 0;

	if (!load || !keys) {
		free(load);
		free(keys);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		/* One replica in all has nothing to be compared with. */
		it->checked = it->kind == KIND_MIRRORED && it->nbytes && j->R * j->W > 1 &&
		              !(j->flags & DVAR_SAVE_SKIP_REPLICA_CHECK);
		if (it->checked) {
			it->chunk0 = j->nchunks;
			j->nchunks += (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
		}
		if (every_worker(j)) {
			it->writer = j->worker;
		} else if (it->kind == KIND_SHARDED) {
			load[it->writer] += it->nbytes; /* its owner: the only worker holding it */
		} else if (pinned_to_chief(it)) {
			it->writer = 0;
			load[0] += it->nbytes;
		} else {
			keys[k].bytes = it->nbytes;
			keys[k++].index = i;
		}
	}
	qsort(keys, k, sizeof *keys, plan_cmp);
	for (size_t q = 0; q < k; q++) {
		int best = 0;

		for (int w = 1; w < j->W; w++)
			if (load[w] < load[best])
				best = w;
		j->items[keys[q].index].writer = best;
		load[best] += keys[q].bytes;
	}
	free(load);
	free(keys);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- staging */

/*
 * An asynchronous save checksums the primary's share from its staged copy,
 * in the background, rather than before returning: the stall is then the
 * copy, and the replicas are judged when the save is finished. Not with
 * DVAR_SAVE_ALLOW_REPLICA_MISMATCH: its mark goes into the entries, so the
 * verdict must come before they are written.
 */
static int defers(const save_job *j, const item *it, int local)
{
	return j->late_verdict && it->checked && local == 0 && it->writer == j->worker;
}

#define PAGE_ROUND(n) (((n) + 4095u) & ~(size_t)4095u)

/* What this worker writes and cannot borrow: a synchronous save reads
 * mirrored values, shards and plain data in place; aggregates always need a
 * buffer, and so do values on GPUs. */
static int staged(const save_job *j, const item *it)
{
	return it->writer == j->worker && it->nbytes &&
	       (j->async || reduced(it) || (it->v && dvar_mem_on_device(j->s)));
}

/* Staging buffers, carved page-aligned out of the job's arena (the last
 * save's, reused when it is large enough). */
static int allocate_staging(save_job *j)
{
	size_t need = 0, off = 0;

	if (j->nchunks && !(j->sums = malloc((size_t)j->R * j->nchunks * sizeof *j->sums)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < j->n; i++)
		if (staged(j, &j->items[i]))
			need += PAGE_ROUND(j->items[i].nbytes);
	if (need > j->arena_cap) {
		arena_free(j->s, j->arena);
		j->arena_cap = 0;
		if (!(j->arena = arena_alloc(j->s, need)))
			return dvar_error_prefix("staging");
		j->arena_cap = need;
	}
	for (size_t i = 0; i < j->n; i++)
		if (staged(j, &j->items[i])) {
			j->items[i].owned = j->arena + off;
			off += PAGE_ROUND(j->items[i].nbytes);
		}
	return DVAR_OK;
}

/* Checksum src in CHECK_CHUNK pieces into sums, copying it to dst on the
 * way when dst is not NULL (block by block, while each is in cache). */
static void checksum_copy(uint32_t *sums, unsigned char *dst, const unsigned char *src, size_t n)
{
	for (size_t off = 0; off < n; off += CHECK_CHUNK) {
		size_t len = n - off < CHECK_CHUNK ? n - off : CHECK_CHUNK;
		uint32_t crc = 0;

		for (size_t b = 0; b < len; b += COPY_BLOCK) {
			size_t bl = len - b < COPY_BLOCK ? len - b : COPY_BLOCK;

			if (dst)
				memcpy(dst + off + b, src + off + b, bl);
			crc = dvar_crc32c_extend(crc, src + off + b, bl);
		}
		*sums++ = crc;
	}
}

/*
 * A GPU replica's value in a staging run (PHASE_VALUES, synchronous saves
 * too): the keeper's starts coming to its staging buffer on the replica's
 * snapshot stream (stage_device_finish waits for all of them, then takes
 * their checksums), and the other replicas' are checksummed from host
 * copies, piece by piece.
 */
static int stage_device(save_job *j, item *it, int local, int keeper)
{
	const unsigned char *src = dvar_variable__component(it->v, local);
	uint32_t *sums = j->sums + (size_t)local * j->nchunks + it->chunk0;
	unsigned char *bounce;
	int rc = DVAR_OK;

	if (keeper)
		return dvar_mem_snapshot(j->s, local, it->owned, src, it->nbytes) == DVAR_OK
		               ? DVAR_OK
		               : dvar_error_prefix("saving '%s'", it->name);
	if (!it->checked)
		return DVAR_OK;
	if (!(bounce = malloc(CHECK_CHUNK)))
		return dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory", it->name);
	for (size_t off = 0; off < it->nbytes && rc == DVAR_OK; off += CHECK_CHUNK) {
		size_t len = it->nbytes - off < CHECK_CHUNK ? it->nbytes - off : CHECK_CHUNK;

		if ((rc = dvar_mem_copy(j->s, local, bounce, src + off, len)) == DVAR_OK)
			*sums++ = dvar_crc32c_extend(0, bounce, len);
	}
	free(bounce);
	return rc == DVAR_OK ? DVAR_OK : dvar_error_prefix("saving '%s'", it->name);
}

/* The end of a GPU replica's staging run: its copies have landed, and the
 * checked ones are checksummed from them. */
static int stage_device_finish(save_job *j, int local)
{
	if (dvar_mem_snapshot_wait(j->s, local) != DVAR_OK)
		return dvar_error_prefix("saving: copying from the GPU");
	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		if (it->v && it->nbytes && !reduced(it) && local == 0 && it->writer == j->worker &&
		    it->checked && !defers(j, it, local))
			checksum_copy(j->sums + (size_t)local * j->nchunks + it->chunk0, NULL, it->owned,
			              it->nbytes);
	}
	return DVAR_OK;
}

/*
 * An aggregate (SUM, MEAN) of a GPU variable: reduced on the GPUs from the
 * components themselves, the keeper's result copied to its staging buffer.
 */
static int stage_device_aggregate(save_job *j, dvar_replica *ctx, item *it, int keeper)
{
	int local = dvar_replica_local_id(ctx);
	dvar_reduce_op op = it->agg == DVAR_AGG_MEAN ? DVAR_REDUCE_MEAN : DVAR_REDUCE_SUM;
	void *tmp = dvar_mem_alloc(j->s, local, it->nbytes, 0);
	int rc;

	if (!tmp)
		return dvar_error_prefix("saving '%s'", it->name);
	rc = dvar_replica_all_reduce(ctx, op, it->dtype, dvar_variable__component(it->v, local), tmp,
	                             it->nbytes / dvar_dtype_size(it->dtype));
	if (rc == DVAR_OK && keeper)
		rc = dvar_mem_copy(j->s, local, it->owned, tmp, it->nbytes);
	dvar_mem_free(j->s, local, tmp);
	return rc == DVAR_OK ? DVAR_OK : dvar_error_prefix("saving '%s'", it->name);
}

/*
 * What a staging run does. PHASE_VALUES, before anything is written: the
 * aggregates and, for an asynchronous save, the copies and the checksums
 * (fused: the state changes once the call returns). PHASE_CHECK, for a
 * synchronous save, while its part is being written: the checksums alone,
 * which then cost CPU time the disk would leave idle.
 */
enum { PHASE_VALUES, PHASE_CHECK };

/*
 * A staging run, on every replica: the SUM and MEAN aggregates (TF's
 * OnReadPolicy._get_cross_replica, the same collective and bytes as
 * dvar_variable_read cross-replica, but from replica context, so an open
 * function scope is not marked: TF saves in a save context), the checksums
 * of this replica's mirrored components, and local replica 0's copies.
 */
static int stage_replica(dvar_replica *ctx, void *arg)
{
	save_job *j = arg;
	int local = dvar_replica_local_id(ctx);
	int rc = DVAR_OK;

	if (j->stage_error.code != DVAR_OK)
		return dvar_error_set(j->stage_error.code, "%s", j->stage_error.message);
	for (size_t i = 0; i < j->n && rc == DVAR_OK; i++) {
		item *it = &j->items[i];
		int keeper = local == 0 && it->writer == j->worker;

		if (reduced(it) && j->phase == PHASE_VALUES && dvar_mem_on_device(j->s)) {
			rc = stage_device_aggregate(j, ctx, it, keeper);
		} else if (it->v && it->nbytes && !reduced(it) && dvar_mem_on_device(j->s)) {
			if (j->phase == PHASE_VALUES)
				rc = stage_device(j, it, local, keeper);
		} else if (reduced(it) && j->phase == PHASE_VALUES) {
			unsigned char *buf = keeper ? it->owned : malloc(it->nbytes);
			dvar_reduce_op op = it->agg == DVAR_AGG_MEAN ? DVAR_REDUCE_MEAN : DVAR_REDUCE_SUM;

			if (!buf)
				return dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory",
				                      it->name);
			rc = dvar_variable_read(it->v, ctx, buf, it->nbytes);
			if (rc == DVAR_OK)
				rc = dvar_replica_all_reduce(ctx, op, it->dtype, buf, buf,
				                             it->nbytes / dvar_dtype_size(it->dtype));
			if (!keeper)
				free(buf);
			if (rc != DVAR_OK)
				rc = dvar_error_prefix("saving '%s'", it->name);
		} else if (it->v && it->nbytes && !reduced(it)) {
			const unsigned char *src = dvar_variable__component(it->v, local);
			unsigned char *dst = keeper && j->phase == PHASE_VALUES ? it->owned : NULL;

			if (defers(j, it, local))
				memcpy(dst, src, it->nbytes);
			else if (it->checked && (j->async || j->phase == PHASE_CHECK))
				checksum_copy(j->sums + (size_t)local * j->nchunks + it->chunk0, dst, src,
				              it->nbytes);
			else if (dst)
				memcpy(dst, src, it->nbytes);
		}
	}
	if (rc == DVAR_OK && j->phase == PHASE_VALUES && dvar_mem_on_device(j->s))
		rc = stage_device_finish(j, local);
	return rc;
}

/* After the staging run: where the writer reads each of its items from. */
static void point_at_data(save_job *j)
{
	static const unsigned char empty[1];

	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		if (it->writer != j->worker)
			continue;
		if (it->nbytes == 0)
			it->data = empty;
		else if (it->owned)
			it->data = it->owned;
		else if (it->kind == KIND_PLAIN || it->kind == KIND_SHARDED ||
		         it->kind == KIND_ITERATOR)
			it->data = it->src;
		else
			/* Mirrored: the primary (TF's read_var). ONLY_FIRST_REPLICA:
			 * replica 0's value, this worker's primary. */
			it->data = dvar_variable__component(it->v, 0);
		if ((it->kind == KIND_PLAIN || it->kind == KIND_SHARDED ||
		     it->kind == KIND_ITERATOR) && it->owned)
			memcpy(it->owned, it->src, it->nbytes);
	}
}

/* ---------------------------------------------------------------- the replica check */

/*
 * Round 3's payload: for every checked item, the first local replica that
 * differs from this worker's primary and the chunk where (-1, -1 when none),
 * then this worker's primary checksums.
 */
static unsigned char *check_payload(const save_job *j, size_t *len)
{
	size_t nchecked = 0;
	unsigned char *p, *q;

	for (size_t i = 0; i < j->n; i++)
		nchecked += j->items[i].checked;
	*len = 16 * nchecked + 4 * j->nchunks;
	if (!(p = malloc(*len ? *len : 1)))
		return NULL;
	q = p;
	for (size_t i = 0; i < j->n; i++) {
		const item *it = &j->items[i];
		size_t chunks = (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
		int64_t bad[2] = { -1, -1 };

		if (!it->checked)
			continue;
		for (int r = 1; r < j->R && bad[0] < 0; r++)
			for (size_t c = 0; c < chunks; c++)
				if (j->sums[(size_t)r * j->nchunks + it->chunk0 + c] !=
				    j->sums[it->chunk0 + c]) {
					bad[0] = r;
					bad[1] = (int64_t)c;
					break;
				}
		memcpy(q, bad, 16);
		q += 16;
	}
	if (j->nchunks)
		memcpy(q, j->sums, 4 * j->nchunks);
	return p;
}

static int report_mismatch(const save_job *j, const item *it, int replica, int against,
                           int64_t chunk)
{
	uint64_t lo = (uint64_t)chunk * CHECK_CHUNK;
	uint64_t hi = lo + CHECK_CHUNK < it->nbytes ? lo + CHECK_CHUNK : it->nbytes;

	return dvar_error_set(DVAR_EMISMATCH,
	                      "mirrored variable '%s': replica %d (worker %d) differs from "
	                      "replica %d (worker %d) in bytes [%llu, %llu); pass "
	                      "DVAR_SAVE_ALLOW_REPLICA_MISMATCH to save the primary anyway",
	                      it->name, replica, replica / j->R, against, against / j->R,
	                      (unsigned long long)lo, (unsigned long long)hi);
}

/*
 * Every worker judges every worker's report the same way: the first item
 * (in list order) whose replicas differ, within a worker or between a
 * worker's primary and worker 0's. With DVAR_SAVE_ALLOW_REPLICA_MISMATCH
 * such items are only marked.
 */
static int judge_replicas(save_job *j, const unsigned char *all, const size_t *offs)
{
	size_t slot = 0;

	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];
		size_t chunks = (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
		size_t nchecked_bytes;

		if (!it->checked)
			continue;
		nchecked_bytes = (offs[1] - offs[0]) - 4 * j->nchunks;
		for (int w = 0; w < j->W && !it->mismatch; w++) {
			const unsigned char *base = all + offs[w];
			const unsigned char *sums0 = all + offs[0] + nchecked_bytes;
			const unsigned char *sums = base + nchecked_bytes;
			int64_t bad[2];

			memcpy(bad, base + 16 * slot, 16);
			if (bad[0] >= 0) {
				it->mismatch = 1;
				if (!(j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH))
					return report_mismatch(j, it, w * j->R + (int)bad[0], w * j->R,
					                       bad[1]);
			}
			for (size_t c = 0; c < chunks && w > 0 && !it->mismatch; c++)
				if (memcmp(sums + 4 * (it->chunk0 + c), sums0 + 4 * (it->chunk0 + c), 4)) {
					it->mismatch = 1;
					if (!(j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH))
						return report_mismatch(j, it, w * j->R, 0, (int64_t)c);
				}
		}
		slot++;
	}
	return DVAR_OK;
}

/* ---------------------------------------------------------------- writing a part */

static int add_item(dvar_writer *w, const item *it)
{
	/* One shard is a plain entry, as TF writes a full slice. */
	int sliced = it->kind == KIND_SHARDED && it->nshards > 1;
	int kind = it->kind == KIND_SHARDED && !sliced ? KIND_PLAIN : it->kind;
	int rc = dvar_writer_add(w, it->name, it->dtype, &it->shape, sliced ? &it->slice : NULL,
	                         it->data);
	char count[24];

	if (rc == DVAR_OK)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_KIND, kind_names[kind]);
	if (rc == DVAR_OK && sliced) {
		snprintf(count, sizeof count, "%lld", (long long)it->nshards);
		rc = dvar_writer_set_attr(w, it->name, DVAR_SHARDING_ATTR_SHARDS, count);
		if (rc == DVAR_OK)
			rc = dvar_writer_set_attr(w, it->name, DVAR_SHARDING_ATTR_LAYOUT, DVAR_LAYOUT_DIV);
	}
	if (rc == DVAR_OK && it->v)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_SYNCHRONIZATION,
		                          dvar_store__sync_name(it->sync));
	if (rc == DVAR_OK && it->v)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_AGGREGATION,
		                          dvar_store__agg_name(it->agg));
	if (rc == DVAR_OK && it->kind == KIND_ITERATOR)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_ITERATOR_COLUMNS,
		                          DVAR_INPUT__STATE_NAMES);
	if (rc == DVAR_OK && it->mismatch)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_REPLICA_CHECK,
		                          DVAR_REPLICA_CHECK_MISMATCH);
	return rc;
}

/* This worker's items into its part, then the part's entries: no MPI, so
 * it may run in the background while the coordinator goes on. */
static void *write_part(void *arg)
{
	save_job *j = arg;
	int rc = DVAR_OK;

	for (size_t i = 0; i < j->n; i++)
		if (defers(j, &j->items[i], 0))
			checksum_copy(j->sums + j->items[i].chunk0, NULL, j->items[i].owned,
			              j->items[i].nbytes);
	for (size_t i = 0; i < j->n && rc == DVAR_OK; i++)
		if (j->items[i].writer == j->worker)
			rc = add_item(j->w, &j->items[i]);
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
	}
	arena_free(j->s, j->arena);
	free(j->items);
	free(j->sums);
	free(j->blob);
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
	atomic_init(&j->written, 0);
	return DVAR_OK;
}

/* A staging run in phase, when the agreed list gives it anything to do
 * (the same decision on every worker). A local failure travels into the
 * run, which then fails everywhere. */
static int stage(save_job *j, int phase)
{
	int work = 0;

	for (size_t i = 0; i < j->n; i++) {
		const item *it = &j->items[i];

		work |= phase == PHASE_VALUES ? reduced(it) || (j->async && it->v && it->nbytes)
		                              : it->checked;
	}
	if (!work)
		return DVAR_OK;
	j->phase = phase;
	return dvar_strategy_run(j->s, stage_replica, j);
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

static void stop_writing(save_job *j)
{
	if (j->threaded)
		pthread_join(j->thread, NULL);
	j->threaded = 0;
}

/* The replica verdict, the same on every worker (payload: check_payload). */
static int agree_on_replicas(save_job *j, int rc)
{
	unsigned char *payload = NULL, *all = NULL;
	size_t len = 0, *offs = NULL;

	if (rc == DVAR_OK && !(payload = check_payload(j, &len)))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK && !(offs = malloc(((size_t)j->W + 1) * sizeof *offs)))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	rc = dvar_store__agree(j->s, rc, payload, len, offs ? &all : NULL, offs);
	if (rc == DVAR_OK)
		rc = judge_replicas(j, all, offs);
	free(payload);
	free(all);
	free(offs);
	return rc;
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
	if (rc == DVAR_OK)
		rc = make_plan(j);
	if (rc != DVAR_OK)
		return rc; /* the same verdict everywhere; nothing was created */
	if ((rc = gather_iterators(j)) != DVAR_OK)
		return rc; /* agreed */

	/* Round 2: aggregates (and, asynchronous, copies and checksums). */
	keep(&j->stage_error, allocate_staging(j));
	if ((rc = stage(j, PHASE_VALUES)) != DVAR_OK)
		return rc;

	/* Round 3: every worker opens its part and starts writing; the
	 * replicas are judged meanwhile (a synchronous save checksums them now).
	 * A staging failure that no run reported (the list gave the run nothing
	 * to do) fails here, in the agreement. */
	if (j->stage_error.code != DVAR_OK) {
		rc = dvar_error_set(j->stage_error.code, "%s", j->stage_error.message);
	} else {
		point_at_data(j);
		rc = every_worker(j) ? dvar_writer_open_step_part(&j->w, j->root, j->step, j->token,
		                                                  0, 1, &j->wopts)
		                     : dvar_writer_open_step_part(&j->w, j->root, j->step, j->token,
		                                                  j->worker, j->W, &j->wopts);
	}
	opened = rc == DVAR_OK;
	rc = dvar_store__agree(j->s, rc, NULL, 0, NULL, NULL);
	if (rc == DVAR_OK) {
		/* Marks (DVAR_SAVE_ALLOW_REPLICA_MISMATCH) go into the entries:
		 * judge before writing. A verdict that can only fail the save may
		 * come while the part is written. */
		int marks = (j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH) != 0;

		if (marks)
			rc = agree_on_replicas(j, j->async ? DVAR_OK : stage(j, PHASE_CHECK));
		if (rc == DVAR_OK)
			start_writing(j);
		if (rc == DVAR_OK && !marks && !j->late_verdict)
			rc = agree_on_replicas(j, stage(j, PHASE_CHECK));
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
		keep(&failed, agree_on_replicas(j, DVAR_OK));
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
	rc = dvar_store__agree(j->s, rc_local, every_worker(j) ? NULL : j->blob,
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
	free(offs);
	rc = dvar_store__agree(j->s, rc_commit, NULL, 0, NULL, NULL);
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
	store_state *st = dvar_strategy__store_slot(s);

	if (!st && (st = calloc(1, sizeof *st))) {
		st->s = s;
		dvar_strategy__set_store_slot(s, st, state_fini);
	}
	return st;
}

/* Free the job, keeping its arena (the larger one) for the next save. */
static void release_job(store_state *st, save_job *j)
{
	if (st && j->arena_cap > st->arena_cap) {
		arena_free(st->s, st->arena);
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
	arena_free(st->s, st->arena);
	free(st);
}

/* Finish the pending asynchronous save, if any (collective). */
static int finish_pending(dvar_strategy *s)
{
	store_state *st = dvar_strategy__store_slot(s);
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
		rc = dvar_store__agree(s, rc, NULL, 0, NULL, NULL);
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
	st = dvar_strategy__store_slot(s);
	if (!st || !(j = st->pending)) {
		*done = 1;
		return DVAR_OK;
	}
	mine = (unsigned char)atomic_load(&j->written);
	if ((rc = dvar_store__all_gather(s, &mine, 1, &all, NULL)) != DVAR_OK)
		return rc;
	for (int w = 0; w < j->W; w++)
		every &= all[w];
	free(all);
	if (!every)
		return DVAR_OK;
	*done = 1;
	return finish_pending(s);
}
