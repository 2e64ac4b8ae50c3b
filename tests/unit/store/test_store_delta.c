/*
 * tests/unit/store/test_store_delta.c - delta saves (DVAR_SAVE_DELTA):
 * random sequences of updates (scatters into a mirrored table, scatters
 * from every worker into a sharded one, whole assigns, a sync-on-read
 * metric, a scalar) with saves at random steps; every checkpoint of the
 * chain reads back equal, variable by variable, to a full save of the same
 * state and to the model, and restores into other replica counts and shard
 * counts; what each save wrote (dvar_save_last); asynchronous deltas
 * snapshot the state of their call; a restore becomes the next base; a
 * deleted base is refused by name.
 *
 * Runs alone and under mpirun (W = 2, 3); every expectation is computed
 * from the seeds, W and the worker id. --save DIR writes a chain with this
 * W; --restore DIR restores its latest under another W and checks it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "store_tu.h"

/* Tables large enough that a few changed rows (each piece two streams,
 * padded to 4 KiB) take less room than the table. */
#define DR 2048 /* dense table: DR x DC float32, mirrored */
#define DC 8
#define ER 2048 /* sharded table: ER x EC float32, 3 shards */
#define EC 4
#define STEPS 12

typedef struct {
	float d[DR * DC];
	float e[ER * EC];
	double m[2];
	int64_t c;
} state;

typedef struct {
	dvar_variable *d, *m, *c;
	dvar_sharded_variable *e;
} vars;

static uint64_t mix(uint64_t a, uint64_t b)
{
	uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 29);
}

static void make_vars(dvar_strategy *s, vars *v, int64_t shards)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_sharded_variable_spec ss = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(shards);

	spec.name = "d";
	spec.dtype = DVAR_FLOAT32;
	spec.shape.rank = 2;
	spec.shape.dims[0] = DR;
	spec.shape.dims[1] = DC;
	assert_int_equal(dvar_variable_create(&v->d, s, &spec), DVAR_OK);
	spec.name = "m";
	spec.dtype = DVAR_FLOAT64;
	spec.shape.rank = 1;
	spec.shape.dims[0] = 2;
	spec.synchronization = DVAR_SYNC_ON_READ;
	spec.aggregation = DVAR_AGG_SUM;
	assert_int_equal(dvar_variable_create(&v->m, s, &spec), DVAR_OK);
	spec.name = "c";
	spec.dtype = DVAR_INT64;
	spec.shape.rank = 0;
	spec.synchronization = DVAR_SYNC_ON_WRITE;
	spec.aggregation = DVAR_AGG_NONE;
	assert_int_equal(dvar_variable_create(&v->c, s, &spec), DVAR_OK);
	ss.name = "e";
	ss.dtype = DVAR_FLOAT32;
	ss.shape.rank = 2;
	ss.shape.dims[0] = ER;
	ss.shape.dims[1] = EC;
	ss.partitioner = &p;
	assert_int_equal(dvar_sharded_variable_create(&v->e, s, &ss), DVAR_OK);
}

static void free_vars(vars *v)
{
	dvar_variable_free(v->d);
	dvar_variable_free(v->m);
	dvar_variable_free(v->c);
	dvar_sharded_variable_free(v->e);
}

/* Worker w's sharded scatter at step: k rows (some repeated), values. */
static size_t sharded_updates(int64_t step, int w, int64_t *idx, float *rows)
{
	size_t k = (size_t)(mix((uint64_t)step, (uint64_t)w + 100) % 4);
	for (size_t i = 0; i < k; i++) {
		idx[i] = (int64_t)(mix((uint64_t)step, (uint64_t)(w * 10 + (int)i)) % ER);
		for (int c = 0; c < EC; c++)
			rows[i * EC + c] = (float)((step * 7 + w * 3 + (int64_t)i + c) % 50);
	}
	return k;
}

/* The dense rows replaced at step (0 most steps, sometimes none): k. */
static size_t dense_updates(int64_t step, int64_t *idx, float *rows)
{
	uint64_t r = mix((uint64_t)step, 1);
	size_t k = r % 5 != 0 ? 1 + (size_t)(r % 3) : 0;

	for (size_t i = 0; i < k; i++) {
		idx[i] = (int64_t)(mix((uint64_t)step, 20 + i) % DR);
		for (int c = 0; c < DC; c++)
			rows[i * DC + c] = (float)(step * 100 + (int64_t)i * 10 + c);
	}
	return k;
}

/*
 * The model: what step's updates make of the logical values in a run of W
 * workers. The dense rows are replaced in order; every worker's sharded
 * rows are added, in worker order, as the owners apply them; now and then
 * a whole update; the metric and (every other step) the counter are set.
 */
static void model_step(state *st, int W, int64_t step)
{
	int64_t idx[8] = { 0 };
	float rows[8 * EC] = { 0 };
	size_t k = dense_updates(step, idx, rows);

	for (size_t i = 0; i < k; i++)
		memcpy(&st->d[idx[i] * DC], &rows[i * DC], DC * sizeof(float));
	if (step % 7 == 3)
		for (int i = 0; i < DR * DC; i++)
			st->d[i] = (float)(step + i % 11);
	for (int w = 0; w < W; w++) {
		size_t kw = sharded_updates(step, w, idx, rows);
		for (size_t i = 0; i < kw; i++)
			for (int c = 0; c < EC; c++)
				st->e[idx[i] * EC + c] += rows[i * EC + c];
	}
	if (step % 4 == 2)
		for (int i = 0; i < ER * EC; i++)
			st->e[i] += (float)(i % 3);
	st->m[0] = (double)step;
	st->m[1] = -(double)step;
	if (step % 2 == 0)
		st->c = step;
}

/* One step of training on this worker: the model's updates made through
 * the variables' own calls (the sharded scatter with this worker's rows),
 * st advanced to match. */
static void train_step(const stu_topo *t, vars *v, state *st, int64_t step)
{
	int64_t idx[8] = { 0 };
	float rows[8 * EC] = { 0 };
	size_t k = dense_updates(step, idx, rows);

	model_step(st, t->W, step);
	/* Dense: rows replaced (cross-replica: every component), then maybe all. */
	if (k)
		assert_int_equal(dvar_variable_scatter(v->d, NULL, DVAR_SCATTER_UPDATE, idx, k, rows),
		                 DVAR_OK);
	if (step % 7 == 3)
		assert_int_equal(dvar_variable_assign(v->d, NULL, st->d), DVAR_OK);
	k = sharded_updates(step, t->worker, idx, rows);
	assert_int_equal(dvar_sharded_variable_scatter(v->e, DVAR_SCATTER_ADD, idx, k, rows,
	                                               k * EC * sizeof(float)),
	                 DVAR_OK);
	if (step % 4 == 2) {
		float *all = malloc(sizeof st->e);
		assert_non_null(all);
		for (int i = 0; i < ER * EC; i++)
			all[i] = (float)(i % 3);
		assert_int_equal(dvar_sharded_variable_assign_add(v->e, all), DVAR_OK);
		free(all);
	}
	assert_int_equal(dvar_variable_assign(v->m, NULL, st->m), DVAR_OK);
	if (step % 2 == 0)
		assert_int_equal(dvar_variable_assign(v->c, NULL, &st->c), DVAR_OK);
}

static int64_t mismatches_in(const void *got, const void *want, size_t bytes)
{
	return memcmp(got, want, bytes) != 0;
}

/* Read every variable of ckpt offline and count the ones that differ from st. */
static int64_t check_checkpoint(const char *ckpt, const state *st)
{
	dvar_reader *r;
	state got;
	size_t i;
	int64_t bad = 0;

	if (dvar_reader_open(&r, ckpt, NULL) != DVAR_OK) {
		fprintf(stderr, "open %s: %s\n", ckpt, dvar_error_last()->message);
		return 100;
	}
	if (dvar_reader_find(r, "d", &i) || dvar_reader_read(r, i, NULL, got.d, sizeof got.d) ||
	    dvar_reader_find(r, "e", &i) || dvar_reader_read(r, i, NULL, got.e, sizeof got.e) ||
	    dvar_reader_find(r, "m", &i) || dvar_reader_read(r, i, NULL, got.m, sizeof got.m) ||
	    dvar_reader_find(r, "c", &i) || dvar_reader_read(r, i, NULL, &got.c, sizeof got.c)) {
		fprintf(stderr, "read %s: %s\n", ckpt, dvar_error_last()->message);
		bad = 100;
	} else {
		bad += mismatches_in(got.d, st->d, sizeof got.d);
		bad += mismatches_in(got.e, st->e, sizeof got.e);
		bad += mismatches_in(got.m, st->m, sizeof got.m);
		bad += mismatches_in(&got.c, &st->c, sizeof got.c);
		if (bad)
			fprintf(stderr, "%s: %lld variables differ from the model\n", ckpt, (long long)bad);
	}
	dvar_reader_free(r);
	return bad;
}

/* Restore ckpt into fresh variables (R replicas, shards shards) and compare with st. */
static int64_t check_restore(int R, int64_t shards, const char *ckpt, const state *st)
{
	stu_topo t;
	vars v;
	state got;
	dvar_shape sh;
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	int64_t bad = 0;

	assert_int_equal(stu_topo_open(&t, R), DVAR_OK);
	make_vars(t.s, &v, shards);
	ro.sharded = &v.e;
	ro.num_sharded = 1;
	dvar_variable *list[3] = { v.d, v.m, v.c };
	if (dvar_restore(t.s, ckpt, list, 3, &ro) != DVAR_OK) {
		fprintf(stderr, "restore %s: %s\n", ckpt, dvar_error_last()->message);
		bad = 100;
	} else {
		assert_int_equal(dvar_variable_read(v.d, NULL, got.d, sizeof got.d), DVAR_OK);
		assert_int_equal(dvar_variable_read(v.m, NULL, got.m, sizeof got.m), DVAR_OK);
		assert_int_equal(dvar_variable_read(v.c, NULL, &got.c, sizeof got.c), DVAR_OK);
		assert_int_equal(dvar_sharded_variable_read(v.e, NULL, 0, got.e, sizeof got.e, &sh),
		                 DVAR_OK);
		bad += mismatches_in(got.d, st->d, sizeof got.d) + mismatches_in(got.e, st->e, sizeof got.e) +
		       mismatches_in(got.m, st->m, sizeof got.m) + mismatches_in(&got.c, &st->c, 8);
	}
	free_vars(&v);
	dvar_strategy_free(t.s);
	return bad;
}

static int save_into(const stu_topo *t, vars *v, const char *root, int64_t step, unsigned flags,
                     int async)
{
	dvar_save_options o = DVAR_SAVE_OPTIONS_INIT;
	dvar_variable *list[3] = { v->d, v->m, v->c };
	o.flags = flags;
	o.sharded = &v->e;
	o.num_sharded = 1;
	int rc = async ? dvar_save_async(t->s, root, step, list, 3, &o)
	               : dvar_save(t->s, root, step, list, 3, &o);
	if (rc != DVAR_OK)
		fprintf(stderr, "worker %d: saving step %lld: %s\n", t->worker, (long long)step,
		        dvar_error_last()->message);
	return rc;
}

/*
 * The chain, saved by R replicas a worker: saves as deltas into root at
 * pseudo-random steps, and the same state as full checkpoints into full/;
 * every delta reads equal to its full twin, and to the model; then random
 * links of the chain restore into R = 1 and 2 replicas and into 2 and 5
 * shards.
 */
static void random_chain(int R)
{
	stu_topo t;
	vars v;
	state st, *saved = calloc(STEPS + 1, sizeof *saved);
	int have[STEPS + 1] = { 0 };
	char *root, *full;
	int64_t bad = 0, deltas = 0;

	assert_non_null(saved);
	assert_int_equal(stu_topo_open(&t, R), DVAR_OK);
	root = stu_shared_dir(t.s);
	full = stu_shared_dir(t.s);
	make_vars(t.s, &v, 3);
	memset(&st, 0, sizeof st);
	for (int64_t step = 1; step <= STEPS; step++) {
		train_step(&t, &v, &st, step);
		if (step > 1 && mix((uint64_t)step, 77) % 3 == 0)
			continue; /* not every step is saved */
		assert_int_equal(save_into(&t, &v, root, step, DVAR_SAVE_DELTA, 0), DVAR_OK);
		dvar_save_info info;
		assert_int_equal(dvar_save_last(t.s, &info), DVAR_OK);
		assert_int_equal(info.step, step);
		assert_int_equal(info.vars_whole + info.vars_unchanged + info.vars_patched, 4);
		/* The metric is whole every time; the first save has no base. */
		assert_true(info.vars_whole >= 1);
		assert_int_equal(info.is_delta, step != 1);
		deltas += info.is_delta;
		assert_int_equal(save_into(&t, &v, full, step, 0, 0), DVAR_OK);
		saved[step] = st;
		have[step] = 1;
	}
	assert_true(deltas >= 5);
	/* Every checkpoint: as the model said, and as its full twin reads. */
	for (int64_t step = 1; step <= STEPS; step++) {
		char name[32];
		if (!have[step])
			continue;
		snprintf(name, sizeof name, "ckpt-%lld", (long long)step);
		char *d = tu_path(root, name), *f = tu_path(full, name);
		bad += check_checkpoint(d, &saved[step]) + check_checkpoint(f, &saved[step]);
		free(d);
		free(f);
	}
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	/* Restores of random links into other topologies and shard counts. */
	for (int k = 0; k < 3; k++) {
		int64_t step = 1 + (int64_t)(mix((uint64_t)k, 5) % STEPS);
		while (!have[step])
			step--;
		char name[32];
		snprintf(name, sizeof name, "ckpt-%lld", (long long)step);
		char *d = tu_path(root, name);
		bad += check_restore(1 + k % 2, k == 1 ? 5 : 2, d, &saved[step]);
		free(d);
	}
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	free(saved);
	free_vars(&v);
	stu_drop_shared_dir(t.s, root);
	stu_drop_shared_dir(t.s, full);
	dvar_strategy_free(t.s);
}

static void test_delta__random_chain(void **state_)
{
	(void)state_;
	for (int R = 1; R <= 2; R++)
		random_chain(R);
}

/* One row changed: a delta of a few KiB where the full checkpoint has all. */
static void test_delta__bytes_follow_the_change(void **state_)
{
	stu_topo t;
	vars v;
	state st;
	char *root;
	dvar_save_info full, delta, none;
	int64_t row = 5;
	float one[DC] = { 1, 2, 3, 4, 5, 6, 7, 8 };

	(void)state_;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	make_vars(t.s, &v, 3);
	memset(&st, 0, sizeof st);
	assert_int_equal(save_into(&t, &v, root, 1, DVAR_SAVE_DELTA, 0), DVAR_OK);
	assert_int_equal(dvar_save_last(t.s, &full), DVAR_OK);
	assert_int_equal(dvar_variable_scatter(v.d, NULL, DVAR_SCATTER_UPDATE, &row, 1, one), DVAR_OK);
	assert_int_equal(save_into(&t, &v, root, 2, DVAR_SAVE_DELTA, 0), DVAR_OK);
	assert_int_equal(dvar_save_last(t.s, &delta), DVAR_OK);
	assert_true(delta.is_delta);
	assert_string_equal(delta.base, "ckpt-1");
	assert_int_equal(delta.vars_patched, 1);
	assert_int_equal(delta.rows_patched, 1);
	assert_int_equal(delta.vars_unchanged, 2); /* e and c */
	assert_int_equal(delta.vars_whole, 1);     /* the metric */
	/* Nothing changed: all unchanged but the metric. */
	assert_int_equal(save_into(&t, &v, root, 3, DVAR_SAVE_DELTA, 0), DVAR_OK);
	assert_int_equal(dvar_save_last(t.s, &none), DVAR_OK);
	assert_int_equal(none.vars_unchanged, 3);
	assert_string_equal(none.base, "ckpt-2");
	/* A new chain on request. */
	assert_int_equal(save_into(&t, &v, root, 4, DVAR_SAVE_DELTA | DVAR_SAVE_NEW_CHAIN, 0),
	                 DVAR_OK);
	assert_int_equal(dvar_save_last(t.s, &none), DVAR_OK);
	assert_false(none.is_delta);
	assert_int_equal(none.vars_whole, 4);
	memcpy(&st.d[row * DC], one, sizeof one);
	{
		char *c4 = tu_path(root, "ckpt-4"), *c3 = tu_path(root, "ckpt-3");
		assert_int_equal(stu_sum_over_workers(t.s, check_checkpoint(c3, &st) +
		                                                check_checkpoint(c4, &st)),
		                 0);
		free(c3);
		free(c4);
	}
	free_vars(&v);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* An asynchronous delta holds the state of its call, not of its commit. */
static void test_delta__async_snapshot(void **state_)
{
	stu_topo t;
	vars v;
	state st, at_save;
	char *root;

	(void)state_;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	root = stu_shared_dir(t.s);
	make_vars(t.s, &v, 3);
	memset(&st, 0, sizeof st);
	train_step(&t, &v, &st, 1);
	assert_int_equal(save_into(&t, &v, root, 1, DVAR_SAVE_DELTA, 1), DVAR_OK);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	train_step(&t, &v, &st, 2);
	at_save = st;
	assert_int_equal(save_into(&t, &v, root, 2, DVAR_SAVE_DELTA, 1), DVAR_OK);
	/* Training goes on while the delta is written. */
	train_step(&t, &v, &st, 3);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	dvar_save_info info;
	assert_int_equal(dvar_save_last(t.s, &info), DVAR_OK);
	assert_true(info.is_delta);
	/* Step 3's changes since ckpt-2 go into the next delta. */
	assert_int_equal(save_into(&t, &v, root, 3, DVAR_SAVE_DELTA, 0), DVAR_OK);
	{
		char *c2 = tu_path(root, "ckpt-2"), *c3 = tu_path(root, "ckpt-3");
		assert_int_equal(stu_sum_over_workers(t.s, check_checkpoint(c2, &at_save) +
		                                                check_checkpoint(c3, &st)),
		                 0);
		free(c2);
		free(c3);
	}
	free_vars(&v);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* A restore from a root's checkpoint is the next delta's base there; a
 * deleted base is refused by name, never read around. */
static void test_delta__restore_is_the_base(void **state_)
{
	stu_topo t;
	vars v, w;
	state st;
	char *root;
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	dvar_save_info info;
	int64_t row = 7;
	float x[DC] = { 9, 9, 9, 9, 9, 9, 9, 9 };

	(void)state_;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	make_vars(t.s, &v, 3);
	memset(&st, 0, sizeof st);
	train_step(&t, &v, &st, 1);
	assert_int_equal(save_into(&t, &v, root, 1, DVAR_SAVE_DELTA, 0), DVAR_OK);
	train_step(&t, &v, &st, 2);
	assert_int_equal(save_into(&t, &v, root, 2, DVAR_SAVE_DELTA, 0), DVAR_OK);
	/* A new job: fresh variables restored from the root's latest. */
	make_vars(t.s, &w, 2);
	ro.sharded = &w.e;
	ro.num_sharded = 1;
	dvar_variable *list[3] = { w.d, w.m, w.c };
	assert_int_equal(dvar_restore(t.s, root, list, 3, &ro), DVAR_OK);
	assert_int_equal(dvar_variable_scatter(w.d, NULL, DVAR_SCATTER_UPDATE, &row, 1, x), DVAR_OK);
	assert_int_equal(save_into(&t, &w, root, 3, DVAR_SAVE_DELTA, 0), DVAR_OK);
	assert_int_equal(dvar_save_last(t.s, &info), DVAR_OK);
	assert_true(info.is_delta);
	assert_string_equal(info.base, "ckpt-2");
	assert_int_equal(info.vars_patched, 1);
	memcpy(&st.d[row * DC], x, sizeof x);
	char *c3 = tu_path(root, "ckpt-3");
	assert_int_equal(stu_sum_over_workers(t.s, check_checkpoint(c3, &st)), 0);
	/* The base of the base gone: the latest cannot be restored, and says why. */
	if (t.worker == 0) {
		char *c1 = tu_path(root, "ckpt-1");
		tu_rmtree(c1);
		free(c1);
	}
	stu_sum_over_workers(t.s, 0);
	assert_int_not_equal(dvar_restore(t.s, root, list, 3, &ro), DVAR_OK);
	tu_assert_error_contains("which is missing");
	free(c3);
	free_vars(&v);
	free_vars(&w);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* Every checkpoint directory under root is listed as kept, and each opens
 * (its whole chain there) and verifies. */
static int64_t check_root(const char *root, size_t *count)
{
	dvar_root_list *l;
	dvar_root_entry e;
	int64_t bad = 0;

	*count = 0;
	if (dvar_root_list_open(&l, root) != DVAR_OK)
		return 100;
	for (size_t i = 0; i < dvar_root_list_count(l); i++) {
		dvar_reader *r;
		uint64_t nbad = 0;
		char *ck;

		dvar_root_list_get(l, i, &e);
		ck = tu_path(root, e.name);
		bad += !e.is_kept;
		if (dvar_reader_open(&r, ck, NULL) != DVAR_OK) {
			fprintf(stderr, "%s: %s\n", ck, dvar_error_last()->message);
			bad++;
		} else {
			bad += dvar_reader_verify(r, NULL, NULL, &nbad) != DVAR_OK || nbad;
			dvar_reader_free(r);
		}
		free(ck);
	}
	*count = dvar_root_list_count(l);
	dvar_root_list_free(l);
	return bad;
}

/*
 * The manager saving deltas: a full checkpoint every third save, keep the
 * last 2; every checkpoint left is kept and readable, older chains go once
 * no kept delta needs them, and the latest restores to the model.
 */
static void test_delta__manager_keeps_what_deltas_need(void **state_)
{
	stu_topo t;
	vars v;
	state st;
	char *root;
	dvar_manager *m;
	dvar_manager_options mo = DVAR_MANAGER_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_variable *list[3];
	int64_t bad = 0;
	size_t count;

	(void)state_;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	make_vars(t.s, &v, 3);
	list[0] = v.d;
	list[1] = v.m;
	list[2] = v.c;
	so.sharded = &v.e;
	so.num_sharded = 1;
	mo.keep_last = 2;
	mo.delta = 1;
	mo.full_every = 3;
	mo.max_chain_ratio = 100; /* the periodic rule alone here */
	mo.save = &so;
	assert_int_equal(dvar_manager_open(&m, t.s, root, list, 3, &mo), DVAR_OK);
	memset(&st, 0, sizeof st);
	for (int64_t step = 1; step <= 10; step++) {
		dvar_save_info info;
		int saved = 0;

		train_step(&t, &v, &st, step);
		assert_int_equal(dvar_manager_step(m, step, &saved), DVAR_OK);
		assert_true(saved);
		assert_int_equal(dvar_save_last(t.s, &info), DVAR_OK);
		/* Full at 1, 4, 7, 10: a full one every third save. */
		if (info.is_delta != ((step - 1) % 3 != 0))
			fail_msg("step %lld: is_delta %d", (long long)step, info.is_delta);
		bad += check_root(root, &count);
		/* The last two and what they need: a whole chain of three behind
		 * a new full checkpoint at most. */
		assert_true(count <= 4);
	}
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	/* After the full ckpt-10 only ckpt-9 (a delta over 8, over 7) and 10 are kept. */
	assert_true(stu_exists_in(root, "ckpt-10") && stu_exists_in(root, "ckpt-7"));
	assert_false(stu_exists_in(root, "ckpt-6") || stu_exists_in(root, "ckpt-4"));
	dvar_manager_free(m);
	bad = check_restore(2, 2, root, &st);
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	free_vars(&v);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* --save DIR: a chain of STEPS steps with this W; --restore DIR: its latest
 * under another W, against the model (every W computes the same model of
 * a W-worker run: the sharded scatters depend on W, so DIR's name gives it). */
static int main_save(const char *dir)
{
	stu_topo t;
	vars v;
	state st;

	if (stu_topo_open(&t, 1) != DVAR_OK)
		return 1;
	if (t.worker == 0)
		tu_rmtree(dir); /* an earlier run's */
	stu_sum_over_workers(t.s, 0);
	make_vars(t.s, &v, 3);
	memset(&st, 0, sizeof st);
	for (int64_t step = 1; step <= STEPS; step++) {
		train_step(&t, &v, &st, step);
		if (save_into(&t, &v, dir, step, DVAR_SAVE_DELTA, 0) != DVAR_OK) {
			fprintf(stderr, "save %lld: %s\n", (long long)step, dvar_error_last()->message);
			return 1;
		}
	}
	free_vars(&v);
	dvar_strategy_free(t.s);
	return 0;
}

static int main_restore(const char *dir, int saved_w)
{
	state st;

	/* The model of a saved_w-worker run, computed here without workers. */
	memset(&st, 0, sizeof st);
	for (int64_t step = 1; step <= STEPS; step++)
		model_step(&st, saved_w, step);
	return check_restore(1, 4, dir, &st) + check_restore(2, 1, dir, &st) != 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_delta__random_chain),
		cmocka_unit_test(test_delta__bytes_follow_the_change),
		cmocka_unit_test(test_delta__async_snapshot),
		cmocka_unit_test(test_delta__restore_is_the_base),
		cmocka_unit_test(test_delta__manager_keeps_what_deltas_need),
	};

	if (argc == 3 && strcmp(argv[1], "--save") == 0)
		return main_save(argv[2]);
	if (argc == 4 && strcmp(argv[1], "--restore") == 0)
		return main_restore(argv[2], atoi(argv[3]));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
