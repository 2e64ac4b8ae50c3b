/*
 * tests/unit/sharding/test_sharding_variable.c - sharded variables: the
 * shards ParameterServerStrategy makes (TF's parameter_server_strategy_v2
 * tests: values, owners round-robin, one shard when the partitioner says
 * one, a partition-aware initializer), assign / assign_add / assign_sub
 * (sharded_variable_test's test_assign), reads with __getitem__'s rules
 * (test_slicing, other axes, errors), embedding lookup (test_embedding_lookup,
 * "mod" refused, random ids against a direct gather with a different id
 * count on every worker, max_norm), sparse row updates (scatter: TF's
 * test_scatter_add_uneven_partition and test_scatter_ops_even_partition,
 * random updates with duplicates and a different count on every worker,
 * each against an unsharded computation, and errors), and creation errors,
 * including workers that disagree on the spec.
 *
 * The same program runs alone and under `mpirun -np 2` and `-np 3`: every
 * expectation is computed from the worker count and id, every rank makes
 * the same calls in the same order and asserts the same things (a failure
 * on one worker is a failure on all of them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "dvar/sharding.h"
#include "runtime/engine.h"
#include "sharding/sharded.h" /* the offsets, to fake a layout that is not "div" */

/* ---------------------------------------------------------------- helpers */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	assert_non_null(p);
	return p;
}

static dvar_shape shape_of(int rank, const int64_t *dims)
{
	dvar_shape shape;

	assert_int_equal(dvar_shape_init(&shape, rank, dims), DVAR_OK);
	return shape;
}

static dvar_sharded_variable *make_sv(dvar_strategy *s, const char *name, int dtype, int rank,
                                      const int64_t *dims, const dvar_partitioner *p,
                                      const void *initial)
{
	dvar_sharded_variable_spec spec = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	dvar_sharded_variable *v = NULL;

	spec.name = name;
	spec.dtype = dtype;
	spec.shape = shape_of(rank, dims);
	spec.partitioner = p;
	spec.initial_value = initial;
	if (dvar_sharded_variable_create(&v, s, &spec) != DVAR_OK)
		fail_msg("creating %s: %s", name, dvar_error_last()->message);
	assert_non_null(v);
	return v;
}

/* A buffer of count elements of dtype holding values[i]. */
static void *elems(int dtype, const double *values, size_t count)
{
	void *p = xmalloc(count * dvar_dtype_size(dtype));

	for (size_t i = 0; i < count; i++)
		tu_put(dtype, p, i, values[i]);
	return p;
}

static void *iota(int dtype, size_t count, double first)
{
	void *p = xmalloc(count * dvar_dtype_size(dtype));

	for (size_t i = 0; i < count; i++)
		tu_put(dtype, p, i, first + (double)i);
	return p;
}

static void assert_values(int dtype, const void *got, const double *want, size_t count,
                          const char *what)
{
	for (size_t i = 0; i < count; i++)
		if (tu_get(dtype, got, i) != want[i])
			fail_msg("%s: element %zu is %g, expected %g", what, i, tu_get(dtype, got, i),
			         want[i]);
}

/*
 * Shard i: its name, first row, rows, owner (i mod W) and, on the owner
 * only, its values; other workers hold no memory for it.
 */
static void expect_shard(const dvar_sharded_variable *v, int64_t i, int64_t offset, int64_t rows,
                         const double *values)
{
	dvar_strategy *s = dvar_sharded_variable_strategy(v);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	const dvar_shape *full = dvar_sharded_variable_shape(v);
	dvar_shard_info info;
	char name[1100];
	uint64_t count = 0;

	assert_int_equal(dvar_sharded_variable_shard(v, i, &info), DVAR_OK);
	snprintf(name, sizeof name, "%s/part_%lld", dvar_sharded_variable_name(v), (long long)i);
	assert_string_equal(info.name, name);
	assert_int_equal(info.offset, offset);
	assert_int_equal(info.owner, (int)(i % W));
	assert_int_equal(info.shape.rank, full->rank);
	if (full->rank > 0)
		assert_int_equal(info.shape.dims[0], rows);
	for (int d = 1; d < full->rank; d++)
		assert_int_equal(info.shape.dims[d], full->dims[d]);
	if (info.owner != me) {
		assert_null(info.data);
		return;
	}
	assert_non_null(info.data);
	assert_int_equal(dvar_shape_num_elements(&info.shape, &count), DVAR_OK);
	assert_values(dvar_sharded_variable_dtype(v), info.data, values, (size_t)count, name);
}

/* v[text] on every worker: the shape, then the values ("" = no items). */
static void expect_read(dvar_sharded_variable *v, const char *text, int rank, const int64_t *dims,
                        const double *values)
{
	int dtype = dvar_sharded_variable_dtype(v);
	dvar_subscript items[16];
	dvar_shape shape, want = shape_of(rank, dims);
	uint64_t count = 0, bytes;
	int n = 0;
	void *buf;

	if (text[0] && dvar_subscript_parse(text, items, 16, &n) != DVAR_OK)
		fail_msg("parsing '%s': %s", text, dvar_error_last()->message);
	memset(&shape, 0xff, sizeof shape);
	/* dst NULL: the shape only (still collective). */
	if (dvar_sharded_variable_read(v, items, n, NULL, 0, &shape) != DVAR_OK)
		fail_msg("shape of %s[%s]: %s", dvar_sharded_variable_name(v), text,
		         dvar_error_last()->message);
	if (!dvar_shape_equal(&shape, &want)) {
		char a[128], b[128];

		dvar_shape_format(&shape, a, sizeof a);
		dvar_shape_format(&want, b, sizeof b);
		fail_msg("%s[%s]: shape %s, expected %s", dvar_sharded_variable_name(v), text, a, b);
	}
	assert_int_equal(dvar_shape_num_elements(&want, &count), DVAR_OK);
	bytes = count * dvar_dtype_size(dtype);
	buf = xmalloc((size_t)bytes);
	memset(&shape, 0xff, sizeof shape);
	if (dvar_sharded_variable_read(v, items, n, buf, bytes, &shape) != DVAR_OK)
		fail_msg("%s[%s]: %s", dvar_sharded_variable_name(v), text, dvar_error_last()->message);
	assert_true(dvar_shape_equal(&shape, &want));
	{
		char what[256];

		snprintf(what, sizeof what, "%s[%s]", dvar_sharded_variable_name(v), text);
		assert_values(dtype, buf, values, (size_t)count, what);
	}
	free(buf);
}

/* v[text] fails on every worker with code, and a message containing needle. */
static void expect_read_error(dvar_sharded_variable *v, const dvar_subscript *items, int n, int code,
                              const char *needle)
{
	double buf[64];
	dvar_shape shape;

	assert_int_equal(dvar_sharded_variable_read(v, items, n, buf, sizeof buf, &shape), code);
	tu_assert_error_contains(needle);
}

static void expect_read_text_error(dvar_sharded_variable *v, const char *text, int code,
                                   const char *needle)
{
	dvar_subscript items[16];
	int n = 0;

	assert_int_equal(dvar_subscript_parse(text, items, 16, &n), DVAR_OK);
	expect_read_error(v, items, n, code, needle);
}

/* ---------------------------------------------------------------- creation: TF's PS tests */

static void test_sharding_variable__ps_basic(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	dvar_partitioner fixed2 = DVAR_PARTITIONER_FIXED_INIT(2);
	const int64_t dims[2] = { 5, 2 }, dims61[2] = { 6, 1 };
	void *init = iota(DVAR_INT64, 10, 0);
	void *init6 = iota(DVAR_INT64, 6, 0);
	dvar_sharded_variable *v, *w;
	static const double s0[] = { 0, 1, 2, 3, 4, 5 }, s1[] = { 6, 7, 8, 9 };
	static const double t0[] = { 0, 1, 2 }, t1[] = { 3, 4, 5 };
	double all[10];
	const int64_t *off;

	(void)state;
	/* testBasic: FixedShards(2), (5, 2) int64 holding 0..9. */
	v = make_sv(s, "w", DVAR_INT64, 2, dims, &fixed2, init);
	assert_string_equal(dvar_sharded_variable_name(v), "w");
	assert_int_equal(dvar_sharded_variable_dtype(v), DVAR_INT64);
	assert_true(dvar_shape_equal(dvar_sharded_variable_shape(v), &(dvar_shape){ 2, { 5, 2 } }));
	assert_ptr_equal(dvar_sharded_variable_strategy(v), s);
	assert_int_equal(dvar_sharded_variable_num_shards(v), 2);
	off = dvar_sharded_variable_offsets(v);
	assert_int_equal(off[0], 0);
	assert_int_equal(off[1], 3);
	assert_int_equal(off[2], 5);
	expect_shard(v, 0, 0, 3, s0); /* [[0,1],[2,3],[4,5]] on worker 0 */
	expect_shard(v, 1, 3, 2, s1); /* [[6,7],[8,9]] on worker 1 (0 alone) */
	for (int i = 0; i < 10; i++)
		all[i] = i;
	expect_read(v, "", 2, dims, all);

	/* testBasic: (6, 1) holding 0..5. */
	w = make_sv(s, "v2", DVAR_INT64, 2, dims61, &fixed2, init6);
	expect_shard(w, 0, 0, 3, t0);
	expect_shard(w, 1, 3, 3, t1);
	dvar_sharded_variable_free(w);
	dvar_sharded_variable_free(v);
	dvar_sharded_variable_free(NULL);
	free(init);
	free(init6);
	dvar_strategy_free(s);
}

static void test_sharding_variable__ps_round_robin(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	dvar_partitioner fixed4 = DVAR_PARTITIONER_FIXED_INIT(4);
	const int64_t d10[1] = { 10 }, d3[1] = { 3 };
	void *ten = iota(DVAR_INT64, 10, 0), *three = iota(DVAR_INT64, 3, 0);
	static const double a[] = { 0, 1, 2 }, b[] = { 3, 4, 5 }, c[] = { 6, 7 }, d[] = { 8, 9 };
	static const double z[] = { 0 }, o[] = { 1 }, t[] = { 2 };
	dvar_sharded_variable *v;

	(void)state;
	/* testNonCallableInitialValue: 3, 3, 2, 2 rows, owners 0, 1, 2, 3 mod W. */
	v = make_sv(s, "nc", DVAR_INT64, 1, d10, &fixed4, ten);
	assert_int_equal(dvar_sharded_variable_num_shards(v), 4);
	expect_shard(v, 0, 0, 3, a);
	expect_shard(v, 1, 3, 3, b);
	expect_shard(v, 2, 6, 2, c);
	expect_shard(v, 3, 8, 2, d);
	dvar_sharded_variable_free(v);

	/* testNumPartitionsLargerThanSize: 4 shards asked of 3 rows give 3. */
	v = make_sv(s, "small", DVAR_INT64, 1, d3, &fixed4, three);
	assert_int_equal(dvar_sharded_variable_num_shards(v), 3);
	expect_shard(v, 0, 0, 1, z);
	expect_shard(v, 1, 1, 1, o);
	expect_shard(v, 2, 2, 1, t);
	dvar_sharded_variable_free(v);
	free(ten);
	free(three);
	dvar_strategy_free(s);
}

static void test_sharding_variable__ps_partition_to_one(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	dvar_partitioner min = DVAR_PARTITIONER_MIN_SIZE_INIT;
	dvar_partitioner fixed1 = DVAR_PARTITIONER_FIXED_INIT(1);
	const int64_t d10[1] = { 10 };
	void *ten = iota(DVAR_INT64, 10, 0);
	double all[10];
	dvar_sharded_variable *v;
	double scalar = 2.5;
	dvar_subscript na = { .kind = DVAR_SUBSCRIPT_NEWAXIS };
	dvar_subscript ell = { .kind = DVAR_SUBSCRIPT_ELLIPSIS };
	dvar_subscript items[2];
	dvar_shape shape;
	float got[2];
	const int64_t one[1] = { 1 };

	(void)state;
	/* testPartitionToOne: MinSize(64 << 20, max_shards 2) on (10,) int64. */
	min.min_shard_bytes = 64 << 20;
	min.max_shards = 2;
	for (int i = 0; i < 10; i++)
		all[i] = i;
	v = make_sv(s, "one", DVAR_INT64, 1, d10, &min, ten);
	assert_int_equal(dvar_sharded_variable_num_shards(v), 1);
	assert_int_equal(dvar_sharded_variable_offsets(v)[0], 0);
	assert_int_equal(dvar_sharded_variable_offsets(v)[1], 10);
	expect_shard(v, 0, 0, 10, all);
	expect_read(v, "3:6", 1, (const int64_t[]){ 3 }, all + 3);
	dvar_sharded_variable_free(v);

	/* A scalar is never partitioned: one shard on worker 0. */
	{
		void *val = elems(DVAR_FLOAT32, &scalar, 1);
		dvar_shard_info info;

		v = make_sv(s, "scalar", DVAR_FLOAT32, 0, NULL, &fixed1, val);
		assert_int_equal(dvar_sharded_variable_num_shards(v), 1);
		assert_int_equal(dvar_sharded_variable_offsets(v)[0], 0);
		assert_int_equal(dvar_sharded_variable_offsets(v)[1], 0);
		assert_int_equal(dvar_sharded_variable_shard(v, 0, &info), DVAR_OK);
		assert_int_equal(info.shape.rank, 0);
		assert_int_equal(info.owner, 0);
		expect_shard(v, 0, 0, 1, &scalar);
		expect_read(v, "", 0, NULL, &scalar);
		expect_read(v, "...", 0, NULL, &scalar);
		expect_read(v, "newaxis", 1, one, &scalar);
		items[0] = na;
		items[1] = ell;
		assert_int_equal(dvar_sharded_variable_read(v, items, 2, got, sizeof got, &shape),
		                 DVAR_OK);
		assert_int_equal(shape.rank, 1);
		assert_true(got[0] == 2.5f);
		expect_read_text_error(v, "0", DVAR_EINVAL,
		                       "Index out of range using input dim 0; input has only 0 dims");
		/* Updates reach the one shard. */
		assert_int_equal(dvar_sharded_variable_assign_add(v, val), DVAR_OK);
		scalar = 5;
		expect_read(v, "", 0, NULL, &scalar);
		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, NULL, 0, 0, NULL, 0),
		                 DVAR_EINVAL);
		tu_assert_error_contains("a scalar has no rows");
		dvar_sharded_variable_free(v);
		free(val);
	}
	free(ten);
	dvar_strategy_free(s);
}

/*
 * A partitioner that gives one partition: TensorFlow
 * (parameter_server_strategy_v2.py, num_partitions == 1) creates a plain
 * variable, whose reads are plain tensor slicing, NumPy's rule: a start
 * below -rows clamps to 0, so on [10, 2] v[-13:-7:2, :] is rows 0 and 2.
 * A sharded variable of two or more shards keeps ShardedVariable's rule
 * (_decompose_slice_spec does not clamp), which gives row 1.
 */
static void test_sharding_variable__one_shard_reads_as_plain(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	dvar_partitioner fixed1 = DVAR_PARTITIONER_FIXED_INIT(1);
	dvar_partitioner fixed2 = DVAR_PARTITIONER_FIXED_INIT(2);
	dvar_partitioner min = DVAR_PARTITIONER_MIN_SIZE_INIT; /* max_shards 1 */
	const int64_t d10x2[2] = { 10, 2 }, d2x2[2] = { 2, 2 }, d1x2[2] = { 1, 2 };
	void *init = iota(DVAR_FLOAT32, 20, 0);
	const dvar_partitioner *ones[2] = { &fixed1, &min };

	(void)state;
	for (int k = 0; k < 2; k++) {
		dvar_sharded_variable *v = make_sv(s, "plain", DVAR_FLOAT32, 2, d10x2, ones[k], init);

		assert_int_equal(dvar_sharded_variable_num_shards(v), 1);
		expect_read(v, "-13:-7:2, :", 2, d2x2, (const double[]){ 0, 1, 4, 5 });
		expect_read(v, "-10:2:3", 2, d1x2, (const double[]){ 0, 1 });
		expect_read(v, "-100:1", 2, d1x2, (const double[]){ 0, 1 });
		expect_read(v, "8:100", 2, d2x2, (const double[]){ 16, 17, 18, 19 });
		expect_read(v, "100:-100:-9", 2, d2x2, (const double[]){ 18, 19, 0, 1 });
		expect_read(v, "-1", 1, (const int64_t[]){ 2 }, (const double[]){ 18, 19 });
		/* A plain tensor's out-of-range index, without ShardedVariable's prefix. */
		expect_read_text_error(v, "10", DVAR_EINVAL,
		                       "reading sharded variable 'plain': slice index 10 of "
		                       "dimension 0 out of bounds.");
		expect_read_text_error(v, "::0", DVAR_EINVAL, "strides[0] must be non-zero");
		dvar_sharded_variable_free(v);
	}
	{
		dvar_sharded_variable *v = make_sv(s, "two", DVAR_FLOAT32, 2, d10x2, &fixed2, init);

		expect_read(v, "-13:-7:2, :", 2, d1x2, (const double[]){ 2, 3 });
		expect_read_text_error(v, "10", DVAR_EINVAL,
		                       "ShardedVariable: slice index 10 of dimension 0 out of bounds.");
		dvar_sharded_variable_free(v);
	}
	free(init);
	dvar_strategy_free(s);
}

struct init_log {
	int calls;
	int64_t offsets[8];
	int64_t rows[8];
};

/* testCustomPartitionAwareInitializer: the identity, shard by shard. */
static int identity_init(void *arg, int dtype, const dvar_shape *shape, const int64_t *offset,
                         void *dst)
{
	struct init_log *log = arg;
	int64_t cols = shape->dims[1];

	if (log->calls < 8) {
		log->offsets[log->calls] = offset[0];
		log->rows[log->calls] = shape->dims[0];
	}
	log->calls++;
	if (offset[1] != 0)
		return dvar_error_set(DVAR_EINVAL, "offset[1] is %lld", (long long)offset[1]);
	for (int64_t r = 0; r < shape->dims[0]; r++)
		for (int64_t c = 0; c < cols; c++)
			tu_put(dtype, dst, (size_t)(r * cols + c), offset[0] + r == c ? 1 : 0);
	return DVAR_OK;
}

static void test_sharding_variable__ps_partition_aware_initializer(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed2 = DVAR_PARTITIONER_FIXED_INIT(2);
	dvar_sharded_variable_spec spec = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	dvar_sharded_variable *v = NULL;
	struct init_log log;
	static const double a[] = { 1, 0, 0, 0, 0, 1, 0, 0 }, b[] = { 0, 0, 1, 0, 0, 0, 0, 1 };
	const int64_t dims[2] = { 4, 4 };
	int expect_calls = 0;

	(void)state;
	memset(&log, 0, sizeof log);
	spec.name = "eye";
	spec.dtype = DVAR_FLOAT32;
	spec.shape = shape_of(2, dims);
	spec.partitioner = &fixed2;
	spec.init = identity_init;
	spec.init_arg = &log;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_OK);
	expect_shard(v, 0, 0, 2, a); /* [[1,0,0,0],[0,1,0,0]] */
	expect_shard(v, 1, 2, 2, b); /* [[0,0,1,0],[0,0,0,1]] */
	/* Called once per shard, on its owner only, with its shape and offset. */
	for (int i = 0; i < 2; i++) {
		if (i % W != me)
			continue;
		assert_int_equal(log.offsets[expect_calls], 2 * i);
		assert_int_equal(log.rows[expect_calls], 2);
		expect_calls++;
	}
	assert_int_equal(log.calls, expect_calls);
	dvar_sharded_variable_free(v);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- updates (test_assign) */

static void test_sharding_variable__assign(void **state)
{
	static const int dtypes[] = { DVAR_INT32, DVAR_FLOAT32, DVAR_FLOAT16, DVAR_UINT8 };
	static const double start[] = { 0, 0, 1, 1, 2, 2, 3, 3 };
	static const double value[] = { 4, 4, 5, 5, 6, 6, 7, 7 };
	static const double add[] = { 1, 1, 1, 1, 2, 2, 2, 2 };
	static const double added[] = { 1, 1, 2, 2, 4, 4, 5, 5 };
	static const double sub[] = { 0, 0, 1, 1, 1, 1, 3, 3 };
	static const double subbed[] = { 0, 0, 0, 0, 1, 1, 0, 0 };
	dvar_strategy *s = tu_strategy(1, 0);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	const int64_t dims[2] = { 4, 2 };

	(void)state;
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		int dt = dtypes[t];
		void *init = elems(dt, start, 8), *val = elems(dt, value, 8);
		void *a = elems(dt, add, 8), *b = elems(dt, sub, 8);
		dvar_sharded_variable *v;

		/* 4 rows over 3 shards: 2, 1, 1. */
		v = make_sv(s, "assign", dt, 2, dims, &fixed3, init);
		expect_shard(v, 0, 0, 2, start);
		assert_int_equal(dvar_sharded_variable_assign(v, val), DVAR_OK);
		expect_shard(v, 0, 0, 2, value);
		expect_shard(v, 1, 2, 1, value + 4);
		expect_shard(v, 2, 3, 1, value + 6);
		expect_read(v, "", 2, dims, value);
		dvar_sharded_variable_free(v);

		v = make_sv(s, "assign_add", dt, 2, dims, &fixed3, init);
		assert_int_equal(dvar_sharded_variable_assign_add(v, a), DVAR_OK);
		expect_shard(v, 0, 0, 2, added);
		expect_shard(v, 1, 2, 1, added + 4);
		expect_shard(v, 2, 3, 1, added + 6);
		expect_read(v, "", 2, dims, added);
		dvar_sharded_variable_free(v);

		v = make_sv(s, "assign_sub", dt, 2, dims, &fixed3, init);
		assert_int_equal(dvar_sharded_variable_assign_sub(v, b), DVAR_OK);
		expect_read(v, "", 2, dims, subbed);
		expect_shard(v, 2, 3, 1, subbed + 6);
		dvar_sharded_variable_free(v);
		free(init);
		free(val);
		free(a);
		free(b);
	}
	dvar_strategy_free(s);
}

static void test_sharding_variable__assign_errors(void **state)
{
	static const double start[] = { 0, 0, 1, 1, 2, 2, 3, 3 };
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	const int64_t dims[2] = { 4, 2 };
	void *init = elems(DVAR_INT32, start, 8), *other = iota(DVAR_INT32, 8, 100);
	void *flags = elems(DVAR_BOOL, start, 8);
	dvar_sharded_variable *v = make_sv(s, "e", DVAR_INT32, 2, dims, &fixed3, init);
	dvar_sharded_variable *bv = make_sv(s, "flags", DVAR_BOOL, 2, dims, &fixed3, flags);

	(void)state;
	/* A NULL value on one worker: nobody changes anything. */
	assert_int_equal(dvar_sharded_variable_assign(v, me == W - 1 ? NULL : other), DVAR_EINVAL);
	tu_assert_error_contains("assign of sharded variable 'e': value is NULL");
	if (W > 1) {
		char who[32];

		snprintf(who, sizeof who, "worker %d: ", W - 1);
		tu_assert_error_contains(who);
	}
	expect_read(v, "", 2, dims, start);
	/* bool cannot be added to. */
	assert_int_equal(dvar_sharded_variable_assign_add(bv, flags), DVAR_EINVAL);
	tu_assert_error_contains("assign_add of sharded variable 'flags'");
	assert_int_equal(dvar_sharded_variable_assign(bv, flags), DVAR_OK);
	assert_int_equal(dvar_sharded_variable_assign(NULL, flags), DVAR_EINVAL);
	dvar_sharded_variable_free(bv);
	dvar_sharded_variable_free(v);
	free(init);
	free(other);
	free(flags);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- reads (test_slicing) */

/* data = [[1,2],[3,4],...,[15,16]], shards data[:3], data[3:6], data[6:]. */
static dvar_sharded_variable *slicing_variable(dvar_strategy *s)
{
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	const int64_t dims[2] = { 8, 2 };
	void *data = iota(DVAR_INT32, 16, 1);
	dvar_sharded_variable *v = make_sv(s, "sv", DVAR_INT32, 2, dims, &fixed3, data);
	const int64_t *off = dvar_sharded_variable_offsets(v);

	assert_int_equal(dvar_sharded_variable_num_shards(v), 3);
	assert_int_equal(off[1], 3);
	assert_int_equal(off[2], 6);
	assert_int_equal(off[3], 8);
	free(data);
	return v;
}

/* v[text] selects these rows of data, whole. */
static void expect_rows(dvar_sharded_variable *v, const char *text, const int *rows, int n)
{
	double values[32];
	int64_t dims[2] = { n, 2 };

	for (int i = 0; i < n; i++) {
		values[2 * i] = 2 * rows[i] + 1;
		values[2 * i + 1] = 2 * rows[i] + 2;
	}
	expect_read(v, text, 2, dims, values);
}

/* expect_rows(v, text, ROWS(1, 2)): the rows and their count. */
#define ROWS(...) \
	(const int[]){ __VA_ARGS__ }, (int)(sizeof((const int[]){ __VA_ARGS__ }) / sizeof(int))

static void test_sharding_variable__slicing(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	dvar_sharded_variable *v = slicing_variable(s);
	static const char *const empty[] = { "0:0", "5:3", "3:5:-1", "-1:0", "2:-1:-1" };
	double col0[8];
	const int64_t d8[1] = { 8 }, d81[2] = { 8, 1 }, d2[1] = { 2 }, d182[3] = { 1, 8, 2 };
	double all[16];

	(void)state;
	for (int i = 0; i < 8; i++) {
		char text[8];
		double row[2] = { 2 * i + 1, 2 * i + 2 };

		snprintf(text, sizeof text, "%d", i);
		expect_read(v, text, 1, d2, row);
		col0[i] = 2 * i + 1;
	}
	for (int i = 0; i < 16; i++)
		all[i] = i + 1;
	expect_rows(v, ":", ROWS(0, 1, 2, 3, 4, 5, 6, 7));
	expect_rows(v, ":2", ROWS(0, 1));
	expect_rows(v, "-8:2", ROWS(0, 1));
	expect_rows(v, "-10:2", ROWS(0, 1));
	expect_rows(v, "5:", ROWS(5, 6, 7));
	expect_rows(v, "5:-1", ROWS(5, 6));
	expect_rows(v, "::3", ROWS(0, 3, 6));
	expect_rows(v, "::5", ROWS(0, 5));
	expect_rows(v, "1::6", ROWS(1, 7));
	expect_rows(v, "1:5:6", ROWS(1));
	expect_rows(v, "1::7", ROWS(1));
	expect_rows(v, "2:7", ROWS(2, 3, 4, 5, 6));
	expect_rows(v, "2:7:2", ROWS(2, 4, 6));
	expect_rows(v, "2:7:3", ROWS(2, 5));
	/* Negative steps. */
	expect_rows(v, "::-1", ROWS(7, 6, 5, 4, 3, 2, 1, 0));
	expect_rows(v, "2::-1", ROWS(2, 1, 0));
	expect_rows(v, "2:-8:-1", ROWS(2, 1));
	expect_rows(v, "2:-10:-1", ROWS(2, 1, 0));
	expect_rows(v, "4::-1", ROWS(4, 3, 2, 1, 0));
	expect_rows(v, "-1:-3:-1", ROWS(7, 6));
	expect_rows(v, "::-5", ROWS(7, 2));
	expect_rows(v, "6::-6", ROWS(6, 0));
	expect_rows(v, "6:5:-6", ROWS(6));
	expect_rows(v, "6::-7", ROWS(6));
	expect_rows(v, "7:1:-1", ROWS(7, 6, 5, 4, 3, 2));
	expect_rows(v, "7:1:-2", ROWS(7, 5, 3));
	expect_rows(v, "7:1:-4", ROWS(7, 3));
	/* TF's quirk: a start below -rows is not clamped (NumPy selects row 0). */
	expect_rows(v, "-10:2:3", ROWS(1));
	/* Empty results. */
	for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
		expect_read(v, empty[i], 2, (const int64_t[]){ 0, 2 }, NULL);
	/* Other axes. */
	expect_read(v, ":,0", 1, d8, col0);
	expect_read(v, ":,0:1", 2, d81, col0);
	expect_read(v, "2", 1, d2, (const double[]){ 5, 6 });
	expect_read(v, "6", 1, d2, (const double[]){ 13, 14 });
	expect_read(v, "2,1", 0, NULL, (const double[]){ 6 });
	expect_read(v, "-2", 1, d2, (const double[]){ 13, 14 });
	expect_read(v, "...", 2, (const int64_t[]){ 8, 2 }, all);
	expect_read(v, "...,0", 1, d8, col0);
	expect_read(v, "0:1,...", 2, (const int64_t[]){ 1, 2 }, (const double[]){ 1, 2 });
	expect_read(v, "newaxis,...", 3, d182, all);
	expect_read(v, "1:7:2, ::-1", 2, (const int64_t[]){ 3, 2 },
	            (const double[]){ 4, 3, 8, 7, 12, 11 });
	expect_read(v, "::-3, 1, newaxis", 2, (const int64_t[]){ 3, 1 },
	            (const double[]){ 16, 10, 4 });
	expect_read(v, "-1, -2", 0, NULL, (const double[]){ 15 });
	expect_read(v, ":, 5:", 2, (const int64_t[]){ 8, 0 }, NULL);
	dvar_sharded_variable_free(v);
	dvar_strategy_free(s);
}

static void test_sharding_variable__read_errors(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_sharded_variable *v = slicing_variable(s);
	dvar_subscript two_ellipses[2] = { { .kind = DVAR_SUBSCRIPT_ELLIPSIS },
		                       { .kind = DVAR_SUBSCRIPT_ELLIPSIS } };
	dvar_subscript bad_kind = { .kind = 42 };
	dvar_subscript items[4];
	int32_t small[3], rowbuf[2];
	dvar_shape shape;
	int n;

	(void)state;
	/* TF's texts, with the index already adjusted. */
	expect_read_text_error(v, "100", DVAR_EINVAL,
	                       "ShardedVariable: slice index 100 of dimension 0 out of bounds.");
	expect_read_text_error(v, "-100", DVAR_EINVAL,
	                       "ShardedVariable: slice index -92 of dimension 0 out of bounds.");
	expect_read_text_error(v, "::0", DVAR_EINVAL, "slice step cannot be zero");
	expect_read_text_error(v, ":, 5", DVAR_EINVAL, "slice index 5 of dimension 1 out of bounds.");
	expect_read_text_error(v, ":, -3", DVAR_EINVAL,
	                       "slice index -1 of dimension 1 out of bounds.");
	expect_read_text_error(v, ":, ::0", DVAR_EINVAL, "strides[1] must be non-zero");
	expect_read_text_error(v, "0, 0, 0", DVAR_EINVAL,
	                       "Index out of range using input dim 2; input has only 2 dims");
	expect_read_error(v, two_ellipses, 2, DVAR_EINVAL, "Multiple ellipses");
	expect_read_error(v, &bad_kind, 1, DVAR_EINVAL, "unknown kind 42");
	expect_read_error(v, NULL, 1, DVAR_EINVAL, "items is NULL");
	/* Too many dimensions in the result. */
	for (int i = 0; i < 4; i++)
		items[i].kind = DVAR_SUBSCRIPT_NEWAXIS;
	assert_int_equal(dvar_sharded_variable_read(v, items, 4, NULL, 0, &shape), DVAR_OK);
	assert_int_equal(shape.rank, 6);
	{
		dvar_subscript many[8];

		for (int i = 0; i < 8; i++)
			many[i].kind = DVAR_SUBSCRIPT_NEWAXIS;
		expect_read_error(v, many, 8, DVAR_EINVAL, "more than 8 dimensions");
	}
	/* dst too small: DVAR_ESHAPE naming both sizes; the shape is still set. */
	assert_int_equal(dvar_subscript_parse("0:2", items, 4, &n), DVAR_OK);
	memset(&shape, 0, sizeof shape);
	assert_int_equal(dvar_sharded_variable_read(v, items, n, small, sizeof small, &shape),
	                 DVAR_ESHAPE);
	tu_assert_error_contains("dst holds 12 bytes, the result (int32 [2,2]) needs 16");
	assert_int_equal(shape.rank, 2);

	/* One worker's bad index fails the read everywhere. */
	assert_int_equal(dvar_subscript_parse(me == W - 1 ? "8" : "1", items, 4, &n), DVAR_OK);
	assert_int_equal(dvar_sharded_variable_read(v, items, n, rowbuf, sizeof rowbuf, &shape),
	                 DVAR_EINVAL);
	tu_assert_error_contains("slice index 8 of dimension 0 out of bounds.");
	if (W > 1) {
		char who[32];

		snprintf(who, sizeof who, "worker %d: ", W - 1);
		tu_assert_error_contains(who);
	}
	/* Workers may read different things; everything still works. */
	{
		char text[8];
		double row[2];

		snprintf(text, sizeof text, "%d", (3 * me + 1) % 8);
		row[0] = 2 * ((3 * me + 1) % 8) + 1;
		row[1] = row[0] + 1;
		expect_read(v, text, 1, (const int64_t[]){ 2 }, row);
	}
	/* A worker that asks for the shape only still serves the others. */
	{
		double want[16];

		for (int i = 0; i < 16; i++)
			want[i] = i + 1;
		if (me == 0) {
			assert_int_equal(dvar_sharded_variable_read(v, NULL, 0, NULL, 0, &shape), DVAR_OK);
			assert_int_equal(shape.dims[0], 8);
		} else {
			expect_read(v, "", 2, (const int64_t[]){ 8, 2 }, want);
			/* expect_read made two reads; worker 0 makes the second here. */
		}
		if (me == 0) {
			int32_t got[16];

			assert_int_equal(dvar_sharded_variable_read(v, NULL, 0, got, sizeof got, &shape),
			                 DVAR_OK);
			assert_values(DVAR_INT32, got, want, 16, "full read");
		}
	}
	assert_int_equal(dvar_sharded_variable_read(NULL, NULL, 0, NULL, 0, &shape), DVAR_EINVAL);
	dvar_sharded_variable_free(v);
	dvar_strategy_free(s);
}

/* A reference for v[s0, s1, s2] on a (d0, d1, d2) array with positive or
 * full slices (where TF's axis-0 rule and NumPy's agree). */
static size_t reference3(const float *full, const int64_t *dims, const int64_t *sl, float *out)
{
	size_t n = 0;

	for (int64_t i = sl[0]; sl[2] > 0 ? i < sl[1] : i > sl[1]; i += sl[2])
		for (int64_t j = sl[3]; sl[5] > 0 ? j < sl[4] : j > sl[4]; j += sl[5])
			for (int64_t k = sl[6]; sl[8] > 0 ? k < sl[7] : k > sl[7]; k += sl[8])
				out[n++] = full[(i * dims[1] + j) * dims[2] + k];
	return n;
}

static void test_sharding_variable__read_3d(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	dvar_partitioner fixed4 = DVAR_PARTITIONER_FIXED_INIT(4);
	const int64_t dims[3] = { 7, 3, 4 };
	float full[84], want[84], got[84];
	/* start, stop, step per dimension, and the text. */
	static const struct {
		int64_t sl[9];
		const char *text;
	} cases[] = {
		{ { 1, 6, 2, 2, -1, -1, 1, 3, 1 }, "1:6:2, ::-1, 1:3" },
		{ { 0, 7, 1, 0, 3, 2, 3, -1, -2 }, ":, ::2, ::-2" },
		{ { 6, -1, -3, 1, 2, 1, 0, 4, 3 }, "::-3, 1:2, ::3" },
		{ { 2, 7, 1, 0, 3, 1, 0, 4, 1 }, "2:" },
	};

	(void)state;
	for (int i = 0; i < 84; i++)
		full[i] = (float)(i * 3 % 17) - 4.5f;
	{
		dvar_sharded_variable *v = make_sv(s, "cube", DVAR_FLOAT32, 3, dims, &fixed4, full);
		dvar_subscript items[8];
		dvar_shape shape;
		int n;

		for (int limit = 0; limit < 2; limit++) {
			/* Second time round, all-to-all messages of 5 bytes. */
			dvar_comm__set_message_max(limit ? 5 : 0);
			for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
				size_t count = reference3(full, dims, cases[c].sl, want);

				assert_int_equal(dvar_subscript_parse(cases[c].text, items, 8, &n), DVAR_OK);
				memset(got, 0, sizeof got);
				if (dvar_sharded_variable_read(v, items, n, got, sizeof got, &shape) != DVAR_OK)
					fail_msg("cube[%s]: %s", cases[c].text, dvar_error_last()->message);
				assert_int_equal(shape.rank, 3);
				assert_memory_equal(got, want, count * sizeof *got);
			}
		}
		dvar_comm__set_message_max(0);
		dvar_sharded_variable_free(v);
	}
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- embedding lookup */

static void test_sharding_variable__embedding_lookup(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	dvar_partitioner fixed1 = DVAR_PARTITIONER_FIXED_INIT(1);
	const int64_t dims[2] = { 5, 2 };
	void *data = iota(DVAR_FLOAT32, 10, 1);
	dvar_sharded_variable *v = make_sv(s, "emb", DVAR_FLOAT32, 2, dims, &fixed3, data);
	static const int64_t ids[3] = { 0, 3, 4 };
	static const double want[6] = { 1, 2, 7, 8, 9, 10 };
	static const double shard0[] = { 1, 2, 3, 4 }, shard1[] = { 5, 6, 7, 8 }, shard2[] = { 9, 10 };
	float got[6];

	(void)state;
	/* Shards [[1,2],[3,4]], [[5,6],[7,8]], [[9,10]]. */
	expect_shard(v, 0, 0, 2, shard0);
	expect_shard(v, 1, 2, 2, shard1);
	expect_shard(v, 2, 4, 1, shard2);
	/* embedding_lookup_v2(sv, [0, 3, 4]) = [[1,2],[7,8],[9,10]]. */
	memset(got, 0, sizeof got);
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 3, 0, got, sizeof got),
	                 DVAR_OK);
	assert_values(DVAR_FLOAT32, got, want, 6, "lookup [0,3,4]");

	/* "mod" over several shards is refused (TF v1 would give [[1,2],[3,4],[7,8]]). */
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_MOD, ids, 3, 0, got, sizeof got),
	                 DVAR_EINVAL);
	tu_assert_error_contains("partition strategy \"mod\" does not match");
	tu_assert_error_contains("wrong rows");
	assert_int_equal(dvar_embedding_lookup(v, 7, ids, 3, 0, got, sizeof got), DVAR_EINVAL);
	tu_assert_error_contains("Unrecognized partition strategy: 7");

	/* An id outside [0, 5) on one worker fails every worker, naming it. */
	{
		const int64_t bad[2] = { 1, me == W - 1 ? 5 : 2 };

		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, bad, 2, 0, got, sizeof got),
		                 DVAR_EINVAL);
		tu_assert_error_contains("id 5 at position 1 is outside [0, 5)");
		if (W > 1) {
			char who[32];

			snprintf(who, sizeof who, "worker %d: ", W - 1);
			tu_assert_error_contains(who);
		}
	}
	/* dst too small; dst NULL with ids. */
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 3, 0, got, 20), DVAR_ESHAPE);
	tu_assert_error_contains("dst holds 20 bytes, 3 rows of 8 bytes need 24");
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 3, 0, NULL, 0), DVAR_EINVAL);
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, NULL, 3, 0, got, sizeof got),
	                 DVAR_EINVAL);
	tu_assert_error_contains("ids is NULL");
	/* No ids at all is fine. */
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, NULL, 0, 0, NULL, 0), DVAR_OK);
	assert_int_equal(dvar_embedding_lookup(NULL, DVAR_PARTITION_DIV, NULL, 0, 0, NULL, 0),
	                 DVAR_EINVAL);
	dvar_sharded_variable_free(v);

	/* One shard: "mod" and "div" are the same plain gather. */
	v = make_sv(s, "emb1", DVAR_FLOAT32, 2, dims, &fixed1, data);
	memset(got, 0, sizeof got);
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_MOD, ids, 3, 0, got, sizeof got),
	                 DVAR_OK);
	assert_values(DVAR_FLOAT32, got, want, 6, "mod lookup, one shard");
	dvar_sharded_variable_free(v);
	free(data);
	dvar_strategy_free(s);
}

/* A different number of random ids on every worker (none on worker 1)
 * against a gather from the full value. */
static void test_sharding_variable__embedding_lookup_random(void **state)
{
	static const int dtypes[] = { DVAR_FLOAT32, DVAR_INT64, DVAR_BFLOAT16, DVAR_UINT8 };
	dvar_strategy *s = tu_strategy(2, 0);
	int me = dvar_strategy_worker_id(s);
	const int64_t dims[3] = { 37, 3, 2 };
	const size_t row = 6;
	size_t count = me == 1 ? 0 : 20 + 7 * (size_t)me;
	int64_t ids[64];
	uint64_t rng = 1234 + (uint64_t)me;
	double full[37 * 6], want[64 * 6];

	(void)state;
	for (size_t k = 0; k < count; k++)
		ids[k] = (int64_t)(tu_rand(&rng) % 37);
	if (count > 3)
		ids[count - 1] = ids[0]; /* a repeated id */
	for (int i = 0; i < 37 * 6; i++)
		full[i] = (double)((i * 7) % 23);
	for (size_t k = 0; k < count; k++)
		for (size_t e = 0; e < row; e++)
			want[k * row + e] = full[(size_t)ids[k] * row + e];
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		for (int shards = 1; shards <= 8; shards += 3) {
			dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(shards);
			void *init = elems(dtypes[t], full, 37 * 6);
			dvar_sharded_variable *v = make_sv(s, "table", dtypes[t], 3, dims, &p, init);
			size_t es = dvar_dtype_size(dtypes[t]);
			void *got = xmalloc(count * row * es);

			if (dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, count, 0, count ? got : NULL,
			                          count * row * es) != DVAR_OK)
				fail_msg("lookup: %s", dvar_error_last()->message);
			assert_values(dtypes[t], got, want, count * row, "random lookup");
			free(got);
			free(init);
			dvar_sharded_variable_free(v);
		}
	}
	dvar_strategy_free(s);
}

/* TF's clip_by_norm in float32: x * max_norm / max(norm, max_norm). */
static void clip_ref(float *row, size_t n, float mn)
{
	float l2 = 0, norm;

	for (size_t i = 0; i < n; i++)
		l2 += row[i] * row[i];
	norm = l2 > 0 ? sqrtf(l2) : l2;
	for (size_t i = 0; i < n; i++)
		row[i] = (row[i] * mn) / (norm > mn ? norm : mn);
}

static void test_sharding_variable__embedding_lookup_max_norm(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s);
	dvar_partitioner fixed2 = DVAR_PARTITIONER_FIXED_INIT(2);
	const int64_t dims[2] = { 4, 2 };
	const float table[8] = { 3, 4, 0.3f, 0.4f, 0, 0, -6, 8 };
	const double dtable[8] = { 3, 4, 0.3, 0.4, 0, 0, -6, 8 };
	static const int64_t ids[5] = { 0, 1, 2, 3, 0 };
	dvar_sharded_variable *v = make_sv(s, "clip", DVAR_FLOAT32, 2, dims, &fixed2, table);
	float got[10], want[10];
	double dgot[10];

	(void)state;
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, 1.0, got, sizeof got),
	                 DVAR_OK);
	assert_true(got[0] == 0.6f && got[1] == 0.8f);  /* norm 5 -> 1 */
	assert_true(got[4] == 0 && got[5] == 0);        /* a zero row stays zero */
	assert_true(got[6] == -0.6f && got[7] == 0.8f); /* norm 10 -> 1 */
	for (int k = 0; k < 5; k++) {
		memcpy(want + 2 * k, table + 2 * ids[k], 2 * sizeof *want);
		clip_ref(want + 2 * k, 2, 1.0f);
	}
	assert_memory_equal(got, want, sizeof got);
	/* A norm below max_norm: x * m / m, as TF computes it. */
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, 7.5, got, sizeof got),
	                 DVAR_OK);
	for (int k = 0; k < 5; k++) {
		memcpy(want + 2 * k, table + 2 * ids[k], 2 * sizeof *want);
		clip_ref(want + 2 * k, 2, 7.5f);
	}
	assert_memory_equal(got, want, sizeof got);
	/* TensorFlow's clip_by_norm takes a negative clip norm as 0 and returns
	 * rows of zeros; dvar refuses it (a caller's mistake) and writes nothing. */
	memset(got, 0x5a, sizeof got);
	memcpy(want, got, sizeof got);
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, -1, got, sizeof got),
	                 DVAR_EINVAL);
	tu_assert_error_contains("max_norm -1 is not a norm (use 0 for none)");
	assert_memory_equal(got, want, sizeof got);
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, NAN, got, sizeof got),
	                 DVAR_EINVAL);
	dvar_sharded_variable_free(v);

	/* float64 in its own precision. */
	v = make_sv(s, "clip64", DVAR_FLOAT64, 2, dims, &fixed2, dtable);
	assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, 2.0, dgot, sizeof dgot),
	                 DVAR_OK);
	assert_true(dgot[0] == (3.0 * 2.0) / 5.0 && dgot[1] == (4.0 * 2.0) / 5.0);
	assert_true(dgot[2] == (0.3 * 2.0) / 2.0 && dgot[3] == (0.4 * 2.0) / 2.0);
	dvar_sharded_variable_free(v);

	/* Integers and bool cannot be clipped (one worker asking fails all). */
	{
		int32_t itable[8] = { 3, 4, 1, 1, 0, 0, 6, 8 }, igot[10];
		unsigned char btable[8] = { 1, 0, 1, 1, 0, 0, 1, 0 }, bgot[10];
		int me = dvar_strategy_worker_id(s);

		v = make_sv(s, "ints", DVAR_INT32, 2, dims, &fixed2, itable);
		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5,
		                                       me == W - 1 ? 1.0 : 0.0, igot, sizeof igot),
		                 DVAR_EINVAL);
		tu_assert_error_contains("max_norm needs a floating dtype, and the variable is int32");
		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, 0, igot, sizeof igot),
		                 DVAR_OK);
		assert_int_equal(igot[2], 1);
		assert_int_equal(igot[7], 8);
		dvar_sharded_variable_free(v);
		v = make_sv(s, "bools", DVAR_BOOL, 2, dims, &fixed2, btable);
		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 5, 1.0, bgot,
		                                       sizeof bgot),
		                 DVAR_EINVAL);
		tu_assert_error_contains("the variable is bool");
		dvar_sharded_variable_free(v);
	}
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- creation errors */

static int failing_init(void *arg, int dtype, const dvar_shape *shape, const int64_t *offset,
                        void *dst)
{
	if (offset[0] > 0)
		return dvar_error_set(DVAR_EIO, "cannot read rows from %lld", (long long)offset[0]);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- scatter */

/* The unsharded reference: op applied to full (rows of row elements) in
 * the order of idx, as dvar_variable_scatter applies it. */
static void scatter_ref(dvar_scatter_op op, double *full, size_t row, const int64_t *idx,
                        size_t n, const double *upd)
{
	for (size_t k = 0; k < n; k++) {
		for (size_t e = 0; e < row; e++) {
			double *x = &full[(size_t)idx[k] * row + e], u = upd[k * row + e];

			switch (op) {
			case DVAR_SCATTER_UPDATE: *x = u; break;
			case DVAR_SCATTER_ADD: *x += u; break;
			case DVAR_SCATTER_SUB: *x -= u; break;
			case DVAR_SCATTER_MIN: *x = u < *x ? u : *x; break;
			case DVAR_SCATTER_MAX: *x = u > *x ? u : *x; break;
			}
		}
	}
}

static void scatter_ok(dvar_sharded_variable *v, dvar_scatter_op op, const int64_t *idx, size_t n,
                       const void *rows, uint64_t bytes)
{
	if (dvar_sharded_variable_scatter(v, op, idx, n, n ? rows : NULL, bytes) != DVAR_OK)
		fail_msg("scatter %d into %s: %s", (int)op, dvar_sharded_variable_name(v),
		         dvar_error_last()->message);
}

/* Reference §2.8, test_scatter_add_uneven_partition: 32x1 as 11/11/10. */
static void test_sharding_variable__scatter_add_uneven(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	const int64_t dims[2] = { 32, 1 };
	static const int64_t idx[6] = { 0, 10, 11, 12, 30, 31 };
	static const double vals[6] = { 0, 1, 2, 3, 4, 5 };
	static const float rows[6] = { 0, 1, 2, 3, 4, 5 };
	dvar_sharded_variable *v = make_sv(s, "sv", DVAR_FLOAT32, 2, dims, &fixed3, NULL);
	double want[32] = { 0 }, s0[11] = { 0 }, s1[11] = { 0 }, s2[10] = { 0 };
	size_t n = me == 0 ? 6 : 0;

	(void)state;
	/* Worker 0 brings the six updates, the others none. */
	scatter_ok(v, DVAR_SCATTER_ADD, idx, n, rows, n * sizeof(float));
	/* shard0 gets (0->0, 10->1); shard1 (0->2, 1->3); shard2 (8->4, 9->5). */
	s0[0] = 0, s0[10] = 1, s1[0] = 2, s1[1] = 3, s2[8] = 4, s2[9] = 5;
	expect_shard(v, 0, 0, 11, s0);
	expect_shard(v, 1, 11, 11, s1);
	expect_shard(v, 2, 22, 10, s2);
	scatter_ref(DVAR_SCATTER_ADD, want, 1, idx, 6, vals);
	expect_read(v, "", 2, dims, want);

	/* Every worker brings them: applied once per worker. */
	scatter_ok(v, DVAR_SCATTER_ADD, idx, 6, rows, sizeof rows);
	for (int w = 0; w < W; w++)
		scatter_ref(DVAR_SCATTER_ADD, want, 1, idx, 6, vals);
	expect_read(v, "", 2, dims, want);
	dvar_sharded_variable_free(v);
	dvar_strategy_free(s);
}

/* Reference §2.8, test_scatter_ops_even_partition: 30x1 as 10/10/10, every
 * op, the updates spread over the workers (update k on worker k mod W). */
static void test_sharding_variable__scatter_ops_even(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	const int64_t dims[2] = { 30, 1 };
	static const int64_t idx[5] = { 0, 10, 12, 21, 22 };
	static const double vals[5] = { -4, 50, 3, 21, -100 };
	void *init = iota(DVAR_FLOAT32, 30, 0);
	dvar_sharded_variable *v = make_sv(s, "even", DVAR_FLOAT32, 2, dims, &fixed3, init);

	(void)state;
	assert_int_equal(dvar_sharded_variable_num_shards(v), 3);
	for (int op = DVAR_SCATTER_UPDATE; op <= DVAR_SCATTER_MAX; op++) {
		int64_t mine[5];
		float rows[5];
		double want[30];
		size_t n = 0;

		assert_int_equal(dvar_sharded_variable_assign(v, init), DVAR_OK);
		for (int k = 0; k < 5; k++)
			if (k % W == me) {
				mine[n] = idx[k];
				rows[n++] = (float)vals[k];
			}
		scatter_ok(v, (dvar_scatter_op)op, mine, n, rows, n * sizeof(float));
		/* Unsharded: every worker's updates, in worker order. */
		for (int i = 0; i < 30; i++)
			want[i] = i;
		for (int w = 0; w < W; w++)
			for (int k = 0; k < 5; k++)
				if (k % W == w)
					scatter_ref((dvar_scatter_op)op, want, 1, &idx[k], 1, &vals[k]);
		expect_read(v, "", 2, dims, want);
	}
	dvar_sharded_variable_free(v);
	free(init);
	dvar_strategy_free(s);
}

/* Worker w's random updates (the same on every worker that computes them):
 * a different count on each (none on worker 1), duplicate indices. */
static size_t random_updates(int w, int64_t *idx, double *upd, size_t row)
{
	size_t count = w == 1 ? 0 : 9 + 5 * (size_t)w;
	uint64_t rng = 777 + (uint64_t)w;

	for (size_t k = 0; k < count; k++) {
		idx[k] = (int64_t)(tu_rand(&rng) % 37);
		for (size_t e = 0; e < row; e++)
			upd[k * row + e] = (double)((int)(tu_rand(&rng) % 17) - 8);
	}
	if (count > 3) {
		idx[1] = idx[0]; /* duplicates: applied in order */
		idx[count - 1] = idx[0];
	}
	return count;
}

static void test_sharding_variable__scatter_random(void **state)
{
	static const int dtypes[] = { DVAR_FLOAT32, DVAR_INT64, DVAR_FLOAT64 };
	dvar_strategy *s = tu_strategy(2, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	const int64_t dims[2] = { 37, 3 };
	const size_t row = 3;
	int64_t idx[64];
	double upd[64 * 3], full[37 * 3];

	(void)state;
	for (int i = 0; i < 37 * 3; i++)
		full[i] = (double)((i * 5) % 11);
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		for (int shards = 1; shards <= 7; shards += 3) {
			dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(shards);
			size_t es = dvar_dtype_size(dtypes[t]);
			void *init = elems(dtypes[t], full, 37 * 3);
			dvar_sharded_variable *v = make_sv(s, "table", dtypes[t], 2, dims, &p, init);

			for (int op = DVAR_SCATTER_UPDATE; op <= DVAR_SCATTER_MAX; op++) {
				double want[37 * 3];
				size_t n = random_updates(me, idx, upd, row);
				void *rows = elems(dtypes[t], upd, n * row);

				assert_int_equal(dvar_sharded_variable_assign(v, init), DVAR_OK);
				scatter_ok(v, (dvar_scatter_op)op, idx, n, rows, n * row * es);
				memcpy(want, full, sizeof want);
				for (int w = 0; w < W; w++) {
					size_t m = random_updates(w, idx, upd, row);

					scatter_ref((dvar_scatter_op)op, want, row, idx, m, upd);
				}
				expect_read(v, "", 2, dims, want);
				free(rows);
			}
			free(init);
			dvar_sharded_variable_free(v);
		}
	}
	dvar_strategy_free(s);
}

static void test_sharding_variable__scatter_errors(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	const int64_t dims[2] = { 32, 1 };
	void *init = iota(DVAR_FLOAT32, 32, 0);
	dvar_sharded_variable *v = make_sv(s, "sv", DVAR_FLOAT32, 2, dims, &fixed3, init);
	static const int64_t two[2] = { 1, 2 };
	static const float rows[2] = { 7, 8 };
	double want[32];
	dvar_sharded_variable *b, *sc;
	int rc;

	(void)state;
	for (int i = 0; i < 32; i++)
		want[i] = i;
	assert_int_equal(dvar_sharded_variable_scatter(NULL, DVAR_SCATTER_ADD, two, 2, rows,
	                                               sizeof rows),
	                 DVAR_EINVAL);
	tu_assert_error_contains("variable is NULL");

	/* Shards that do not conform to "div" (12/10/10 for 32 rows): TF's
	 * NotImplementedError. */
	v->offsets[1] = 12;
	assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, two, 2, rows,
	                                               sizeof rows),
	                 DVAR_ENOTSUPP);
	tu_assert_error_contains("scatter_xxx ops are not supported in ShardedVariable that does "
	                         "not conform to \"div\" sharding");
	v->offsets[1] = 11;

	/* An index outside [0, 32) on the last worker fails every worker. */
	{
		const int64_t bad[2] = { 1, me == W - 1 ? 32 : 2 };

		assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, bad, 2, rows,
		                                               sizeof rows),
		                 DVAR_EINVAL);
		tu_assert_error_contains("scatter_add of sharded variable 'sv'");
		tu_assert_error_contains("index 32 at position 1 is outside [0, 32)");
		if (W > 1) {
			char who[32];

			snprintf(who, sizeof who, "worker %d: ", W - 1);
			tu_assert_error_contains(who);
		}
	}
	{
		const int64_t neg[1] = { -1 };

		assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_UPDATE, neg, 1, rows, 4),
		                 DVAR_EINVAL);
		tu_assert_error_contains("index -1 at position 0 is outside [0, 32)");
	}
	/* rows_bytes must be count x 4 (on the last worker, 4 bytes short). */
	rc = dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, two, 2, rows,
	                                   me == W - 1 ? 4 : sizeof rows);
	assert_int_equal(rc, DVAR_ESHAPE);
	tu_assert_error_contains("rows holds 4 bytes, 2 rows of 4 bytes need 8");
	assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, two, 2, rows, 12),
	                 DVAR_ESHAPE);
	tu_assert_error_contains("rows holds 12 bytes, 2 rows of 4 bytes need 8");
	assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, two, 0, NULL, 4),
	                 DVAR_ESHAPE);
	assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, NULL, 2, rows,
	                                               sizeof rows),
	                 DVAR_EINVAL);
	tu_assert_error_contains("indices is NULL");
	assert_int_equal(dvar_sharded_variable_scatter(v, DVAR_SCATTER_ADD, two, 2, NULL,
	                                               sizeof rows),
	                 DVAR_EINVAL);
	tu_assert_error_contains("rows is NULL");
	assert_int_equal(dvar_sharded_variable_scatter(v, (dvar_scatter_op)9, two, 2, rows,
	                                               sizeof rows),
	                 DVAR_EINVAL);
	tu_assert_error_contains("unknown operator 9");
	/* Workers calling different ops fail together (the steps differ). */
	if (W > 1) {
		rc = dvar_sharded_variable_scatter(
		        v, me == W - 1 ? DVAR_SCATTER_SUB : DVAR_SCATTER_ADD, two, 2, rows, sizeof rows);
		assert_int_equal(rc, DVAR_ECOMM);
	}
	/* Nothing changed anywhere; nothing at all is fine. */
	expect_read(v, "", 2, dims, want);
	scatter_ok(v, DVAR_SCATTER_ADD, NULL, 0, NULL, 0);
	expect_read(v, "", 2, dims, want);

	/* bool: scatter_update only, as dvar_variable_scatter. */
	{
		const int64_t bdims[1] = { 4 };
		static const double bwant[4] = { 0, 1, 0, 0 };
		const unsigned char one = 1;
		const int64_t i1[1] = { 1 };

		b = make_sv(s, "flags", DVAR_BOOL, 1, bdims, &fixed3, NULL);
		assert_int_equal(dvar_sharded_variable_scatter(b, DVAR_SCATTER_ADD, i1, 1, &one, 1),
		                 DVAR_EINVAL);
		tu_assert_error_contains("scatter_add of sharded variable 'flags'");
		scatter_ok(b, DVAR_SCATTER_UPDATE, i1, 1, &one, 1);
		expect_read(b, "", 1, bdims, bwant);
		dvar_sharded_variable_free(b);
	}
	/* A scalar has no rows. */
	{
		const float x = 1;
		const int64_t i0[1] = { 0 };

		sc = make_sv(s, "scalar", DVAR_FLOAT32, 0, NULL, &fixed3, &x);
		assert_int_equal(dvar_sharded_variable_scatter(sc, DVAR_SCATTER_UPDATE, i0, 1, &x, 4),
		                 DVAR_EINVAL);
		tu_assert_error_contains("a scalar has no rows to scatter into");
		dvar_sharded_variable_free(sc);
	}
	dvar_sharded_variable_free(v);
	free(init);
	dvar_strategy_free(s);
}

static void test_sharding_variable__create_errors(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_partitioner fixed2 = DVAR_PARTITIONER_FIXED_INIT(2);
	dvar_partitioner fixed3 = DVAR_PARTITIONER_FIXED_INIT(3);
	dvar_partitioner bad = DVAR_PARTITIONER_FIXED_INIT(0);
	dvar_sharded_variable_spec spec = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	dvar_sharded_variable *v = (dvar_sharded_variable *)&spec;
	const int64_t dims[2] = { 4, 2 };
	char long_name[1002];

	(void)state;
	spec.name = "x";
	spec.dtype = DVAR_FLOAT32;
	spec.shape = shape_of(2, dims);
	spec.partitioner = &fixed2;

	assert_int_equal(dvar_sharded_variable_create(&v, NULL, &spec), DVAR_EINVAL);
	assert_null(v);
	assert_int_equal(dvar_sharded_variable_create(NULL, s, &spec), DVAR_EINVAL);
	assert_int_equal(dvar_sharded_variable_create(&v, s, NULL), DVAR_EINVAL);
	spec.version = 99;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	tu_assert_error_contains("version 99");
	spec.version = DVAR_SHARDED_VARIABLE_SPEC_VERSION;
	spec.name = "";
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	tu_assert_error_contains("1 to 1000 bytes");
	memset(long_name, 'a', 1001);
	long_name[1001] = '\0';
	spec.name = long_name;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	long_name[1000] = '\0';
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_OK); /* 1000 is fine */
	dvar_sharded_variable_free(v);
	spec.name = "x";
	spec.partitioner = NULL;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	tu_assert_error_contains("a partitioner is required");
	spec.partitioner = &bad;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	tu_assert_error_contains("sharded variable 'x'");
	spec.partitioner = &fixed2;
	spec.dtype = 77;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype 77");
	spec.dtype = DVAR_FLOAT32;

	/* One worker's bad spec fails creation everywhere. */
	spec.partitioner = me == W - 1 ? NULL : &fixed2;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EINVAL);
	assert_null(v);
	tu_assert_error_contains("a partitioner is required");
	spec.partitioner = &fixed2;

	/* An initializer that fails on the owner of shard 1 fails every worker. */
	spec.init = failing_init;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_EIO);
	tu_assert_error_contains(
	        "the initializer failed for shard 'x/part_1': cannot read rows from 2");
	if (W > 1)
		tu_assert_error_contains("worker 1: ");
	spec.init = NULL;

	/* Workers that disagree on the spec: every worker names the difference. */
	if (W > 1) {
		int odd = me == W - 1;
		char who[64];
		dvar_sharded_variable_spec other = spec;
		const int64_t dims3[2] = { 5, 2 };
		float zeros[8] = { 0 };

		snprintf(who, sizeof who, "worker %d ", W - 1);
		other.name = odd ? "y" : "x";
		assert_int_equal(dvar_sharded_variable_create(&v, s, &other), DVAR_EINVAL);
		tu_assert_error_contains("names it 'y' but worker 0 names it 'x'");
		tu_assert_error_contains(who);
		other = spec;
		other.dtype = odd ? DVAR_INT32 : DVAR_FLOAT32;
		assert_int_equal(dvar_sharded_variable_create(&v, s, &other), DVAR_EINVAL);
		tu_assert_error_contains("passes dtype int32 but worker 0 passes float32");
		other = spec;
		other.shape = odd ? shape_of(2, dims3) : spec.shape;
		assert_int_equal(dvar_sharded_variable_create(&v, s, &other), DVAR_EINVAL);
		tu_assert_error_contains("passes shape [5,2] but worker 0 passes [4,2]");
		other = spec;
		other.partitioner = odd ? &fixed3 : &fixed2;
		assert_int_equal(dvar_sharded_variable_create(&v, s, &other), DVAR_EINVAL);
		tu_assert_error_contains("passes partitioner fixed:3 but worker 0 passes fixed:2");
		other = spec;
		other.initial_value = odd ? zeros : NULL;
		assert_int_equal(dvar_sharded_variable_create(&v, s, &other), DVAR_EINVAL);
		tu_assert_error_contains("passes an initial_value but worker 0 passes neither");
		assert_null(v);
	}

	/* Accessors on bad input. */
	v = make_sv(s, "ok", DVAR_FLOAT32, 2, dims, &fixed2, NULL);
	{
		dvar_shard_info info;
		static const double zeros[4] = { 0 };

		expect_shard(v, 1, 2, 2, zeros); /* no initial value: zeros */
		assert_int_equal(dvar_sharded_variable_shard(v, 2, &info), DVAR_EINVAL);
		tu_assert_error_contains("shard 2 does not exist (it has 2)");
		assert_int_equal(dvar_sharded_variable_shard(v, -1, &info), DVAR_EINVAL);
		assert_int_equal(dvar_sharded_variable_shard(v, 0, NULL), DVAR_EINVAL);
		assert_int_equal(dvar_sharded_variable_shard(NULL, 0, &info), DVAR_EINVAL);
	}
	assert_null(dvar_sharded_variable_name(NULL));
	assert_null(dvar_sharded_variable_offsets(NULL));
	assert_int_equal(dvar_sharded_variable_num_shards(NULL), 0);
	dvar_sharded_variable_free(v);

	/* A variable with no rows: one empty shard. */
	{
		const int64_t empty[2] = { 0, 3 };

		v = make_sv(s, "empty", DVAR_FLOAT32, 2, empty, &fixed2, NULL);
		assert_int_equal(dvar_sharded_variable_num_shards(v), 1);
		expect_read(v, "", 2, empty, NULL);
		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, NULL, 0, 0, NULL, 0),
		                 DVAR_OK);
		dvar_sharded_variable_free(v);
	}
	/* Rows of no elements: shards of no bytes, lookups of nothing. */
	{
		const int64_t flat[2] = { 5, 0 };
		static const int64_t ids[2] = { 1, 4 };

		v = make_sv(s, "flat", DVAR_FLOAT32, 2, flat, &fixed2, NULL);
		assert_int_equal(dvar_sharded_variable_num_shards(v), 2);
		expect_read(v, "", 2, flat, NULL);
		expect_read(v, "1:4", 2, (const int64_t[]){ 3, 0 }, NULL);
		assert_int_equal(dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 2, 1.0, NULL, 0),
		                 DVAR_OK);
		assert_int_equal(dvar_sharded_variable_assign(v, NULL), DVAR_OK);
		dvar_sharded_variable_free(v);
	}
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- calls that do not match */

static int sum_replica(dvar_replica *ctx, void *arg)
{
	float buf[2] = { 1, 2 };

	(void)arg;
	return dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 2);
}

/* Workers making different calls fail, every one of them, and stay in step. */
static void test_sharding_variable__mismatched_calls(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	dvar_sharded_variable *v = slicing_variable(s);
	dvar_partitioner fixed2 = DVAR_PARTITIONER_FIXED_INIT(2);
	const int64_t dims[2] = { 8, 2 };
	void *data = iota(DVAR_INT32, 16, 1);
	dvar_sharded_variable *other = make_sv(s, "other", DVAR_INT32, 2, dims, &fixed2, data);
	static const int64_t ids[1] = { 3 };
	int32_t out[16];
	double all[16];
	int odd = me == W - 1, rc;

	(void)state;
	for (int i = 0; i < 16; i++)
		all[i] = i + 1;
	if (W > 1) {
		/* A read against an assign. */
		if (odd)
			rc = dvar_sharded_variable_assign(v, data);
		else
			rc = dvar_sharded_variable_read(v, NULL, 0, out, sizeof out, NULL);
		assert_int_equal(rc, DVAR_ECOMM);
		tu_assert_error_contains("every worker must make the same cross-worker calls");
		tu_assert_error_contains("assign of sharded variable 'sv'");
		/* Lookups in two different variables. */
		rc = dvar_embedding_lookup(odd ? other : v, DVAR_PARTITION_DIV, ids, 1, 0, out,
		                           sizeof out);
		assert_int_equal(rc, DVAR_ECOMM);
		tu_assert_error_contains("embedding lookup in sharded variable 'other'");
		/* A lookup against a run of the replicas with a collective. */
		if (odd)
			rc = dvar_strategy_run(s, sum_replica, NULL);
		else
			rc = dvar_embedding_lookup(v, DVAR_PARTITION_DIV, ids, 1, 0, out, sizeof out);
		assert_int_equal(rc, DVAR_ECOMM);
	}
	/* Still in step: everything works. */
	expect_read(v, "", 2, dims, all);
	expect_read(other, "", 2, dims, all);
	dvar_sharded_variable_free(other);
	dvar_sharded_variable_free(v);
	free(data);
	dvar_strategy_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sharding_variable__ps_basic),
		cmocka_unit_test(test_sharding_variable__ps_round_robin),
		cmocka_unit_test(test_sharding_variable__ps_partition_to_one),
		cmocka_unit_test(test_sharding_variable__one_shard_reads_as_plain),
		cmocka_unit_test(test_sharding_variable__ps_partition_aware_initializer),
		cmocka_unit_test(test_sharding_variable__assign),
		cmocka_unit_test(test_sharding_variable__assign_errors),
		cmocka_unit_test(test_sharding_variable__slicing),
		cmocka_unit_test(test_sharding_variable__read_errors),
		cmocka_unit_test(test_sharding_variable__read_3d),
		cmocka_unit_test(test_sharding_variable__embedding_lookup),
		cmocka_unit_test(test_sharding_variable__embedding_lookup_random),
		cmocka_unit_test(test_sharding_variable__embedding_lookup_max_norm),
		cmocka_unit_test(test_sharding_variable__scatter_add_uneven),
		cmocka_unit_test(test_sharding_variable__scatter_ops_even),
		cmocka_unit_test(test_sharding_variable__scatter_random),
		cmocka_unit_test(test_sharding_variable__scatter_errors),
		cmocka_unit_test(test_sharding_variable__create_errors),
		cmocka_unit_test(test_sharding_variable__mismatched_calls),
	};

	return cmocka_run_group_tests_name("sharding/variable", tests, NULL, NULL);
}
