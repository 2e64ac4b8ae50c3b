/*
 * tests/unit/runtime/test_runtime_variables.c - distributed variables: creation
 * and naming, every synchronization x aggregation x context x update with its
 * exact result, cross-replica reads, the exact SUM split, scatters, every
 * numeric dtype, TF's error texts, and the unsaveable marks.
 *
 * The same program runs alone and under `mpirun -np 2` and `-np 3`: every
 * expectation is computed from R, W, the worker id and N, and every rank runs
 * the same tests in the same order. Each topology helper creates fresh
 * strategies with R = 1..4 replicas per worker.
 *
 * Replica functions never assert (cmocka cannot fail from another thread):
 * they record each replica's return code and message, and the main thread
 * checks them after the run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "runtime/runtime.h"

#define MAX_R 4

static const int numeric_dtypes[] = { DVAR_INT8,   DVAR_INT16,   DVAR_INT32,   DVAR_INT64,
	                              DVAR_UINT8,  DVAR_UINT16,  DVAR_UINT32,  DVAR_UINT64,
	                              DVAR_FLOAT16, DVAR_BFLOAT16, DVAR_FLOAT32, DVAR_FLOAT64 };
#define NUM_NUMERIC (sizeof numeric_dtypes / sizeof numeric_dtypes[0])

static const int all_aggs[] = { DVAR_AGG_NONE, DVAR_AGG_SUM, DVAR_AGG_MEAN,
	                        DVAR_AGG_ONLY_FIRST_REPLICA };

enum { K_ASSIGN, K_ADD, K_SUB };
static const char *const kind_names[] = { "assign", "assign_add", "assign_sub" };
static const char *const scatter_names[] = { "scatter_update", "scatter_add", "scatter_sub",
	                                     "scatter_min", "scatter_max" };

/* ---------------------------------------------------------------- topologies */

typedef struct {
	dvar_strategy *s;
	int R, W, worker, N;
} topo;

static void for_each_topology(void (*fn)(const topo *t))
{
	for (int r = 1; r <= MAX_R; r++) {
		dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
		topo t;

		o.replicas = r;
		assert_int_equal(dvar_strategy_create(&t.s, &o), DVAR_OK);
		t.R = dvar_strategy_local_replicas(t.s);
		t.W = dvar_strategy_num_workers(t.s);
		t.worker = dvar_strategy_worker_id(t.s);
		t.N = dvar_strategy_num_replicas_in_sync(t.s);
		assert_int_equal(t.R, r);
		assert_int_equal(t.N, t.R * t.W);
		fn(&t);
		dvar_strategy_free(t.s);
	}
}

static int global_id(const topo *t, int local)
{
	return t->worker * t->R + local;
}

/* ---------------------------------------------------------------- elements */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	assert_non_null(p);
	return p;
}

static void assert_elems(int dtype, const void *actual, const void *expected, size_t count,
                         const char *what)
{
	size_t size = dvar_dtype_size(dtype);

	for (size_t i = 0; i < count; i++)
		if (memcmp((const unsigned char *)actual + i * size,
		           (const unsigned char *)expected + i * size, size) != 0)
			fail_msg("%s: %s element %zu is %g, expected %g", what, dvar_dtype_name(dtype), i,
			         tu_get(dtype, actual, i), tu_get(dtype, expected, i));
}

/* Every local component of v equals expect(global id, element). */
static void assert_components(const topo *t, dvar_variable *v,
                              double (*expect)(const void *ctx, int id, size_t i),
                              const void *ctx, const char *what)
{
	int dtype = dvar_variable_dtype(v);
	size_t nbytes = dvar_variable_nbytes(v);
	size_t count = nbytes / dvar_dtype_size(dtype);
	void *got = xmalloc(nbytes);
	void *want = xmalloc(nbytes);

	for (int l = 0; l < t->R; l++) {
		char label[256];

		for (size_t i = 0; i < count; i++)
			tu_put(dtype, want, i, expect(ctx, global_id(t, l), i));
		assert_int_equal(dvar_variable_read_local(v, l, got, nbytes), DVAR_OK);
		snprintf(label, sizeof label, "%s, R=%d W=%d, local %d", what, t->R, t->W, l);
		assert_elems(dtype, got, want, count, label);
	}
	free(got);
	free(want);
}

static dvar_variable *make_var(dvar_strategy *s, const char *name, int dtype, int rank,
                               const int64_t *dims, int sync, int agg, const void *initial)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_variable *v = NULL;

	spec.name = name;
	spec.dtype = dtype;
	assert_int_equal(dvar_shape_init(&spec.shape, rank, dims), DVAR_OK);
	spec.synchronization = sync;
	spec.aggregation = agg;
	spec.initial_value = initial;
	if (dvar_variable_create(&v, s, &spec) != DVAR_OK)
		fail_msg("creating %s: %s", name, dvar_error_last()->message);
	assert_non_null(v);
	return v;
}

/* ---------------------------------------------------------------- replica jobs */

typedef struct rjob rjob;
struct rjob {
	const topo *t;
	dvar_variable *v;
	int (*body)(rjob *j, dvar_replica *ctx, int id, int local);
	int kind;                         /* K_* or a dvar_scatter_op */
	double (*gen)(int id, size_t i);  /* a replica's value */
	int bad_replica;                  /* scatter: passes an index out of range */
	const void *shared;               /* what every replica passes, for some bodies */
	int rc[MAX_R];
	char msg[MAX_R][DVAR_ERROR_MESSAGE_MAX];
	void *out[MAX_R];
};

static int rjob_main(dvar_replica *ctx, void *arg)
{
	rjob *j = arg;
	int local = dvar_replica_local_id(ctx);

	dvar_error_clear();
	j->rc[local] = j->body(j, ctx, dvar_replica_id(ctx), local);
	snprintf(j->msg[local], sizeof j->msg[local], "%s", dvar_error_last()->message);
	return DVAR_OK;
}

static void run_job(rjob *j)
{
	int rc = dvar_strategy_run(j->t->s, rjob_main, j);

	if (rc != DVAR_OK)
		fail_msg("run: %s", dvar_error_last()->message);
}

static void assert_job_ok(const rjob *j, const char *what)
{
	for (int l = 0; l < j->t->R; l++)
		if (j->rc[l] != DVAR_OK)
			fail_msg("%s, R=%d W=%d, local %d: %d %s", what, j->t->R, j->t->W, l, j->rc[l],
			         j->msg[l]);
}

static int dense_update(dvar_variable *v, dvar_replica *ctx, int kind, const void *value)
{
	switch (kind) {
	case K_ASSIGN: return dvar_variable_assign(v, ctx, value);
	case K_ADD: return dvar_variable_assign_add(v, ctx, value);
	default: return dvar_variable_assign_sub(v, ctx, value);
	}
}

/* Each replica applies its own gen(id, .) with j->kind. */
static int body_update(rjob *j, dvar_replica *ctx, int id, int local)
{
	int dtype = dvar_variable_dtype(j->v);
	size_t count = dvar_variable_nbytes(j->v) / dvar_dtype_size(dtype);
	void *value = malloc(dvar_variable_nbytes(j->v) + 1);
	int rc;

	if (!value)
		return DVAR_ENOMEM;
	for (size_t i = 0; i < count; i++)
		tu_put(dtype, value, i, j->gen(id, i));
	rc = dense_update(j->v, ctx, j->kind, value);
	free(value);
	return rc;
}

/* Each replica reads the variable in replica context into out[local]. */
static int body_read(rjob *j, dvar_replica *ctx, int id, int local)
{
	return dvar_variable_read(j->v, ctx, j->out[local], dvar_variable_nbytes(j->v));
}

/* Read in replica context: every replica sees its own component. */
static void assert_replica_reads(const topo *t, dvar_variable *v,
                                 double (*expect)(const void *ctx, int id, size_t i),
                                 const void *ectx, const char *what)
{
	rjob j = { .t = t, .v = v, .body = body_read };
	int dtype = dvar_variable_dtype(v);
	size_t nbytes = dvar_variable_nbytes(v);
	size_t count = nbytes / dvar_dtype_size(dtype);
	void *want = xmalloc(nbytes);

	for (int l = 0; l < t->R; l++)
		j.out[l] = xmalloc(nbytes);
	run_job(&j);
	assert_job_ok(&j, what);
	for (int l = 0; l < t->R; l++) {
		for (size_t i = 0; i < count; i++)
			tu_put(dtype, want, i, expect(ectx, global_id(t, l), i));
		assert_elems(dtype, j.out[l], want, count, what);
		free(j.out[l]);
	}
	free(want);
}

/* ---------------------------------------------------------------- the dense model */

static double base_of(size_t i)
{
	return 10.0 * (double)(i % 5 + 1);
}

static double value_of(int id, size_t i)
{
	return (double)(id + 1) * (double)(i % 3 + 1);
}

typedef struct {
	const topo *t;
	int sync, agg, kind;
	int in_replica; /* the update ran in replica context */
	double (*base)(size_t i);
	double (*gen)(int id, size_t i);
} model;

/* What the update brings to replica id: TF's apply_aggregation. */
static double model_value(const model *m, int id, size_t i)
{
	double sum = 0;

	if (!m->in_replica || m->sync == DVAR_SYNC_ON_READ || m->agg == DVAR_AGG_NONE)
		return m->gen(id, i);
	if (m->agg == DVAR_AGG_ONLY_FIRST_REPLICA)
		return m->gen(0, i);
	for (int r = 0; r < m->t->N; r++)
		sum += m->gen(r, i);
	return m->agg == DVAR_AGG_SUM ? sum : sum / m->t->N;
}

static double model_expect(const void *ctx, int id, size_t i)
{
	const model *m = ctx;
	double x = model_value(m, id, i);

	switch (m->kind) {
	case K_ASSIGN: return x;
	case K_ADD: return m->base(i) + x;
	default: return m->base(i) - x;
	}
}

static double expect_base(const void *ctx, int id, size_t i)
{
	const model *m = ctx;

	return m->base(i);
}

static void fill(int dtype, void *buf, size_t count, double (*f)(size_t i))
{
	for (size_t i = 0; i < count; i++)
		tu_put(dtype, buf, i, f(i));
}

/* ---------------------------------------------------------------- creation */

static struct {
	int calls;
	int replica_id;
	int dtype;
	dvar_shape shape;
	int fail;
} init_log;

static int init_iota(void *arg, int replica_id, int dtype, const dvar_shape *shape, void *dst)
{
	uint64_t n;

	init_log.calls++;
	init_log.replica_id = replica_id;
	init_log.dtype = dtype;
	init_log.shape = *shape;
	if (init_log.fail)
		return dvar_error_set(DVAR_EIO, "the initializer's disk is on fire");
	assert_int_equal(dvar_shape_num_elements(shape, &n), DVAR_OK);
	for (uint64_t i = 0; i < n; i++)
		tu_put(dtype, dst, i, (double)(i * 3 + *(int *)arg));
	return DVAR_OK;
}

static double expect_iota7(const void *ctx, int id, size_t i)
{
	return (double)(i * 3 + 7);
}

static double expect_worker0(const void *ctx, int id, size_t i)
{
	return (double)i; /* worker 0's initial value: i + 100 * worker */
}

static double expect_zero(const void *ctx, int id, size_t i)
{
	return 0;
}

static void create_names(const topo *t)
{
	int64_t dims[2] = { 2, 3 };
	float init[6];
	dvar_variable *v;
	float got[6];
	char want[64];
	int seven = 7;

	for (int i = 0; i < 6; i++)
		init[i] = (float)(i + 100 * t->worker); /* only worker 0's counts */
	v = make_var(t->s, "layer/w", DVAR_FLOAT32, 2, dims, DVAR_SYNC_AUTO, DVAR_AGG_NONE, init);
	assert_string_equal(dvar_variable_name(v), "layer/w");
	assert_string_equal(dvar_variable_component_name(v, 0), "layer/w");
	for (int l = 1; l < t->R; l++) {
		snprintf(want, sizeof want, "layer/w/replica_%d", l);
		assert_string_equal(dvar_variable_component_name(v, l), want);
	}
	assert_null(dvar_variable_component_name(v, t->R));
	assert_null(dvar_variable_component_name(v, -1));
	assert_int_equal(dvar_variable_dtype(v), DVAR_FLOAT32);
	assert_true(dvar_shape_equal(dvar_variable_shape(v), &(dvar_shape){ 2, { 2, 3 } }));
	assert_int_equal(dvar_variable_synchronization(v), DVAR_SYNC_ON_WRITE); /* AUTO */
	assert_int_equal(dvar_variable_aggregation(v), DVAR_AGG_NONE);
	assert_int_equal(dvar_variable_trainable(v), 1);
	assert_ptr_equal(dvar_variable_strategy(v), t->s);
	assert_int_equal(dvar_variable_nbytes(v), sizeof got);
	assert_components(t, v, expect_worker0, NULL, "initial value from worker 0");
	assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got), DVAR_OK);
	for (int i = 0; i < 6; i++)
		assert_true(got[i] == (float)i);
	dvar_variable_free(v);

	/* ON_READ: not trainable; the name pattern is the same. */
	v = make_var(t->s, "acc", DVAR_INT32, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, NULL);
	assert_int_equal(dvar_variable_synchronization(v), DVAR_SYNC_ON_READ);
	assert_int_equal(dvar_variable_aggregation(v), DVAR_AGG_SUM);
	assert_int_equal(dvar_variable_trainable(v), 0);
	assert_int_equal(dvar_variable_nbytes(v), 4);
	if (t->R > 1)
		assert_string_equal(dvar_variable_component_name(v, 1), "acc/replica_1");
	assert_components(t, v, expect_zero, NULL, "zeros by default");
	dvar_variable_free(v);

	/* An initializer: called once, on worker 0 only, as replica 0. */
	{
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		int64_t d3[3] = { 3, 1, 2 };

		spec.name = "emb";
		spec.dtype = DVAR_INT64;
		dvar_shape_init(&spec.shape, 3, d3);
		spec.init = init_iota;
		spec.init_arg = &seven;
		memset(&init_log, 0, sizeof init_log);
		init_log.replica_id = -1;
		assert_int_equal(dvar_variable_create(&v, t->s, &spec), DVAR_OK);
		assert_int_equal(init_log.calls, t->worker == 0 ? 1 : 0);
		if (t->worker == 0) {
			assert_int_equal(init_log.replica_id, 0);
			assert_int_equal(init_log.dtype, DVAR_INT64);
			assert_true(dvar_shape_equal(&init_log.shape, &spec.shape));
		}
		assert_components(t, v, expect_iota7, NULL, "initializer");
		dvar_variable_free(v);

		/* initial_value wins over init. */
		{
			int64_t iv[6] = { 0, 1, 2, 3, 4, 5 };

			spec.initial_value = iv;
			init_log.calls = 0;
			assert_int_equal(dvar_variable_create(&v, t->s, &spec), DVAR_OK);
			assert_int_equal(init_log.calls, 0);
			assert_components(t, v, expect_worker0, NULL, "initial_value over init");
			dvar_variable_free(v);
			spec.initial_value = NULL;
		}

		/* A failing initializer fails the creation on every worker, and the
		 * strategy stays usable. */
		init_log.fail = 1;
		v = (dvar_variable *)&spec; /* must come back NULL */
		{
			int rc = dvar_variable_create(&v, t->s, &spec);

			assert_int_not_equal(rc, DVAR_OK);
			assert_null(v);
			if (t->worker == 0) {
				assert_int_equal(rc, DVAR_EIO);
				tu_assert_error_contains("the initializer's disk is on fire");
				tu_assert_error_contains("'emb'");
			}
		}
		init_log.fail = 0;
		assert_int_equal(dvar_variable_create(&v, t->s, &spec), DVAR_OK);
		assert_components(t, v, expect_iota7, NULL, "after a failed creation");
		dvar_variable_free(v);
	}

	/* Empty and scalar shapes. */
	{
		int64_t empty[2] = { 0, 3 };
		double scalar = 2.5;
		double d;

		v = make_var(t->s, "empty", DVAR_FLOAT32, 2, empty, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, NULL);
		assert_int_equal(dvar_variable_nbytes(v), 0);
		assert_int_equal(dvar_variable_read(v, NULL, &d, 0), DVAR_OK);
		assert_int_equal(dvar_variable_assign(v, NULL, NULL), DVAR_OK);
		dvar_variable_free(v);

		v = make_var(t->s, "scalar", DVAR_FLOAT64, 0, NULL, DVAR_SYNC_ON_WRITE, DVAR_AGG_MEAN,
		             &scalar);
		for (int l = 0; l < t->R; l++) {
			assert_int_equal(dvar_variable_read_local(v, l, &d, sizeof d), DVAR_OK);
			assert_true(d == 2.5);
		}
		dvar_variable_free(v);
	}
	dvar_variable_free(NULL);
}

static void test_runtime_variables__create_names(void **state)
{
	(void)state;
	for_each_topology(create_names);
}

/* Create with spec and expect code and (when given) a message part; out stays NULL. */
static void expect_create_error(dvar_strategy *s, const dvar_variable_spec *spec, int code,
                                const char *needle)
{
	dvar_variable *v = (dvar_variable *)spec;

	assert_int_equal(dvar_variable_create(&v, s, spec), code);
	assert_null(v);
	if (needle)
		tu_assert_error_contains(needle);
}

static const char mean_text[] =
	"creating distributed tf.Variable with aggregation=MEAN and a non-floating dtype is not "
	"supported, please use a different aggregation or dtype";

static void create_errors(const topo *t)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_variable_spec bad;
	dvar_variable *v = NULL;
	int64_t dims[1] = { 3 };
	char *longname = xmalloc(1026);

	spec.name = "w";
	spec.dtype = DVAR_FLOAT32;
	dvar_shape_init(&spec.shape, 1, dims);

	assert_int_equal(dvar_variable_create(NULL, t->s, &spec), DVAR_EINVAL);
	assert_int_equal(dvar_variable_create(&v, NULL, &spec), DVAR_EINVAL);
	assert_null(v);
	expect_create_error(t->s, NULL, DVAR_EINVAL, NULL);

	bad = spec;
	bad.version = 0;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "version");
	bad.version = DVAR_VARIABLE_SPEC_VERSION + 1;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "version");

	bad = spec;
	bad.name = NULL;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "1 to 1024 bytes");
	bad.name = "";
	expect_create_error(t->s, &bad, DVAR_EINVAL, "1 to 1024 bytes");
	memset(longname, 'n', 1025);
	longname[1025] = '\0';
	bad.name = longname;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "1 to 1024 bytes");
	longname[1024] = '\0'; /* 1024 bytes is fine */
	assert_int_equal(dvar_variable_create(&v, t->s, &bad), DVAR_OK);
	assert_int_equal(strlen(dvar_variable_name(v)), 1024);
	if (t->R > 1) {
		assert_int_equal(strlen(dvar_variable_component_name(v, 1)), 1024 + strlen("/replica_1"));
		assert_string_equal(dvar_variable_component_name(v, 1) + 1024, "/replica_1");
	}
	dvar_variable_free(v);

	bad = spec;
	bad.dtype = 7; /* DT_STRING */
	expect_create_error(t->s, &bad, DVAR_EINVAL, "dtype 7");
	bad.dtype = 0;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "dtype 0");

	bad = spec;
	bad.shape.rank = DVAR_MAX_RANK + 1;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "'w'");
	bad.shape.rank = -1;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "'w'");
	bad = spec;
	bad.shape.dims[0] = -2;
	expect_create_error(t->s, &bad, DVAR_EINVAL, "'w'");

	bad = spec;
	bad.synchronization = DVAR_SYNC_NONE;
	bad.aggregation = 17; /* synchronization is checked first, as in TF */
	expect_create_error(t->s, &bad, DVAR_EINVAL,
	                    "`NONE` variable synchronization mode is not supported with tf.distribute "
	                    "strategy. Please change the `synchronization` for variable: w");
	bad.synchronization = 4;
	expect_create_error(t->s, &bad, DVAR_EINVAL,
	                    "Invalid variable synchronization mode: 4 for variable: w");
	bad.synchronization = -1;
	expect_create_error(t->s, &bad, DVAR_EINVAL,
	                    "Invalid variable synchronization mode: -1 for variable: w");
	bad = spec;
	bad.aggregation = 4;
	expect_create_error(t->s, &bad, DVAR_EINVAL,
	                    "Invalid variable aggregation mode: 4 for variable: w");
	bad.aggregation = -1;
	expect_create_error(t->s, &bad, DVAR_EINVAL,
	                    "Invalid variable aggregation mode: -1 for variable: w");

	/* MEAN needs a floating dtype, under both policies. */
	bad = spec;
	bad.aggregation = DVAR_AGG_MEAN;
	for (int sync = DVAR_SYNC_AUTO; sync <= DVAR_SYNC_ON_READ; sync++) {
		if (sync == DVAR_SYNC_NONE)
			continue;
		bad.synchronization = sync;
		for (size_t d = 0; d < NUM_NUMERIC; d++) {
			bad.dtype = numeric_dtypes[d];
			if (dvar_kernel_is_floating(bad.dtype)) {
				assert_int_equal(dvar_variable_create(&v, t->s, &bad), DVAR_OK);
				dvar_variable_free(v);
			} else {
				expect_create_error(t->s, &bad, DVAR_EINVAL, mean_text);
			}
		}
		bad.dtype = DVAR_BOOL;
		expect_create_error(t->s, &bad, DVAR_EINVAL, mean_text);
	}
	free(longname);
}

static void test_runtime_variables__create_errors(void **state)
{
	(void)state;
	for_each_topology(create_errors);
}

/* Workers that create one variable with different specs all fail, and none
 * waits for the others. */
static void spec_mismatch(const topo *t)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_variable *v = NULL;
	int64_t dims[1] = { 3 };
	int rc;

	spec.name = "w";
	spec.dtype = DVAR_FLOAT32;
	dvar_shape_init(&spec.shape, 1, dims);

	spec.shape.dims[0] = t->worker == 1 ? 4 : 3;
	rc = dvar_variable_create(&v, t->s, &spec);
	assert_int_not_equal(rc, DVAR_OK);
	assert_null(v);
	tu_assert_error_contains("different specs");
	spec.shape.dims[0] = 3;

	spec.aggregation = t->worker == t->W - 1 ? DVAR_AGG_SUM : DVAR_AGG_NONE;
	assert_int_not_equal(dvar_variable_create(&v, t->s, &spec), DVAR_OK);
	assert_null(v);
	spec.aggregation = DVAR_AGG_NONE;

	/* One worker's spec is invalid: it fails with TF's text, the others
	 * fail too instead of waiting for it. */
	spec.synchronization = t->worker == 1 ? DVAR_SYNC_NONE : DVAR_SYNC_ON_WRITE;
	assert_int_not_equal(dvar_variable_create(&v, t->s, &spec), DVAR_OK);
	assert_null(v);
	if (t->worker == 1)
		tu_assert_error_contains("`NONE` variable synchronization mode is not supported");
	spec.synchronization = DVAR_SYNC_ON_WRITE;

	assert_int_equal(dvar_variable_create(&v, t->s, &spec), DVAR_OK);
	dvar_variable_free(v);
}

static void test_runtime_variables__spec_mismatch(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s);

	(void)state;
	dvar_strategy_free(s);
	if (W == 1)
		skip(); /* one worker agrees with itself: tested under mpirun */
	for_each_topology(spec_mismatch);
}

/* ---------------------------------------------------------------- dense updates */

#define DENSE_COUNT 5

/* ON_WRITE (and AUTO) in replica context: every aggregation and update. */
static void on_write_replica(const topo *t)
{
	static const int syncs[] = { DVAR_SYNC_AUTO, DVAR_SYNC_ON_WRITE };
	int64_t dims[1] = { DENSE_COUNT };
	float base[DENSE_COUNT];

	fill(DVAR_FLOAT32, base, DENSE_COUNT, base_of);
	for (size_t si = 0; si < 2; si++)
		for (size_t a = 0; a < 4; a++)
			for (int kind = K_ASSIGN; kind <= K_SUB; kind++) {
				model m = { t, DVAR_SYNC_ON_WRITE, all_aggs[a], kind, 1, base_of, value_of };
				dvar_variable *v = make_var(t->s, "w", DVAR_FLOAT32, 1, dims, syncs[si],
				                            all_aggs[a], base);
				rjob j = { .t = t, .v = v, .body = body_update, .kind = kind,
					   .gen = value_of };
				char what[128];
				float primary[DENSE_COUNT];

				snprintf(what, sizeof what, "ON_WRITE agg %d %s in replica context",
				         all_aggs[a], kind_names[kind]);
				run_job(&j);
				assert_job_ok(&j, what);
				assert_components(t, v, model_expect, &m, what);
				assert_replica_reads(t, v, model_expect, &m, what);
				/* Cross-replica: the primary, local replica 0. */
				assert_int_equal(dvar_variable_read(v, NULL, primary, sizeof primary), DVAR_OK);
				for (size_t i = 0; i < DENSE_COUNT; i++)
					assert_true(primary[i] ==
					            (float)model_expect(&m, global_id(t, 0), i));
				dvar_variable_free(v);
			}

	/* The headline numbers: replica r adds r + 1. */
	for (size_t a = 0; a < 4; a++) {
		float zero = 100.0f;
		dvar_variable *v = make_var(t->s, "c", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_WRITE,
		                            all_aggs[a], &zero);
		rjob j = { .t = t, .v = v, .body = body_update, .kind = K_ADD, .gen = value_of };
		float got;
		double want;

		run_job(&j);
		assert_job_ok(&j, "scalar assign_add");
		switch (all_aggs[a]) {
		case DVAR_AGG_SUM: want = 100 + t->N * (t->N + 1) / 2.0; break;
		case DVAR_AGG_MEAN: want = 100 + (t->N + 1) / 2.0; break;
		case DVAR_AGG_ONLY_FIRST_REPLICA: want = 101; break;
		default: want = 100 + t->worker * t->R + 1; break; /* the primary's own */
		}
		assert_int_equal(dvar_variable_read(v, NULL, &got, sizeof got), DVAR_OK);
		assert_true(got == (float)want);
		dvar_variable_free(v);
	}
}

static void test_runtime_variables__on_write_replica(void **state)
{
	(void)state;
	for_each_topology(on_write_replica);
}

/* ON_READ in replica context: each replica changes its own component;
 * cross-replica reads aggregate over all N replicas. */
static void on_read_replica(const topo *t)
{
	int64_t dims[1] = { DENSE_COUNT };
	float base[DENSE_COUNT];

	fill(DVAR_FLOAT32, base, DENSE_COUNT, base_of);
	for (size_t a = 0; a < 4; a++)
		for (int kind = K_ASSIGN; kind <= K_SUB; kind++) {
			int agg = all_aggs[a];
			model m = { t, DVAR_SYNC_ON_READ, agg, kind, 1, base_of, value_of };
			dvar_variable *v = make_var(t->s, "r", DVAR_FLOAT32, 1, dims, DVAR_SYNC_ON_READ,
			                            agg, base);
			rjob j = { .t = t, .v = v, .body = body_update, .kind = kind, .gen = value_of };
			char what[128];
			float got[DENSE_COUNT];
			int rc;

			snprintf(what, sizeof what, "ON_READ agg %d %s in replica context", agg,
			         kind_names[kind]);
			run_job(&j);
			assert_job_ok(&j, what);
			assert_components(t, v, model_expect, &m, what);
			assert_replica_reads(t, v, model_expect, &m, what);

			rc = dvar_variable_read(v, NULL, got, sizeof got);
			if (agg == DVAR_AGG_NONE) {
				assert_int_equal(rc, DVAR_EINVAL);
				tu_assert_error_contains(
					"Could not convert from `tf.VariableAggregation` "
					"VariableAggregation.NONE to`tf.distribute.ReduceOp` type");
			} else {
				assert_int_equal(rc, DVAR_OK);
				for (size_t i = 0; i < DENSE_COUNT; i++) {
					double sum = 0;

					for (int r = 0; r < t->N; r++)
						sum += model_expect(&m, r, i);
					if (agg == DVAR_AGG_ONLY_FIRST_REPLICA)
						sum = model_expect(&m, 0, i);
					else if (agg == DVAR_AGG_MEAN)
						sum /= t->N;
					if (got[i] != (float)sum)
						fail_msg("%s: read %zu is %g, expected %g", what, i, got[i], sum);
				}
			}
			/* The components are untouched by the read. */
			assert_components(t, v, model_expect, &m, what);
			dvar_variable_free(v);
		}
}

/*
 * ON_WRITE ONLY_FIRST_REPLICA, assign in replica context, several workers:
 * TensorFlow (values_util.on_write_assign through
 * MultiWorkerMirroredStrategy's _update_replica) broadcasts each worker's
 * own first local replica, so with W = 2 and R = 2 worker 1 ends with
 * replica 2's value and the mirrored copies differ between workers. dvar
 * applies the value of replica 0 (worker 0's first) on every worker, which
 * keeps the copies equal (docs/RUNTIME.md, "Where dvar differs").
 */
static void first_replica_across_workers(const topo *t)
{
	int64_t dims[1] = { DENSE_COUNT };
	float base[DENSE_COUNT], got[DENSE_COUNT];
	model m = { t, DVAR_SYNC_ON_WRITE, DVAR_AGG_ONLY_FIRST_REPLICA, K_ASSIGN, 1, base_of,
		    value_of };
	dvar_variable *v;
	rjob j = { .t = t, .body = body_update, .kind = K_ASSIGN, .gen = value_of };

	fill(DVAR_FLOAT32, base, DENSE_COUNT, base_of);
	v = make_var(t->s, "first", DVAR_FLOAT32, 1, dims, DVAR_SYNC_ON_WRITE,
	             DVAR_AGG_ONLY_FIRST_REPLICA, base);
	j.v = v;
	run_job(&j);
	assert_job_ok(&j, "ONLY_FIRST_REPLICA assign");
	/* Every component of every worker: replica 0's value. */
	assert_components(t, v, model_expect, &m, "ONLY_FIRST_REPLICA assign");
	assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got), DVAR_OK);
	for (size_t i = 0; i < DENSE_COUNT; i++) {
		assert_true(got[i] == (float)value_of(0, i));
		/* What TensorFlow would leave on this worker differs from worker 1 on. */
		if (t->worker > 0)
			assert_true(got[i] != (float)value_of(t->worker * t->R, i));
	}
	dvar_variable_free(v);
}

static void test_runtime_variables__first_replica_across_workers(void **state)
{
	(void)state;
	for_each_topology(first_replica_across_workers);
}

static void test_runtime_variables__on_read_replica(void **state)
{
	(void)state;
	for_each_topology(on_read_replica);
}

static double three_plus_id(int id, size_t i)
{
	return 3.0 + id;
}

/* TF's values_test tables: replicas [3., 4.] read 7 (SUM), 3.5 (MEAN), 3
 * (ONLY_FIRST_REPLICA); here replica r holds 3 + r for any N. */
static void on_read_table(const topo *t)
{
	for (size_t a = 1; a < 4; a++) {
		int agg = all_aggs[a];
		dvar_variable *v = make_var(t->s, "t", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_READ, agg,
		                            NULL);
		rjob j = { .t = t, .v = v, .body = body_update, .kind = K_ASSIGN,
			   .gen = three_plus_id };
		double sum = 3.0 * t->N + t->N * (t->N - 1) / 2.0;
		float got;

		run_job(&j);
		assert_job_ok(&j, "table");
		assert_int_equal(dvar_variable_read(v, NULL, &got, sizeof got), DVAR_OK);
		if (agg == DVAR_AGG_SUM) {
			assert_true(got == (float)sum);
			if (t->N == 2)
				assert_true(got == 7.0f);
		} else if (agg == DVAR_AGG_MEAN) {
			assert_true(got == (float)(sum / t->N));
			if (t->N == 2)
				assert_true(got == 3.5f);
		} else {
			assert_true(got == 3.0f);
		}
		dvar_variable_free(v);
	}

	/* An ON_READ SUM variable created with 1.0 reads N. */
	{
		float one = 1.0f;
		float got;
		int32_t ione = 1, igot;
		dvar_variable *v = make_var(t->s, "one", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_READ,
		                            DVAR_AGG_SUM, &one);

		assert_int_equal(dvar_variable_read(v, NULL, &got, sizeof got), DVAR_OK);
		assert_true(got == (float)t->N);
		dvar_variable_free(v);
		v = make_var(t->s, "ione", DVAR_INT32, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, &ione);
		assert_int_equal(dvar_variable_read(v, NULL, &igot, sizeof igot), DVAR_OK);
		assert_int_equal(igot, t->N);
		dvar_variable_free(v);
	}
}

static void test_runtime_variables__on_read_table(void **state)
{
	(void)state;
	for_each_topology(on_read_table);
}

/* Cross-replica updates: every synchronization, aggregation and update. */
typedef struct {
	const topo *t;
	int sync, agg, kind;
} cross_model;

static double cross_value(size_t i)
{
	return 7.0 * (double)(i + 1);
}

static double cross_expect(const void *ctx, int id, size_t i)
{
	const cross_model *m = ctx;
	double x = cross_value(i);

	if (m->sync == DVAR_SYNC_ON_READ && m->agg == DVAR_AGG_SUM) {
		if (m->kind != K_ASSIGN)
			return base_of(i); /* refused */
		return (double)((float)x / (float)m->t->N);
	}
	switch (m->kind) {
	case K_ASSIGN: return x;
	case K_ADD: return base_of(i) + x;
	default: return base_of(i) - x;
	}
}

static void cross_replica(const topo *t)
{
	static const int syncs[] = { DVAR_SYNC_AUTO, DVAR_SYNC_ON_WRITE, DVAR_SYNC_ON_READ };
	int64_t dims[1] = { DENSE_COUNT };
	float base[DENSE_COUNT], value[DENSE_COUNT];

	fill(DVAR_FLOAT32, base, DENSE_COUNT, base_of);
	fill(DVAR_FLOAT32, value, DENSE_COUNT, cross_value);
	for (size_t si = 0; si < 3; si++)
		for (size_t a = 0; a < 4; a++)
			for (int kind = K_ASSIGN; kind <= K_SUB; kind++) {
				int sync = syncs[si] == DVAR_SYNC_AUTO ? DVAR_SYNC_ON_WRITE : syncs[si];
				cross_model m = { t, sync, all_aggs[a], kind };
				dvar_variable *v = make_var(t->s, "x", DVAR_FLOAT32, 1, dims, syncs[si],
				                            all_aggs[a], base);
				char what[128];
				int rc = dense_update(v, NULL, kind, value);

				snprintf(what, sizeof what, "sync %d agg %d %s across replicas", sync,
				         all_aggs[a], kind_names[kind]);
				if (sync == DVAR_SYNC_ON_READ && all_aggs[a] == DVAR_AGG_SUM &&
				    kind != K_ASSIGN) {
					char text[256];

					assert_int_equal(rc, DVAR_EINVAL);
					snprintf(text, sizeof text,
					         "SyncOnReadVariable does not support `%s` in cross-replica "
					         "context when aggregation is set to "
					         "`tf.VariableAggregation.SUM`.",
					         kind_names[kind]);
					tu_assert_error_contains(text);
				} else if (rc != DVAR_OK) {
					fail_msg("%s: %s", what, dvar_error_last()->message);
				}
				assert_components(t, v, cross_expect, &m, what);
				dvar_variable_free(v);
			}
}

static void test_runtime_variables__cross_replica(void **state)
{
	(void)state;
	for_each_topology(cross_replica);
}

/* ON_READ SUM cross-replica assign: each replica gets its share and the read
 * gives the value back. */
static void on_read_split(const topo *t)
{
	static const int32_t totals[] = { 7, -7, 5, 1, 0, -1, 2147483647, (-2147483647 - 1) };
	enum { NT = sizeof totals / sizeof totals[0] };
	int64_t dims[1] = { NT };
	dvar_variable *v = make_var(t->s, "split", DVAR_INT32, 1, dims, DVAR_SYNC_ON_READ,
	                            DVAR_AGG_SUM, NULL);
	int32_t part[NT], got[NT];

	assert_int_equal(dvar_variable_assign(v, NULL, totals), DVAR_OK);
	for (int l = 0; l < t->R; l++) {
		int id = global_id(t, l);

		assert_int_equal(dvar_variable_read_local(v, l, part, sizeof part), DVAR_OK);
		for (int i = 0; i < NT; i++) {
			int64_t q = totals[i] / t->N, r = totals[i] % t->N;

			if (r < 0) {
				q--;
				r += t->N;
			}
			assert_int_equal(part[i], q + (id < r));
		}
		if (t->N == 2) {
			assert_int_equal(part[0], id == 0 ? 4 : 3);
			assert_int_equal(part[1], id == 0 ? -3 : -4);
		}
		if (t->N == 3)
			assert_int_equal(part[2], id < 2 ? 2 : 1);
	}
	assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got), DVAR_OK);
	assert_memory_equal(got, totals, sizeof got);
	dvar_variable_free(v);

	/* float32: value / N in float32. */
	{
		float x[2] = { 7.0f, 1.0f }, fpart[2], fgot[2];

		v = make_var(t->s, "fsplit", DVAR_FLOAT32, 1, (int64_t[]){ 2 }, DVAR_SYNC_ON_READ,
		             DVAR_AGG_SUM, NULL);
		assert_int_equal(dvar_variable_assign(v, NULL, x), DVAR_OK);
		for (int l = 0; l < t->R; l++) {
			assert_int_equal(dvar_variable_read_local(v, l, fpart, sizeof fpart), DVAR_OK);
			assert_true(fpart[0] == 7.0f / (float)t->N);
			assert_true(fpart[1] == 1.0f / (float)t->N);
			if (t->N == 2)
				assert_true(fpart[0] == 3.5f);
			if (t->N == 3)
				assert_true(fpart[1] == 0.33333334f);
		}
		assert_int_equal(dvar_variable_read(v, NULL, fgot, sizeof fgot), DVAR_OK);
		assert_true(fabsf(fgot[0] - 7.0f) <= 4e-6f);
		assert_true(fabsf(fgot[1] - 1.0f) <= 1e-6f);
		if ((t->N & (t->N - 1)) == 0) { /* a power of two divides exactly */
			assert_true(fgot[0] == 7.0f);
			assert_true(fgot[1] == 1.0f);
		}
		dvar_variable_free(v);
	}

	/* bool cannot be divided (TF's truediv refuses it); nothing changes. */
	{
		unsigned char b = 1, got_b = 9;

		v = make_var(t->s, "bsplit", DVAR_BOOL, 0, NULL, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, NULL);
		assert_int_equal(dvar_variable_assign(v, NULL, &b), DVAR_EINVAL);
		tu_assert_error_contains("bool");
		assert_int_equal(dvar_variable_read_local(v, 0, &got_b, 1), DVAR_OK);
		assert_int_equal(got_b, 0);
		dvar_variable_free(v);
	}
}

static void test_runtime_variables__on_read_split(void **state)
{
	(void)state;
	for_each_topology(on_read_split);
}

/* The split itself, for any N. */
static void test_runtime_variables__split_sum(void **state)
{
	int32_t i32[4] = { 7, -7, 5, 1 }, p32[4];
	int64_t big[2] = { INT64_MAX, INT64_MIN }, pbig[2];
	int64_t odd = 9007199254740993LL, podd;
	uint8_t u8 = 255, pu8;
	uint64_t u64 = UINT64_MAX, pu64;
	int8_t i8 = -128, pi8;
	float f = 1.0f, pf;
	double d = 1.0, pd;
	uint16_t h, ph;
	unsigned char b = 1;

	(void)state;
	/* TF's table, with the exact split where TF truncates. */
	assert_int_equal(dvar_variable_split_sum(DVAR_INT32, i32, p32, 4, 0, 2), DVAR_OK);
	assert_int_equal(p32[0], 4);
	assert_int_equal(p32[1], -3);
	assert_int_equal(p32[2], 3);
	assert_int_equal(p32[3], 1);
	assert_int_equal(dvar_variable_split_sum(DVAR_INT32, i32, p32, 4, 1, 2), DVAR_OK);
	assert_int_equal(p32[0], 3);
	assert_int_equal(p32[1], -4);
	assert_int_equal(p32[2], 2);
	assert_int_equal(p32[3], 0);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(dvar_variable_split_sum(DVAR_INT32, i32 + 2, p32, 1, r, 3), DVAR_OK);
		assert_int_equal(p32[0], r < 2 ? 2 : 1);
	}
	/* Every share of every N adds up to the total, for every integer dtype. */
	for (size_t d_i = 0; d_i < NUM_NUMERIC; d_i++) {
		int dtype = numeric_dtypes[d_i];
		size_t size = dvar_dtype_size(dtype);
		unsigned char total[8], share[8];
		uint64_t seed = 42;

		if (dvar_kernel_is_floating(dtype))
			continue;
		for (int trial = 0; trial < 200; trial++) {
			int n = 1 + (int)(tu_rand(&seed) % 13);
			uint64_t raw = tu_rand(&seed), sum = 0, want = 0;

			memcpy(total, &raw, size);
			for (int r = 0; r < n; r++) {
				uint64_t s = 0;

				assert_int_equal(dvar_variable_split_sum(dtype, total, share, 1, r, n),
				                 DVAR_OK);
				memcpy(&s, share, size);
				sum += s; /* modulo 2^64; compared on the low bytes */
			}
			memcpy(&want, total, size);
			assert_memory_equal(&sum, &want, size);
		}
	}
	/* Extremes do not overflow. */
	assert_int_equal(dvar_variable_split_sum(DVAR_INT64, big, pbig, 2, 0, 2), DVAR_OK);
	assert_true(pbig[0] == INT64_MAX / 2 + 1 && pbig[1] == INT64_MIN / 2);
	assert_int_equal(dvar_variable_split_sum(DVAR_INT64, big, pbig, 2, 0, 1), DVAR_OK);
	assert_true(pbig[0] == INT64_MAX && pbig[1] == INT64_MIN);
	/* 2^53 + 1 stays exact (TF goes through float64). */
	assert_int_equal(dvar_variable_split_sum(DVAR_INT64, &odd, &podd, 1, 0, 1), DVAR_OK);
	assert_true(podd == 9007199254740993LL);
	assert_int_equal(dvar_variable_split_sum(DVAR_UINT8, &u8, &pu8, 1, 3, 4), DVAR_OK);
	assert_int_equal(pu8, 63); /* 255 = 64 + 64 + 64 + 63 */
	assert_int_equal(dvar_variable_split_sum(DVAR_UINT64, &u64, &pu64, 1, 0, 2), DVAR_OK);
	assert_true(pu64 == UINT64_MAX / 2 + 1);
	assert_int_equal(dvar_variable_split_sum(DVAR_INT8, &i8, &pi8, 1, 2, 3), DVAR_OK);
	assert_int_equal(pi8, -43); /* -128 = -42 - 43 - 43, floor(-128/3) = -43 */
	assert_int_equal(dvar_variable_split_sum(DVAR_INT8, &i8, &pi8, 1, 0, 3), DVAR_OK);
	assert_int_equal(pi8, -42);

	/* Floats divide in their own type. */
	assert_int_equal(dvar_variable_split_sum(DVAR_FLOAT32, &f, &pf, 1, 2, 3), DVAR_OK);
	assert_true(pf == 0.33333334f);
	assert_int_equal(dvar_variable_split_sum(DVAR_FLOAT64, &d, &pd, 1, 0, 3), DVAR_OK);
	assert_true(pd == 1.0 / 3.0);
	h = tu_f32_to_f16(1.0f);
	assert_int_equal(dvar_variable_split_sum(DVAR_FLOAT16, &h, &ph, 1, 0, 3), DVAR_OK);
	assert_int_equal(ph, tu_f32_to_f16(1.0f / 3.0f));
	assert_int_equal(ph, 0x3555);
	h = tu_f32_to_bf16(1.0f);
	assert_int_equal(dvar_variable_split_sum(DVAR_BFLOAT16, &h, &ph, 1, 0, 3), DVAR_OK);
	assert_int_equal(ph, tu_f32_to_bf16(1.0f / 3.0f));
	/* bfloat16 holds 257 as 256, and TF divides by N in the tensor's dtype. */
	h = tu_f32_to_bf16(256.0f);
	assert_int_equal(dvar_variable_split_sum(DVAR_BFLOAT16, &h, &ph, 1, 0, 257), DVAR_OK);
	assert_int_equal(ph, tu_f32_to_bf16(1.0f));
	/* In place. */
	pf = 7.0f;
	assert_int_equal(dvar_variable_split_sum(DVAR_FLOAT32, &pf, &pf, 1, 0, 2), DVAR_OK);
	assert_true(pf == 3.5f);

	assert_int_equal(dvar_variable_split_sum(DVAR_BOOL, &b, &b, 1, 0, 2), DVAR_EINVAL);
	assert_int_equal(dvar_variable_split_sum(DVAR_INT32, i32, p32, 1, 2, 2), DVAR_EINVAL);
	assert_int_equal(dvar_variable_split_sum(DVAR_INT32, i32, p32, 1, -1, 2), DVAR_EINVAL);
	assert_int_equal(dvar_variable_split_sum(DVAR_INT32, i32, p32, 1, 0, 0), DVAR_EINVAL);
	assert_int_equal(dvar_variable_split_sum(99, i32, p32, 1, 0, 1), DVAR_EINVAL);
}

/* ---------------------------------------------------------------- scatters */

#define SROWS 10
#define SCOLS 2
#define SMAX 3

static double scatter_base(size_t i)
{
	return (double)((i / SCOLS) * 10 + i % SCOLS);
}

/* Replica id's rows: a duplicate on replica 0, and different counts (some
 * replicas bring none). */
static size_t scatter_data(int id, int64_t idx[SMAX], float upd[SMAX * SCOLS])
{
	size_t n = id == 0 ? 3 : id % 4 == 3 ? 0 : (size_t)(1 + id % 3);

	idx[0] = id % SROWS;
	idx[1] = (3 * id + 1) % SROWS;
	idx[2] = id % SROWS;
	for (int k = 0; k < SMAX; k++)
		for (int c = 0; c < SCOLS; c++)
			upd[k * SCOLS + c] = (float)((id + 1) * (k + 1) + 20 * c);
	return n;
}

static void ref_scatter(float *var, int op, const int64_t *idx, size_t n, const float *upd,
                        float divisor)
{
	for (size_t k = 0; k < n; k++)
		for (int c = 0; c < SCOLS; c++) {
			float *x = &var[idx[k] * SCOLS + c];
			float u = upd[k * SCOLS + c];

			if (divisor != 1.0f)
				u = u / divisor;
			switch (op) {
			case DVAR_SCATTER_UPDATE: *x = u; break;
			case DVAR_SCATTER_ADD: *x = *x + u; break;
			case DVAR_SCATTER_SUB: *x = *x - u; break;
			case DVAR_SCATTER_MIN: *x = u < *x ? u : *x; break;
			default: *x = u > *x ? u : *x; break;
			}
		}
}

typedef struct {
	const topo *t;
	int agg, op;
	int in_replica;
	int bad_replica; /* -1: none */
	float *cache[64]; /* expected table per global id, computed lazily */
} scatter_model;

static const int64_t cross_idx[4] = { 1, 4, 1, 9 };
static const float cross_upd[4 * SCOLS] = { 5, -5, 50, 60, 7, 70, 2, 3 };

static const float *scatter_expected(scatter_model *m, int id)
{
	float *var;
	int64_t idx[SMAX];
	float upd[SMAX * SCOLS];

	if (m->cache[id])
		return m->cache[id];
	var = xmalloc(SROWS * SCOLS * sizeof *var);
	for (size_t i = 0; i < SROWS * SCOLS; i++)
		var[i] = (float)scatter_base(i);
	if (!m->in_replica) {
		ref_scatter(var, m->op, cross_idx, 4, cross_upd, 1.0f);
	} else if (m->agg == DVAR_AGG_NONE) {
		size_t n = scatter_data(id, idx, upd);

		if (id != m->bad_replica)
			ref_scatter(var, m->op, idx, n, upd, 1.0f);
	} else if (m->bad_replica >= 0) {
		/* refused everywhere */
	} else if (m->agg == DVAR_AGG_ONLY_FIRST_REPLICA) {
		size_t n = scatter_data(0, idx, upd);

		ref_scatter(var, m->op, idx, n, upd, 1.0f);
	} else {
		for (int r = 0; r < m->t->N; r++) {
			size_t n = scatter_data(r, idx, upd);

			ref_scatter(var, m->op, idx, n, upd,
			            m->agg == DVAR_AGG_MEAN ? (float)m->t->N : 1.0f);
		}
	}
	m->cache[id] = var;
	return var;
}

static double scatter_expect(const void *ctx, int id, size_t i)
{
	return scatter_expected((scatter_model *)ctx, id)[i];
}

static void scatter_model_free(scatter_model *m)
{
	for (int i = 0; i < 64; i++)
		free(m->cache[i]);
}

static int body_scatter(rjob *j, dvar_replica *ctx, int id, int local)
{
	int64_t idx[SMAX];
	float upd[SMAX * SCOLS];
	size_t n = scatter_data(id, idx, upd);

	if (id == j->bad_replica) {
		idx[0] = 2;
		idx[1] = 12;
		n = 2;
	}
	return dvar_variable_scatter(j->v, ctx, (dvar_scatter_op)j->kind, idx, n, upd);
}

static void scatter_case(const topo *t, int sync, int agg, int op, int in_replica)
{
	int64_t dims[2] = { SROWS, SCOLS };
	float base[SROWS * SCOLS];
	dvar_variable *v;
	scatter_model m = { t, agg, op, in_replica, -1, { 0 } };
	char what[128];

	/* TensorFlow (values.py, MirroredVariable.scatter_update/_min/_max)
	 * raises NotImplementedError for SUM and MEAN in both contexts; dvar
	 * refuses with its text and changes nothing. */
	int refused = (op == DVAR_SCATTER_UPDATE || op == DVAR_SCATTER_MIN ||
	               op == DVAR_SCATTER_MAX) &&
	              (agg == DVAR_AGG_SUM || agg == DVAR_AGG_MEAN);

	fill(DVAR_FLOAT32, base, SROWS * SCOLS, scatter_base);
	v = make_var(t->s, "w", DVAR_FLOAT32, 2, dims, sync, agg, base);
	snprintf(what, sizeof what, "sync %d agg %d %s in %s context", sync, agg, scatter_names[op],
	         in_replica ? "replica" : "cross-replica");
	if (refused) {
		char text[256];
		rjob j = { .t = t, .v = v, .body = body_scatter, .kind = op, .bad_replica = -1 };

		snprintf(text, sizeof text,
		         "%s is only supported for mirrored variable (variable created within "
		         "certain `tf.distribute.Strategy` scope) with NONE or `ONLY_FIRST_REPLICA` "
		         "aggregation, got: VariableAggregation.%s.",
		         scatter_names[op], agg == DVAR_AGG_SUM ? "SUM" : "MEAN");
		if (in_replica) {
			run_job(&j);
			for (int l = 0; l < t->R; l++) {
				assert_int_equal(j.rc[l], DVAR_ENOTSUPP);
				if (!strstr(j.msg[l], text))
					fail_msg("%s: %s", what, j.msg[l]);
			}
		} else {
			assert_int_equal(dvar_variable_scatter(v, NULL, op, cross_idx, 4, cross_upd),
			                 DVAR_ENOTSUPP);
			tu_assert_error_contains(text);
		}
		m.in_replica = 1;
		m.bad_replica = 0; /* nothing applied anywhere */
		assert_components(t, v, scatter_expect, &m, what);
		scatter_model_free(&m);
		dvar_variable_free(v);
		return;
	}
	if (in_replica) {
		rjob j = { .t = t, .v = v, .body = body_scatter, .kind = op, .bad_replica = -1 };

		run_job(&j);
		assert_job_ok(&j, what);
	} else {
		assert_int_equal(dvar_variable_scatter(v, NULL, op, cross_idx, 4, cross_upd), DVAR_OK);
	}
	assert_components(t, v, scatter_expect, &m, what);
	if (in_replica)
		assert_replica_reads(t, v, scatter_expect, &m, what);
	scatter_model_free(&m);
	dvar_variable_free(v);
}

static void scatter(const topo *t)
{
	static const int syncs[] = { DVAR_SYNC_AUTO, DVAR_SYNC_ON_WRITE };

	for (size_t si = 0; si < 2; si++)
		for (size_t a = 0; a < 4; a++)
			for (int op = DVAR_SCATTER_UPDATE; op <= DVAR_SCATTER_MAX; op++) {
				scatter_case(t, syncs[si], all_aggs[a], op, 0);
				scatter_case(t, syncs[si], all_aggs[a], op, 1);
			}
}

static void test_runtime_variables__scatter(void **state)
{
	(void)state;
	for_each_topology(scatter);
}

static void scatter_errors(const topo *t)
{
	int64_t dims[2] = { SROWS, SCOLS };
	float base[SROWS * SCOLS];
	const int bad = t->N > 1 ? 1 : 0;

	fill(DVAR_FLOAT32, base, SROWS * SCOLS, scatter_base);

	/* An index out of range on one replica: with aggregation every replica
	 * fails and nothing changes; with NONE only that replica fails. */
	for (size_t a = 0; a < 4; a++) {
		int agg = all_aggs[a];
		dvar_variable *v = make_var(t->s, "w", DVAR_FLOAT32, 2, dims, DVAR_SYNC_ON_WRITE, agg,
		                            base);
		rjob j = { .t = t, .v = v, .body = body_scatter, .kind = DVAR_SCATTER_ADD,
			   .bad_replica = bad };
		scatter_model m = { t, agg, DVAR_SCATTER_ADD, 1, bad, { 0 } };

		run_job(&j);
		for (int l = 0; l < t->R; l++) {
			int id = global_id(t, l);

			if (id == bad) {
				assert_int_equal(j.rc[l], DVAR_EINVAL);
				assert_non_null(strstr(j.msg[l], "index 12 is out of range [0, 10) for "
				                                 "variable 'w'"));
			} else if (agg == DVAR_AGG_NONE) {
				assert_int_equal(j.rc[l], DVAR_OK);
			} else {
				char needle[64];

				assert_int_equal(j.rc[l], DVAR_EINVAL);
				snprintf(needle, sizeof needle, "failed on replica %d", bad);
				if (!strstr(j.msg[l], needle))
					fail_msg("replica %d: %s", id, j.msg[l]);
			}
		}
		assert_components(t, v, scatter_expect, &m, "a bad index on one replica");
		scatter_model_free(&m);
		dvar_variable_free(v);
	}

	/* Cross-replica: checked before any component changes. */
	{
		dvar_variable *v = make_var(t->s, "w", DVAR_FLOAT32, 2, dims, DVAR_SYNC_ON_WRITE,
		                            DVAR_AGG_SUM, base);
		scatter_model m = { t, DVAR_AGG_SUM, DVAR_SCATTER_ADD, 1, 0, { 0 } };
		int64_t idx[3] = { 3, -1, 4 };
		int64_t idx10[1] = { 10 };
		float upd[3 * SCOLS] = { 1, 2, 3, 4, 5, 6 };

		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_SUB, idx, 3, upd),
		                 DVAR_EINVAL);
		tu_assert_error_contains("index -1 is out of range [0, 10) for variable 'w'");
		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_ADD, idx10, 1, upd),
		                 DVAR_EINVAL);
		tu_assert_error_contains("index 10 is out of range [0, 10) for variable 'w'");
		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_ADD, NULL, 1, upd),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_ADD, idx, 1, NULL),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_variable_scatter(v, NULL, (dvar_scatter_op)5, idx, 1, upd),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_ADD, NULL, 0, NULL),
		                 DVAR_OK);
		m.bad_replica = 0; /* nothing applied anywhere */
		assert_components(t, v, scatter_expect, &m, "refused cross-replica scatters");
		scatter_model_free(&m);
		dvar_variable_free(v);
	}

	/* A scalar has no rows. */
	{
		float x = 1.0f;
		int64_t idx[1] = { 0 };
		dvar_variable *v = make_var(t->s, "s", DVAR_FLOAT32, 0, NULL, DVAR_SYNC_ON_WRITE,
		                            DVAR_AGG_SUM, &x);
		rjob j = { .t = t, .v = v, .body = body_scatter, .kind = DVAR_SCATTER_ADD,
			   .bad_replica = -1 };

		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_ADD, idx, 1, &x),
		                 DVAR_EINVAL);
		tu_assert_error_contains("scalar");
		run_job(&j);
		for (int l = 0; l < t->R; l++)
			assert_int_equal(j.rc[l], DVAR_EINVAL);
		dvar_variable_free(v);
	}

	/* ON_READ variables refuse every scatter, with TF's texts. */
	for (size_t a = 0; a < 4; a++) {
		dvar_variable *v = make_var(t->s, "r", DVAR_FLOAT32, 2, dims, DVAR_SYNC_ON_READ,
		                            all_aggs[a], base);
		model m = { t, DVAR_SYNC_ON_READ, all_aggs[a], K_ASSIGN, 0, scatter_base, NULL };

		for (int op = DVAR_SCATTER_UPDATE; op <= DVAR_SCATTER_MAX; op++) {
			rjob j = { .t = t, .v = v, .body = body_scatter, .kind = op, .bad_replica = -1 };
			int64_t idx[1] = { 0 };
			float upd[SCOLS] = { 1, 1 };
			char text[256];

			assert_int_equal(dvar_variable_scatter(v, NULL, op, idx, 1, upd), DVAR_ENOTSUPP);
			snprintf(text, sizeof text,
			         "ON_READ variables doesn't support `%s` in cross replica context",
			         scatter_names[op]);
			tu_assert_error_contains(text);
			run_job(&j);
			snprintf(text, sizeof text,
			         "Variables with `synchronization=ON_READ` doesn't support `%s`",
			         scatter_names[op]);
			for (int l = 0; l < t->R; l++) {
				assert_int_equal(j.rc[l], DVAR_ENOTSUPP);
				if (!strstr(j.msg[l], text))
					fail_msg("%s", j.msg[l]);
			}
		}
		m.kind = K_ASSIGN;
		m.gen = NULL;
		assert_components(t, v, expect_base, &m, "ON_READ scatters change nothing");
		dvar_variable_free(v);
	}
}

static void test_runtime_variables__scatter_errors(void **state)
{
	(void)state;
	for_each_topology(scatter_errors);
}

/* ---------------------------------------------------------------- dtypes */

static double small_base(size_t i)
{
	return (double)(i % 4);
}

static double small_value(int id, size_t i)
{
	return (double)(id + 1) * (double)(i % 3 + 1);
}

static void dtypes(const topo *t)
{
	static const size_t sizes[] = { 1, 7, 1023 };

	for (size_t d = 0; d < NUM_NUMERIC; d++)
		for (size_t z = 0; z < 3; z++) {
			int dtype = numeric_dtypes[d];
			int64_t dims[1] = { (int64_t)sizes[z] };
			size_t nbytes = sizes[z] * dvar_dtype_size(dtype);
			void *base = xmalloc(nbytes);
			void *got = xmalloc(nbytes);
			void *want = xmalloc(nbytes);
			char what[128];
			dvar_variable *v;

			fill(dtype, base, sizes[z], small_base);
			snprintf(what, sizeof what, "%s[%zu]", dvar_dtype_name(dtype), sizes[z]);

			/* ON_WRITE SUM: replica r adds (r + 1) * k; integers wrap. */
			{
				model m = { t, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, K_ADD, 1, small_base,
					    small_value };
				rjob j = { .t = t, .body = body_update, .kind = K_ADD,
					   .gen = small_value };

				v = make_var(t->s, "d", dtype, 1, dims, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM,
				             base);
				j.v = v;
				run_job(&j);
				assert_job_ok(&j, what);
				assert_components(t, v, model_expect, &m, what);
				dvar_variable_free(v);
			}

			/* ON_READ: replica r assigns (r + 1) * k; reads aggregate. */
			for (size_t a = 1; a < 4; a++) {
				int agg = all_aggs[a];
				rjob j = { .t = t, .body = body_update, .kind = K_ASSIGN,
					   .gen = small_value };

				if (agg == DVAR_AGG_MEAN && !dvar_kernel_is_floating(dtype))
					continue;
				v = make_var(t->s, "o", dtype, 1, dims, DVAR_SYNC_ON_READ, agg, base);
				j.v = v;
				run_job(&j);
				assert_job_ok(&j, what);
				assert_int_equal(dvar_variable_read(v, NULL, got, nbytes), DVAR_OK);
				for (size_t i = 0; i < sizes[z]; i++) {
					double k = (double)(i % 3 + 1);
					double sum = k * t->N * (t->N + 1) / 2.0;

					tu_put(dtype, want, i,
					    agg == DVAR_AGG_SUM    ? sum
					    : agg == DVAR_AGG_MEAN ? sum / t->N
					                           : k);
				}
				assert_elems(dtype, got, want, sizes[z], what);
				dvar_variable_free(v);
			}
			free(base);
			free(got);
			free(want);
		}
}

static void test_runtime_variables__dtypes(void **state)
{
	(void)state;
	for_each_topology(dtypes);
}

static double bool_pattern(size_t i)
{
	return (double)(i % 2);
}

static double bool_replica(int id, size_t i)
{
	return (double)((i + (size_t)id) % 3 == 0);
}

static double expect_bool_pattern(const void *ctx, int id, size_t i)
{
	return bool_pattern(i);
}

static double expect_bool_own(const void *ctx, int id, size_t i)
{
	return bool_replica(id, i);
}

static double expect_bool_first(const void *ctx, int id, size_t i)
{
	return bool_replica(0, i);
}

static double expect_bool_not(const void *ctx, int id, size_t i)
{
	return 1 - bool_pattern(i);
}

static double not_pattern(size_t i)
{
	return 1 - bool_pattern(i);
}

/* bool: assignments and reads that only move values work; arithmetic fails. */
static void bools(const topo *t)
{
	int64_t dims[1] = { 7 };
	unsigned char pattern[7], flipped[7], got[7];
	dvar_variable *v;

	fill(DVAR_BOOL, pattern, 7, bool_pattern);
	fill(DVAR_BOOL, flipped, 7, not_pattern);
	v = make_var(t->s, "b", DVAR_BOOL, 1, dims, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE, pattern);
	assert_components(t, v, expect_bool_pattern, NULL, "bool initial value");
	assert_int_equal(dvar_variable_assign(v, NULL, flipped), DVAR_OK);
	assert_components(t, v, expect_bool_not, NULL, "bool cross-replica assign");
	assert_int_equal(dvar_variable_assign_add(v, NULL, pattern), DVAR_EINVAL);
	tu_assert_error_contains("bool");
	assert_int_equal(dvar_variable_assign_sub(v, NULL, pattern), DVAR_EINVAL);
	assert_components(t, v, expect_bool_not, NULL, "bool after refused arithmetic");
	{
		int64_t idx[2] = { 0, 6 };
		unsigned char one[2] = { 1, 1 };

		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_ADD, idx, 2, one),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_MAX, idx, 2, one),
		                 DVAR_EINVAL);
		assert_int_equal(dvar_variable_scatter(v, NULL, DVAR_SCATTER_UPDATE, idx, 2, one),
		                 DVAR_OK);
		assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got), DVAR_OK);
		assert_int_equal(got[0], 1);
		assert_int_equal(got[6], 1);
		assert_int_equal(got[1], 0);
	}
	{
		rjob j = { .t = t, .v = v, .body = body_update, .kind = K_ASSIGN,
			   .gen = bool_replica };

		run_job(&j);
		assert_job_ok(&j, "bool NONE replica assign");
		assert_components(t, v, expect_bool_own, NULL, "bool NONE replica assign");
		j.kind = K_ADD;
		run_job(&j);
		for (int l = 0; l < t->R; l++)
			assert_int_equal(j.rc[l], DVAR_EINVAL);
	}
	dvar_variable_free(v);

	/* ONLY_FIRST_REPLICA broadcasts replica 0's bools; SUM cannot add them. */
	v = make_var(t->s, "b1", DVAR_BOOL, 1, dims, DVAR_SYNC_ON_WRITE,
	             DVAR_AGG_ONLY_FIRST_REPLICA, pattern);
	{
		rjob j = { .t = t, .v = v, .body = body_update, .kind = K_ASSIGN,
			   .gen = bool_replica };

		run_job(&j);
		assert_job_ok(&j, "bool ONLY_FIRST_REPLICA replica assign");
		assert_components(t, v, expect_bool_first, NULL, "bool ONLY_FIRST_REPLICA");
	}
	dvar_variable_free(v);
	v = make_var(t->s, "bs", DVAR_BOOL, 1, dims, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, pattern);
	{
		rjob j = { .t = t, .v = v, .body = body_update, .kind = K_ASSIGN,
			   .gen = bool_replica };

		run_job(&j);
		for (int l = 0; l < t->R; l++) {
			assert_int_equal(j.rc[l], DVAR_EINVAL);
			assert_non_null(strstr(j.msg[l], "bool"));
		}
		assert_components(t, v, expect_bool_pattern, NULL, "bool SUM refused");
	}
	dvar_variable_free(v);

	/* ON_READ bools: ONLY_FIRST_REPLICA reads replica 0's; SUM cannot. */
	v = make_var(t->s, "rb", DVAR_BOOL, 1, dims, DVAR_SYNC_ON_READ,
	             DVAR_AGG_ONLY_FIRST_REPLICA, pattern);
	{
		rjob j = { .t = t, .v = v, .body = body_update, .kind = K_ASSIGN,
			   .gen = bool_replica };

		run_job(&j);
		assert_job_ok(&j, "ON_READ bool assign");
		assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got), DVAR_OK);
		for (size_t i = 0; i < 7; i++)
			assert_int_equal(got[i], (int)bool_replica(0, i));
	}
	dvar_variable_free(v);
	v = make_var(t->s, "rbs", DVAR_BOOL, 1, dims, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, pattern);
	assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got), DVAR_EINVAL);
	tu_assert_error_contains("bool");
	dvar_variable_free(v);
}

static void test_runtime_variables__bool(void **state)
{
	(void)state;
	for_each_topology(bools);
}

/* ---------------------------------------------------------------- one large variable */

static int init_large(void *arg, int replica_id, int dtype, const dvar_shape *shape, void *dst)
{
	float *f = dst;
	uint64_t n;

	if (dvar_shape_num_elements(shape, &n) != DVAR_OK)
		return DVAR_EINVAL;
	for (uint64_t i = 0; i < n; i++)
		f[i] = (float)(i % 1024);
	return DVAR_OK;
}

static int body_add_shared(rjob *j, dvar_replica *ctx, int id, int local)
{
	return dvar_variable_assign_add(j->v, ctx, j->shared);
}

/* 64 MiB of float32: created from worker 0, read across replicas in pieces,
 * updated in replica context. */
static void test_runtime_variables__large(void **state)
{
	const size_t count = (size_t)16 << 20;
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_strategy *s;
	dvar_variable *v;
	float *buf = xmalloc(count * sizeof *buf);
	float *one = xmalloc(count * sizeof *one);
	int n;

	(void)state;
	o.replicas = 2;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	n = dvar_strategy_num_replicas_in_sync(s);
	spec.name = "big";
	spec.dtype = DVAR_FLOAT32;
	dvar_shape_init(&spec.shape, 1, (int64_t[]){ (int64_t)count });
	spec.synchronization = DVAR_SYNC_ON_READ;
	spec.aggregation = DVAR_AGG_SUM;
	spec.init = init_large;
	assert_int_equal(dvar_variable_create(&v, s, &spec), DVAR_OK);
	assert_int_equal(dvar_variable_nbytes(v), (size_t)64 << 20);

	assert_int_equal(dvar_variable_read_local(v, 1, buf, count * sizeof *buf), DVAR_OK);
	for (size_t i = 0; i < count; i++)
		if (buf[i] != (float)(i % 1024))
			fail_msg("component 1, element %zu: %g", i, buf[i]);
	assert_int_equal(dvar_variable_read(v, NULL, buf, count * sizeof *buf), DVAR_OK);
	for (size_t i = 0; i < count; i++)
		if (buf[i] != (float)(n * (int)(i % 1024)))
			fail_msg("SUM read, element %zu: %g", i, buf[i]);

	/* Every replica adds 1 to its own component: the SUM grows by N. */
	for (size_t i = 0; i < count; i++)
		one[i] = 1.0f;
	{
		topo t = { s, 2, dvar_strategy_num_workers(s), dvar_strategy_worker_id(s), n };
		rjob j = { .t = &t, .v = v, .body = body_add_shared, .shared = one };

		run_job(&j);
		assert_job_ok(&j, "64 MiB assign_add");
	}
	assert_int_equal(dvar_variable_read(v, NULL, buf, count * sizeof *buf), DVAR_OK);
	for (size_t i = 0; i < count; i++)
		if (buf[i] != (float)(n * (int)(i % 1024) + n))
			fail_msg("SUM read after assign_add, element %zu: %g", i, buf[i]);
	free(buf);
	free(one);
	dvar_variable_free(v);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- unsaveable marks */

/* Open a scope named f, do one thing, and say whether the scope can be saved. */
static int scope_saveable(dvar_strategy *s, void (*body)(void *), void *arg)
{
	int rc;

	assert_int_equal(dvar_strategy_function_begin(s, "f_with_input_signature_test"), DVAR_OK);
	body(arg);
	rc = dvar_strategy_check_saveable(s);
	if (rc != DVAR_OK) {
		assert_int_equal(rc, DVAR_EINVAL);
		tu_assert_error_contains("Unable to save function f_with_input_signature_test for the "
		                         "following reason(s):\n");
		tu_assert_error_contains(dvar_unsaveable_reason);
	}
	assert_int_equal(dvar_strategy_function_end(s), DVAR_OK);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_OK);
	return rc == DVAR_OK;
}

typedef struct {
	const topo *t;
	dvar_variable *v;
	int what; /* 0..2 dense kinds, 3.. scatter ops, 8 read */
	int in_replica;
	void *buf;
} mark_job;

static int body_mark(rjob *j, dvar_replica *ctx, int id, int local)
{
	const mark_job *mj = j->shared;
	int64_t idx[1] = { 0 };

	if (mj->what <= K_SUB)
		return dense_update(mj->v, ctx, mj->what, mj->buf);
	if (mj->what < 8)
		return dvar_variable_scatter(mj->v, ctx, (dvar_scatter_op)(mj->what - 3), idx, 1,
		                             mj->buf);
	return dvar_variable_read(mj->v, ctx, j->out[local], dvar_variable_nbytes(mj->v));
}

static void do_mark(void *arg)
{
	mark_job *mj = arg;

	if (mj->in_replica) {
		float reads[MAX_R][SCOLS];
		rjob j = { .t = mj->t, .v = mj->v, .body = body_mark, .shared = mj };

		for (int l = 0; l < MAX_R; l++)
			j.out[l] = reads[l];
		run_job(&j);
		return;
	}
	if (mj->what <= K_SUB)
		(void)dense_update(mj->v, NULL, mj->what, mj->buf);
	else if (mj->what < 8)
		(void)dvar_variable_scatter(mj->v, NULL, (dvar_scatter_op)(mj->what - 3),
		                            (const int64_t[]){ 0 }, 1, mj->buf);
	else
		(void)dvar_variable_read(mj->v, NULL, mj->buf, dvar_variable_nbytes(mj->v));
}

static void unsaveable(const topo *t)
{
	static const int syncs[] = { DVAR_SYNC_ON_WRITE, DVAR_SYNC_ON_READ };
	int64_t dims[1] = { SCOLS };
	float buf[SCOLS] = { 1, 2 };

	for (size_t si = 0; si < 2; si++)
		for (size_t a = 0; a < 4; a++) {
			int sync = syncs[si], agg = all_aggs[a];
			dvar_variable *v = make_var(t->s, "m", DVAR_FLOAT32, 1, dims, sync, agg, buf);

			for (int in_replica = 0; in_replica <= 1; in_replica++)
				for (int what = 0; what <= 8; what++) {
					mark_job mj = { t, v, what, in_replica, buf };
					int saveable = scope_saveable(t->s, do_mark, &mj);
					int want;

					if (what < 8)
						want = 0; /* every update marks */
					else if (in_replica || sync == DVAR_SYNC_ON_WRITE)
						want = 1;
					else if (agg == DVAR_AGG_SUM)
						want = 0;
					else if (agg == DVAR_AGG_MEAN)
						want = t->W == 1;
					else
						want = 1; /* ONLY_FIRST_REPLICA; NONE fails without a mark */
					if (saveable != want)
						fail_msg("sync %d agg %d what %d in_replica %d: saveable %d", sync,
						         agg, what, in_replica, saveable);
				}

			/* Outside a scope nothing is marked. */
			assert_int_equal(dvar_variable_assign(v, NULL, buf), DVAR_OK);
			if (sync == DVAR_SYNC_ON_READ && agg == DVAR_AGG_SUM)
				assert_int_equal(dvar_variable_read(v, NULL, buf, sizeof buf), DVAR_OK);
			assert_int_equal(dvar_strategy_check_saveable(t->s), DVAR_OK);
			dvar_variable_free(v);
		}
}

static void test_runtime_variables__unsaveable(void **state)
{
	(void)state;
	for_each_topology(unsaveable);
}

/* ---------------------------------------------------------------- argument errors */

static double one_two_three(size_t i)
{
	return (double)(i + 1);
}

static void bad_arguments(const topo *t)
{
	float x[3] = { 1, 2, 3 }, got[3];
	int64_t dims[1] = { 3 };
	dvar_variable *v = make_var(t->s, "a", DVAR_FLOAT32, 1, dims, DVAR_SYNC_ON_WRITE,
	                            DVAR_AGG_NONE, x);
	dvar_variable *r = make_var(t->s, "b", DVAR_FLOAT32, 1, dims, DVAR_SYNC_ON_READ, DVAR_AGG_SUM,
	                            x);

	assert_int_equal(dvar_variable_read(v, NULL, got, sizeof got - 1), DVAR_ESHAPE);
	assert_int_equal(dvar_variable_read(v, NULL, NULL, sizeof got), DVAR_EINVAL);
	/* A collective read that fails on one worker fails on all of them. */
	{
		int rc = dvar_variable_read(r, NULL, got, t->worker == 0 ? 4 : sizeof got);

		if (t->worker == 0)
			assert_int_equal(rc, DVAR_ESHAPE);
		else
			assert_int_not_equal(rc, DVAR_OK);
	}
	assert_int_equal(dvar_variable_read(r, NULL, got, sizeof got), DVAR_OK);
	for (int i = 0; i < 3; i++)
		assert_true(got[i] == x[i] * t->N);
	assert_int_equal(dvar_variable_read_local(v, t->R, got, sizeof got), DVAR_EINVAL);
	tu_assert_error_contains("out of range");
	assert_int_equal(dvar_variable_read_local(v, -1, got, sizeof got), DVAR_EINVAL);
	assert_int_equal(dvar_variable_read_local(v, 0, got, 11), DVAR_ESHAPE);
	assert_int_equal(dvar_variable_read(NULL, NULL, got, sizeof got), DVAR_EINVAL);
	assert_int_equal(dvar_variable_read_local(NULL, 0, got, sizeof got), DVAR_EINVAL);
	assert_int_equal(dvar_variable_assign(NULL, NULL, x), DVAR_EINVAL);
	assert_int_equal(dvar_variable_assign(v, NULL, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_variable_assign_add(NULL, NULL, x), DVAR_EINVAL);
	assert_int_equal(dvar_variable_scatter(NULL, NULL, DVAR_SCATTER_ADD, NULL, 0, NULL),
	                 DVAR_EINVAL);
	assert_null(dvar_variable_name(NULL));
	assert_null(dvar_variable_component_name(NULL, 0));
	assert_null(dvar_variable_shape(NULL));
	assert_null(dvar_variable_strategy(NULL));
	assert_int_equal(dvar_variable_nbytes(NULL), 0);
	assert_int_equal(dvar_variable_trainable(NULL), 0);
	dvar_variable_free(v);
	dvar_variable_free(r);
}

/* Replica 1 passes no value to an aggregated update: it fails with
 * DVAR_EINVAL, the others' collective fails instead of waiting, and no
 * component changes. */
static int body_null_on_one(rjob *j, dvar_replica *ctx, int id, int local)
{
	return dvar_variable_assign_add(j->v, ctx, id == 1 ? NULL : j->shared);
}

static void null_on_one_replica(const topo *t)
{
	float x[3] = { 1, 2, 3 };
	int64_t dims[1] = { 3 };
	model m = { t, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, K_ASSIGN, 0, NULL, NULL };

	if (t->N == 1)
		return;
	for (size_t a = 1; a < 4; a++) {
		dvar_variable *v = make_var(t->s, "n", DVAR_FLOAT32, 1, dims, DVAR_SYNC_ON_WRITE,
		                            all_aggs[a], x);
		rjob j = { .t = t, .v = v, .body = body_null_on_one, .shared = x };
		int rc = dvar_strategy_run(t->s, rjob_main, &j);

		/* A collective that failed because a peer left fails the run too. */
		(void)rc;
		for (int l = 0; l < t->R; l++) {
			if (global_id(t, l) == 1) {
				assert_int_equal(j.rc[l], DVAR_EINVAL);
				assert_non_null(strstr(j.msg[l], "value is NULL"));
			} else {
				assert_int_not_equal(j.rc[l], DVAR_OK);
			}
		}
		m.base = one_two_three;
		assert_components(t, v, expect_base, &m, "an update refused on one replica");
		dvar_variable_free(v);
	}
}

static void test_runtime_variables__null_on_one_replica(void **state)
{
	(void)state;
	for_each_topology(null_on_one_replica);
}

static void test_runtime_variables__bad_arguments(void **state)
{
	(void)state;
	for_each_topology(bad_arguments);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_variables__create_names),
		cmocka_unit_test(test_runtime_variables__create_errors),
		cmocka_unit_test(test_runtime_variables__spec_mismatch),
		cmocka_unit_test(test_runtime_variables__on_write_replica),
		cmocka_unit_test(test_runtime_variables__on_read_replica),
		cmocka_unit_test(test_runtime_variables__first_replica_across_workers),
		cmocka_unit_test(test_runtime_variables__on_read_table),
		cmocka_unit_test(test_runtime_variables__cross_replica),
		cmocka_unit_test(test_runtime_variables__on_read_split),
		cmocka_unit_test(test_runtime_variables__split_sum),
		cmocka_unit_test(test_runtime_variables__scatter),
		cmocka_unit_test(test_runtime_variables__scatter_errors),
		cmocka_unit_test(test_runtime_variables__dtypes),
		cmocka_unit_test(test_runtime_variables__bool),
		cmocka_unit_test(test_runtime_variables__large),
		cmocka_unit_test(test_runtime_variables__unsaveable),
		cmocka_unit_test(test_runtime_variables__bad_arguments),
		cmocka_unit_test(test_runtime_variables__null_on_one_replica),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
