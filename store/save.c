/*
 * store/save.c - dvar_save: every worker calls it with the same variables at
 * the same step, and one checkpoint comes out, each value written once.
 *
 * The rounds, each an agreement through exchange.c so that every worker
 * takes the same decision:
 *   1. local checks (arguments, the open function scope) and, from the
 *      chief, the save's token; every worker's list digest travels along and
 *      must match worker 0's;
 *   2. every worker opens its part (data file) of the checkpoint;
 *   3. the values: each item has one writer (the plan); ON_READ SUM and MEAN
 *      aggregates are collective, so every worker takes part in every one of
 *      them, in list order, whether it writes the result or not; then each
 *      worker finishes its part and its entries travel to the chief;
 *   4. the chief commits (or, after any failure, removes the staging
 *      directory) and every worker receives its result.
 * A worker that fails locally keeps taking part in every collective step, so
 * no peer waits for it; its failure surfaces at the next agreement.
 *
 * Ownership: everything allocated here is freed before dvar_save returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/core.h"
#include "runtime/runtime.h"
#include "store/store.h"

#define NAME_MAX_BYTES 1024
#define TOKEN_BYTES 16

enum { KIND_MIRRORED, KIND_SYNC_ON_READ, KIND_PLAIN };

static const char *const kind_names[] = { "mirrored", "sync_on_read", "plain" };

/* One thing to save: a distributed variable or a plain tensor. */
typedef struct {
	const char *name;
	int dtype;
	dvar_shape shape;
	size_t nbytes;
	int kind;
	int sync, agg;
	dvar_variable *v;  /* NULL for a plain tensor */
	const void *data;  /* a plain tensor's elements (the chief's) */
	int writer;        /* the worker that writes it */
} item;

typedef struct {
	dvar_strategy *s;
	int64_t step;
	int W, worker;
	size_t n;
	item *items;
	char token[2 * TOKEN_BYTES + 1];
	dvar_write_options wopts;
} save_state;

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
	for (size_t i = 0; i < n; i++)
		names[i] = items[i].name;
	qsort(names, n, sizeof *names, name_cmp);
	for (size_t i = 1; i < n && rc == DVAR_OK; i++)
		if (strcmp(names[i - 1], names[i]) == 0)
			rc = dvar_error_set(DVAR_EINVAL, "the name '%s' is given twice", names[i]);
	free(names);
	return rc;
}

static int add_variable(save_state *st, item *it, dvar_variable *v, size_t i)
{
	if (!v)
		return dvar_error_set(DVAR_EINVAL, "variable #%zu is NULL", i);
	if (dvar_variable_strategy(v) != st->s)
		return dvar_error_set(DVAR_EINVAL, "variable '%s' belongs to another strategy",
		                      dvar_variable_name(v));
	it->v = v;
	it->name = dvar_variable_name(v);
	it->dtype = dvar_variable_dtype(v);
	it->shape = *dvar_variable_shape(v);
	it->nbytes = dvar_variable_nbytes(v);
	it->sync = dvar_variable_synchronization(v);
	it->agg = dvar_variable_aggregation(v);
	it->kind = it->sync == DVAR_SYNC_ON_READ ? KIND_SYNC_ON_READ : KIND_MIRRORED;
	return DVAR_OK;
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

static int add_tensor(save_state *st, item *it, const dvar_store_tensor *t, size_t i)
{
	int rc = dvar_store__check_tensor(t, i, &it->shape, &it->nbytes);

	if (rc != DVAR_OK)
		return rc;
	/* Only the chief writes plain tensors: only its data is read. */
	if (st->worker == 0 && it->nbytes && !t->data)
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': data is NULL", t->name);
	it->name = t->name;
	it->dtype = t->dtype;
	it->kind = KIND_PLAIN;
	it->data = t->data;
	return DVAR_OK;
}

/* Everything this worker can check on its own, before talking to the others. */
static int prepare(save_state *st, const char *root, dvar_variable *const *vars, size_t n,
                   const dvar_save_options *opts)
{
	size_t nt = opts ? opts->num_tensors : 0;
	int rc;

	if (opts && opts->version != DVAR_SAVE_OPTIONS_VERSION)
		return dvar_error_set(DVAR_EINVAL, "save options version %u, expected %u", opts->version,
		                      DVAR_SAVE_OPTIONS_VERSION);
	if (!root || root[0] == '\0')
		return dvar_error_set(DVAR_EINVAL, "no checkpoint root given");
	if (st->step < 0)
		return dvar_error_set(DVAR_EINVAL, "step %lld is negative", (long long)st->step);
	if (n && !vars)
		return dvar_error_set(DVAR_EINVAL, "%zu variables but vars is NULL", n);
	if (nt && !opts->tensors)
		return dvar_error_set(DVAR_EINVAL, "%zu tensors but tensors is NULL", nt);
	if (opts && opts->write)
		st->wopts = *opts->write;
	if (st->worker != 0) {
		/* Publishing and retention are the chief's, and so is reporting. */
		st->wopts.progress = NULL;
		st->wopts.progress_userdata = NULL;
	}
	if (!(st->items = calloc(n + nt ? n + nt : 1, sizeof *st->items)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	st->n = n + nt;
	for (size_t i = 0; i < n; i++)
		if ((rc = add_variable(st, &st->items[i], vars[i], i)) != DVAR_OK)
			return rc;
	for (size_t i = 0; i < nt; i++)
		if ((rc = add_tensor(st, &st->items[n + i], &opts->tensors[i], i)) != DVAR_OK)
			return rc;
	if ((rc = check_unique(st->items, st->n)) != DVAR_OK)
		return rc;
	return dvar_strategy_check_saveable(st->s);
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
	int64_t d[5 + DVAR_MAX_RANK] = { it->kind, it->sync, it->agg, it->dtype, it->shape.rank };
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < it->shape.rank; i++)
		d[5 + i] = it->shape.dims[i];
	h = fnv(h, d, sizeof d);
	return fnv(h, it->name, strlen(it->name) + 1);
}

static void make_token(char *token)
{
	unsigned char r[TOKEN_BYTES];
	ssize_t got = getrandom(r, sizeof r, GRND_NONBLOCK);

	if (got != (ssize_t)sizeof r) {
		/* No entropy yet: the clock, the process and a stack address still
		 * make a token no other save of this root uses. */
		uint64_t a = (uint64_t)(dvar_now() * 1e9), b = (uint64_t)getpid() ^ (uint64_t)(uintptr_t)r;

		a = fnv(0xcbf29ce484222325ull, &a, sizeof a);
		b = fnv(a, &b, sizeof b);
		memcpy(r, &a, 8);
		memcpy(r + 8, &b, 8);
	}
	for (int i = 0; i < TOKEN_BYTES; i++)
		snprintf(token + 2 * i, 3, "%02x", r[i]);
}

/*
 * Round 1. Payload: the token (chief's counts) then the list's digests.
 * On success st->token is the chief's token on every worker.
 */
static int agree_on_list(save_state *st, int rc)
{
	size_t len = 2 * TOKEN_BYTES + 8 + 8 * st->n;
	unsigned char *mine = rc == DVAR_OK ? malloc(len) : NULL;
	unsigned char *all = NULL;
	size_t *offs = malloc(((size_t)st->W + 1) * sizeof *offs);
	uint64_t count = st->n;

	if (rc == DVAR_OK && (!mine || !offs))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK) {
		if (st->worker == 0)
			make_token(st->token);
		memcpy(mine, st->token, 2 * TOKEN_BYTES);
		memcpy(mine + 2 * TOKEN_BYTES, &count, 8);
		for (size_t i = 0; i < st->n; i++) {
			uint64_t h = digest(&st->items[i]);

			memcpy(mine + 2 * TOKEN_BYTES + 8 + 8 * i, &h, 8);
		}
	}
	rc = dvar_store__agree(st->s, rc, mine, rc == DVAR_OK ? len : 0, offs ? &all : NULL, offs);
	free(mine);
	if (rc == DVAR_OK && !offs)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc != DVAR_OK) {
		free(all);
		free(offs);
		return rc;
	}
	memcpy(st->token, all, 2 * TOKEN_BYTES);
	st->token[2 * TOKEN_BYTES] = '\0';
	/* Every worker compares every list with worker 0's: the same verdict everywhere. */
	for (int w = 1; w < st->W && rc == DVAR_OK; w++) {
		const unsigned char *a = all + offs[0] + 2 * TOKEN_BYTES;
		const unsigned char *b = all + offs[w] + 2 * TOKEN_BYTES;
		uint64_t na, nb;

		memcpy(&na, a, 8);
		memcpy(&nb, b, 8);
		if (na != nb) {
			rc = dvar_error_set(DVAR_EINVAL,
			                    "the workers save different lists: worker 0 passes %llu "
			                    "variables and tensors, worker %d passes %llu",
			                    (unsigned long long)na, w, (unsigned long long)nb);
			break;
		}
		for (uint64_t i = 0; i < na; i++)
			if (memcmp(a + 8 + 8 * i, b + 8 + 8 * i, 8) != 0) {
				rc = dvar_error_set(DVAR_EINVAL,
				                    "the workers save different lists: item #%llu ('%s' on "
				                    "worker %d) differs between worker 0 and worker %d in "
				                    "name, kind, dtype, shape, synchronization or aggregation",
				                    (unsigned long long)i,
				                    i < st->n ? st->items[i].name : "none", st->worker, w);
				break;
			}
	}
	free(all);
	free(offs);
	return rc;
}

/* Checks that depend only on the agreed list: the same outcome everywhere. */
static int check_saveable_kinds(const save_state *st)
{
	for (size_t i = 0; i < st->n; i++) {
		const item *it = &st->items[i];
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
	return it->kind == KIND_PLAIN ||
	       (it->kind == KIND_SYNC_ON_READ && it->agg == DVAR_AGG_ONLY_FIRST_REPLICA);
}

/*
 * One writer per item: pinned items on worker 0, the rest largest first
 * onto the least-loaded worker (the lowest id on ties). A function of the
 * agreed list and W alone, so every worker computes the same plan.
 */
static int make_plan(save_state *st)
{
	uint64_t *load = calloc((size_t)st->W, sizeof *load);
	plan_key *keys = malloc((st->n ? st->n : 1) * sizeof *keys);
	size_t k = 0;

	if (!load || !keys) {
		free(load);
		free(keys);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < st->n; i++) {
		item *it = &st->items[i];

		if (pinned_to_chief(it)) {
			it->writer = 0;
			load[0] += it->nbytes;
		} else {
			keys[k].bytes = it->nbytes;
			keys[k++].index = i;
		}
	}
	qsort(keys, k, sizeof *keys, plan_cmp);
	for (size_t j = 0; j < k; j++) {
		int best = 0;

		for (int w = 1; w < st->W; w++)
			if (load[w] < load[best])
				best = w;
		st->items[keys[j].index].writer = best;
		load[best] += keys[j].bytes;
	}
	free(load);
	free(keys);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- values */

struct reduce_job {
	dvar_variable *v;
	dvar_reduce_op op;
	unsigned char *out; /* this worker's result, or NULL when it only takes part */
};

/*
 * OnReadPolicy._get_cross_replica for SUM and MEAN, as dvar_variable_read
 * computes it (the same collective, the same bytes), but from replica
 * context: it reads each replica's own component, so an open function scope
 * is not marked (TF saves in a save context, where nothing is marked).
 */
static int reduce_replica(dvar_replica *ctx, void *arg)
{
	const struct reduce_job *j = arg;
	size_t nbytes = dvar_variable_nbytes(j->v);
	size_t count = nbytes / dvar_dtype_size(dvar_variable_dtype(j->v));
	int keep = dvar_replica_local_id(ctx) == 0 && j->out;
	unsigned char *buf = keep ? j->out : malloc(nbytes);
	int rc;

	if (!buf)
		return dvar_error_set(DVAR_ENOMEM, "reading variable '%s': out of memory",
		                      dvar_variable_name(j->v));
	rc = dvar_variable_read(j->v, ctx, buf, nbytes);
	if (rc == DVAR_OK)
		rc = dvar_replica_all_reduce(ctx, j->op, dvar_variable_dtype(j->v), buf, buf, count);
	if (!keep)
		free(buf);
	return rc;
}

/*
 * The bytes of item it, in *data (*owned when they must be freed), for the
 * writer. ON_READ SUM and MEAN have been reduced into *owned by the caller.
 */
static int value_of(const item *it, const void **data, unsigned char **owned)
{
	static const unsigned char empty[1];

	if (it->nbytes == 0) {
		*data = empty;
		return DVAR_OK;
	}
	if (it->kind == KIND_PLAIN) {
		*data = it->data;
		return DVAR_OK;
	}
	if (*owned) {
		*data = *owned;
		return DVAR_OK;
	}
	/* Mirrored: the primary (TF's read_var). ONLY_FIRST_REPLICA: replica
	 * 0's value, which is this worker's primary (the plan puts it on worker
	 * 0). Neither needs the other workers. */
	if (!(*owned = malloc(it->nbytes)))
		return dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory", it->name);
	*data = *owned;
	return dvar_variable_read_local(it->v, 0, *owned, it->nbytes);
}

static int add_item(dvar_writer *w, const item *it, const void *data)
{
	int rc = dvar_writer_add(w, it->name, it->dtype, &it->shape, NULL, data);

	if (rc == DVAR_OK)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_KIND, kind_names[it->kind]);
	if (rc == DVAR_OK && it->kind != KIND_PLAIN)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_SYNCHRONIZATION,
		                          dvar_store__sync_name(it->sync));
	if (rc == DVAR_OK && it->kind != KIND_PLAIN)
		rc = dvar_writer_set_attr(w, it->name, DVAR_STORE_ATTR_AGGREGATION,
		                          dvar_store__agg_name(it->agg));
	return rc;
}

/*
 * Round 3's work: compute and write this worker's items, taking part in
 * every aggregate even after a failure of its own. Returns this worker's
 * status. A failed aggregate fails on every worker alike, and all of them
 * stop there.
 */
static int write_items(save_state *st, dvar_writer *w)
{
	int rc = DVAR_OK;

	for (size_t i = 0; i < st->n; i++) {
		const item *it = &st->items[i];
		int mine = it->writer == st->worker;
		unsigned char *owned = NULL;
		const void *data = NULL;

		if (it->kind == KIND_SYNC_ON_READ && it->agg != DVAR_AGG_ONLY_FIRST_REPLICA &&
		    it->nbytes) {
			struct reduce_job job = { it->v, it->agg == DVAR_AGG_MEAN ? DVAR_REDUCE_MEAN
			                                                          : DVAR_REDUCE_SUM,
				                  NULL };
			int rrc;

			/* Every worker takes part; a worker that failed already
			 * drops the result. */
			if (mine && rc == DVAR_OK && !(owned = malloc(it->nbytes)))
				rc = dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory", it->name);
			job.out = owned;
			rrc = dvar_strategy_run(st->s, reduce_replica, &job);
			if (rrc != DVAR_OK) {
				/* A failed run fails on every worker: all stop here. */
				free(owned);
				return dvar_error_prefix("saving '%s'", it->name);
			}
		}
		if (mine && rc == DVAR_OK) {
			rc = value_of(it, &data, &owned);
			if (rc == DVAR_OK)
				rc = add_item(w, it, data);
		}
		free(owned);
	}
	return rc;
}

/* ---------------------------------------------------------------- the save */

static int commit(save_state *st, dvar_writer *w, const unsigned char *blobs, const size_t *offs)
{
	const void **ptrs = malloc((size_t)st->W * sizeof *ptrs);
	size_t *lens = malloc((size_t)st->W * sizeof *lens);
	int rc;

	if (!ptrs || !lens) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else {
		for (int p = 0; p < st->W; p++) {
			ptrs[p] = blobs + offs[p];
			lens[p] = offs[p + 1] - offs[p];
		}
		rc = dvar_writer_commit_parts(w, ptrs, lens, st->W);
	}
	free(ptrs);
	free(lens);
	return rc;
}

/* Keep a message across later calls that overwrite the error record. */
typedef struct {
	int code;
	char message[DVAR_ERROR_MESSAGE_MAX];
} saved_error;

static int keep(saved_error *e, int code)
{
	e->code = code;
	snprintf(e->message, sizeof e->message, "%s", code ? dvar_error_last()->message : "");
	return code;
}

static int save(save_state *st, const char *root, dvar_variable *const *vars, size_t n,
                const dvar_save_options *opts)
{
	dvar_writer *w = NULL;
	void *blob = NULL;
	unsigned char *blobs = NULL;
	size_t blob_len = 0, *offs = NULL;
	saved_error failed = { DVAR_OK, "" };
	int rc, rc_local = DVAR_OK, rc_commit = DVAR_OK;

	/* Round 1: checks, token, the same list everywhere. */
	rc = agree_on_list(st, prepare(st, root, vars, n, opts));
	if (rc == DVAR_OK)
		rc = check_saveable_kinds(st);
	if (rc != DVAR_OK)
		return rc; /* the same verdict everywhere; nothing was created */

	/* Round 2: every worker plans and opens its part. */
	rc = make_plan(st);
	if (rc == DVAR_OK)
		rc = dvar_writer_open_step_part(&w, root, st->step, st->token, st->worker, st->W,
		                                &st->wopts);
	keep(&failed, dvar_store__agree(st->s, rc, NULL, 0, NULL, NULL));

	/* Round 3: values, parts, entries to the chief. */
	if (failed.code == DVAR_OK) {
		rc_local = write_items(st, w);
		if (rc_local == DVAR_OK)
			rc_local = dvar_writer_finish_part(w, &blob, &blob_len);
	}
	/* No part writes any more once its worker is past here. */
	if (st->worker != 0 || rc_local != DVAR_OK) {
		dvar_writer_free(w);
		w = NULL;
	}
	if (!(offs = malloc(((size_t)st->W + 1) * sizeof *offs)) && rc_local == DVAR_OK)
		rc_local = dvar_error_set(DVAR_ENOMEM, "out of memory");
	rc = dvar_store__agree(st->s, rc_local, blob, blob_len, offs ? &blobs : NULL, offs);
	free(blob);
	if (failed.code == DVAR_OK)
		keep(&failed, rc);

	/* Round 4: the chief commits, or cleans up after a failure anywhere. */
	if (st->worker == 0) {
		if (failed.code == DVAR_OK)
			rc_commit = commit(st, w, blobs, offs);
		/* Never touches a committed checkpoint: only this token's staging. */
		if (failed.code != DVAR_OK || rc_commit != DVAR_OK)
			dvar_writer_abort_step_parts(root, st->step, st->token);
		dvar_writer_free(w);
	}
	free(blobs);
	free(offs);
	rc = dvar_store__agree(st->s, rc_commit, NULL, 0, NULL, NULL);
	if (failed.code != DVAR_OK)
		return dvar_error_set(failed.code, "%s", failed.message);
	return rc;
}

int dvar_save(dvar_strategy *s, const char *root, int64_t step, dvar_variable *const *vars,
              size_t n, const dvar_save_options *opts)
{
	dvar_write_options defaults = DVAR_WRITE_OPTIONS_INIT;
	save_state st;
	int rc;

	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_save: strategy is NULL");
	memset(&st, 0, sizeof st);
	st.s = s;
	st.step = step;
	st.W = dvar_strategy_num_workers(s);
	st.worker = dvar_strategy_worker_id(s);
	st.wopts = defaults;
	rc = save(&st, root, vars, n, opts);
	free(st.items);
	if (rc != DVAR_OK)
		return dvar_error_prefix("saving step %lld to '%s'", (long long)step,
		                         root ? root : "(null)");
	return DVAR_OK;
}
