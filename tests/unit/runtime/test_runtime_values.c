/*
 * tests/unit/runtime/test_runtime_values.c - distributed values and the
 * cross-replica reduce and gather (TF's strategy.reduce, strategy.gather,
 * experimental_distribute_values_from_function, experimental_local_results).
 *
 * Runs alone (one worker) and under mpirun with several: every expectation
 * is computed from the number of workers and this worker's id, and every
 * rank runs the same tests in the same order (strategies, reduce and gather
 * are collective). Each test goes over R = 1..4 replicas per worker.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "dvar/runtime.h"

#define MAX_R 4

/* dvar_strategy_reduce(s, DVAR_REDUCE_<op>, ...), to keep the lines short. */
#define REDUCE(s, op, ...) dvar_strategy_reduce((s), DVAR_REDUCE_##op, __VA_ARGS__)
#define NONE DVAR_AXIS_NONE

static dvar_strategy *strategy_new(int R)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;

	o.replicas = R;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_int_equal(dvar_strategy_local_replicas(s), R);
	return s;
}

static dvar_shape shape1(int64_t d0)
{
	dvar_shape s = { .rank = 1, .dims = { d0 } };
	return s;
}

static dvar_shape shape2(int64_t d0, int64_t d1)
{
	dvar_shape s = { .rank = 2, .dims = { d0, d1 } };
	return s;
}

/* ---------------------------------------------------------------- from a function */

/*
 * Components given by a rule on the replica id: fills `rows(id)` rows of
 * `cols` columns (rank 2 when cols > 0, else rank 1) of float32, element
 * (r, c) = value(id, r, c).
 */
typedef struct {
	int64_t (*rows)(int id, int N);
	int cols;
	float (*value)(int id, int N, int64_t r, int c);
	int dtype;     /* float32 (default) or int32 */
	int transpose; /* shape [cols, rows] instead of [rows, cols] */
} rule;

static int fill_from_rule(dvar_values *v, int local, int id, int N, void *arg)
{
	const rule *ru = arg;
	int64_t rows = ru->rows(id, N);
	int cols = ru->cols > 0 ? ru->cols : 1;
	int dtype = ru->dtype ? ru->dtype : DVAR_FLOAT32;
	dvar_shape shape = ru->cols > 0 ? (ru->transpose ? shape2(cols, rows) : shape2(rows, cols))
	                                : shape1(rows);
	size_t n = (size_t)rows * cols;
	float *f = malloc(n * 4 + 4);
	int32_t *i32 = (int32_t *)f;
	int rc;

	assert_non_null(f);
	for (int64_t r = 0; r < rows; r++) {
		for (int c = 0; c < cols; c++) {
			size_t at = ru->transpose ? (size_t)c * rows + r : (size_t)r * cols + c;
			float x = ru->value(id, N, r, c);
			if (dtype == DVAR_INT32)
				i32[at] = (int32_t)x;
			else
				f[at] = x;
		}
	}
	rc = dvar_values_set(v, local, &shape, f);
	free(f);
	return rc;
}

static dvar_values *values_from_rule(dvar_strategy *s, const rule *ru)
{
	dvar_values *v = NULL;

	assert_int_equal(dvar_values_from_function(&v, s, ru->dtype ? ru->dtype : DVAR_FLOAT32,
	                                           fill_from_rule, (void *)ru),
	                 DVAR_OK);
	assert_non_null(v);
	return v;
}

/* ---------------------------------------------------------------- the seed's examples */

/* A global batch of 4N elements 0..4N-1; replica i holds [4i, 4i + 4). With
 * N = 2 this is TF's example: axis NONE gives [0+4, 1+5, 2+6, 3+7], axis 0
 * SUM gives 28. */
static int64_t rows_four(int id, int N)
{
	(void)id;
	(void)N;
	return 4;
}

static float batch_value(int id, int N, int64_t r, int c)
{
	(void)N;
	(void)c;
	return (float)(4 * id + r);
}

static void test_runtime_values__global_batch(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		rule ru = { .rows = rows_four, .value = batch_value };
		dvar_values *v = values_from_rule(s, &ru);
		float out[4], sum;
		dvar_shape shape;

		memset(&shape, 0xff, sizeof shape);
		assert_int_equal(REDUCE(s, SUM, v, NONE, out, sizeof out, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 1);
		assert_int_equal(shape.dims[0], 4);
		for (int j = 0; j < 4; j++)
			assert_true(out[j] == (float)(4 * N * (N - 1) / 2 + N * j));
		if (N == 2) {
			const float want[4] = { 4, 6, 8, 10 };
			assert_memory_equal(out, want, sizeof want);
		}

		/* axis 0: the result is a scalar. */
		assert_int_equal(REDUCE(s, SUM, v, 0, &sum, sizeof sum, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 0);
		assert_true(sum == (float)(4 * N * (4 * N - 1) / 2));
		if (N == 2)
			assert_true(sum == 28.0f);

		/* MEAN, axis NONE: the sum over N; axis 0: over all 4N elements. */
		assert_int_equal(REDUCE(s, MEAN, v, NONE, out, sizeof out, NULL), DVAR_OK);
		for (int j = 0; j < 4; j++)
			assert_true(out[j] == (float)(4 * N * (N - 1) / 2 + N * j) / (float)N);
		assert_int_equal(REDUCE(s, MEAN, v, 0, &sum, sizeof sum, NULL), DVAR_OK);
		assert_true(sum == (float)(4 * N - 1) / 2.0f);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

/* TF's partial last batch: 6 elements split [0, 1, 2, 3] and [4, 5] over
 * 2 replicas; MEAN along axis 0 is 15 / 6 = 2.5, not the mean of the two
 * replicas' means. Generally: replica i holds 4 rows, the last one 2. */
static int64_t rows_partial(int id, int N)
{
	return (N > 1 && id == N - 1) ? 2 : 4;
}

static float partial_value(int id, int N, int64_t r, int c)
{
	(void)N;
	(void)c;
	return (float)(4 * id + r);
}

static void test_runtime_values__partial_batch_mean(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		int64_t T = N > 1 ? 4 * (N - 1) + 2 : 4; /* elements 0..T-1 */
		rule ru = { .rows = rows_partial, .value = partial_value };
		rule ri = { .rows = rows_partial, .value = partial_value, .dtype = DVAR_INT32 };
		dvar_values *v = values_from_rule(s, &ru), *vi = values_from_rule(s, &ri);
		float mean;
		int32_t imean, isum;

		assert_int_equal(REDUCE(s, MEAN, v, 0, &mean, sizeof mean, NULL), DVAR_OK);
		assert_true(mean == (float)(T - 1) / 2.0f);
		if (N == 2)
			assert_true(mean == 2.5f);
		/* Integers: the sum divided with truncation (15 / 6 = 2). */
		assert_int_equal(REDUCE(s, SUM, vi, 0, &isum, sizeof isum, NULL), DVAR_OK);
		assert_int_equal(isum, T * (T - 1) / 2);
		assert_int_equal(REDUCE(s, MEAN, vi, 0, &imean, sizeof imean, NULL), DVAR_OK);
		assert_int_equal(imean, (T * (T - 1) / 2) / T);
		if (N == 2)
			assert_int_equal(imean, 2);
		dvar_values_free(v);
		dvar_values_free(vi);
		dvar_strategy_free(s);
	}
}

/* Rows 0, 1, 2, 0, 1, 2, ... per replica (some replicas have none), of two
 * columns: (g, 10 g) with g the global row index. */
static int64_t rows_mod3(int id, int N)
{
	(void)N;
	return id % 3;
}

static int64_t rows_before(int id)
{
	int64_t n = 0;
	for (int i = 0; i < id; i++)
		n += i % 3;
	return n;
}

static float global_row_value(int id, int N, int64_t r, int c)
{
	(void)N;
	return (float)((rows_before(id) + r) * (c ? 10 : 1));
}

static void test_runtime_values__axis_with_empty_replicas(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		int64_t T = rows_before(N);
		rule ru = { .rows = rows_mod3, .cols = 2, .value = global_row_value };
		dvar_values *v = values_from_rule(s, &ru);
		float out[2];
		dvar_shape shape;
		int rc;

		/* SUM: zeros when no replica has rows (N = 1). */
		assert_int_equal(REDUCE(s, SUM, v, 0, out, sizeof out, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 1);
		assert_int_equal(shape.dims[0], 2);
		assert_true(out[0] == (float)(T * (T - 1) / 2));
		assert_true(out[1] == (float)(10 * T * (T - 1) / 2));
		rc = REDUCE(s, MIN, v, 0, out, sizeof out, NULL);
		if (T == 0) {
			/* MIN over no rows at all has no value. */
			assert_int_equal(rc, DVAR_EINVAL);
			tu_assert_error_contains("zero rows");
		} else {
			assert_int_equal(rc, DVAR_OK);
			assert_true(out[0] == 0.0f && out[1] == 0.0f);
			assert_int_equal(REDUCE(s, MAX, v, 0, out, sizeof out, NULL), DVAR_OK);
			assert_true(out[0] == (float)(T - 1) && out[1] == (float)(10 * (T - 1)));
			assert_int_equal(REDUCE(s, MEAN, v, 0, out, sizeof out, NULL), DVAR_OK);
			assert_true(out[0] == (float)(T - 1) / 2.0f);
			assert_true(out[1] == (float)(10 * (T - 1)) / 2.0f);
		}
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- MIN / MAX, dtypes */

static int set_minmax(dvar_values *v, int local, int id, int N, void *arg)
{
	dvar_shape shape = shape1(3);
	int dtype = dvar_values_dtype(v);

	(void)arg;
	(void)N;
	if (dtype == DVAR_INT32) {
		int32_t x[3] = { id, -id, 100 - id };
		return dvar_values_set(v, local, &shape, x);
	}
	if (dtype == DVAR_FLOAT64) {
		double x[3] = { id, -id, 100.5 - id };
		return dvar_values_set(v, local, &shape, x);
	}
	{
		uint16_t x[3] = { (uint16_t)id, (uint16_t)(1000 - id), (uint16_t)(7 * id) };
		return dvar_values_set(v, local, &shape, x);
	}
}

static void test_runtime_values__min_max(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		dvar_values *vi, *vd, *vu;
		int32_t i[3];
		double d[3];
		uint16_t u[3];

		assert_int_equal(dvar_values_from_function(&vi, s, DVAR_INT32, set_minmax, NULL),
		                 DVAR_OK);
		assert_int_equal(dvar_values_from_function(&vd, s, DVAR_FLOAT64, set_minmax, NULL),
		                 DVAR_OK);
		assert_int_equal(dvar_values_from_function(&vu, s, DVAR_UINT16, set_minmax, NULL),
		                 DVAR_OK);

		assert_int_equal(REDUCE(s, MIN, vi, NONE, i, sizeof i, NULL), DVAR_OK);
		assert_int_equal(i[0], 0);
		assert_int_equal(i[1], -(N - 1));
		assert_int_equal(i[2], 100 - (N - 1));
		assert_int_equal(REDUCE(s, MAX, vi, NONE, i, sizeof i, NULL), DVAR_OK);
		assert_int_equal(i[0], N - 1);
		assert_int_equal(i[1], 0);
		assert_int_equal(i[2], 100);
		/* MEAN over integers truncates: sum of -id is -N(N-1)/2. */
		assert_int_equal(REDUCE(s, MEAN, vi, NONE, i, sizeof i, NULL), DVAR_OK);
		assert_int_equal(i[0], (N * (N - 1) / 2) / N);
		assert_int_equal(i[1], -((N * (N - 1) / 2) / N));

		assert_int_equal(REDUCE(s, MIN, vd, NONE, d, sizeof d, NULL), DVAR_OK);
		assert_true(d[0] == 0 && d[1] == -(N - 1) && d[2] == 100.5 - (N - 1));
		assert_int_equal(REDUCE(s, MAX, vd, NONE, d, sizeof d, NULL), DVAR_OK);
		assert_true(d[0] == N - 1 && d[1] == 0 && d[2] == 100.5);
		/* Along axis 0 too: each replica reduces its own 3 elements first. */
		assert_int_equal(REDUCE(s, MIN, vd, 0, d, sizeof d[0], NULL), DVAR_OK);
		assert_true(d[0] == -(N - 1));
		assert_int_equal(REDUCE(s, MAX, vd, 0, d, sizeof d[0], NULL), DVAR_OK);
		assert_true(d[0] == 100.5);

		assert_int_equal(REDUCE(s, MIN, vu, NONE, u, sizeof u, NULL), DVAR_OK);
		assert_int_equal(u[0], 0);
		assert_int_equal(u[1], 1000 - (N - 1));
		assert_int_equal(u[2], 0);
		assert_int_equal(REDUCE(s, MAX, vu, NONE, u, sizeof u, NULL), DVAR_OK);
		assert_int_equal(u[0], N - 1);
		assert_int_equal(u[1], 1000);
		assert_int_equal(u[2], 7 * (N - 1));
		dvar_values_free(vi);
		dvar_values_free(vd);
		dvar_values_free(vu);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- mirrored */

static void test_runtime_values__mirrored(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		const float x[3] = { 1.5f, -2.0f, 3.0f };
		const int32_t k[2] = { 7, -7 };
		const uint16_t one_h = 0x3c00; /* float16 1.0 */
		dvar_shape shape = shape1(3), sk = shape1(2), scalar = { .rank = 0 };
		dvar_values *v, *vk, *vh;
		float out[3], total;
		int32_t ko[2];
		uint16_t h;

		assert_int_equal(dvar_values_new_mirrored(&v, s, DVAR_FLOAT32, &shape, x), DVAR_OK);
		assert_int_equal(dvar_values_new_mirrored(&vk, s, DVAR_INT32, &sk, k), DVAR_OK);
		assert_int_equal(dvar_values_new_mirrored(&vh, s, DVAR_FLOAT16, &scalar, &one_h),
		                 DVAR_OK);
		assert_true(dvar_values_is_mirrored(v));
		assert_int_equal(dvar_values_dtype(v), DVAR_FLOAT32);
		for (int l = 0; l < R; l++) {
			const void *data;
			dvar_shape got;
			assert_int_equal(dvar_values_get(v, l, &got, &data), DVAR_OK);
			assert_true(dvar_shape_equal(&got, &shape));
			assert_memory_equal(data, x, sizeof x);
		}

		/* SUM of a mirrored x over N replicas is N * x (TF's MirroredStrategy
		 * refuses with an assertion); MEAN is x, exactly, as in TF. */
		assert_int_equal(REDUCE(s, SUM, v, NONE, out, sizeof out, NULL), DVAR_OK);
		for (int j = 0; j < 3; j++)
			assert_true(out[j] == (float)N * x[j]);
		assert_int_equal(REDUCE(s, MEAN, v, NONE, out, sizeof out, NULL), DVAR_OK);
		assert_memory_equal(out, x, sizeof x);
		assert_int_equal(REDUCE(s, MIN, v, NONE, out, sizeof out, NULL), DVAR_OK);
		assert_memory_equal(out, x, sizeof x);
		assert_int_equal(REDUCE(s, SUM, v, 0, &total, sizeof total, NULL), DVAR_OK);
		assert_true(total == 2.5f * (float)N);
		assert_int_equal(REDUCE(s, MEAN, v, 0, &total, sizeof total, NULL), DVAR_OK);
		assert_true(total == 2.5f / 3.0f);

		assert_int_equal(REDUCE(s, SUM, vk, NONE, ko, sizeof ko, NULL), DVAR_OK);
		assert_int_equal(ko[0], 7 * N);
		assert_int_equal(ko[1], -7 * N);
		assert_int_equal(REDUCE(s, MEAN, vk, NONE, ko, sizeof ko, NULL), DVAR_OK);
		assert_int_equal(ko[0], 7);
		assert_int_equal(ko[1], -7);

		/* A float16 scalar: N * 1.0 is exact up to 2048. */
		assert_int_equal(REDUCE(s, SUM, vh, NONE, &h, sizeof h, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 0);
		{
			double d;
			assert_int_equal(dvar_dtype_to_f64(&d, DVAR_FLOAT16, &h, 1), DVAR_OK);
			assert_true(d == N);
		}

		/* Its components are set together. */
		assert_int_equal(dvar_values_set(v, 0, &shape, x), DVAR_EINVAL);
		tu_assert_error_contains("mirrored");
		dvar_values_free(v);
		dvar_values_free(vk);
		dvar_values_free(vh);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- TensorFlow's choices */

static int64_t rows_one(int id, int N)
{
	(void)id;
	(void)N;
	return 1;
}

/* TF's example of an integer MEAN: replica 0 holds 3, the others 4. */
static float three_then_fours(int id, int N, int64_t r, int c)
{
	(void)N;
	(void)r;
	(void)c;
	return id == 0 ? 3.0f : 4.0f;
}

/*
 * Where TensorFlow's reduce and dvar's differ or agree, one case each
 * (docs/RUNTIME.md, "Where dvar differs from TensorFlow on purpose"):
 * - integer MEAN: TF divides with true division and returns float64
 *   ([3], [4], [4] gives 3.667); dvar keeps the dtype and truncates (3), and
 *   the documented recipe, SUM then a division in double, gives TF's value;
 * - MEAN of a mirrored value: TF returns the value itself
 *   (MirroredExtended._reduce_to); so does dvar, exactly, where summing
 *   three float32 copies and dividing gives 1.3436425924301147;
 * - SUM of a mirrored value: TF's MirroredStrategy stops at an assertion;
 *   dvar returns N * x (test_runtime_values__mirrored);
 * - a negative axis counts from the end, as in TF, and DVAR_AXIS_NONE is
 *   none of them.
 */
static void test_runtime_values__tensorflow_choices(void **state)
{
	(void)state;
	assert_true(DVAR_AXIS_NONE < -DVAR_MAX_RANK);
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		rule ints = { .rows = rows_one, .value = three_then_fours, .dtype = DVAR_INT32 };
		rule ru = { .rows = rows_four, .cols = 2, .value = batch_value };
		dvar_values *vi = values_from_rule(s, &ints), *v = values_from_rule(s, &ru), *vm;
		const float x = 1.3436424732208252f;
		dvar_shape scalar = { .rank = 0 }, shape;
		float out[8], want[8], mean;
		int32_t k;

		/* Integer MEAN truncates in the dtype; SUM / N is TF's float64. */
		assert_int_equal(REDUCE(s, MEAN, vi, NONE, &k, sizeof k, NULL), DVAR_OK);
		assert_int_equal(k, (3 + 4 * (N - 1)) / N);
		assert_int_equal(REDUCE(s, SUM, vi, NONE, &k, sizeof k, NULL), DVAR_OK);
		assert_int_equal(k, 3 + 4 * (N - 1));
		if (N == 3) {
			assert_int_equal(REDUCE(s, MEAN, vi, NONE, &k, sizeof k, NULL), DVAR_OK);
			assert_int_equal(k, 3);
			assert_true(fabs((double)(3 + 4 + 4) / N - 3.6666666666666665) < 1e-15);
		}

		/* A mirrored MEAN is the value, bit for bit. */
		assert_int_equal(dvar_values_new_mirrored(&vm, s, DVAR_FLOAT32, &scalar, &x), DVAR_OK);
		assert_int_equal(REDUCE(s, MEAN, vm, NONE, &mean, sizeof mean, NULL), DVAR_OK);
		assert_memory_equal(&mean, &x, sizeof x);
		if (N == 3) {
			volatile float sum = x;

			sum += x;
			sum += x;
			assert_true(sum / 3.0f == 1.3436425924301147f); /* what summing gives */
			assert_true(sum / 3.0f != x);
		}
		assert_int_equal(REDUCE(s, SUM, vm, NONE, &mean, sizeof mean, NULL), DVAR_OK);
		if (N == 1)
			assert_memory_equal(&mean, &x, sizeof x);

		/* Axis -2 of a rank-2 value is axis 0, -1 is axis 1; -3 is refused. */
		for (int a = 0; a < 2; a++) {
			assert_int_equal(REDUCE(s, SUM, v, a, want, sizeof want, NULL), DVAR_OK);
			memset(&shape, 0, sizeof shape);
			assert_int_equal(REDUCE(s, SUM, v, a - 2, out, sizeof out, &shape), DVAR_OK);
			assert_int_equal(shape.rank, 1);
			assert_int_equal(shape.dims[0], a == 0 ? 2 : 4);
			assert_memory_equal(out, want, (size_t)shape.dims[0] * sizeof *out);
		}
		assert_int_equal(REDUCE(s, MEAN, v, -2, out, sizeof out, NULL), DVAR_OK);
		assert_true(out[0] == (float)(4 * N - 1) / 2.0f); /* the mean of 0 .. 4N - 1 */
		/* gather's axis counts from the end too. */
		{
			float *g = malloc((size_t)N * 8 * sizeof *g), *h = malloc((size_t)N * 8 * sizeof *h);

			assert_non_null(g);
			assert_non_null(h);
			assert_int_equal(dvar_strategy_gather(s, v, 1, g, (size_t)N * 8 * 4, NULL), DVAR_OK);
			assert_int_equal(dvar_strategy_gather(s, v, -1, h, (size_t)N * 8 * 4, &shape),
			                 DVAR_OK);
			assert_int_equal(shape.dims[1], 2 * N);
			assert_memory_equal(g, h, (size_t)N * 8 * sizeof *g);
			assert_int_equal(dvar_strategy_gather(s, v, -3, h, (size_t)N * 8 * 4, NULL),
			                 DVAR_EINVAL);
			tu_assert_error_contains("axis -3 is out of range");
			free(g);
			free(h);
		}
		dvar_values_free(vm);
		dvar_values_free(vi);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- gather */

/* Replica i: 1, 2, 3, 1, ... rows; element (r, c) = 100 id + 10 r + c. */
static int64_t rows_uneven(int id, int N)
{
	(void)N;
	return id % 3 + 1;
}

static float tagged_value(int id, int N, int64_t r, int c)
{
	(void)N;
	return (float)(100 * id + 10 * r + c);
}

static void test_runtime_values__gather(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		int64_t T = 0;
		rule r0 = { .rows = rows_uneven, .cols = 2, .value = tagged_value };
		rule r1 = { .rows = rows_uneven, .cols = 2, .value = tagged_value, .transpose = 1 };
		dvar_values *v0, *v1;
		float *out;
		size_t bytes;
		dvar_shape shape;

		for (int i = 0; i < N; i++)
			T += rows_uneven(i, N);
		bytes = (size_t)T * 2 * sizeof(float);
		out = malloc(bytes);
		assert_non_null(out);
		v0 = values_from_rule(s, &r0);
		v1 = values_from_rule(s, &r1);

		/* Along 0: [T, 2], the replicas' rows in replica-id order. */
		assert_int_equal(dvar_strategy_gather(s, v0, 0, out, bytes, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 2);
		assert_int_equal(shape.dims[0], T);
		assert_int_equal(shape.dims[1], 2);
		{
			size_t at = 0;
			for (int i = 0; i < N; i++)
				for (int64_t r = 0; r < rows_uneven(i, N); r++, at++)
					for (int c = 0; c < 2; c++)
						assert_true(out[at * 2 + c] ==
						            tagged_value(i, N, r, c));
		}

		/* Along 1: components [2, rows]; the result [2, T]. */
		assert_int_equal(dvar_strategy_gather(s, v1, 1, out, bytes, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 2);
		assert_int_equal(shape.dims[0], 2);
		assert_int_equal(shape.dims[1], T);
		for (int c = 0; c < 2; c++) {
			size_t at = 0;
			for (int i = 0; i < N; i++)
				for (int64_t r = 0; r < rows_uneven(i, N); r++, at++)
					assert_true(out[(size_t)c * T + at] ==
					            tagged_value(i, N, r, c));
		}

		/* Shapes that differ in a dimension but the axis. */
		assert_int_equal(dvar_strategy_gather(s, v1, 0, out, bytes, &shape),
		                 N > 1 ? DVAR_ESHAPE : DVAR_OK);
		if (N > 1)
			tu_assert_error_contains("every dimension but axis 0");

		/* A dst too small fails on every worker; out_shape is still set. */
		memset(&shape, 0, sizeof shape);
		assert_int_equal(dvar_strategy_gather(s, v0, 0, out, bytes - 1, &shape),
		                 DVAR_ESHAPE);
		tu_assert_error_contains("too small");
		assert_int_equal(shape.rank, 2);
		assert_int_equal(shape.dims[0], T);

		/* Gather needs an axis in range. */
		assert_int_equal(dvar_strategy_gather(s, v0, NONE, out, (size_t)T * 8, NULL),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_strategy_gather(s, v0, 2, out, (size_t)T * 8, NULL),
		                 DVAR_EINVAL);
		tu_assert_error_contains("axis 2");
		free(out);
		dvar_values_free(v0);
		dvar_values_free(v1);
		dvar_strategy_free(s);
	}
}

/* TF's gather example: every replica holds [[1], [2]]; along 0 the result
 * is [[1], [2], [1], [2], ...] of shape [2N, 1]. */
static void test_runtime_values__gather_mirrored(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		const int32_t x[2] = { 1, 2 };
		dvar_shape shape = shape2(2, 1);
		dvar_values *v;
		int32_t *out = malloc((size_t)N * 2 * sizeof(int32_t));

		assert_non_null(out);
		assert_int_equal(dvar_values_new_mirrored(&v, s, DVAR_INT32, &shape, x), DVAR_OK);
		assert_int_equal(dvar_strategy_gather(s, v, 0, out, (size_t)N * 8, &shape),
		                 DVAR_OK);
		assert_int_equal(shape.dims[0], 2 * N);
		assert_int_equal(shape.dims[1], 1);
		for (int i = 0; i < 2 * N; i++)
			assert_int_equal(out[i], 1 + i % 2);
		assert_int_equal(dvar_strategy_gather(s, v, 1, out, (size_t)N * 8, &shape),
		                 DVAR_OK);
		assert_int_equal(shape.dims[0], 2);
		assert_int_equal(shape.dims[1], N);
		for (int i = 0; i < 2 * N; i++)
			assert_int_equal(out[i], 1 + i / N);
		dvar_values_free(v);
		free(out);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- local results */

typedef struct {
	int calls;
	int last_local;
	int order_ok;
} fn_log;

static int set_ids(dvar_values *v, int local, int id, int N, void *arg)
{
	fn_log *log = arg;
	int32_t x[2] = { id, N };
	dvar_shape shape = shape1(2);

	/* Called in local order, on this thread. */
	if (local != log->last_local + 1)
		log->order_ok = 0;
	log->last_local = local;
	log->calls++;
	return dvar_values_set(v, local, &shape, x);
}

static void test_runtime_values__from_function_and_local_results(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s), W = dvar_strategy_num_workers(s);
		int worker = dvar_strategy_worker_id(s);
		fn_log log = { 0, -1, 1 };
		dvar_values *v = NULL;
		int32_t sum[2];

		assert_int_equal(N, R * W);
		if (R == 1 && worker == 0)
			print_message("%d worker%s\n", W, W == 1 ? "" : "s");
		assert_int_equal(dvar_values_from_function(&v, s, DVAR_INT32, set_ids, &log),
		                 DVAR_OK);
		assert_int_equal(log.calls, R);
		assert_true(log.order_ok);
		assert_false(dvar_values_is_mirrored(v));
		for (int l = 0; l < R; l++) {
			const int32_t *data;
			dvar_shape shape;
			assert_int_equal(dvar_values_get(v, l, &shape, (const void **)&data),
			                 DVAR_OK);
			assert_int_equal(shape.rank, 1);
			assert_int_equal(shape.dims[0], 2);
			assert_int_equal(data[0], worker * R + l);
			assert_int_equal(data[1], N);
		}
		assert_int_equal(dvar_values_get(v, R, NULL, NULL), DVAR_EINVAL);
		assert_int_equal(dvar_values_get(v, -1, NULL, NULL), DVAR_EINVAL);
		assert_int_equal(REDUCE(s, SUM, v, NONE, sum, sizeof sum, NULL), DVAR_OK);
		assert_int_equal(sum[0], N * (N - 1) / 2);
		assert_int_equal(sum[1], N * N);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

/* Components set one by one (from replica threads, in a run) and reset. */
static int set_in_replica(dvar_replica *ctx, void *arg)
{
	dvar_values *v = arg;
	int id = dvar_replica_id(ctx);
	float x[3] = { (float)id, 1.0f, -(float)id };
	dvar_shape shape = shape1(3);

	return dvar_values_set(v, dvar_replica_local_id(ctx), &shape, x);
}

static void test_runtime_values__set_from_replicas(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		dvar_values *v;
		float out[3];
		const void *data;
		dvar_shape shape = shape1(1), got;
		float one = 42.0f;

		assert_int_equal(dvar_values_new(&v, s, DVAR_FLOAT32), DVAR_OK);
		assert_int_equal(dvar_strategy_run(s, set_in_replica, v), DVAR_OK);
		assert_int_equal(REDUCE(s, SUM, v, NONE, out, sizeof out, NULL), DVAR_OK);
		assert_true(out[0] == (float)(N * (N - 1) / 2));
		assert_true(out[1] == (float)N);
		assert_true(out[2] == -(float)(N * (N - 1) / 2));
		/* Setting again replaces the copy (a new shape of the same rank). */
		assert_int_equal(dvar_values_set(v, 0, &shape, &one), DVAR_OK);
		assert_int_equal(dvar_values_get(v, 0, &got, &data), DVAR_OK);
		assert_int_equal(got.dims[0], 1);
		assert_true(*(const float *)data == 42.0f);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- errors */

static int64_t rows_by_local(int id, int N)
{
	(void)N;
	return 1 + id % 2;
}

static float zero_value(int id, int N, int64_t r, int c)
{
	(void)id;
	(void)N;
	(void)r;
	(void)c;
	return 0;
}

static int64_t rows_by_worker(int id, int N)
{
	(void)N;
	return 1 + id; /* R = 1 below: id is the worker */
}

static void test_runtime_values__shape_mismatch(void **state)
{
	(void)state;
	/* Within a worker (R = 2): replicas of 1 and 2 elements. */
	{
		dvar_strategy *s = strategy_new(2);
		rule ru = { .rows = rows_by_local, .value = zero_value };
		dvar_values *v = values_from_rule(s, &ru);
		float out[64];
		dvar_shape shape;

		assert_int_equal(REDUCE(s, SUM, v, NONE, out, sizeof out, NULL), DVAR_ESHAPE);
		tu_assert_error_contains("one shape");
		/* Along axis 0 the lengths may differ. */
		assert_int_equal(REDUCE(s, SUM, v, 0, out, sizeof out, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 0);
		assert_true(out[0] == 0.0f);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
	/* Across workers only (R = 1): an error on every worker when W > 1. */
	{
		dvar_strategy *s = strategy_new(1);
		int W = dvar_strategy_num_workers(s);
		rule ru = { .rows = rows_by_worker, .value = zero_value };
		dvar_values *v = values_from_rule(s, &ru);
		float out[64];

		assert_int_equal(REDUCE(s, MAX, v, NONE, out, sizeof out, NULL),
		                 W > 1 ? DVAR_ESHAPE : DVAR_OK);
		if (W > 1)
			tu_assert_error_contains("one shape");
		/* The run after a failed one works. */
		assert_int_equal(REDUCE(s, MAX, v, 0, out, sizeof out, NULL), DVAR_OK);
		assert_true(out[0] == 0.0f);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
	/* Workers that disagree on the dtype (R = 1): an error on every worker. */
	{
		dvar_strategy *s = strategy_new(1);
		int W = dvar_strategy_num_workers(s), worker = dvar_strategy_worker_id(s);
		const int32_t one = 1; /* float32 1.4e-45 or int32 1: either way 4 bytes */
		dvar_shape scalar = { .rank = 0 };
		dvar_values *v;
		int32_t out;

		assert_int_equal(dvar_values_new_mirrored(&v, s,
		                                          worker == 0 ? DVAR_FLOAT32 : DVAR_INT32,
		                                          &scalar, &one),
		                 DVAR_OK);
		assert_int_equal(REDUCE(s, SUM, v, NONE, &out, sizeof out, NULL),
		                 W > 1 ? DVAR_EINVAL : DVAR_OK);
		if (W > 1)
			tu_assert_error_contains("called with dtype");
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
	/* Rank differs (R = 2, rank 1 vs rank 2) is refused at set time. */
	{
		dvar_strategy *s = strategy_new(2);
		dvar_values *v;
		float x[4] = { 0 };
		dvar_shape a = shape1(4), b = shape2(2, 2);

		assert_int_equal(dvar_values_new(&v, s, DVAR_FLOAT32), DVAR_OK);
		assert_int_equal(dvar_values_set(v, 0, &a, x), DVAR_OK);
		assert_int_equal(dvar_values_set(v, 1, &b, x), DVAR_ESHAPE);
		tu_assert_error_contains("rank");
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

static void test_runtime_values__bad_arguments(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		int N = dvar_strategy_num_replicas_in_sync(s);
		rule ru = { .rows = rows_four, .cols = 2, .value = batch_value };
		dvar_values *v = values_from_rule(s, &ru), *vb;
		float out[8];
		dvar_shape shape, bshape = shape1(2);
		const uint8_t flags[2] = { 1, 0 };

		/* Axis out of range for rank 2. */
		assert_int_equal(REDUCE(s, SUM, v, 2, out, sizeof out, NULL), DVAR_EINVAL);
		tu_assert_error_contains("axis 2");
		assert_int_equal(REDUCE(s, SUM, v, -3, out, sizeof out, NULL), DVAR_EINVAL);
		tu_assert_error_contains("axis -3 is out of range");
		/* Axis 1: [4, 2] -> [4]. */
		assert_int_equal(REDUCE(s, SUM, v, 1, out, sizeof out, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 1);
		assert_int_equal(shape.dims[0], 4);
		for (int r = 0; r < 4; r++)
			assert_true(out[r] == (float)(2 * (4 * N * (N - 1) / 2 + N * r)));
		/* dst too small: ESHAPE, out_shape set anyway. */
		memset(&shape, 0, sizeof shape);
		assert_int_equal(REDUCE(s, SUM, v, NONE, out, 8 * 4 - 1, &shape), DVAR_ESHAPE);
		tu_assert_error_contains("too small");
		assert_int_equal(shape.rank, 2);
		assert_int_equal(shape.dims[0], 4);
		assert_int_equal(shape.dims[1], 2);
		/* An unknown op. */
		assert_int_equal(
		        dvar_strategy_reduce(s, (dvar_reduce_op)9, v, NONE, out, sizeof out, NULL),
		        DVAR_EINVAL);
		/* bool does not reduce. */
		assert_int_equal(dvar_values_new_mirrored(&vb, s, DVAR_BOOL, &bshape, flags),
		                 DVAR_OK);
		assert_int_equal(REDUCE(s, SUM, vb, NONE, out, sizeof out, NULL), DVAR_EINVAL);
		tu_assert_error_contains("bool");
		/* NULL values. */
		assert_int_equal(REDUCE(s, SUM, NULL, NONE, out, sizeof out, NULL), DVAR_EINVAL);
		assert_int_equal(REDUCE(NULL, SUM, v, NONE, out, sizeof out, NULL), DVAR_EINVAL);
		/* Still usable afterwards. */
		assert_int_equal(REDUCE(s, SUM, v, 0, out, sizeof out, &shape), DVAR_OK);
		assert_int_equal(shape.rank, 1);
		assert_int_equal(shape.dims[0], 2);
		dvar_values_free(vb);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

/* dst too small on one worker only: every worker fails. */
static void test_runtime_values__dst_small_on_one_worker(void **state)
{
	dvar_strategy *s;
	int W, worker;
	dvar_values *v;
	const float x[4] = { 1, 2, 3, 4 };
	dvar_shape shape = shape1(4);
	float out[4];

	(void)state;
	s = strategy_new(2);
	W = dvar_strategy_num_workers(s);
	worker = dvar_strategy_worker_id(s);
	assert_int_equal(dvar_values_new_mirrored(&v, s, DVAR_FLOAT32, &shape, x), DVAR_OK);
	assert_int_equal(
	        REDUCE(s, SUM, v, NONE, out, worker == W - 1 ? sizeof out - 4 : sizeof out, NULL),
	        DVAR_ESHAPE);
	tu_assert_error_contains("too small");
	dvar_values_free(v);
	dvar_strategy_free(s);
}

static int set_local0_only(dvar_values *v, int local, int id, int N, void *arg)
{
	float x = 1.0f;
	dvar_shape shape = { .rank = 0 };

	(void)id;
	(void)N;
	(void)arg;
	return dvar_values_set(v, local, &shape, &x);
}

static int leave_unset(dvar_values *v, int local, int id, int N, void *arg)
{
	(void)v;
	(void)local;
	(void)id;
	(void)N;
	(void)arg;
	return DVAR_OK;
}

static int fail_on_last(dvar_values *v, int local, int id, int N, void *arg)
{
	int R = *(const int *)arg;

	if (local == R - 1)
		return dvar_error_set(DVAR_EIO, "reading the input failed");
	return set_local0_only(v, local, id, N, arg);
}

static void test_runtime_values__unset_and_function_errors(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		dvar_values *v = NULL;
		float x = 1.0f, out = 0;
		dvar_shape scalar = { .rank = 0 };
		const void *data;

		/* Only local 0 set. */
		assert_int_equal(dvar_values_new(&v, s, DVAR_FLOAT32), DVAR_OK);
		assert_int_equal(dvar_values_set(v, 0, &scalar, &x), DVAR_OK);
		assert_int_equal(dvar_values_get(v, 0, NULL, &data), DVAR_OK);
		if (R > 1) {
			assert_int_equal(dvar_values_get(v, R - 1, NULL, &data), DVAR_EINVAL);
			tu_assert_error_contains("never set");
			assert_int_equal(REDUCE(s, SUM, v, NONE, &out, sizeof out, NULL),
			                 DVAR_EINVAL);
			tu_assert_error_contains("never set");
			assert_int_equal(dvar_strategy_gather(s, v, 0, &out, sizeof out, NULL),
			                 DVAR_EINVAL);
		} else {
			assert_int_equal(REDUCE(s, SUM, v, NONE, &out, sizeof out, NULL), DVAR_OK);
			assert_true(out == (float)dvar_strategy_num_workers(s));
		}
		assert_int_equal(dvar_values_set(v, R, &scalar, &x), DVAR_EINVAL);
		assert_int_equal(dvar_values_set(v, -1, &scalar, &x), DVAR_EINVAL);
		assert_int_equal(dvar_values_set(v, 0, &scalar, NULL), DVAR_EINVAL);
		dvar_values_free(v);

		/* A function that leaves its component unset. */
		v = (dvar_values *)&x;
		assert_int_equal(dvar_values_from_function(&v, s, DVAR_FLOAT32, leave_unset, NULL),
		                 DVAR_EINVAL);
		tu_assert_error_contains("unset");
		assert_null(v);
		/* A function that fails: its code and message come back. */
		assert_int_equal(dvar_values_from_function(&v, s, DVAR_FLOAT32, fail_on_last, &R),
		                 DVAR_EIO);
		tu_assert_error_contains("reading the input failed");
		assert_null(v);
		assert_int_equal(dvar_values_from_function(&v, s, DVAR_FLOAT32, NULL, NULL),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_values_from_function(&v, s, 12345, set_local0_only, NULL),
		                 DVAR_EINVAL);
		dvar_strategy_free(s);
	}
}

/* Setting a component again: the new bytes, in place when the size is the
 * same (gpu/cuda checks the same on a GPU), from the component's own
 * pointer too; a new size gets a new buffer. */
static void test_runtime_values__set_again(void **state)
{
	(void)state;
	for (int R = 1; R <= MAX_R; R++) {
		dvar_strategy *s = strategy_new(R);
		dvar_values *v = NULL;
		float a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[4] = { -1, -2, -3, -4 };
		dvar_shape four = { .rank = 1, .dims = { 4 } }, eight = { .rank = 1, .dims = { 8 } };
		dvar_shape got;
		const void *p1, *p2;

		assert_int_equal(dvar_values_new(&v, s, DVAR_FLOAT32), DVAR_OK);
		for (int l = 0; l < R; l++)
			assert_int_equal(dvar_values_set(v, l, &four, a), DVAR_OK);
		assert_int_equal(dvar_values_get(v, R - 1, NULL, &p1), DVAR_OK);
		assert_int_equal(dvar_values_set(v, R - 1, &four, b), DVAR_OK);
		assert_int_equal(dvar_values_get(v, R - 1, &got, &p2), DVAR_OK);
		assert_ptr_equal(p1, p2);
		assert_memory_equal(p2, b, sizeof b);
		/* The others keep theirs. */
		assert_int_equal(dvar_values_get(v, 0, NULL, &p1), DVAR_OK);
		assert_memory_equal(p1, R > 1 ? a : b, sizeof b);
		/* Its own bytes back in. */
		assert_int_equal(dvar_values_set(v, R - 1, &four, p2), DVAR_OK);
		assert_int_equal(dvar_values_get(v, R - 1, NULL, &p2), DVAR_OK);
		assert_memory_equal(p2, b, sizeof b);
		/* Another size: a new buffer. */
		assert_int_equal(dvar_values_set(v, R - 1, &eight, a), DVAR_OK);
		assert_int_equal(dvar_values_get(v, R - 1, &got, &p2), DVAR_OK);
		assert_int_equal(got.dims[0], 8);
		assert_memory_equal(p2, a, sizeof a);
		/* A failed set changes nothing. */
		assert_int_equal(dvar_values_set(v, R - 1, &eight, NULL), DVAR_EINVAL);
		assert_int_equal(dvar_values_get(v, R - 1, &got, &p2), DVAR_OK);
		assert_int_equal(got.dims[0], 8);
		assert_memory_equal(p2, a, sizeof a);
		dvar_values_free(v);
		dvar_strategy_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_values__global_batch),
		cmocka_unit_test(test_runtime_values__partial_batch_mean),
		cmocka_unit_test(test_runtime_values__axis_with_empty_replicas),
		cmocka_unit_test(test_runtime_values__min_max),
		cmocka_unit_test(test_runtime_values__mirrored),
		cmocka_unit_test(test_runtime_values__tensorflow_choices),
		cmocka_unit_test(test_runtime_values__gather),
		cmocka_unit_test(test_runtime_values__gather_mirrored),
		cmocka_unit_test(test_runtime_values__from_function_and_local_results),
		cmocka_unit_test(test_runtime_values__set_from_replicas),
		cmocka_unit_test(test_runtime_values__shape_mismatch),
		cmocka_unit_test(test_runtime_values__bad_arguments),
		cmocka_unit_test(test_runtime_values__dst_small_on_one_worker),
		cmocka_unit_test(test_runtime_values__unset_and_function_errors),
		cmocka_unit_test(test_runtime_values__set_again),
	};
	return cmocka_run_group_tests_name("runtime/values", tests, NULL, NULL);
}
