/*
 * Saving, continued: the replica check on mirrored variables, asynchronous
 * saves (the same checkpoint as a synchronous save, committed by wait or
 * poll, failures surfacing), and TensorFlow's every-worker pattern. Runs
 * alone and under mpirun; every rank takes the same collective steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "store_tu.h"

#define MIB (1u << 20)

static dvar_write_options quick_writes(void)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;

	o.flags = DVAR_WRITE_NO_FSYNC;
	o.compress = DVAR_COMPRESS_NONE;
	o.threads = 2;
	o.chunk_size = MIB;
	return o;
}

static dvar_variable *make_var(dvar_strategy *s, const char *name, int dtype, int64_t count,
                               int sync, int agg)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	dvar_variable *v = NULL;

	spec.name = name;
	spec.dtype = dtype;
	spec.shape.rank = 1;
	spec.shape.dims[0] = count;
	spec.synchronization = sync;
	spec.aggregation = agg;
	assert_int_equal(dvar_variable_create(&v, s, &spec), DVAR_OK);
	return v;
}

static size_t count_of(dvar_variable *v)
{
	return dvar_variable_nbytes(v) / dvar_dtype_size(dvar_variable_dtype(v));
}

/* Cross-replica assign of base + i * step to element i. */
static void assign_ramp(dvar_variable *v, double base, double step)
{
	size_t n = count_of(v);
	unsigned char *buf = malloc(dvar_variable_nbytes(v) + 1);

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++)
		tu_put(dvar_variable_dtype(v), buf, i, base + (double)(i % 1000) * step);
	assert_int_equal(dvar_variable_assign(v, NULL, buf), DVAR_OK);
	free(buf);
}

struct per_replica_job {
	dvar_variable *v;
	int target;   /* the global replica that changes, -1 for all */
	size_t index; /* the element it changes */
	double value; /* ON_READ: each replica's value is value + its id */
};

/* Replica context: ON_WRITE NONE updates only this replica's component. */
static int per_replica(dvar_replica *ctx, void *arg)
{
	struct per_replica_job *j = arg;
	size_t nbytes = dvar_variable_nbytes(j->v);
	int dtype = dvar_variable_dtype(j->v);
	unsigned char *buf = malloc(nbytes + 1);
	int id = dvar_replica_id(ctx), rc;

	if (!buf)
		return DVAR_ENOMEM;
	rc = dvar_variable_read(j->v, ctx, buf, nbytes);
	if (rc == DVAR_OK && j->target < 0)
		for (size_t i = 0; i < nbytes / dvar_dtype_size(dtype); i++)
			tu_put(dtype, buf, i, j->value + id + (double)(i % 7));
	else if (rc == DVAR_OK && id == j->target)
		tu_put(dtype, buf, j->index, tu_get(dtype, buf, j->index) + 1);
	if (rc == DVAR_OK)
		rc = dvar_variable_assign(j->v, ctx, buf);
	free(buf);
	return rc;
}

static void change_replica(dvar_strategy *s, dvar_variable *v, int target, size_t index)
{
	struct per_replica_job j = { v, target, index, 0 };

	assert_int_equal(dvar_strategy_run(s, per_replica, &j), DVAR_OK);
}

static void set_per_replica(dvar_strategy *s, dvar_variable *v, double value)
{
	struct per_replica_job j = { v, -1, 0, value };

	assert_int_equal(dvar_strategy_run(s, per_replica, &j), DVAR_OK);
}

static int save_flags(dvar_strategy *s, const char *root, int64_t step, dvar_variable **vars,
                      size_t n, unsigned int flags, int async)
{
	dvar_write_options wo = quick_writes();
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

	so.write = &wo;
	so.flags = flags;
	return async ? dvar_save_async(s, root, step, vars, n, &so)
	             : dvar_save(s, root, step, vars, n, &so);
}

/* The bytes and the replica_check attribute of name in checkpoint path. */
static void *read_entry(const char *path, const char *name, size_t nbytes, char *check,
                        size_t cap)
{
	dvar_reader *r = NULL;
	void *buf = malloc(nbytes + 1);
	const char *value = NULL;
	size_t i;

	assert_non_null(buf);
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, i, NULL, buf, nbytes), DVAR_OK);
	check[0] = '\0';
	if (dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_REPLICA_CHECK, &value) == DVAR_OK)
		snprintf(check, cap, "%s", value);
	dvar_reader_free(r);
	return buf;
}

/* ---------------------------------------------------------------- the replica check */

static void test_async__replica_check(void **state)
{
	stu_topo t;
	char *root, latest[64], check[32], *path;
	dvar_variable *vars[2];
	size_t n = 3 * MIB / 4, where = MIB / 4 + 5; /* 3 check chunks; change the 2nd */
	float *before, *got;
	int rc;

	(void)state;
	/* Two replicas per worker: a mismatch inside a worker; one replica per
	 * worker: between workers (needs W > 1). */
	for (int R = 2; R >= 1; R--) {
		assert_int_equal(stu_topo_open(&t, R), DVAR_OK);
		if (t.N < 2) {
			dvar_strategy_free(t.s);
			continue;
		}
		root = stu_shared_dir(t.s);
		vars[0] = make_var(t.s, "w", DVAR_FLOAT32, (int64_t)n, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE);
		vars[1] = make_var(t.s, "b", DVAR_FLOAT32, 10, DVAR_SYNC_ON_WRITE, DVAR_AGG_MEAN);
		assign_ramp(vars[0], 1, 0.5);
		assign_ramp(vars[1], -3, 1);
		assert_int_equal(save_flags(t.s, root, 1, vars, 2, 0, 0), DVAR_OK);

		/* The last replica drifts in one element of the second MiB. */
		change_replica(t.s, vars[0], t.N - 1, where);
		rc = save_flags(t.s, root, 2, vars, 2, 0, 0);
		assert_int_equal(rc, DVAR_EMISMATCH);
		tu_assert_error_contains("mirrored variable 'w'");
		tu_assert_error_contains("bytes [1048576, 2097152)");
		tu_assert_error_contains("DVAR_SAVE_ALLOW_REPLICA_MISMATCH");
		{
			char want[160];

			if (R == 2)
				snprintf(want, sizeof want, "replica %d (worker %d) differs from replica %d "
				         "(worker %d)", t.N - 1, t.W - 1, t.N - 2, t.W - 1);
			else
				snprintf(want, sizeof want, "replica %d (worker %d) differs from replica 0 "
				         "(worker 0)", t.N - 1, t.W - 1);
			tu_assert_error_contains(want);
		}
		/* Asynchronous: judged when the save is finished. */
		assert_int_equal(save_flags(t.s, root, 2, vars, 2, 0, 1), DVAR_OK);
		assert_int_equal(dvar_save_wait(t.s), DVAR_EMISMATCH);
		tu_assert_error_contains("mirrored variable 'w'");
		tu_assert_error_contains("bytes [1048576, 2097152)");
		stu_sum_over_workers(t.s, 0);
		stu_latest_of(root, latest, sizeof latest);
		assert_string_equal(latest, "ckpt-1");
		assert_false(stu_exists_in(root, "ckpt-2"));
		assert_int_equal(stu_count_prefix(root, ".ckpt-2"), 0);

		/* Saved anyway: the primary, marked; the agreeing variable unmarked. */
		assert_int_equal(save_flags(t.s, root, 2, vars, 2, DVAR_SAVE_ALLOW_REPLICA_MISMATCH, 0),
		                 DVAR_OK);
		before = malloc(n * sizeof *before);
		assert_non_null(before);
		assert_int_equal(dvar_variable_read_local(vars[0], 0, before, n * sizeof *before),
		                 DVAR_OK);
		path = tu_path(root, "ckpt-2");
		got = read_entry(path, "w", n * sizeof *got, check, sizeof check);
		assert_string_equal(check, "mismatch");
		if (t.worker == 0)
			assert_memory_equal(got, before, n * sizeof *got);
		free(got);
		free(read_entry(path, "b", 10 * sizeof(float), check, sizeof check));
		assert_string_equal(check, "");
		free(path);

		/* Asynchronous and saved anyway: judged before writing, marked. */
		assert_int_equal(save_flags(t.s, root, 4, vars, 2, DVAR_SAVE_ALLOW_REPLICA_MISMATCH, 1),
		                 DVAR_OK);
		assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
		path = tu_path(root, "ckpt-4");
		free(read_entry(path, "w", n * sizeof(float), check, sizeof check));
		assert_string_equal(check, "mismatch");
		free(path);

		/* Not checked at all: saved, unmarked. */
		assert_int_equal(save_flags(t.s, root, 3, vars, 2, DVAR_SAVE_SKIP_REPLICA_CHECK, 0),
		                 DVAR_OK);
		path = tu_path(root, "ckpt-3");
		free(read_entry(path, "w", n * sizeof(float), check, sizeof check));
		assert_string_equal(check, "");
		free(path);

		free(before);
		dvar_variable_free(vars[0]);
		dvar_variable_free(vars[1]);
		stu_drop_shared_dir(t.s, root);
		dvar_strategy_free(t.s);
	}
}

/*
 * Three replicas per worker: the pieces of the values are dealt out to the
 * replicas' threads, so one thread may find replica 2 differing while
 * another finds replica 1. The save names the lowest replica that differs,
 * at its first differing piece, synchronous or not, and commits nothing;
 * once the replicas agree, the copies made piece by piece on every thread
 * are the values, whatever the caller assigns after dvar_save_async.
 */
static void test_async__replica_check_pieces(void **state)
{
	static const char *const names[3] = { "a", "b", "c" };
	/* 5 pieces; 2.5 pieces and 12 bytes; a few bytes. */
	const size_t n[3] = { 5 * MIB / 4, 5 * MIB / 8 + 3, 7 };
	stu_topo t;
	char *root, *path, want[256], check[32];
	dvar_variable *vars[3];
	int last;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 3), DVAR_OK);
	root = stu_shared_dir(t.s);
	for (int k = 0; k < 3; k++) {
		vars[k] = make_var(t.s, names[k], DVAR_FLOAT32, (int64_t)n[k], DVAR_SYNC_ON_WRITE,
		                   DVAR_AGG_NONE);
		assign_ramp(vars[k], k, 0.5);
	}
	/* On the last worker: replica 2 differs in piece 1 of 'a' and in 'b',
	 * replica 1 in piece 4 of 'a'. */
	last = (t.W - 1) * t.R;
	change_replica(t.s, vars[0], last + 2, MIB / 4 + 9);
	change_replica(t.s, vars[0], last + 1, MIB + 1);
	change_replica(t.s, vars[1], last + 2, 3);
	snprintf(want, sizeof want,
	         "mirrored variable 'a': replica %d (worker %d) differs from replica %d (worker %d) "
	         "in bytes [4194304, 5242880)",
	         last + 1, t.W - 1, last, t.W - 1);
	for (int async = 0; async < 2; async++) {
		int rc = save_flags(t.s, root, 1, vars, 3, 0, async);

		if (async) {
			assert_int_equal(rc, DVAR_OK);
			rc = dvar_save_wait(t.s);
		}
		assert_int_equal(rc, DVAR_EMISMATCH);
		tu_assert_error_contains(want);
		stu_sum_over_workers(t.s, 0);
		assert_false(stu_exists_in(root, "ckpt-1"));
		assert_int_equal(stu_count_prefix(root, ".ckpt-1"), 0);
	}

	/* Agreed again; changed right after the call returns. */
	for (int k = 0; k < 3; k++)
		assign_ramp(vars[k], k, 0.5);
	assert_int_equal(save_flags(t.s, root, 1, vars, 3, 0, 1), DVAR_OK);
	for (int k = 0; k < 3; k++)
		assign_ramp(vars[k], -7, 3);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	path = tu_path(root, "ckpt-1");
	for (int k = 0; k < 3; k++) {
		float *got = read_entry(path, names[k], n[k] * sizeof *got, check, sizeof check);

		assert_string_equal(check, "");
		for (size_t i = 0; i < n[k]; i++)
			assert_true(got[i] == (float)(k + (double)(i % 1000) * 0.5));
		free(got);
	}
	free(path);

	for (int k = 0; k < 3; k++)
		dvar_variable_free(vars[k]);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/*
 * On host memory an asynchronous save compares the replicas after the call
 * returned, holding the values: an update waits until its variable has been
 * read. A drift at the call is found even when the replicas are made to
 * agree right after it, and a variable freed right after the call is freed
 * once read, the save finishing with its values at the call.
 */
static void test_async__check_reads_the_call(void **state)
{
	const size_t n = 4 * MIB; /* 16 pieces, the drift in the last */
	stu_topo t;
	char *root, *path, want[160], check[32];
	dvar_variable *vars[2];
	float *agreed = malloc(n * sizeof *agreed), *got;

	(void)state;
	assert_non_null(agreed);
	for (size_t i = 0; i < n; i++)
		agreed[i] = (float)(2 + (double)(i % 1000) * 0.25);
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	root = stu_shared_dir(t.s);
	vars[0] = make_var(t.s, "w", DVAR_FLOAT32, (int64_t)n, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE);
	vars[1] = make_var(t.s, "v", DVAR_FLOAT32, (int64_t)n, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE);
	assign_ramp(vars[0], 1, 0.5);
	assign_ramp(vars[1], 3, 0.5);
	change_replica(t.s, vars[0], t.N - 1, n - 3);
	assert_int_equal(save_flags(t.s, root, 1, vars, 2, 0, 1), DVAR_OK);
	assert_int_equal(dvar_variable_assign(vars[0], NULL, agreed), DVAR_OK);
	assert_int_equal(dvar_save_wait(t.s), DVAR_EMISMATCH);
	snprintf(want, sizeof want,
	         "mirrored variable 'w': replica %d (worker %d) differs from replica %d (worker %d) "
	         "in bytes [15728640, 16777216)",
	         t.N - 1, t.W - 1, t.N - 2, t.W - 1);
	tu_assert_error_contains(want);
	stu_sum_over_workers(t.s, 0);
	assert_false(stu_exists_in(root, "ckpt-1"));

	/* Agreed now; one variable freed, the other changed, at once. */
	assert_int_equal(save_flags(t.s, root, 2, vars, 2, 0, 1), DVAR_OK);
	dvar_variable_free(vars[0]);
	assign_ramp(vars[1], -1, 1);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	path = tu_path(root, "ckpt-2");
	got = read_entry(path, "w", n * sizeof *got, check, sizeof check);
	assert_string_equal(check, "");
	assert_memory_equal(got, agreed, n * sizeof *got);
	free(got);
	got = read_entry(path, "v", n * sizeof *got, check, sizeof check);
	for (size_t i = 0; i < n; i++)
		assert_true(got[i] == (float)(3 + (double)(i % 1000) * 0.5));
	free(got);
	free(path);

	free(agreed);
	dvar_variable_free(vars[1]);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

struct add_job {
	dvar_variable *v;
	const float *delta;
};

/* Replica context: assign_add with the variable's aggregation (SUM: every
 * replica's delta, all-reduced over every worker, lands on every replica). */
static int add_in_replica(dvar_replica *ctx, void *arg)
{
	const struct add_job *a = arg;

	return dvar_variable_assign_add(a->v, ctx, a->delta);
}

/*
 * A training loop's pattern: each save returns and every replica at once
 * updates through a collective, waiting for (and helping) the check of the
 * value it changes, on every worker at its own moment. Each checkpoint holds
 * the values at its call; no step hangs.
 */
static void test_async__updates_in_replica_context(void **state)
{
	const size_t n = 3 * MIB / 2; /* 6 pieces */
	stu_topo t;
	char *root, name[32], check[32];
	dvar_variable *v;
	float *ones = malloc(n * sizeof *ones);
	struct add_job job;

	(void)state;
	assert_non_null(ones);
	for (size_t i = 0; i < n; i++)
		ones[i] = 1;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	root = stu_shared_dir(t.s);
	v = make_var(t.s, "w", DVAR_FLOAT32, (int64_t)n, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM);
	assign_ramp(v, 0, 1);
	job.v = v;
	job.delta = ones;
	for (int step = 1; step <= 4; step++) {
		/* The next save finishes this one first. */
		assert_int_equal(save_flags(t.s, root, step, &v, 1, 0, 1), DVAR_OK);
		assert_int_equal(dvar_strategy_run(t.s, add_in_replica, &job), DVAR_OK);
	}
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	for (int step = 1; step <= 4; step++) {
		char *path;
		float *got;

		snprintf(name, sizeof name, "ckpt-%d", step);
		path = tu_path(root, name);
		got = read_entry(path, "w", n * sizeof *got, check, sizeof check);
		assert_string_equal(check, "");
		for (size_t i = 0; i < n; i++)
			assert_true(got[i] == (float)((double)(i % 1000) + (double)(step - 1) * t.N));
		free(got);
		free(path);
	}
	free(ones);
	dvar_variable_free(v);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- asynchronous saves */

#define NVARS 4

typedef struct {
	dvar_variable *v[NVARS];
	int64_t plain_step;
	dvar_store_tensor plain;
} state_set;

static void make_state(dvar_strategy *s, state_set *st)
{
	st->v[0] = make_var(s, "dense", DVAR_FLOAT32, 5 * MIB / 4, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM);
	st->v[1] = make_var(s, "total", DVAR_INT32, 1001, DVAR_SYNC_ON_READ, DVAR_AGG_SUM);
	st->v[2] = make_var(s, "mean", DVAR_FLOAT64, 77, DVAR_SYNC_ON_READ, DVAR_AGG_MEAN);
	st->v[3] = make_var(s, "first", DVAR_INT64, 9, DVAR_SYNC_ON_READ,
	                    DVAR_AGG_ONLY_FIRST_REPLICA);
	memset(&st->plain, 0, sizeof st->plain);
	st->plain.name = "step";
	st->plain.dtype = DVAR_INT64;
	st->plain.data = &st->plain_step;
}

/* Values that differ with k, replica by replica where they may. */
static void fill_state(dvar_strategy *s, state_set *st, int k)
{
	assign_ramp(st->v[0], k, 0.25);
	for (int i = 1; i < NVARS; i++)
		set_per_replica(s, st->v[i], 10 * k + i);
	st->plain_step = 1000 + k;
}

static void free_state(state_set *st)
{
	for (int i = 0; i < NVARS; i++)
		dvar_variable_free(st->v[i]);
}

static int save_state(dvar_strategy *s, const char *root, int64_t step, state_set *st,
                      unsigned int flags, int async)
{
	dvar_write_options wo = quick_writes();
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

	so.write = &wo;
	so.flags = flags;
	so.tensors = &st->plain;
	so.num_tensors = 1;
	return async ? dvar_save_async(s, root, step, st->v, NVARS, &so)
	             : dvar_save(s, root, step, st->v, NVARS, &so);
}

/* Two checkpoints hold the same entries, bytes and attributes. */
static void assert_same_checkpoint(const char *a, const char *b)
{
	dvar_reader *ra = NULL, *rb = NULL;

	assert_int_equal(dvar_reader_open(&ra, a, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_open(&rb, b, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(ra), dvar_reader_num_vars(rb));
	for (size_t i = 0; i < dvar_reader_num_vars(ra); i++) {
		dvar_var_info ia, ib;
		size_t j;
		uint64_t nbytes = 0;
		void *x, *y;

		assert_int_equal(dvar_reader_var(ra, i, &ia), DVAR_OK);
		assert_int_equal(dvar_reader_find(rb, ia.name, &j), DVAR_OK);
		assert_int_equal(dvar_reader_var(rb, j, &ib), DVAR_OK);
		assert_int_equal(ia.dtype, ib.dtype);
		assert_int_equal(dvar_shape_num_bytes(&ia.shape, ia.dtype, &nbytes), DVAR_OK);
		x = malloc(nbytes + 1);
		y = malloc(nbytes + 1);
		assert_int_equal(dvar_reader_read(ra, i, NULL, x, nbytes), DVAR_OK);
		assert_int_equal(dvar_reader_read(rb, j, NULL, y, nbytes), DVAR_OK);
		assert_memory_equal(x, y, nbytes);
		free(x);
		free(y);
		assert_int_equal(dvar_reader_var_num_attrs(ra, i), dvar_reader_var_num_attrs(rb, j));
		for (size_t k = 0; k < dvar_reader_var_num_attrs(ra, i); k++) {
			const char *key, *va, *vb;

			assert_int_equal(dvar_reader_var_attr_at(ra, i, k, &key, &va), DVAR_OK);
			assert_int_equal(dvar_reader_var_attr(rb, j, key, &vb), DVAR_OK);
			assert_string_equal(va, vb);
		}
	}
	dvar_reader_free(ra);
	dvar_reader_free(rb);
}

static void test_async__same_as_sync(void **state)
{
	stu_topo t;
	state_set st;
	char *dir, *sync_root, *async_root, *a, *b, latest[64];
	int done = 0, polls = 0;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	dir = stu_shared_dir(t.s);
	sync_root = tu_path(dir, "sync");
	async_root = tu_path(dir, "async");
	make_state(t.s, &st);

	/* The state at k = 1, saved both ways; the asynchronous one is changed
	 * right after the call returns. */
	fill_state(t.s, &st, 1);
	assert_int_equal(save_state(t.s, sync_root, 1, &st, 0, 0), DVAR_OK);
	assert_int_equal(save_state(t.s, async_root, 1, &st, 0, 1), DVAR_OK);
	fill_state(t.s, &st, 2);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK); /* nothing pending */
	a = tu_path(sync_root, "ckpt-1");
	b = tu_path(async_root, "ckpt-1");
	assert_same_checkpoint(a, b);
	free(a);
	free(b);

	/* Committed by polling, as a training loop would. */
	assert_int_equal(save_state(t.s, sync_root, 2, &st, 0, 0), DVAR_OK);
	assert_int_equal(save_state(t.s, async_root, 2, &st, 0, 1), DVAR_OK);
	fill_state(t.s, &st, 3);
	while (!done) {
		assert_int_equal(dvar_save_poll(t.s, &done), DVAR_OK);
		polls++;
	}
	assert_true(polls >= 1);
	assert_int_equal(dvar_save_poll(t.s, &done), DVAR_OK);
	assert_int_equal(done, 1);
	stu_latest_of(async_root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-2");
	a = tu_path(sync_root, "ckpt-2");
	b = tu_path(async_root, "ckpt-2");
	assert_same_checkpoint(a, b);
	free(a);
	free(b);

	/* The next save finishes the pending one, synchronous or not. */
	assert_int_equal(save_state(t.s, async_root, 3, &st, 0, 1), DVAR_OK);
	assert_int_equal(save_state(t.s, async_root, 4, &st, 0, 1), DVAR_OK);
	assert_int_equal(save_state(t.s, async_root, 5, &st, 0, 0), DVAR_OK);
	stu_sum_over_workers(t.s, 0);
	assert_true(stu_exists_in(async_root, "ckpt-3"));
	assert_true(stu_exists_in(async_root, "ckpt-4"));
	stu_latest_of(async_root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-5");

	free_state(&st);
	free(sync_root);
	free(async_root);
	stu_drop_shared_dir(t.s, dir);
	dvar_strategy_free(t.s);
}

/* The chief pulls the staging directory away under a pending save. */
static void break_pending(const stu_topo *t, const char *root, int64_t step)
{
	char prefix[64];

	stu_sum_over_workers(t->s, 0); /* every part is open */
	snprintf(prefix, sizeof prefix, ".ckpt-%lld.dvartmp-", (long long)step);
	if (t->worker == 0) {
		assert_int_equal(stu_count_prefix(root, prefix), 1);
		{
			char cmd[1024];

			snprintf(cmd, sizeof cmd, "rm -rf '%s'/%s*", root, prefix);
			assert_int_equal(system(cmd), 0);
		}
	}
}

static void test_async__failure_surfaces(void **state)
{
	stu_topo t;
	state_set st;
	char *root, latest[64];

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	make_state(t.s, &st);
	fill_state(t.s, &st, 1);
	assert_int_equal(save_state(t.s, root, 1, &st, 0, 0), DVAR_OK);

	/* wait reports it, the same on every worker. */
	assert_int_equal(save_state(t.s, root, 2, &st, 0, 1), DVAR_OK);
	break_pending(&t, root, 2);
	assert_int_not_equal(dvar_save_wait(t.s), DVAR_OK);
	tu_assert_error_contains("saving step 2 to '");

	/* The next save reports it and saves nothing. */
	assert_int_equal(save_state(t.s, root, 3, &st, 0, 1), DVAR_OK);
	break_pending(&t, root, 3);
	assert_int_not_equal(save_state(t.s, root, 4, &st, 0, 0), DVAR_OK);
	tu_assert_error_contains("step 4 was not saved: saving step 3 to '");
	stu_sum_over_workers(t.s, 0);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-1");
	assert_false(stu_exists_in(root, "ckpt-2"));
	assert_false(stu_exists_in(root, "ckpt-3"));
	assert_false(stu_exists_in(root, "ckpt-4"));

	/* And the one after that works. */
	assert_int_equal(save_state(t.s, root, 4, &st, 0, 1), DVAR_OK);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-4");

	/* A strategy freed with a save pending: nothing committed, no staging. */
	assert_int_equal(save_state(t.s, root, 5, &st, 0, 1), DVAR_OK);
	free_state(&st);
	dvar_strategy_free(t.s);
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	stu_sum_over_workers(t.s, 0);
	assert_false(stu_exists_in(root, "ckpt-5"));
	assert_int_equal(stu_count_prefix(root, ".ckpt-5"), 0);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "ckpt-4");
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- every worker its own */

static void test_async__every_worker(void **state)
{
	stu_topo t;
	state_set st;
	char *dir, *shared, *own, name[32], *a, *b, check[8];
	int64_t first[9], want[9];

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	dir = stu_shared_dir(t.s);
	shared = tu_path(dir, "shared");
	snprintf(name, sizeof name, "worker-%d", t.worker);
	own = tu_path(dir, name);
	make_state(t.s, &st);
	fill_state(t.s, &st, 4);

	assert_int_equal(save_state(t.s, shared, 7, &st, 0, 0), DVAR_OK);
	assert_int_equal(save_state(t.s, own, 7, &st, DVAR_SAVE_EVERY_WORKER, 0), DVAR_OK);
	a = tu_path(own, "ckpt-7");
	b = tu_path(shared, "ckpt-7");
	/* A whole checkpoint of its own: one data file. */
	assert_true(stu_exists_in(a, "data-00000-of-00001"));
	/* The same values as the shared save, except ONLY_FIRST_REPLICA, which
	 * each worker takes from its own first replica. */
	if (t.worker == 0)
		assert_same_checkpoint(a, b);
	free(read_entry(a, "dense", 5 * MIB, check, sizeof check));
	{
		int64_t *got = read_entry(a, "first", sizeof first, check, sizeof check);

		assert_int_equal(dvar_variable_read_local(st.v[3], 0, want, sizeof want), DVAR_OK);
		memcpy(first, got, sizeof first);
		assert_memory_equal(first, want, sizeof want);
		free(got);
	}
	/* Asynchronous too. */
	assert_int_equal(save_state(t.s, own, 8, &st, DVAR_SAVE_EVERY_WORKER, 1), DVAR_OK);
	fill_state(t.s, &st, 5);
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK);
	free(b);
	b = tu_path(own, "ckpt-8");
	assert_same_checkpoint(a, b);

	free(a);
	free(b);
	free(shared);
	free(own);
	free_state(&st);
	stu_drop_shared_dir(t.s, dir);
	dvar_strategy_free(t.s);
}

static void test_async__bad_flags(void **state)
{
	stu_topo t;
	state_set st;
	char *root;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	make_state(t.s, &st);
	assert_int_equal(save_state(t.s, root, 1, &st, 1u << 7, 1), DVAR_EINVAL);
	tu_assert_error_contains("unknown save flags 0x80");
	if (t.W > 1) {
		/* Workers that disagree on the flags. */
		assert_int_equal(save_state(t.s, root, 1, &st,
		                            t.worker == 1 ? DVAR_SAVE_SKIP_REPLICA_CHECK : 0, 0),
		                 DVAR_EINVAL);
		tu_assert_error_contains("different flags: worker 0 passes 0x0, worker 1 passes 0x2");
	}
	assert_int_equal(dvar_save_poll(t.s, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_save_wait(NULL), DVAR_EINVAL);
	assert_int_equal(dvar_save_async(NULL, root, 1, st.v, NVARS, NULL), DVAR_EINVAL);
	stu_sum_over_workers(t.s, 0);
	assert_int_equal(stu_count_prefix(root, ""), 2); /* . and .. */
	free_state(&st);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* Staging that cannot be had fails the save on every worker, writing
 * nothing. (Under AddressSanitizer a 16 TiB request aborts instead of
 * returning NULL, so the case runs in the plain builds.) */
static void test_async__staging_out_of_memory(void **state)
{
#if defined(__SANITIZE_ADDRESS__)
	(void)state;
	skip();
#else
	stu_topo t;
	char *root, latest[64];
	static unsigned char never_read[1];
	dvar_store_tensor huge = { .name = "huge", .dtype = DVAR_UINT8, .data = never_read };
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_write_options wo = quick_writes();

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	huge.shape.rank = 1;
	huge.shape.dims[0] = (int64_t)1 << 44;
	so.write = &wo;
	so.tensors = &huge;
	so.num_tensors = 1;
	assert_int_equal(dvar_save_async(t.s, root, 1, NULL, 0, &so), DVAR_ENOMEM);
	tu_assert_error_contains("of staging");
	assert_int_equal(dvar_save_wait(t.s), DVAR_OK); /* nothing pending */
	stu_sum_over_workers(t.s, 0);
	stu_latest_of(root, latest, sizeof latest);
	assert_string_equal(latest, "");
	assert_int_equal(stu_count_prefix(root, ".ckpt-1"), 0);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_async__replica_check),
		cmocka_unit_test(test_async__replica_check_pieces),
		cmocka_unit_test(test_async__check_reads_the_call),
		cmocka_unit_test(test_async__updates_in_replica_context),
		cmocka_unit_test(test_async__same_as_sync),
		cmocka_unit_test(test_async__failure_surfaces),
		cmocka_unit_test(test_async__every_worker),
		cmocka_unit_test(test_async__bad_flags),
		cmocka_unit_test(test_async__staging_out_of_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
