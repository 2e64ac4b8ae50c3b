/*
 * tests/unit/store/test_store_iterator.c - the second part of distributed
 * input (docs/INPUT.md): prefetching on a background thread gives the same
 * steps as none, and an iterator's position saved in a checkpoint
 * (dvar_save_options.iterators) resumes exactly on the same topology and at
 * the same number of global-batch steps on another one; the errors when a
 * saved position cannot apply.
 *
 * Runs alone (W = 1) and under `mpirun -np 2`; every rank makes the same
 * calls and checks its own worker's steps. With --save DIR / --restore DIR
 * it is the across-workers pair (save with W = 2, restore with W = 1),
 * chained by ctest fixtures.
 *
 * Steps are text as in test_runtime_input.c: " | " between steps, ","
 * between local replicas, each batch the global indices of its rows; every
 * element's value is its global index, checked row by row.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_tu.h"
#include "testutil.h"
#include "dvar/input.h"

#define N_ELEMS 23
#define TEXT 4096

static int64_t range_data[64];

static dvar_strategy *strategy(int replicas, int single)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;

	o.replicas = replicas;
	o.workers = single ? 1 : DVAR_WORKERS_AUTO;
	if (dvar_strategy_create(&s, &o) != DVAR_OK)
		fail_msg("strategy: %s", dvar_error_last()->message);
	return s;
}

static dvar_dataset *range_ds(int64_t n)
{
	dvar_shape sh;
	dvar_dataset *ds = NULL;

	assert_int_equal(dvar_shape_init(&sh, 1, &n), DVAR_OK);
	assert_int_equal(dvar_dataset_from_array(&ds, DVAR_INT64, &sh, range_data), DVAR_OK);
	return ds;
}

/* Files of 5, 7, 4, 7 int64 records under dir (the chief writes them; every
 * worker waits), each record its global index. */
static const int64_t file_rows[] = { 5, 7, 4, 7 };

static dvar_dataset *files_ds(dvar_strategy *s, const char *dir)
{
	char paths[4][512];
	const char *p[4];
	dvar_shape rec;
	dvar_dataset *ds = NULL;
	int64_t g = 0;

	for (int f = 0; f < 4; f++) {
		snprintf(paths[f], sizeof paths[f], "%s/part-%d.bin", dir, f);
		p[f] = paths[f];
		if (dvar_strategy_worker_id(s) == 0) {
			FILE *fp = fopen(paths[f], "wb");

			assert_non_null(fp);
			for (int64_t i = 0; i < file_rows[f]; i++, g++)
				assert_int_equal(fwrite(&g, 8, 1, fp), 1);
			fclose(fp);
		}
	}
	assert_true(stu_sum_over_workers(s, 1) >= 1); /* a barrier */
	assert_int_equal(dvar_shape_init(&rec, 0, NULL), DVAR_OK);
	if (dvar_dataset_from_files(&ds, p, 4, DVAR_INT64, &rec) != DVAR_OK)
		fail_msg("files: %s", dvar_error_last()->message);
	return ds;
}

static dvar_input_options opts(int64_t batch, int policy, int mode, int64_t prefetch,
                               const char *name)
{
	dvar_input_options o = DVAR_INPUT_OPTIONS_INIT;

	o.batch_size = batch;
	o.auto_shard_policy = policy;
	o.mode = mode;
	o.prefetch = prefetch;
	o.name = name;
	return o;
}

static dvar_input_iterator *distribute(dvar_strategy *s, dvar_dataset *ds, dvar_input_options o)
{
	dvar_input_iterator *it = NULL;

	if (dvar_distribute_dataset(&it, s, ds, &o) != DVAR_OK)
		fail_msg("distribute: %s", dvar_error_last()->message);
	return it;
}

/* Up to max steps (-1: to the end) as text; the number of steps with a value. */
static int steps_text(dvar_input_iterator *it, int R, int max, char *out, size_t cap)
{
	dvar_replica_batch b[8];
	int has = 0, step;
	size_t at = 0;

	assert_true(R <= 8);
	out[0] = '\0';
	for (step = 0; max < 0 || step < max; step++) {
		assert_true(step < 200);
		if (dvar_input_iterator_next(it, b, &has) != DVAR_OK)
			fail_msg("next: %s", dvar_error_last()->message);
		if (!has)
			break;
		at += (size_t)snprintf(out + at, cap - at, "%s", step ? " | " : "");
		for (int r = 0; r < R; r++) {
			at += (size_t)snprintf(out + at, cap - at, "%s[", r ? "," : "");
			assert_int_equal(b[r].shape.dims[0], b[r].rows);
			for (int64_t i = 0; i < b[r].rows; i++) {
				int64_t v;

				memcpy(&v, (const char *)b[r].data + i * 8, 8);
				assert_int_equal(v, b[r].indices[i]);
				at += (size_t)snprintf(out + at, cap - at, "%s%lld", i ? " " : "",
				                       (long long)b[r].indices[i]);
			}
			at += (size_t)snprintf(out + at, cap - at, "]");
		}
		assert_true(at < cap);
	}
	return step;
}

static void expect_same(const char *what, const char *got, const char *want, int worker)
{
	if (strcmp(got, want) != 0)
		fail_msg("%s, worker %d: got \"%s\"\n expected \"%s\"", what, worker, got, want);
}

static int save_its(dvar_strategy *s, const char *root, int64_t step, dvar_input_iterator **its,
                    size_t n)
{
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

	so.iterators = its;
	so.num_iterators = n;
	return dvar_save(s, root, step, NULL, 0, &so);
}

static int restore_its(dvar_strategy *s, const char *path, dvar_input_iterator **its, size_t n)
{
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;

	ro.iterators = its;
	ro.num_iterators = n;
	return dvar_restore(s, path, NULL, 0, &ro);
}

/* ---------------------------------------------------------------- prefetch */

/* Every plan, with prefetch off, the default, one batch and many steps
 * ahead: the same steps, element for element. */
static void test_store_iterator__prefetch_same_steps(void **state)
{
	const int64_t prefetch[] = { 0, 1, 7, 64 };
	char *dir;

	(void)state;
	for (int R = 1; R <= 3; R++) {
		dvar_strategy *s = strategy(R, 0);
		int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
		dvar_dataset *arr = range_ds(N_ELEMS), *files;
		struct {
			dvar_dataset *ds;
			int policy, mode;
			int64_t batch;
		} cases[5];
		int nc = 5;

		dir = stu_shared_dir(s);
		files = files_ds(s, dir);
		cases[0].ds = arr, cases[0].policy = DVAR_AUTO_SHARD_AUTO, cases[0].batch = 5;
		cases[1].ds = arr, cases[1].policy = DVAR_AUTO_SHARD_OFF, cases[1].batch = 7;
		cases[2].ds = files, cases[2].policy = DVAR_AUTO_SHARD_AUTO, cases[2].batch = 4;
		cases[3].ds = files, cases[3].policy = DVAR_AUTO_SHARD_DATA, cases[3].batch = 6;
		cases[4].ds = files, cases[4].policy = DVAR_AUTO_SHARD_OFF, cases[4].batch = 3;
		for (int c = 0; c < nc; c++)
			cases[c].mode = c == 4 ? DVAR_INPUT_REPLICATE : DVAR_INPUT_SPLIT;
		for (int c = 0; c < nc; c++) {
			char want[TEXT], got[TEXT];
			dvar_input_iterator *it = distribute(
				s, cases[c].ds,
				opts(cases[c].batch, cases[c].policy, cases[c].mode, DVAR_INPUT_PREFETCH_OFF,
				     NULL));

			steps_text(it, R, -1, want, sizeof want);
			dvar_input_iterator_free(it);
			assert_true(want[0] != '\0' || W > 1);
			for (size_t k = 0; k < sizeof prefetch / sizeof *prefetch; k++) {
				it = distribute(s, cases[c].ds,
				                opts(cases[c].batch, cases[c].policy, cases[c].mode,
				                     prefetch[k], NULL));
				steps_text(it, R, -1, got, sizeof got);
				expect_same("prefetch", got, want, me);
				dvar_input_iterator_free(it);
			}
			/* Freed while the thread has steps prepared. */
			it = distribute(s, cases[c].ds,
			                opts(cases[c].batch, cases[c].policy, cases[c].mode, 64, NULL));
			steps_text(it, R, 1, got, sizeof got);
			dvar_input_iterator_free(it);
		}
		dvar_dataset_free(files);
		dvar_dataset_free(arr);
		stu_drop_shared_dir(s, dir);
		dvar_strategy_free(s);
	}
}

/* A file that shrank after the dataset was made: the step that reads it
 * fails, with or without prefetch, and every later call fails alike. */
static void test_store_iterator__prefetch_error(void **state)
{
	dvar_strategy *s = strategy(1, 1);
	char *dir = stu_shared_dir(s), path[512];
	dvar_dataset *ds = files_ds(s, dir);

	(void)state;
	for (int pf = 0; pf < 2; pf++) {
		dvar_input_iterator *it =
			distribute(s, ds, opts(4, DVAR_AUTO_SHARD_OFF, DVAR_INPUT_SPLIT,
			                       pf ? 0 : DVAR_INPUT_PREFETCH_OFF, NULL));
		dvar_replica_batch b[1];
		int has = 0;

		snprintf(path, sizeof path, "%s/part-3.bin", dir);
		assert_int_equal(truncate(path, 8), 0);
		assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_OK); /* file 0 */
		assert_int_equal(has, 1);
		for (int k = 0; k < 10; k++) {
			int rc = dvar_input_iterator_next(it, b, &has);

			if (rc != DVAR_OK) {
				assert_int_equal(rc, DVAR_EIO);
				assert_non_null(strstr(dvar_error_last()->message, "part-3.bin"));
				assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_EIO);
				assert_int_equal(has, 0);
				break;
			}
			assert_true(k < 9);
			assert_int_equal(has, 1);
		}
		dvar_input_iterator_free(it);
		dvar_dataset_free(ds);
		ds = files_ds(s, dir); /* rewrites the files */
	}
	dvar_dataset_free(ds);
	stu_drop_shared_dir(s, dir);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- checkpoints */

/*
 * Consume k steps of a, save, consume the rest of a (want); then a fresh
 * iterator b with the same options (prefetch flipped), restored, must give
 * the same rest.
 */
static void same_topology(dvar_strategy *s, const char *root, dvar_dataset *ds,
                          dvar_input_options o, int k, int64_t step)
{
	int R = dvar_strategy_local_replicas(s), me = dvar_strategy_worker_id(s);
	dvar_input_iterator *a = distribute(s, ds, o), *b;
	char head[TEXT], want[TEXT], got[TEXT], ck[1024];

	steps_text(a, R, k, head, sizeof head);
	if (save_its(s, root, step, &a, 1) != DVAR_OK)
		fail_msg("save: %s", dvar_error_last()->message);
	steps_text(a, R, -1, want, sizeof want);
	o.prefetch = o.prefetch == DVAR_INPUT_PREFETCH_OFF ? 0 : DVAR_INPUT_PREFETCH_OFF;
	b = distribute(s, ds, o);
	steps_text(b, R, 2, got, sizeof got); /* a position to be replaced */
	snprintf(ck, sizeof ck, "%s/ckpt-%lld", root, (long long)step);
	if (restore_its(s, ck, &b, 1) != DVAR_OK)
		fail_msg("restore: %s", dvar_error_last()->message);
	steps_text(b, R, -1, got, sizeof got);
	expect_same("restored", got, want, me);
	/* Restoring the same checkpoint again rewinds again. */
	assert_int_equal(restore_its(s, ck, &b, 1), DVAR_OK);
	steps_text(b, R, -1, got, sizeof got);
	expect_same("restored twice", got, want, me);
	dvar_input_iterator_free(b);
	dvar_input_iterator_free(a);
}

static int64_t fn_rows[8];

static int fn_dataset(dvar_dataset **out, const dvar_input_context *ctx, void *arg)
{
	int64_t n = fn_rows[ctx->input_pipeline_id];
	dvar_shape sh;

	(void)arg;
	dvar_shape_init(&sh, 1, &n);
	return dvar_dataset_from_array(out, DVAR_INT64, &sh, range_data);
}

static void test_store_iterator__same_topology(void **state)
{
	(void)state;
	for (int R = 1; R <= 2; R++) {
		dvar_strategy *s = strategy(R, 0);
		char *root = stu_shared_dir(s);
		dvar_dataset *arr = range_ds(N_ELEMS), *files = files_ds(s, root);
		int64_t step = 1;

		for (int k = 0; k <= 4; k += 2) {
			same_topology(s, root, arr, opts(5, DVAR_AUTO_SHARD_AUTO, DVAR_INPUT_SPLIT, 0, "in"),
			              k, step++);
			same_topology(s, root, arr,
			              opts(7, DVAR_AUTO_SHARD_OFF, DVAR_INPUT_SPLIT,
			                   DVAR_INPUT_PREFETCH_OFF, "in"),
			              k, step++);
			same_topology(s, root, files,
			              opts(4, DVAR_AUTO_SHARD_FILE, DVAR_INPUT_SPLIT, 3, "in"), k, step++);
			same_topology(s, root, files,
			              opts(3, DVAR_AUTO_SHARD_AUTO, DVAR_INPUT_REPLICATE, 0, "in"), k,
			              step++);
		}
		/* Past the end: the restored iterator is at the end too. */
		same_topology(s, root, arr, opts(5, DVAR_AUTO_SHARD_DATA, DVAR_INPUT_SPLIT, 0, "in"),
		              40, step++);
		/* From a function: each worker's own dataset. */
		{
			dvar_input_options o = opts(2 * R * dvar_strategy_num_workers(s), 0,
			                            DVAR_INPUT_SPLIT, 0, "fn");
			dvar_input_iterator *a = NULL, *b = NULL;
			char want[TEXT], got[TEXT], ck[1024];
			int me = dvar_strategy_worker_id(s);

			for (int w = 0; w < 8; w++)
				fn_rows[w] = 9 + 4 * w;
			assert_int_equal(dvar_distribute_datasets_from_function(&a, s, fn_dataset, NULL, &o),
			                 DVAR_OK);
			steps_text(a, R, 1, got, sizeof got);
			assert_int_equal(save_its(s, root, step, &a, 1), DVAR_OK);
			steps_text(a, R, -1, want, sizeof want);
			o.prefetch = DVAR_INPUT_PREFETCH_OFF;
			assert_int_equal(dvar_distribute_datasets_from_function(&b, s, fn_dataset, NULL, &o),
			                 DVAR_OK);
			snprintf(ck, sizeof ck, "%s/ckpt-%lld", root, (long long)step);
			assert_int_equal(restore_its(s, ck, &b, 1), DVAR_OK);
			steps_text(b, R, -1, got, sizeof got);
			expect_same("from a function", got, want, me);
			dvar_input_iterator_free(b);
			dvar_input_iterator_free(a);
		}
		dvar_dataset_free(files);
		dvar_dataset_free(arr);
		stu_drop_shared_dir(s, root);
		dvar_strategy_free(s);
	}
}

/*
 * Save with R = 2 after k steps; restore into R = 1 and R = 3 (the same W):
 * the rest is what a fresh iterator of that topology gives after k steps,
 * and its first element is global element k * G.
 */
static void test_store_iterator__other_replicas(void **state)
{
	const int64_t G = 6;
	dvar_strategy *s2 = strategy(2, 0);
	char *root = stu_shared_dir(s2), ck[1024];
	dvar_dataset *arr = range_ds(N_ELEMS), *files = files_ds(s2, root);
	int W = dvar_strategy_num_workers(s2), me = dvar_strategy_worker_id(s2);
	struct {
		dvar_dataset *ds;
		int policy, mode;
	} cases[] = { { arr, DVAR_AUTO_SHARD_AUTO, DVAR_INPUT_SPLIT },
		      { files, DVAR_AUTO_SHARD_DATA, DVAR_INPUT_SPLIT },
		      { arr, DVAR_AUTO_SHARD_OFF, DVAR_INPUT_REPLICATE } };
	int64_t step = 1;

	(void)state;
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
		for (int k = 1; k <= 3; k++, step++) {
			dvar_input_iterator *a = distribute(
				s2, cases[c].ds, opts(G, cases[c].policy, cases[c].mode, 0, "in"));
			char text[TEXT];

			steps_text(a, 2, k, text, sizeof text);
			assert_int_equal(save_its(s2, root, step, &a, 1), DVAR_OK);
			dvar_input_iterator_free(a);
			snprintf(ck, sizeof ck, "%s/ckpt-%lld", root, (long long)step);
			for (int R = 1; R <= 3; R += 2) {
				dvar_strategy *s = strategy(R, 0);
				dvar_input_options o = opts(G, cases[c].policy, cases[c].mode, 0, "in");
				dvar_input_iterator *fresh = distribute(s, cases[c].ds, o), *b;
				dvar_replica_batch bt[3];
				char want[TEXT], got[TEXT];
				int has = 0;
				int64_t lo = INT64_MAX;

				steps_text(fresh, R, k, text, sizeof text);
				steps_text(fresh, R, -1, want, sizeof want);
				o.prefetch = R == 1 ? DVAR_INPUT_PREFETCH_OFF : 0;
				b = distribute(s, cases[c].ds, o);
				if (restore_its(s, ck, &b, 1) != DVAR_OK)
					fail_msg("restore R=%d: %s", R, dvar_error_last()->message);
				steps_text(b, R, -1, got, sizeof got);
				expect_same("other R", got, want, me);
				/* The first step after the restore starts at element k*G. */
				assert_int_equal(restore_its(s, ck, &b, 1), DVAR_OK);
				assert_int_equal(dvar_input_iterator_next(b, bt, &has), DVAR_OK);
				for (int r = 0; r < R; r++)
					if (bt[r].rows && bt[r].indices[0] < lo)
						lo = bt[r].indices[0];
				/* Worker 0's replica 0 (every replica, replicating) starts there. */
				assert_int_equal(
					stu_sum_over_workers(s, cases[c].mode == DVAR_INPUT_REPLICATE || me == 0
					                                ? lo == (int64_t)k * G
					                                : 1),
					W);
				dvar_input_iterator_free(b);
				dvar_input_iterator_free(fresh);
				dvar_strategy_free(s);
			}
		}
	dvar_dataset_free(files);
	dvar_dataset_free(arr);
	stu_drop_shared_dir(s2, root);
	dvar_strategy_free(s2);
}

static int check_entry(const char *root, int W, int64_t steps);

static void expect_error(int rc, int code, const char *part)
{
	if (rc != code || !strstr(dvar_error_last()->message, part))
		fail_msg("got %d \"%s\", expected %d with \"%s\"", rc, dvar_error_last()->message, code,
		         part);
}

/* What cannot apply, refused with nothing changed, the same on every worker. */
static void test_store_iterator__errors(void **state)
{
	dvar_strategy *s = strategy(2, 0);
	char *root = stu_shared_dir(s), ck[1024], before[TEXT], after[TEXT];
	dvar_dataset *arr = range_ds(N_ELEMS), *small = range_ds(N_ELEMS - 1);
	dvar_dataset *files = files_ds(s, root);
	dvar_input_iterator *a = distribute(s, arr, opts(4, 0, DVAR_INPUT_SPLIT, 0, "in"));
	dvar_input_iterator *unnamed = distribute(s, arr, opts(4, 0, DVAR_INPUT_SPLIT, 0, NULL));
	dvar_input_iterator *b, *other[2];
	dvar_store_tensor t;
	int64_t v = 7;
	int bad;

	(void)state;
	steps_text(a, 2, 2, before, sizeof before);
	expect_error(save_its(s, root, 1, &unnamed, 1), DVAR_EINVAL, "has no name");
	other[0] = a;
	other[1] = a;
	expect_error(save_its(s, root, 1, other, 2), DVAR_EINVAL, "given twice");
	{
		dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

		memset(&t, 0, sizeof t);
		t.name = "plain";
		t.dtype = DVAR_INT64;
		t.data = &v;
		so.tensors = &t;
		so.num_tensors = 1;
		so.iterators = &a;
		so.num_iterators = 1;
		assert_int_equal(dvar_save(s, root, 1, NULL, 0, &so), DVAR_OK);
		bad = dvar_strategy_worker_id(s) == 0
		              ? check_entry(root, dvar_strategy_num_workers(s), 2)
		              : 0;
		assert_int_equal(stu_sum_over_workers(s, bad), 0);
	}
	snprintf(ck, sizeof ck, "%s/ckpt-1", root);

	/* Another batch size, another dataset size, another mode. */
	b = distribute(s, arr, opts(5, 0, DVAR_INPUT_SPLIT, 0, "in"));
	steps_text(b, 2, 1, before, sizeof before);
	expect_error(restore_its(s, ck, &b, 1), DVAR_EINVAL, "batch_size 4, this iterator has 5");
	steps_text(b, 2, -1, after, sizeof after); /* unchanged: the second step onward */
	assert_true(strncmp(after, "[5 6 7]", 7) == 0 || dvar_strategy_num_workers(s) > 1);
	dvar_input_iterator_free(b);
	b = distribute(s, small, opts(4, 0, DVAR_INPUT_SPLIT, 0, "in"));
	expect_error(restore_its(s, ck, &b, 1), DVAR_EINVAL, "dataset of 23 elements");
	dvar_input_iterator_free(b);
	b = distribute(s, arr, opts(4, 0, DVAR_INPUT_REPLICATE, 0, "in"));
	expect_error(restore_its(s, ck, &b, 1), DVAR_EINVAL, "mode");
	dvar_input_iterator_free(b);
	/* A name the checkpoint does not have, and a plain tensor's name. */
	b = distribute(s, arr, opts(4, 0, DVAR_INPUT_SPLIT, 0, "elsewhere"));
	expect_error(restore_its(s, ck, &b, 1), DVAR_ENOTFOUND, "'elsewhere' is not in");
	dvar_input_iterator_free(b);
	b = distribute(s, arr, opts(4, 0, DVAR_INPUT_SPLIT, 0, "plain"));
	expect_error(restore_its(s, ck, &b, 1), DVAR_ESHAPE, "not an input iterator");
	dvar_input_iterator_free(b);
	expect_error(restore_its(s, ck, &unnamed, 1), DVAR_EINVAL, "has no name");

	/* A per-worker stream (FILE sharding, V2) on another R: not supported
	 * when W > 1; V2 over one worker carries over. */
	{
		dvar_input_iterator *f = distribute(s, files, opts(4, DVAR_AUTO_SHARD_FILE,
		                                                   DVAR_INPUT_SPLIT, 0, "files"));
		dvar_strategy *s1 = strategy(1, 0);
		dvar_input_iterator *g = distribute(s1, files, opts(4, DVAR_AUTO_SHARD_FILE,
		                                                    DVAR_INPUT_SPLIT, 0, "files"));

		steps_text(f, 2, 1, before, sizeof before);
		assert_int_equal(save_its(s, root, 2, &f, 1), DVAR_OK);
		snprintf(ck, sizeof ck, "%s/ckpt-2", root);
		if (dvar_strategy_num_workers(s) > 1)
			expect_error(restore_its(s1, ck, &g, 1), DVAR_ENOTSUPP, "another topology");
		else
			assert_int_equal(restore_its(s1, ck, &g, 1), DVAR_OK);
		dvar_input_iterator_free(g);
		dvar_strategy_free(s1);
		dvar_input_iterator_free(f);
	}
	dvar_input_iterator_free(unnamed);
	dvar_input_iterator_free(a);
	dvar_dataset_free(files);
	dvar_dataset_free(small);
	dvar_dataset_free(arr);
	stu_drop_shared_dir(s, root);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- across worker counts */

/* The entry as docs/STORE.md describes it: kind "iterator", the columns
 * named, one row per worker, each worker's number in column 1 and the steps
 * in column 11. 0 when it is so. */
static int check_entry(const char *root, int W, int64_t steps)
{
	dvar_reader *r = NULL;
	dvar_var_info info;
	const char *v = NULL;
	int64_t table[8 * 18];
	size_t i;
	int bad = 0;

	if (dvar_reader_open(&r, root, NULL) != DVAR_OK || dvar_reader_find(r, "in", &i) != DVAR_OK ||
	    dvar_reader_var(r, i, &info) != DVAR_OK) {
		print_error("entry: %s\n", dvar_error_last()->message);
		dvar_reader_free(r);
		return 1;
	}
	bad |= info.dtype != DVAR_INT64 || info.shape.rank != 2 || info.shape.dims[0] != W ||
	       info.shape.dims[1] != 18 || W > 8;
	bad |= dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_KIND, &v) != DVAR_OK ||
	       strcmp(v, "iterator") != 0;
	bad |= dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_ITERATOR_COLUMNS, &v) != DVAR_OK ||
	       strncmp(v, "version,worker,num_workers,", 27) != 0;
	if (!bad)
		bad |= dvar_reader_read(r, i, NULL, table, (uint64_t)W * 18 * 8) != DVAR_OK;
	for (int w = 0; w < W && !bad; w++)
		bad |= table[w * 18 + 1] != w || table[w * 18 + 2] != W || table[w * 18 + 11] != steps;
	if (bad)
		print_error("the iterator's entry is not as documented\n");
	dvar_reader_free(r);
	return bad;
}

/* --save DIR (W = 2, R = 1): 3 steps of batch 5 over range(23), DATA. */
static int main_save(const char *dir)
{
	dvar_strategy *s = strategy(1, 0);
	dvar_dataset *ds = range_ds(N_ELEMS);
	dvar_input_iterator *it = distribute(s, ds, opts(5, 0, DVAR_INPUT_SPLIT, 0, "in"));
	char text[TEXT];
	int rc, bad = 0;

	if (dvar_strategy_worker_id(s) == 0)
		tu_rmtree(dir);
	stu_sum_over_workers(s, 0);
	steps_text(it, 1, 3, text, sizeof text);
	rc = save_its(s, dir, 3, &it, 1);
	if (rc != DVAR_OK)
		print_error("save: %s\n", dvar_error_last()->message);
	if (rc == DVAR_OK && dvar_strategy_worker_id(s) == 0)
		bad = check_entry(dir, dvar_strategy_num_workers(s), 3);
	rc |= (int)stu_sum_over_workers(s, bad);
	dvar_input_iterator_free(it);
	dvar_dataset_free(ds);
	dvar_strategy_free(s);
	return rc != DVAR_OK;
}

/* --restore DIR (W = 1, R = 1 and 3): the rest is elements 15..22, in order. */
static int main_restore(const char *dir)
{
	int bad = 0;

	for (int R = 1; R <= 3; R += 2) {
		dvar_strategy *s = strategy(R, 1);
		dvar_dataset *ds = range_ds(N_ELEMS);
		dvar_input_iterator *it = distribute(s, ds, opts(5, 0, DVAR_INPUT_SPLIT, 0, "in"));
		dvar_replica_batch b[3];
		int has = 0;
		int64_t next = 15;

		if (restore_its(s, dir, &it, 1) != DVAR_OK) {
			print_error("restore: %s\n", dvar_error_last()->message);
			bad = 1;
		}
		while (!bad && dvar_input_iterator_next(it, b, &has) == DVAR_OK && has)
			for (int r = 0; r < R; r++)
				for (int64_t i = 0; i < b[r].rows; i++)
					if (b[r].indices[i] != next++) {
						print_error("R=%d: element %lld, expected %lld\n", R,
						            (long long)b[r].indices[i], (long long)next - 1);
						bad = 1;
					}
		if (!bad && next != N_ELEMS) {
			print_error("R=%d: ended at %lld\n", R, (long long)next);
			bad = 1;
		}
		dvar_input_iterator_free(it);
		dvar_dataset_free(ds);
		dvar_strategy_free(s);
	}
	return bad;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_iterator__prefetch_same_steps),
		cmocka_unit_test(test_store_iterator__prefetch_error),
		cmocka_unit_test(test_store_iterator__same_topology),
		cmocka_unit_test(test_store_iterator__other_replicas),
		cmocka_unit_test(test_store_iterator__errors),
	};

	for (int i = 0; i < 64; i++)
		range_data[i] = i;
	if (argc == 3 && strcmp(argv[1], "--save") == 0)
		return main_save(argv[2]);
	if (argc == 3 && strcmp(argv[1], "--restore") == 0)
		return main_restore(argv[2]);
	return cmocka_run_group_tests_name("store/iterator", tests, NULL, NULL);
}
