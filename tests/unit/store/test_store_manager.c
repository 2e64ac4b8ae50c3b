/*
 * tests/unit/store/test_store_manager.c - the checkpoint manager: a training
 * loop whose variables change every step saves every K steps, keeps the last
 * N checkpoints, and restores the latest one or a given step into fresh
 * variables of another replica count; a fresh root restores nothing
 * (DVAR_ENOTFOUND); the asynchronous mode writes the same checkpoints with
 * the same values as the synchronous one; a pending save that fails in the
 * background surfaces from the call that finishes it; bad options fail.
 *
 * The same program runs alone and under `mpirun -np 2`: every expectation
 * is computed from R, W and the worker id, every rank runs the same tests
 * in the same order, and value checks count mismatches on each worker and
 * sum the counts over all workers before asserting, so that an assert fails
 * on every rank or on none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "store_tu.h"

/* ---------------------------------------------------------------- the root */

/* The committed checkpoints under root, as "ckpt-6 ckpt-9" (step order). */
static void listing(const char *root, char *out, size_t cap)
{
	dvar_root_list *l = NULL;
	size_t at = 0;

	out[0] = '\0';
	if (dvar_root_list_open(&l, root) != DVAR_OK)
		return;
	for (size_t i = 0; i < dvar_root_list_count(l) && at < cap; i++) {
		dvar_root_entry e;

		if (dvar_root_list_get(l, i, &e) == DVAR_OK)
			at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? " " : "", e.name);
	}
	dvar_root_list_free(l);
}

/* ---------------------------------------------------------------- the model */

/*
 * Three variables whose values are functions of the training step, so that
 * every checkpoint tells which step it holds:
 *   w      mirrored float32 [5]: w[i] = 10 step + i on every replica;
 *   acc    ON_READ SUM float64 [3]: replica g holds step + g / 4 + i;
 *   count  ON_READ SUM int64 []: replica g holds 100 step + g;
 * plus the plain tensor "step" (int64), the loop's counter.
 * All of them, and their sums, are exact in their dtypes.
 */
#define W_LEN 5
#define ACC_LEN 3

typedef struct {
	dvar_variable *w, *acc, *count;
	int64_t step;           /* the plain tensor's data */
	dvar_store_tensor plain; /* "step", borrowed by the manager */
} model;

static void model_create(dvar_strategy *s, model *m)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;

	memset(m, 0, sizeof *m);
	spec.name = "w";
	spec.dtype = DVAR_FLOAT32;
	spec.shape.rank = 1;
	spec.shape.dims[0] = W_LEN;
	assert_int_equal(dvar_variable_create(&m->w, s, &spec), DVAR_OK);
	spec.name = "acc";
	spec.dtype = DVAR_FLOAT64;
	spec.shape.dims[0] = ACC_LEN;
	spec.synchronization = DVAR_SYNC_ON_READ;
	spec.aggregation = DVAR_AGG_SUM;
	assert_int_equal(dvar_variable_create(&m->acc, s, &spec), DVAR_OK);
	spec.name = "count";
	spec.dtype = DVAR_INT64;
	spec.shape.rank = 0;
	assert_int_equal(dvar_variable_create(&m->count, s, &spec), DVAR_OK);
	m->plain.name = "step";
	m->plain.dtype = DVAR_INT64;
	m->plain.data = &m->step;
}

static void model_free(model *m)
{
	dvar_variable_free(m->w);
	dvar_variable_free(m->acc);
	dvar_variable_free(m->count);
	memset(m, 0, sizeof *m);
}

/* A test's start: R replicas per worker, a fresh root every worker sees
 * (returned), and the model. */
static char *model_setup(stu_topo *t, int replicas, model *m)
{
	char *root;

	assert_int_equal(stu_topo_open(t, replicas), DVAR_OK);
	root = stu_shared_dir(t->s);
	model_create(t->s, m);
	return root;
}

/* A test's end: the model freed, then the root removed and the strategy freed. */
static void model_teardown(stu_topo *t, char *root, model *m)
{
	model_free(m);
	stu_drop_shared_dir(t->s, root);
	dvar_strategy_free(t->s);
}

static float w_at(int64_t step, int i)
{
	return (float)(10 * step + i);
}

static double acc_at(int64_t step, int g, int i)
{
	return (double)step + g / 4.0 + i;
}

/* What a save over N replicas records. */
static double acc_saved(int64_t step, int N, int i)
{
	double sum = 0;

	for (int g = 0; g < N; g++)
		sum += acc_at(step, g, i);
	return sum;
}

static int64_t count_saved(int64_t step, int N)
{
	return 100 * step * N + (int64_t)N * (N - 1) / 2;
}

struct set_job {
	model *m;
	int64_t step;
};

/* ON_READ: each replica assigns its own component (replica context). */
static int set_replica(dvar_replica *ctx, void *arg)
{
	struct set_job *j = arg;
	int g = dvar_replica_id(ctx);
	double acc[ACC_LEN];
	int64_t count = 100 * j->step + g;
	int rc;

	for (int i = 0; i < ACC_LEN; i++)
		acc[i] = acc_at(j->step, g, i);
	rc = dvar_variable_assign(j->m->acc, ctx, acc);
	if (rc == DVAR_OK)
		rc = dvar_variable_assign(j->m->count, ctx, &count);
	return rc;
}

/* What local replica l holds of w, acc and count. */
static int model_read_local(model *m, int l, float w[W_LEN], double acc[ACC_LEN], int64_t *count)
{
	int rc = dvar_variable_read_local(m->w, l, w, W_LEN * sizeof *w);

	if (rc == DVAR_OK)
		rc = dvar_variable_read_local(m->acc, l, acc, ACC_LEN * sizeof *acc);
	if (rc == DVAR_OK)
		rc = dvar_variable_read_local(m->count, l, count, sizeof *count);
	return rc;
}

/* One training step's worth of change: every variable takes step's values. */
static void model_set(dvar_strategy *s, model *m, int64_t step)
{
	struct set_job j = { m, step };
	float w[W_LEN];

	for (int i = 0; i < W_LEN; i++)
		w[i] = w_at(step, i);
	assert_int_equal(dvar_variable_assign(m->w, NULL, w), DVAR_OK);
	assert_int_equal(dvar_strategy_run(s, set_replica, &j), DVAR_OK);
	m->step = step;
}

/*
 * Mismatches between what this worker's replicas hold and a restore of a
 * save of step by N_saved replicas into t's N replicas: w on every replica,
 * acc split as value / N, count split exactly (and read back whole).
 */
static int model_check(const stu_topo *t, model *m, int64_t step, int N_saved)
{
	int64_t count_total = count_saved(step, N_saved), got_total = 0;
	int bad = 0;

	for (int l = 0; l < t->R; l++) {
		int g = t->worker * t->R + l;
		float w[W_LEN];
		double acc[ACC_LEN];
		int64_t count, rem = count_total % t->N;

		if (model_read_local(m, l, w, acc, &count) != DVAR_OK) {
			bad++;
			continue;
		}
		for (int i = 0; i < W_LEN; i++)
			if (w[i] != w_at(step, i)) {
				print_error("w[%d] on replica %d is %g, expected %g\n", i, g, w[i],
				            w_at(step, i));
				bad++;
			}
		for (int i = 0; i < ACC_LEN; i++)
			if (acc[i] != acc_saved(step, N_saved, i) / t->N) {
				print_error("acc[%d] on replica %d is %.17g, expected "
				            "%.17g\n", i, g, acc[i],
				            acc_saved(step, N_saved, i) / t->N);
				bad++;
			}
		if (count != count_total / t->N + (g < rem)) {
			print_error("count on replica %d is %lld, expected %lld\n", g,
			            (long long)count, (long long)(count_total / t->N + (g < rem)));
			bad++;
		}
	}
	/* Collective: the cross-replica SUM gives the saved value back. */
	if (dvar_variable_read(m->count, NULL, &got_total, sizeof got_total) != DVAR_OK ||
	    got_total != count_total)
		bad++;
	if (m->step != step) {
		print_error("the plain tensor 'step' is %lld, expected %lld\n", (long long)m->step,
		            (long long)step);
		bad++;
	}
	return bad;
}

/* Mismatches between root/ckpt-<step> on disk and a save of step by N replicas. */
static int checkpoint_check(const char *root, int64_t step, int N)
{
	char name[64];
	char *dir;
	dvar_reader *r = NULL;
	float w[W_LEN];
	double acc[ACC_LEN];
	int64_t count = 0, plain = -1;
	size_t i;
	int bad = 0;

	snprintf(name, sizeof name, "ckpt-%lld", (long long)step);
	dir = tu_path(root, name);
	if (dvar_reader_open(&r, dir, NULL) != DVAR_OK) {
		print_error("open %s: %s\n", dir, dvar_error_last()->message);
		free(dir);
		return 1;
	}
	free(dir);
	if (dvar_reader_find(r, "w", &i) != DVAR_OK ||
	    dvar_reader_read(r, i, NULL, w, sizeof w) != DVAR_OK ||
	    dvar_reader_find(r, "acc", &i) != DVAR_OK ||
	    dvar_reader_read(r, i, NULL, acc, sizeof acc) != DVAR_OK ||
	    dvar_reader_find(r, "count", &i) != DVAR_OK ||
	    dvar_reader_read(r, i, NULL, &count, sizeof count) != DVAR_OK ||
	    dvar_reader_find(r, "step", &i) != DVAR_OK ||
	    dvar_reader_read(r, i, NULL, &plain, sizeof plain) != DVAR_OK) {
		print_error("%s: %s\n", name, dvar_error_last()->message);
		dvar_reader_free(r);
		return 1;
	}
	dvar_reader_free(r);
	for (int k = 0; k < W_LEN; k++)
		bad += w[k] != w_at(step, k);
	for (int k = 0; k < ACC_LEN; k++)
		bad += acc[k] != acc_saved(step, N, k);
	bad += count != count_saved(step, N);
	bad += plain != step;
	if (bad)
		print_error("%s holds other values than step %lld's\n", name, (long long)step);
	return bad;
}

/* ---------------------------------------------------------------- the manager */

static dvar_write_options test_write_options(void)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;

	o.flags = DVAR_WRITE_NO_FSYNC;
	o.compress = DVAR_COMPRESS_NONE;
	o.threads = 1;
	o.keep_last = 77; /* the manager's keep_last replaces it */
	return o;
}

/* Option storage that is gone once the manager is open. */
struct opts_storage {
	dvar_write_options wo;
	dvar_save_options so;
	dvar_restore_options ro;
	dvar_manager_options mo;
};

static int manager_open(dvar_manager **out, dvar_strategy *s, const char *root,
                        model *m, int64_t K, int N, int async)
{
	struct opts_storage *o = calloc(1, sizeof *o);
	dvar_variable *vars[3] = { m->w, m->acc, m->count };
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	dvar_manager_options mo = DVAR_MANAGER_OPTIONS_INIT;
	int rc;

	assert_non_null(o);
	o->wo = test_write_options();
	o->so = so;
	o->so.write = &o->wo;
	/* The tensor array is borrowed until dvar_manager_free: it lives in
	 * the model, like the data it points at. */
	o->so.tensors = &m->plain;
	o->so.num_tensors = 1;
	o->ro = ro;
	o->ro.tensors = &m->plain;
	o->ro.num_tensors = 1;
	o->mo = mo;
	o->mo.save_every = K;
	o->mo.keep_last = N;
	o->mo.async = async;
	o->mo.save = &o->so;
	o->mo.restore = &o->ro;
	rc = dvar_manager_open(out, s, root, vars, 3, &o->mo);
	/* The options are copied: scribble over them before freeing. */
	memset(o, 0xa5, sizeof *o);
	free(o);
	return rc;
}

/*
 * A training loop of steps [first, last] with K and N: the variables take
 * each step's values, then dvar_manager_step runs. saved_out (may be NULL)
 * receives each step's *saved. Ends with dvar_manager_wait.
 */
static void train(dvar_strategy *s, dvar_manager *mgr, model *m, int64_t first,
                  int64_t last, int *saved_out)
{
	for (int64_t step = first; step <= last; step++) {
		int saved = -1;

		model_set(s, m, step);
		assert_int_equal(dvar_manager_step(mgr, step, &saved), DVAR_OK);
		if (saved_out)
			saved_out[step - first] = saved;
	}
	assert_int_equal(dvar_manager_wait(mgr), DVAR_OK);
}

/*
 * Step `step` saves (a multiple of K), the variables move on to step + 1,
 * and restoring the latest brings step's values back: the mismatches.
 */
static int save_then_restore_latest(const stu_topo *t, dvar_manager *mgr, model *m,
                                    int64_t step)
{
	int64_t restored = -1;
	int saved = -1;

	model_set(t->s, m, step);
	assert_int_equal(dvar_manager_step(mgr, step, &saved), DVAR_OK);
	assert_int_equal(saved, 1);
	model_set(t->s, m, step + 1);
	assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, &restored), DVAR_OK);
	assert_int_equal(restored, step);
	return model_check(t, m, step, t->N);
}

/* ---------------------------------------------------------------- save every K, keep N */

/*
 * K = 3, N = 2 over steps 0..10: saves at 0, 3, 6, 9 and keeps ckpt-6 and
 * ckpt-9, each holding its own step's values; a final save of 10; saving a
 * step again is skipped. Then restore the latest and given steps into fresh
 * variables with other replica counts.
 */
static void every_k_keep_last(int async)
{
	dvar_manager *mgr = NULL;
	char *root, names[256], latest[64];
	int saved[11];
	int64_t bad = 0, restored = -1;
	model m;
	stu_topo t;
	int N_saved;

	root = model_setup(&t, 2, &m);
	N_saved = t.N;
	assert_int_equal(manager_open(&mgr, t.s, root, &m, 3, 2, async), DVAR_OK);
	train(t.s, mgr, &m, 0, 10, saved);
	for (int step = 0; step <= 10; step++)
		assert_int_equal(saved[step], step % 3 == 0);
	listing(root, names, sizeof names);
	assert_string_equal(names, "ckpt-6 ckpt-9");
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-9");
	bad += checkpoint_check(root, 6, t.N) + checkpoint_check(root, 9, t.N);

	/* A final save whatever K, then the same step again: skipped. */
	assert_int_equal(dvar_manager_save(mgr, 10), DVAR_OK);
	assert_int_equal(dvar_manager_save(mgr, 10), DVAR_OK);
	assert_int_equal(dvar_manager_wait(mgr), DVAR_OK);
	listing(root, names, sizeof names);
	assert_string_equal(names, "ckpt-9 ckpt-10");
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-10");
	bad += checkpoint_check(root, 10, t.N);
	/* Step 9 is committed (not the manager's last save): skipped too, on
	 * the save's DVAR_EEXISTS, and ckpt-9 keeps step 9's values. */
	{
		int s9 = -1;

		model_set(t.s, &m, 11);
		assert_int_equal(dvar_manager_step(mgr, 9, &s9), DVAR_OK);
		assert_int_equal(dvar_manager_wait(mgr), DVAR_OK);
		assert_int_equal(s9, 0);
		bad += checkpoint_check(root, 9, t.N);
	}
	assert_int_equal(stu_count_prefix(root, ".ckpt-"), 0);
	dvar_manager_free(mgr);
	model_free(&m);
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	dvar_strategy_free(t.s);

	/* Fresh variables, other replica counts (R = 3 alone only, to keep the
	 * MPI runs short on two cores). Each strategy is freed before the next. */
	for (int R = 1; R <= 3; R += 2) {
		if (R == 3 && N_saved > 2)
			continue;
		assert_int_equal(stu_topo_open(&t, R), DVAR_OK);
		model_create(t.s, &m);
		assert_int_equal(manager_open(&mgr, t.s, root, &m, 3, 2, async), DVAR_OK);
		assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, &restored),
		                 DVAR_OK);
		assert_int_equal(restored, 10);
		bad = model_check(&t, &m, 10, N_saved);
		assert_int_equal(dvar_manager_restore(mgr, 9, &restored), DVAR_OK);
		assert_int_equal(restored, 9);
		bad += model_check(&t, &m, 9, N_saved);

		/* A step no longer kept: DVAR_ENOTFOUND naming root and step,
		 * and nothing changes (the variables keep step 9's values). */
		restored = -7;
		assert_int_equal(dvar_manager_restore(mgr, 3, &restored), DVAR_ENOTFOUND);
		tu_assert_error_contains("restoring step 3 of '");
		tu_assert_error_contains(root);
		tu_assert_error_contains("no ckpt-3 (it holds ckpt-9, ckpt-10)");
		assert_int_equal(restored, -7);
		bad += model_check(&t, &m, 9, N_saved);

		/* Resuming at the restored step does not save it again. */
		{
			int s9 = -1;

			assert_int_equal(dvar_manager_step(mgr, 9, &s9), DVAR_OK);
			assert_int_equal(s9, 0);
		}
		dvar_manager_free(mgr);
		model_free(&m);
		assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
		dvar_strategy_free(t.s);
	}
	listing(root, names, sizeof names);
	assert_string_equal(names, "ckpt-9 ckpt-10");
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

static void test_store_manager__every_k_keep_last(void **state)
{
	(void)state;
	every_k_keep_last(0);
}

static void test_store_manager__every_k_keep_last_async(void **state)
{
	(void)state;
	every_k_keep_last(1);
}

/*
 * save_every = 0 is every step; keep_last = 0 keeps them all. Without a
 * pointer file there is no latest, but a given step restores.
 */
static void test_store_manager__defaults(void **state)
{
	dvar_manager *mgr = NULL;
	char *root, names[256];
	int saved[5];
	int64_t bad = 0;
	model m;
	stu_topo t;

	(void)state;
	root = model_setup(&t, 1, &m);
	assert_int_equal(manager_open(&mgr, t.s, root, &m, 0, 0, 0), DVAR_OK);
	train(t.s, mgr, &m, 1, 5, saved);
	for (int k = 0; k < 5; k++)
		assert_int_equal(saved[k], 1);
	listing(root, names, sizeof names);
	assert_string_equal(names, "ckpt-1 ckpt-2 ckpt-3 ckpt-4 ckpt-5");
	for (int step = 1; step <= 5; step++)
		bad += checkpoint_check(root, step, t.N);

	/* Without its pointer file the root has no latest (the reader's
	 * error), but a given step still restores; a damaged one is corrupt. */
	stu_sum_over_workers(t.s, 0);
	if (t.worker == 0) {
		char *p = tu_path(root, "checkpoint");

		assert_int_equal(remove(p), 0);
		free(p);
	}
	stu_sum_over_workers(t.s, 0);
	assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains("restoring the latest checkpoint of '");
	assert_int_equal(dvar_manager_restore(mgr, 2, NULL), DVAR_OK);
	bad += model_check(&t, &m, 2, t.N);
	stu_sum_over_workers(t.s, 0);
	if (t.worker == 0) {
		char *p = tu_path(root, "checkpoint");
		FILE *f = fopen(p, "w");

		assert_non_null(f);
		fputs("model_checkpoint_path: ckpt-5 without quotes\n", f);
		fclose(f);
		free(p);
	}
	stu_sum_over_workers(t.s, 0);
	assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("model_checkpoint_path is not a quoted path");
	bad += model_check(&t, &m, 2, t.N);
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	dvar_manager_free(mgr);
	model_teardown(&t, root, &m);
}

/* ---------------------------------------------------------------- a fresh start */

/* Mismatches between this worker's components and what model_set(step) gave them. */
static int model_check_set(const stu_topo *t, model *m, int64_t step)
{
	int bad = 0;

	for (int l = 0; l < t->R; l++) {
		int g = t->worker * t->R + l;
		float w[W_LEN];
		double acc[ACC_LEN];
		int64_t count;

		if (model_read_local(m, l, w, acc, &count) != DVAR_OK) {
			bad++;
			continue;
		}
		for (int i = 0; i < W_LEN; i++)
			bad += w[i] != w_at(step, i);
		for (int i = 0; i < ACC_LEN; i++)
			bad += acc[i] != acc_at(step, g, i);
		bad += count != 100 * step + g;
	}
	return bad + (m->step != step);
}

/*
 * A root that does not exist yet: open creates it; restoring the latest or
 * any step is DVAR_ENOTFOUND naming the root, and the variables keep their
 * values. After the first save the latest restores; once the root is
 * removed behind the manager's back, restoring is DVAR_ENOTFOUND again.
 */
static void test_store_manager__fresh_start(void **state)
{
	dvar_manager *mgr = NULL;
	char *dir, *root;
	int64_t restored = -7, bad = 0;
	model m;
	stu_topo t;

	(void)state;
	dir = model_setup(&t, 2, &m);
	root = tu_path(dir, "run/one");
	model_set(t.s, &m, 4);
	assert_int_equal(manager_open(&mgr, t.s, root, &m, 5, 1, 0), DVAR_OK);
	assert_true(stu_exists_in(dir, "run/one"));

	assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, &restored), DVAR_ENOTFOUND);
	tu_assert_error_contains("restoring the latest checkpoint of '");
	tu_assert_error_contains(root);
	tu_assert_error_contains("holds no checkpoint yet");
	assert_int_equal(restored, -7);
	assert_int_equal(dvar_manager_restore(mgr, 5, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains("restoring step 5 of '");
	tu_assert_error_contains("no ckpt-5 (it holds none)");
	bad += model_check_set(&t, &m, 4);

	/* The first save, then the latest restores over other values. */
	bad += save_then_restore_latest(&t, mgr, &m, 5);

	/* The root removed behind the manager's back. */
	stu_sum_over_workers(t.s, 0);
	if (t.worker == 0) {
		char *p = tu_path(dir, "run");

		tu_rmtree(p);
		free(p);
	}
	stu_sum_over_workers(t.s, 0);
	model_set(t.s, &m, 7);
	assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains(root);
	tu_assert_error_contains("does not exist");
	bad += model_check_set(&t, &m, 7);
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	dvar_manager_free(mgr);
	free(root);
	model_teardown(&t, dir, &m);
}

/* ---------------------------------------------------------------- async = sync */

/*
 * The same loop (variables changing every step, K = 2, N = 3) once
 * synchronous and once asynchronous: the same steps saved, the same
 * checkpoints kept, the same values in them, byte for byte; restoring
 * either gives the same variables.
 */
static void test_store_manager__async_matches_sync(void **state)
{
	dvar_manager *mgr = NULL;
	char *dir, *roots[2], names[2][256];
	int saved[2][13];
	int64_t bad = 0;
	model m;
	stu_topo t;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	dir = stu_shared_dir(t.s);
	for (int async = 0; async < 2; async++) {
		roots[async] = tu_path(dir, async ? "async" : "sync");
		model_create(t.s, &m);
		assert_int_equal(manager_open(&mgr, t.s, roots[async], &m, 2, 3, async), DVAR_OK);
		train(t.s, mgr, &m, 0, 12, saved[async]);
		listing(roots[async], names[async], sizeof names[async]);
		dvar_manager_free(mgr);
		model_free(&m);
	}
	assert_memory_equal(saved[0], saved[1], sizeof saved[0]);
	assert_string_equal(names[0], "ckpt-8 ckpt-10 ckpt-12");
	assert_string_equal(names[1], names[0]);
	for (int step = 8; step <= 12; step += 2) {
		char name[32];
		dvar_reader *r[2] = { NULL, NULL };

		snprintf(name, sizeof name, "ckpt-%d", step);
		for (int a = 0; a < 2; a++) {
			char *p = tu_path(roots[a], name);

			bad += checkpoint_check(roots[a], step, t.N);
			assert_int_equal(dvar_reader_open(&r[a], p, NULL), DVAR_OK);
			free(p);
		}
		assert_int_equal(dvar_reader_num_vars(r[0]), dvar_reader_num_vars(r[1]));
		for (size_t i = 0; i < dvar_reader_num_vars(r[0]); i++) {
			dvar_var_info a, b;
			unsigned char ba[64], bb[64];

			assert_int_equal(dvar_reader_var(r[0], i, &a), DVAR_OK);
			assert_int_equal(dvar_reader_var(r[1], i, &b), DVAR_OK);
			assert_string_equal(a.name, b.name);
			assert_true(a.raw_bytes == b.raw_bytes && a.raw_bytes <= sizeof ba);
			assert_int_equal(dvar_reader_read(r[0], i, NULL, ba, a.raw_bytes), DVAR_OK);
			assert_int_equal(dvar_reader_read(r[1], i, NULL, bb, b.raw_bytes), DVAR_OK);
			assert_memory_equal(ba, bb, a.raw_bytes);
		}
		dvar_reader_free(r[0]);
		dvar_reader_free(r[1]);
	}
	for (int a = 0; a < 2; a++) {
		int64_t restored = -1;

		model_create(t.s, &m);
		assert_int_equal(manager_open(&mgr, t.s, roots[a], &m, 2, 3, a), DVAR_OK);
		assert_int_equal(dvar_manager_restore(mgr, DVAR_MANAGER_LATEST, &restored),
		                 DVAR_OK);
		assert_int_equal(restored, 12);
		bad += model_check(&t, &m, 12, t.N);
		assert_int_equal(dvar_manager_restore(mgr, 8, &restored), DVAR_OK);
		assert_int_equal(restored, 8);
		bad += model_check(&t, &m, 8, t.N);
		dvar_manager_free(mgr);
		model_free(&m);
		free(roots[a]);
	}
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	stu_drop_shared_dir(t.s, dir);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- async: poll, restore, free */

/*
 * Asynchronous saves commit from the polls of non-save steps alone (no
 * wait), with the values of the step they were started at although the
 * variables change every step meanwhile. A restore finishes a pending save
 * first, so the latest is that save. A manager freed with a save pending
 * leaves it to the strategy, whose dvar_save_wait commits it.
 */
static void test_store_manager__async_poll_restore_free(void **state)
{
	dvar_manager *mgr = NULL;
	char *root;
	int64_t bad = 0, seen = 0, step;
	int saved = -1;
	model m;
	stu_topo t;

	(void)state;
	root = model_setup(&t, 2, &m);
	assert_int_equal(manager_open(&mgr, t.s, root, &m, 100, 0, 1), DVAR_OK);
	model_set(t.s, &m, 0);
	assert_int_equal(dvar_manager_step(mgr, 0, &saved), DVAR_OK);
	assert_int_equal(saved, 1);
	for (step = 1; step < 100 && seen < t.W; step++) {
		model_set(t.s, &m, step);
		assert_int_equal(dvar_manager_step(mgr, step, &saved), DVAR_OK);
		assert_int_equal(saved, 0);
		seen = stu_sum_over_workers(t.s, stu_exists_in(root, "ckpt-0"));
		usleep(2000);
	}
	assert_int_equal(seen, t.W);
	bad += checkpoint_check(root, 0, t.N);

	/* Restore right after an asynchronous save started: that save. */
	bad += save_then_restore_latest(&t, mgr, &m, 100);
	assert_true(stu_exists_in(root, "ckpt-100"));

	/* Freed with a save pending: the strategy still finishes it. */
	model_set(t.s, &m, 200);
	assert_int_equal(dvar_manager_save(mgr, 200), DVAR_OK);
	dvar_manager_free(mgr);
	model_set(t.s, &m, 201);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	bad += checkpoint_check(root, 200, t.N);
	assert_int_equal(stu_sum_over_workers(t.s, bad), 0);
	model_teardown(&t, root, &m);
}

/* ---------------------------------------------------------------- a failing pending save */

/*
 * An asynchronous save whose data file cannot be written on the last worker
 * (a file size limit: writes fail with EFBIG, as on a full disk), found by
 * the background writer after dvar_manager_step returned. The call that
 * finishes the save returns its failure on every worker, naming the step
 * and the worker: a later non-save dvar_manager_step (a poll) when by_wait is 0,
 * dvar_manager_wait otherwise. Nothing is committed, the previous latest
 * stays, and saving the step again works.
 */
static void pending_failure(int by_wait)
{
	dvar_manager *mgr = NULL;
	dvar_variable *vars[2];
	dvar_manager_options mo = DVAR_MANAGER_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_write_options wo = test_write_options();
	stu_fsize limit;
	char *root, latest[64], want[64];
	float *big;
	stu_topo t;
	int rc = DVAR_OK, saved = -1, failing;
	int64_t step = 1000, at = -1;

	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	failing = t.W - 1;
	root = stu_shared_dir(t.s);
	/* One 1 MiB variable per worker (W <= 2), so every worker writes one. */
	assert_non_null(big = calloc(262144, sizeof *big));
	for (int k = 0; k < 2; k++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;

		spec.name = k ? "big1" : "big0";
		spec.dtype = DVAR_FLOAT32;
		spec.shape.rank = 1;
		spec.shape.dims[0] = 262144;
		assert_int_equal(dvar_variable_create(&vars[k], t.s, &spec), DVAR_OK);
		big[0] = (float)k;
		assert_int_equal(dvar_variable_assign(vars[k], NULL, big), DVAR_OK);
	}
	so.write = &wo;
	mo.save_every = 1000;
	mo.async = 1;
	mo.save = &so;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 2, &mo), DVAR_OK);
	assert_int_equal(dvar_manager_step(mgr, 0, &saved), DVAR_OK);
	assert_int_equal(saved, 1);
	assert_int_equal(dvar_manager_wait(mgr), DVAR_OK);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-0");

	stu_fsize_limit(&limit, t.worker == failing, 65536);
	/* The save starts fine: the writing fails later, in the background. */
	assert_int_equal(dvar_manager_step(mgr, step, &saved), DVAR_OK);
	assert_int_equal(saved, 1);
	if (by_wait) {
		rc = dvar_manager_wait(mgr);
		at = 0;
	} else {
		/* Non-save steps poll until the save is finished. */
		for (int64_t s = step + 1; s < 2 * step && rc == DVAR_OK; s++) {
			saved = -1;
			usleep(5000);
			rc = dvar_manager_step(mgr, s, &saved);
			assert_int_equal(saved, 0);
			at = s;
		}
	}
	stu_fsize_restore(&limit);
	assert_int_not_equal(rc, DVAR_OK);
	assert_true(at >= 0);
	tu_assert_error_contains("the asynchronous save of step 1000 failed");
	tu_assert_error_contains("saving step 1000 to '");
	if (t.W > 1) {
		snprintf(want, sizeof want, "worker %d:", failing);
		tu_assert_error_contains(want);
	}
	/* Reported once: the manager has nothing pending any more. */
	assert_int_equal(dvar_manager_wait(mgr), DVAR_OK);
	assert_false(stu_exists_in(root, "ckpt-1000"));
	assert_int_equal(stu_count_prefix(root, ".ckpt-1000"), 0);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-0");

	/* Step 1000 was not saved, so saving it again is not skipped. */
	assert_int_equal(dvar_manager_save(mgr, step), DVAR_OK);
	assert_int_equal(dvar_manager_wait(mgr), DVAR_OK);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-1000");
	dvar_manager_free(mgr);
	dvar_variable_free(vars[0]);
	dvar_variable_free(vars[1]);
	free(big);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

static void test_store_manager__pending_failure_poll(void **state)
{
	(void)state;
	pending_failure(0);
}

static void test_store_manager__pending_failure_wait(void **state)
{
	(void)state;
	pending_failure(1);
}

/* ---------------------------------------------------------------- bad options */

static void test_store_manager__bad_options(void **state)
{
	dvar_manager *mgr = NULL;
	dvar_manager_options mo = DVAR_MANAGER_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	dvar_variable *vars[3];
	char *root, *file;
	model m;
	stu_topo t;

	(void)state;
	root = model_setup(&t, 1, &m);
	vars[0] = m.w;
	vars[1] = m.acc;
	vars[2] = m.count;

	assert_int_equal(dvar_manager_open(NULL, t.s, root, vars, 3, NULL), DVAR_EINVAL);
	/* Any non-NULL value: a failed open must leave *out NULL. */
	mgr = (dvar_manager *)&mo;
	assert_int_equal(dvar_manager_open(&mgr, NULL, root, vars, 3, NULL), DVAR_EINVAL);
	tu_assert_error_contains("strategy is NULL");
	assert_null(mgr);

	mo.version = 99;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("opening a checkpoint manager for '");
	tu_assert_error_contains("dvar_manager_options: version 99 is not one this library knows "
	                         "(1 to 2)");
	assert_null(mgr);
	mo.version = DVAR_MANAGER_OPTIONS_VERSION;
	mo.save_every = -3;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("save_every is -3; it must be >= 0");
	mo.save_every = 2;
	mo.keep_last = -1;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("keep_last is -1; it must be >= 0");
	mo.keep_last = 0;
	so.version = 7;
	mo.save = &so;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("dvar_save_options: version 7 is not one");
	so.version = DVAR_SAVE_OPTIONS_VERSION;
	ro.version = 0;
	mo.restore = &ro;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("dvar_restore_options: version 0 is not one");
	ro.version = DVAR_RESTORE_OPTIONS_VERSION;
	dvar_read_options rd = DVAR_READ_OPTIONS_INIT;
	ro.read = &rd;
	rd.version = 3;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("dvar_read_options: version 3 is not one");
	rd.version = DVAR_READ_OPTIONS_VERSION;
	rd.flags = 8;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("dvar_read_options: unknown flags 0x8");
	rd.flags = DVAR_READ_CACHED;
	assert_int_equal(dvar_manager_open(&mgr, t.s, NULL, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("no checkpoint root given");
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, NULL, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("3 variables but vars is NULL");
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, NULL, 0, &mo), DVAR_EINVAL);
	tu_assert_error_contains("nothing to save");
	vars[1] = NULL;
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_EINVAL);
	tu_assert_error_contains("variable #1 is NULL");
	vars[1] = m.acc;
	assert_null(mgr);

	/* A root that is a file: the chief cannot create it, every worker fails. */
	file = tu_path(root, "file");
	if (t.worker == 0) {
		FILE *f = fopen(file, "w");

		assert_non_null(f);
		fclose(f);
	}
	stu_sum_over_workers(t.s, 0);
	assert_int_equal(dvar_manager_open(&mgr, t.s, file, vars, 3, &mo), DVAR_EIO);
	tu_assert_error_contains("is not a directory");
	if (t.W > 1)
		tu_assert_error_contains("worker 0:");
	free(file);

	/* Bad steps, and NULL managers. */
	assert_int_equal(dvar_manager_open(&mgr, t.s, root, vars, 3, &mo), DVAR_OK);
	assert_int_equal(dvar_manager_step(mgr, -2, NULL), DVAR_EINVAL);
	tu_assert_error_contains("step -2 is negative");
	assert_int_equal(dvar_manager_save(mgr, -1), DVAR_EINVAL);
	tu_assert_error_contains("step -1 is negative");
	assert_int_equal(dvar_manager_restore(mgr, -5, NULL), DVAR_EINVAL);
	tu_assert_error_contains("DVAR_MANAGER_LATEST");
	assert_int_equal(dvar_manager_step(NULL, 1, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_manager_save(NULL, 1), DVAR_EINVAL);
	assert_int_equal(dvar_manager_restore(NULL, 1, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_manager_wait(NULL), DVAR_EINVAL);
	dvar_manager_free(NULL);
	/* No save at an odd step with K = 2; nothing written. */
	{
		int saved = -1;

		assert_int_equal(dvar_manager_step(mgr, 1, &saved), DVAR_OK);
		assert_int_equal(saved, 0);
		assert_false(stu_exists_in(root, "ckpt-1"));
	}
	dvar_manager_free(mgr);
	model_teardown(&t, root, &m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_manager__every_k_keep_last),
		cmocka_unit_test(test_store_manager__every_k_keep_last_async),
		cmocka_unit_test(test_store_manager__defaults),
		cmocka_unit_test(test_store_manager__fresh_start),
		cmocka_unit_test(test_store_manager__async_matches_sync),
		cmocka_unit_test(test_store_manager__async_poll_restore_free),
		cmocka_unit_test(test_store_manager__pending_failure_poll),
		cmocka_unit_test(test_store_manager__pending_failure_wait),
		cmocka_unit_test(test_store_manager__bad_options),
	};

	return cmocka_run_group_tests_name("store/manager", tests, NULL, NULL);
}
