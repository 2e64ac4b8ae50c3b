/*
 * tests/unit/runtime/test_runtime_input.c - distributed input
 * (dvar/input.h) against TensorFlow's worked examples
 * (tf-behavior.md §5.1-5.3): the legacy and V2 splits, batch_sizes_for_worker,
 * partial and empty per-replica batches, the stop condition, drop_remainder,
 * DATA / FILE / OFF sharding over two workers, the replicate-everything
 * mode, distribute from a function, and the errors with TF's texts.
 *
 * The same program runs alone and under `mpirun -np 2`. Single-worker
 * examples use a strategy with workers = 1 on every rank (no MPI); the
 * two-worker examples run when W = 2, on every rank alike, each rank
 * checking its own worker's expectation. Every rank makes the same
 * collective calls in the same order.
 *
 * Iterations are written as text: steps separated by " | ", local replicas
 * by ",", each batch the global indices of its rows: "[0 1],[2 3] | [4],[5]".
 * Every element's value is its global index, checked row by row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/input.h"

static int64_t range_data[64];

static dvar_strategy *strategy(int replicas, int single)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;

	o.replicas = replicas;
	o.workers = single ? 1 : DVAR_WORKERS_AUTO;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	return s;
}

static dvar_dataset *range_ds(int64_t n)
{
	dvar_shape sh;
	dvar_dataset *ds = NULL;

	assert_true(n <= 64);
	assert_int_equal(dvar_shape_init(&sh, 1, &n), DVAR_OK);
	assert_int_equal(dvar_dataset_from_array(&ds, DVAR_INT64, &sh, range_data), DVAR_OK);
	return ds;
}

static dvar_input_options opts(int64_t batch, int drop, int policy, int mode)
{
	dvar_input_options o = DVAR_INPUT_OPTIONS_INIT;

	o.batch_size = batch;
	o.drop_remainder = drop;
	o.auto_shard_policy = policy;
	o.mode = mode;
	return o;
}

/* Iterate to the end; the steps as text. Checks data, indices and shapes. */
static void collect(dvar_input_iterator *it, int R, char *out, size_t cap)
{
	dvar_replica_batch b[8];
	int has = 0;
	size_t at = 0;

	assert_true(R <= 8);
	out[0] = '\0';
	for (int step = 0;; step++) {
		assert_true(step < 100);
		if (dvar_input_iterator_next(it, b, &has) != DVAR_OK)
			fail_msg("next: %s", dvar_error_last()->message);
		if (!has)
			break;
		if (step)
			at += (size_t)snprintf(out + at, cap - at, " | ");
		for (int r = 0; r < R; r++) {
			at += (size_t)snprintf(out + at, cap - at, "%s[", r ? "," : "");
			assert_int_equal(b[r].shape.dims[0], b[r].rows);
			if (b[r].rows == 0) {
				assert_null(b[r].data);
				assert_null(b[r].indices);
			}
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
	/* The end is sticky. */
	assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_OK);
	assert_int_equal(has, 0);
}

/* distribute ds with o on s and compare the iteration with expect. */
static void expect_split(dvar_strategy *s, dvar_dataset *ds, dvar_input_options o,
                         const char *expect)
{
	dvar_input_iterator *it = NULL;
	char got[2048];

	if (dvar_distribute_dataset(&it, s, ds, &o) != DVAR_OK)
		fail_msg("distribute: %s", dvar_error_last()->message);
	collect(it, dvar_strategy_local_replicas(s), got, sizeof got);
	if (strcmp(got, expect) != 0)
		fail_msg("worker %d: got \"%s\"\n expected \"%s\"", dvar_strategy_worker_id(s), got,
		         expect);
	/* A reset starts over, from the end and from midway (a step prefetched). */
	for (int midway = 0; midway < 2; midway++) {
		dvar_replica_batch b[8];
		int has;

		assert_int_equal(dvar_input_iterator_reset(it), DVAR_OK);
		if (midway) {
			assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_OK);
			assert_int_equal(dvar_input_iterator_reset(it), DVAR_OK);
		}
		collect(it, dvar_strategy_local_replicas(s), got, sizeof got);
		if (strcmp(got, expect) != 0)
			fail_msg("worker %d, after a reset%s: got \"%s\"\n expected \"%s\"",
			         dvar_strategy_worker_id(s), midway ? " midway" : "", got, expect);
	}
	dvar_input_iterator_free(it);
}

/* range(n), global batch G, R replicas on one worker. */
static void single(int64_t n, int64_t G, int R, int drop, int policy, const char *expect)
{
	dvar_strategy *s = strategy(R, 1);
	dvar_dataset *ds = range_ds(n);

	expect_split(s, ds, opts(G, drop, policy, DVAR_INPUT_SPLIT), expect);
	dvar_dataset_free(ds);
	dvar_strategy_free(s);
}

static void assert_message(const char *expect)
{
	if (strcmp(dvar_error_last()->message, expect) != 0)
		fail_msg("message \"%s\"\n expected \"%s\"", dvar_error_last()->message, expect);
}

/* ---------------------------------------------------------------- pure rules */

static void test_runtime_input__batch_sizes_for_worker(void **state)
{
	int64_t o[16];
	static const struct {
		int64_t G;
		int W, R, w;
		int64_t expect[4];
	} cases[] = {
		{ 8, 2, 2, 0, { 2, 2, 2, 2 } }, { 8, 2, 2, 1, { 2, 2, 2, 2 } },
		{ 4, 3, 1, 0, { 2, 1, 1 } },    { 4, 3, 1, 1, { 1, 1, 2 } },
		{ 4, 3, 1, 2, { 1, 2, 1 } },    { 7, 2, 2, 0, { 2, 2, 2, 1 } },
		{ 7, 2, 2, 1, { 2, 1, 2, 2 } }, { 4, 1, 5, 0, { 1, 1, 1, 1 } },
	};
	(void)state;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int n = cases[c].W * cases[c].R;

		assert_int_equal(dvar_input_batch_sizes_for_worker(cases[c].G, cases[c].W, cases[c].R,
		                                                   cases[c].w, o),
		                 DVAR_OK);
		for (int i = 0; i < n && i < 4; i++)
			assert_int_equal(o[i], cases[c].expect[i]);
	}
	/* Invariants over a grid: length W*R, sums to G, each step sums to G, max-min <= 1. */
	for (int64_t G = 0; G <= 13; G++)
		for (int W = 1; W <= 3; W++)
			for (int R = 1; R <= 3; R++) {
				int64_t all[3][9];

				for (int w = 0; w < W; w++) {
					int64_t sum = 0, mn = G, mx = 0;

					assert_int_equal(dvar_input_batch_sizes_for_worker(G, W, R, w, all[w]),
					                 DVAR_OK);
					for (int i = 0; i < W * R; i++) {
						sum += all[w][i];
						mn = all[w][i] < mn ? all[w][i] : mn;
						mx = all[w][i] > mx ? all[w][i] : mx;
					}
					assert_int_equal(sum, G);
					assert_true(mx - mn <= 1);
				}
				for (int step = 0; step < W; step++) {
					int64_t sum = 0;

					for (int w = 0; w < W; w++)
						for (int r = 0; r < R; r++)
							sum += all[w][step * R + r];
					assert_int_equal(sum, G);
				}
			}
	assert_int_equal(dvar_input_batch_sizes_for_worker(4, 2, 1, 2, o), DVAR_EINVAL);
	assert_int_equal(dvar_input_batch_sizes_for_worker(4, 0, 1, 0, o), DVAR_EINVAL);
}

static void test_runtime_input__per_replica_batch_size(void **state)
{
	dvar_input_context ctx = { 1, 0, 6 };
	int64_t out = 0;

	(void)state;
	assert_int_equal(dvar_input_context_per_replica_batch_size(&ctx, 12, &out), DVAR_OK);
	assert_int_equal(out, 2);
	assert_int_equal(dvar_input_context_per_replica_batch_size(&ctx, 13, &out), DVAR_EINVAL);
	assert_message("The `global_batch_size` 13 is not divisible by `num_replicas_in_sync` 6 ");
}

/* ---------------------------------------------------------------- one worker */

static void test_runtime_input__legacy_split(void **state)
{
	(void)state;
	/* AUTO on in-memory data falls back to DATA: the legacy ceil split. */
	single(6, 4, 2, 0, DVAR_AUTO_SHARD_AUTO, "[0 1],[2 3] | [4],[5]");
	single(4, 4, 5, 0, DVAR_AUTO_SHARD_AUTO, "[0],[1],[2],[3],[]");
	single(4, 4, 3, 0, DVAR_AUTO_SHARD_AUTO, "[0 1],[2 3],[]");
	single(4, 4, 2, 0, DVAR_AUTO_SHARD_DATA, "[0 1],[2 3]");
	single(5, 5, 3, 0, DVAR_AUTO_SHARD_DATA, "[0 1],[2 3],[4]");
	single(7, 7, 3, 0, DVAR_AUTO_SHARD_AUTO, "[0 1 2],[3 4 5],[6]");
	single(1, 1, 4, 0, DVAR_AUTO_SHARD_AUTO, "[0],[],[],[]");
	single(10, 10, 2, 0, DVAR_AUTO_SHARD_AUTO, "[0 1 2 3 4],[5 6 7 8 9]");
	/* _LegacyRebatchDataset(range(8).batch(4), 3) */
	single(8, 4, 3, 0, DVAR_AUTO_SHARD_AUTO, "[0 1],[2 3],[] | [4 5],[6 7],[]");
	/* testFinalPartialBatchAfterRebatch, and with drop_remainder */
	single(9, 4, 2, 0, DVAR_AUTO_SHARD_AUTO, "[0 1],[2 3] | [4 5],[6 7] | [8],[]");
	single(9, 4, 2, 1, DVAR_AUTO_SHARD_AUTO, "[0 1],[2 3] | [4 5],[6 7]");
	single(10, 4, 2, 0, DVAR_AUTO_SHARD_AUTO, "[0 1],[2 3] | [4 5],[6 7] | [8],[9]");
	/* An empty dataset ends at once. */
	single(0, 4, 2, 0, DVAR_AUTO_SHARD_AUTO, "");
}

static void test_runtime_input__v2_split(void **state)
{
	(void)state;
	/* OFF keeps RebatchDatasetV2: batch_sizes_for_worker, rows pulled across batches. */
	single(4, 4, 5, 0, DVAR_AUTO_SHARD_OFF, "[0],[1],[2],[3],[]");
	single(4, 4, 3, 0, DVAR_AUTO_SHARD_OFF, "[0 1],[2],[3]");
	single(4, 4, 2, 0, DVAR_AUTO_SHARD_OFF, "[0 1],[2 3]");
	single(5, 5, 3, 0, DVAR_AUTO_SHARD_OFF, "[0 1],[2 3],[4]");
	single(7, 7, 3, 0, DVAR_AUTO_SHARD_OFF, "[0 1 2],[3 4],[5 6]");
	single(1, 1, 4, 0, DVAR_AUTO_SHARD_OFF, "[0],[],[],[]");
	single(10, 10, 2, 0, DVAR_AUTO_SHARD_OFF, "[0 1 2 3 4],[5 6 7 8 9]");
	/* ds.rebatch([2,1,1]) on range(8).batch(4) */
	single(8, 4, 3, 0, DVAR_AUTO_SHARD_OFF, "[0 1],[2],[3] | [4 5],[6],[7]");
	/* ds.rebatch([1,1,1,1,0]) on range(8).batch(4, drop_remainder=True) */
	single(8, 4, 5, 1, DVAR_AUTO_SHARD_OFF, "[0],[1],[2],[3],[] | [4],[5],[6],[7],[]");
	/* Sizes [3,3,2] pull rows across the batches [0..7],[8..11]; a short output,
	 * then the end (an empty input with a desired size > 0). */
	single(12, 8, 3, 0, DVAR_AUTO_SHARD_OFF, "[0 1 2],[3 4 5],[6 7] | [8 9 10],[11],[]");
	/* drop_remainder drops the short global batch before rebatching. */
	single(10, 4, 2, 1, DVAR_AUTO_SHARD_OFF, "[0 1],[2 3] | [4 5],[6 7]");
	/* The short last batch [8 9] is not split: V2 pulls 2 rows, then ends. */
	single(10, 4, 2, 0, DVAR_AUTO_SHARD_OFF, "[0 1],[2 3] | [4 5],[6 7] | [8 9],[]");
	/* FILE on one worker is skipped (W = 1, index 0), V2 stays. */
	single(4, 4, 3, 0, DVAR_AUTO_SHARD_FILE, "[0 1],[2],[3]");
}

static void test_runtime_input__element_shape(void **state)
{
	float m[6][3];
	int64_t dims[2] = { 6, 3 };
	dvar_shape sh, el;
	dvar_dataset *ds = NULL;
	dvar_input_iterator *it = NULL;
	dvar_strategy *s = strategy(2, 1);
	dvar_input_options o = opts(4, 0, DVAR_AUTO_SHARD_AUTO, DVAR_INPUT_SPLIT);
	dvar_replica_batch b[2];
	int has = 0, dtype = -1;
	int64_t n = -1;

	(void)state;
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 3; j++)
			m[i][j] = (float)(i * 10 + j);
	assert_int_equal(dvar_shape_init(&sh, 2, dims), DVAR_OK);
	assert_int_equal(dvar_dataset_from_array(&ds, DVAR_FLOAT32, &sh, m), DVAR_OK);
	assert_int_equal(dvar_dataset_num_elements(ds, &n), DVAR_OK);
	assert_int_equal(n, 6);
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_OK);
	assert_int_equal(dvar_input_iterator_element(it, &dtype, &el), DVAR_OK);
	assert_int_equal(dtype, DVAR_FLOAT32);
	assert_int_equal(el.rank, 1);
	assert_int_equal(el.dims[0], 3);
	assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_OK);
	assert_int_equal(has, 1);
	assert_int_equal(b[1].shape.rank, 2);
	assert_int_equal(b[1].shape.dims[0], 2);
	assert_int_equal(b[1].shape.dims[1], 3);
	assert_ptr_equal(b[1].data, m[2]); /* array rows are not copied */
	assert_true(((const float *)b[1].data)[5] == 32.0f);
	assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_OK);
	assert_int_equal(b[0].rows, 1);
	assert_int_equal(b[1].rows, 1);
	assert_true(((const float *)b[1].data)[2] == 52.0f);
	assert_int_equal(dvar_input_iterator_next(it, b, &has), DVAR_OK);
	assert_int_equal(has, 0);
	dvar_input_iterator_free(it);
	dvar_dataset_free(ds);
	dvar_strategy_free(s);
}

static void test_runtime_input__replicate(void **state)
{
	dvar_strategy *s = strategy(2, 1);
	dvar_dataset *ds = range_ds(5);

	(void)state;
	/* TF 2.0 Estimator: every replica reads the whole dataset. */
	expect_split(s, ds, opts(2, 0, DVAR_AUTO_SHARD_AUTO, DVAR_INPUT_REPLICATE),
	             "[0 1],[0 1] | [2 3],[2 3] | [4],[4]");
	expect_split(s, ds, opts(2, 1, DVAR_AUTO_SHARD_OFF, DVAR_INPUT_REPLICATE),
	             "[0 1],[0 1] | [2 3],[2 3]");
	dvar_dataset_free(ds);
	dvar_strategy_free(s);
}

/* Files of int64 records whose values are their global indices. */
static char *write_file(const char *dir, const char *name, int64_t from, int64_t n, size_t extra)
{
	char *p = tu_path(dir, name);
	FILE *f = fopen(p, "wb");

	assert_non_null(f);
	for (int64_t i = from; i < from + n; i++)
		assert_int_equal(fwrite(&i, 8, 1, f), 1);
	for (size_t i = 0; i < extra; i++)
		fputc(0, f);
	fclose(f);
	return p;
}

static dvar_dataset *files_ds(const char *dir, const char *prefix, const int64_t *lens, int n)
{
	char *paths[8], name[32];
	dvar_shape scalar = { 0 };
	dvar_dataset *ds = NULL;
	int64_t from = 0;

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s-%d.bin", prefix, i);
		paths[i] = write_file(dir, name, from, lens[i], 0);
		from += lens[i];
	}
	if (dvar_dataset_from_files(&ds, (const char *const *)paths, (size_t)n, DVAR_INT64,
	                            &scalar) != DVAR_OK)
		fail_msg("from_files: %s", dvar_error_last()->message);
	for (int i = 0; i < n; i++)
		free(paths[i]);
	return ds;
}

static void test_runtime_input__files_one_worker(void **state)
{
	const char *dir = *state;
	int64_t two[2] = { 6, 6 };
	dvar_dataset *ds = files_ds(dir, "two", two, 2);
	dvar_strategy *s1 = strategy(1, 1), *s2 = strategy(2, 1);
	int64_t n = 0;

	assert_int_equal(dvar_dataset_num_elements(ds, &n), DVAR_OK);
	assert_int_equal(n, 12);
	/* AUTO finds a file dataset: FILE, skipped for one worker; V2 reads across files. */
	expect_split(s1, ds, opts(4, 0, DVAR_AUTO_SHARD_AUTO, DVAR_INPUT_SPLIT),
	             "[0 1 2 3] | [4 5 6 7] | [8 9 10 11]");
	expect_split(s2, ds, opts(5, 0, DVAR_AUTO_SHARD_FILE, DVAR_INPUT_SPLIT),
	             "[0 1 2],[3 4] | [5 6 7],[8 9] | [10 11],[]");
	/* DATA on files: the legacy split. */
	expect_split(s2, ds, opts(5, 0, DVAR_AUTO_SHARD_DATA, DVAR_INPUT_SPLIT),
	             "[0 1 2],[3 4] | [5 6 7],[8 9] | [10],[11]");
	expect_split(s2, ds, opts(5, 1, DVAR_AUTO_SHARD_DATA, DVAR_INPUT_SPLIT),
	             "[0 1 2],[3 4] | [5 6 7],[8 9]");
	dvar_dataset_free(ds);
	dvar_strategy_free(s1);
	dvar_strategy_free(s2);
}

static void test_runtime_input__file_errors(void **state)
{
	const char *dir = *state;
	char *good = write_file(dir, "good.bin", 0, 3, 0);
	char *bad = write_file(dir, "bad.bin", 0, 3, 5);
	char *missing = tu_path(dir, "missing.bin");
	const char *paths[3] = { good, bad, missing };
	dvar_shape scalar = { 0 };
	dvar_dataset *ds = (dvar_dataset *)1;
	char expect[1024];

	assert_int_equal(dvar_dataset_from_files(&ds, paths, 2, DVAR_INT64, &scalar), DVAR_EINVAL);
	assert_null(ds);
	snprintf(expect, sizeof expect,
	         "dataset file '%s' is 29 bytes, not a multiple of the record size 8", bad);
	assert_message(expect);
	paths[1] = missing;
	assert_int_equal(dvar_dataset_from_files(&ds, paths, 2, DVAR_INT64, &scalar),
	                 DVAR_ENOTFOUND);
	tu_assert_error_contains(missing);
	assert_int_equal(dvar_dataset_from_files(&ds, paths, 0, DVAR_INT64, &scalar), DVAR_EINVAL);
	free(good);
	free(bad);
	free(missing);
}

static void test_runtime_input__bad_options(void **state)
{
	dvar_strategy *s = strategy(2, 1);
	dvar_dataset *ds = range_ds(4);
	dvar_input_iterator *it = NULL;
	dvar_input_options o;

	(void)state;
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, NULL), DVAR_EINVAL);
	assert_null(it);
	o = opts(4, 0, 0, 0);
	o.version = 0;
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_EINVAL);
	o = opts(0, 0, 0, 0);
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_EINVAL);
	tu_assert_error_contains("batch_size 0");
	o = opts(4, 0, 3, 0); /* HINT is not supported */
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_EINVAL);
	tu_assert_error_contains("auto_shard_policy 3");
	o = opts(4, 0, -2, 0);
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_EINVAL);
	o = opts(4, 0, 0, 2);
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_EINVAL);
	tu_assert_error_contains("mode 2");
	o = opts(4, 0, DVAR_AUTO_SHARD_DATA, DVAR_INPUT_REPLICATE);
	assert_int_equal(dvar_distribute_dataset(&it, s, ds, &o), DVAR_EINVAL);
	tu_assert_error_contains("REPLICATE");
	o = opts(4, 0, 0, 0);
	assert_int_equal(dvar_distribute_dataset(&it, s, NULL, &o), DVAR_EINVAL);
	assert_null(it);
	dvar_dataset_free(ds);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- from a function */

typedef struct {
	int calls;
	dvar_input_context seen;
	int fail;
} fn_state;

/* Worker w's own dataset: range(5 + w), values = indices. */
static int make_ds(dvar_dataset **out, const dvar_input_context *ctx, void *arg)
{
	fn_state *st = arg;

	st->calls++;
	st->seen = *ctx;
	if (st->fail)
		return DVAR_EIO;
	*out = range_ds(5 + ctx->input_pipeline_id);
	return DVAR_OK;
}

static void from_function(int single_worker)
{
	dvar_strategy *s = strategy(2, single_worker);
	int W = dvar_strategy_num_workers(s), w = dvar_strategy_worker_id(s);
	dvar_input_iterator *it = NULL;
	dvar_input_options o = opts(2 * W * 2, 0, DVAR_AUTO_SHARD_DATA, DVAR_INPUT_SPLIT);
	fn_state st = { 0 };
	char got[512], expect[512];

	/* G = 4W over N = 2W: per-replica batches of 2, handed to local 0, 1, 0, ... */
	assert_int_equal(dvar_distribute_datasets_from_function(&it, s, make_ds, &st, &o), DVAR_OK);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.seen.num_input_pipelines, W);
	assert_int_equal(st.seen.input_pipeline_id, w);
	assert_int_equal(st.seen.num_replicas_in_sync, 2 * W);
	collect(it, 2, got, sizeof got);
	dvar_input_iterator_free(it);
	/* range(5) on worker 0; range(6) on worker 1; no worker stops alone. */
	if (W == 1)
		snprintf(expect, sizeof expect, "[0 1],[2 3] | [4],[]");
	else
		snprintf(expect, sizeof expect, "%s",
		         w == 0 ? "[0 1],[2 3] | [4],[]" : "[0 1],[2 3] | [4 5],[]");
	assert_string_equal(got, expect);

	/* Per-replica batch size: TF's error, trailing space. */
	o.batch_size = 2 * W * 2 + 1;
	assert_int_equal(dvar_distribute_datasets_from_function(&it, s, make_ds, &st, &o),
	                 DVAR_EINVAL);
	assert_null(it);
	snprintf(expect, sizeof expect,
	         "The `global_batch_size` %d is not divisible by `num_replicas_in_sync` %d ",
	         4 * W + 1, 2 * W);
	assert_message(expect);
	assert_int_equal(st.calls, 1);

	/* A failing function fails the call everywhere. */
	o.batch_size = 4 * W;
	st.fail = 1;
	assert_int_equal(dvar_distribute_datasets_from_function(&it, s, make_ds, &st, &o),
	                 DVAR_EIO);
	assert_null(it);
	tu_assert_error_contains("input function failed");
	o.mode = DVAR_INPUT_REPLICATE;
	assert_int_equal(dvar_distribute_datasets_from_function(&it, s, make_ds, &st, &o),
	                 DVAR_EINVAL);
	dvar_strategy_free(s);
}

static void test_runtime_input__from_function(void **state)
{
	(void)state;
	from_function(1);
	from_function(0);
}

/* ---------------------------------------------------------------- two workers */

/* dataset ds, options o, R replicas over the MPI world; when W == 2 each
 * worker checks its own expectation. */
static void two(dvar_dataset *ds, int R, dvar_input_options o, const char *w0, const char *w1)
{
	dvar_strategy *s = strategy(R, 0);

	if (dvar_strategy_num_workers(s) == 2)
		expect_split(s, ds, o, dvar_strategy_worker_id(s) == 0 ? w0 : w1);
	dvar_strategy_free(s);
}

static void test_runtime_input__two_workers_data(void **state)
{
	dvar_dataset *d9 = range_ds(9), *d15 = range_ds(15), *d12 = range_ds(12);

	(void)state;
	/* range(9).batch(2), 2 workers x 1 replica, DATA (and AUTO on in-memory data). */
	two(d9, 1, opts(2, 0, DVAR_AUTO_SHARD_DATA, 0), "[0] | [2] | [4] | [6] | [8]",
	    "[1] | [3] | [5] | [7] | []");
	two(d9, 1, opts(2, 0, DVAR_AUTO_SHARD_AUTO, 0), "[0] | [2] | [4] | [6] | [8]",
	    "[1] | [3] | [5] | [7] | []");
	two(d9, 1, opts(2, 1, DVAR_AUTO_SHARD_DATA, 0), "[0] | [2] | [4] | [6]",
	    "[1] | [3] | [5] | [7]");
	/* range(9).batch(2), 2 workers x 2 replicas: ceil(2/4) = 1, sub-batches k % 2. */
	two(d9, 2, opts(2, 0, DVAR_AUTO_SHARD_DATA, 0), "[0],[] | [2],[] | [4],[] | [6],[] | [8],[]",
	    "[1],[] | [3],[] | [5],[] | [7],[] | [],[]");
	/* range(15).batch(4), 2 workers x 2 replicas (input_lib_test). */
	two(d15, 2, opts(4, 0, DVAR_AUTO_SHARD_DATA, 0), "[0],[2] | [4],[6] | [8],[10] | [12],[14]",
	    "[1],[3] | [5],[7] | [9],[11] | [13],[]");
	/* OFF, range(12).batch(8), 2 x 1 (testMWMSPartialBatch): V2 sizes [4,4]. */
	two(d12, 1, opts(8, 0, DVAR_AUTO_SHARD_OFF, 0), "[0 1 2 3] | [4 5 6 7] | [8 9 10 11]",
	    "[0 1 2 3] | [4 5 6 7] | [8 9 10 11]");
	/* REPLICATE: every replica of every worker reads everything. */
	two(d9, 1, opts(4, 0, DVAR_AUTO_SHARD_OFF, DVAR_INPUT_REPLICATE),
	    "[0 1 2 3] | [4 5 6 7] | [8]", "[0 1 2 3] | [4 5 6 7] | [8]");
	dvar_dataset_free(d9);
	dvar_dataset_free(d15);
	dvar_dataset_free(d12);
}

static void test_runtime_input__two_workers_files(void **state)
{
	const char *dir = *state;
	int64_t two_files[2] = { 6, 6 }, one_file[1] = { 12 }, uneven[2] = { 2, 6 };
	dvar_dataset *f2 = files_ds(dir, "two", two_files, 2);
	dvar_dataset *f1 = files_ds(dir, "one", one_file, 1);
	dvar_dataset *fu = files_ds(dir, "uneven", uneven, 2);
	dvar_strategy *s;
	dvar_input_iterator *it = NULL;
	dvar_input_options o;

	/* The docs' FILE example (2 files, 2 workers, batch 4); the code's V2 answer. */
	two(f2, 1, opts(4, 0, DVAR_AUTO_SHARD_FILE, 0), "[0 1] | [2 3] | [4 5]",
	    "[6 7] | [8 9] | [10 11]");
	two(f2, 1, opts(4, 0, DVAR_AUTO_SHARD_AUTO, 0), "[0 1] | [2 3] | [4 5]",
	    "[6 7] | [8 9] | [10 11]");
	/* The docs' DATA example (1 file, 2 workers, batch 4). */
	two(f1, 1, opts(4, 0, DVAR_AUTO_SHARD_DATA, 0), "[0 1] | [4 5] | [8 9]",
	    "[2 3] | [6 7] | [10 11]");
	/* Worker 0 runs out first; the steps go on until no replica anywhere has data. */
	two(fu, 1, opts(2, 0, DVAR_AUTO_SHARD_FILE, 0), "[0] | [1] | [] | [] | [] | []",
	    "[2] | [3] | [4] | [5] | [6] | [7]");

	s = strategy(1, 0);
	if (dvar_strategy_num_workers(s) == 2) {
		char expect[1024];

		snprintf(expect, sizeof expect,
		         "Could not apply FILE based sharding: the dataset only has 1 file(s), which "
		         "is not enough for the required 2 shards/workers. If you are using datasets "
		         "with distribution strategy, consider setting the auto sharding policy to "
		         "either DATA or OFF using the `experimental_distribute.auto_shard_policy` "
		         "option of `tf.data.Options()`. Or, split your input files into a larger "
		         "number of small files such that number of files is greater than number of "
		         "shards/workers.");
		o = opts(4, 0, DVAR_AUTO_SHARD_FILE, 0);
		assert_int_equal(dvar_distribute_dataset(&it, s, f1, &o), DVAR_EINVAL);
		assert_null(it);
		assert_message(expect);
		/* AUTO tries FILE; the count is checked when the shard runs, not a fallback. */
		o = opts(4, 0, DVAR_AUTO_SHARD_AUTO, 0);
		assert_int_equal(dvar_distribute_dataset(&it, s, f1, &o), DVAR_EINVAL);
		assert_message(expect);
		/* FILE on an in-memory array cannot shard. */
		{
			dvar_dataset *a = range_ds(4);

			o = opts(4, 0, DVAR_AUTO_SHARD_FILE, 0);
			assert_int_equal(dvar_distribute_dataset(&it, s, a, &o), DVAR_EINVAL);
			tu_assert_error_contains("Found an unshardable source dataset");
			dvar_dataset_free(a);
		}
		/* The strategy still works. */
		o = opts(4, 0, DVAR_AUTO_SHARD_DATA, 0);
		expect_split(s, f1, o, dvar_strategy_worker_id(s) == 0 ? "[0 1] | [4 5] | [8 9]"
		                                                      : "[2 3] | [6 7] | [10 11]");
	}
	dvar_strategy_free(s);
	dvar_dataset_free(f2);
	dvar_dataset_free(f1);
	dvar_dataset_free(fu);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_input__batch_sizes_for_worker),
		cmocka_unit_test(test_runtime_input__per_replica_batch_size),
		cmocka_unit_test(test_runtime_input__legacy_split),
		cmocka_unit_test(test_runtime_input__v2_split),
		cmocka_unit_test(test_runtime_input__element_shape),
		cmocka_unit_test(test_runtime_input__replicate),
		cmocka_unit_test_setup_teardown(test_runtime_input__files_one_worker, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_runtime_input__file_errors, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test(test_runtime_input__bad_options),
		cmocka_unit_test(test_runtime_input__from_function),
		cmocka_unit_test(test_runtime_input__two_workers_data),
		cmocka_unit_test_setup_teardown(test_runtime_input__two_workers_files, tu_setup_dir,
		                                tu_teardown_dir),
	};

	for (int i = 0; i < 64; i++)
		range_data[i] = i;
	return cmocka_run_group_tests_name("runtime/input", tests, NULL, NULL);
}
