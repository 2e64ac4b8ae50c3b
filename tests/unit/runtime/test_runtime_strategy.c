/*
 * tests/unit/runtime/test_runtime_strategy.c - the strategy: replica ids and
 * counts, persistent replica threads, how a failure anywhere reaches every
 * replica and worker (and that nothing hangs), mismatched collectives,
 * option checks, function scopes and TF's unsaveable message, and (under
 * mpirun) timeouts and workers that disagree on R.
 *
 * The same program runs alone and under `mpirun -np 2/3`: expectations are
 * computed from the worker count, and every rank runs the same tests in the
 * same order.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "runtime/runtime.h"

#define MAXR 4
#define MAXN 64

static int thread_count(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* A SUM all_reduce every replica can check: element i is g + i everywhere,
 * so the sum is N * i + N * (N - 1) / 2. */
static int check_sum(dvar_replica *ctx, int count)
{
	int n = dvar_replica_num_replicas(ctx), g = dvar_replica_id(ctx);
	int32_t buf[64];
	int rc;

	for (int i = 0; i < count; i++)
		buf[i] = g + i;
	rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_INT32, buf, buf, (size_t)count);
	if (rc != DVAR_OK)
		return rc;
	for (int i = 0; i < count; i++)
		if (buf[i] != n * i + n * (n - 1) / 2)
			return dvar_error_set(DVAR_ERROR, "replica %d: element %d is %d, expected %d", g, i,
			                      buf[i], n * i + n * (n - 1) / 2);
	return DVAR_OK;
}

static int sum_fn(dvar_replica *ctx, void *arg)
{
	(void)arg;
	return check_sum(ctx, 5);
}

/* ---------------------------------------------------------------- ids and threads */

struct ids {
	int id[MAXR], local[MAXR], num[MAXR];
	dvar_strategy *strategy[MAXR];
	pthread_t thread[MAXR];
	atomic_int calls;
};

static int ids_fn(dvar_replica *ctx, void *arg)
{
	struct ids *r = arg;
	int l = dvar_replica_local_id(ctx);

	r->id[l] = dvar_replica_id(ctx);
	r->local[l] = l;
	r->num[l] = dvar_replica_num_replicas(ctx);
	r->strategy[l] = dvar_replica_strategy(ctx);
	r->thread[l] = pthread_self();
	atomic_fetch_add(&r->calls, 1);
	return DVAR_OK;
}

static void test_runtime_strategy__ids_and_counts(void **state)
{
	(void)state;
	for (int R = 1; R <= MAXR; R++) {
		dvar_strategy *s = tu_strategy(R, 0);
		int W = dvar_strategy_num_workers(s), w = dvar_strategy_worker_id(s);
		struct ids r;

		memset(&r, 0, sizeof r);
		assert_true(W >= 1);
		assert_true(w >= 0 && w < W);
		assert_int_equal(dvar_strategy_local_replicas(s), R);
		assert_int_equal(dvar_strategy_num_replicas_in_sync(s), R * W);
		assert_int_equal(dvar_strategy_is_chief(s), w == 0);
		assert_int_equal(dvar_strategy_run(s, ids_fn, &r), DVAR_OK);
		assert_int_equal(atomic_load(&r.calls), R);
		for (int l = 0; l < R; l++) {
			assert_int_equal(r.id[l], w * R + l);
			assert_int_equal(r.local[l], l);
			assert_int_equal(r.num[l], R * W);
			assert_ptr_equal(r.strategy[l], s);
			assert_false(pthread_equal(r.thread[l], pthread_self()));
			for (int m = 0; m < l; m++)
				assert_false(pthread_equal(r.thread[l], r.thread[m]));
		}
		dvar_strategy_free(s);
	}
	assert_int_equal(dvar_replica_id(NULL), -1);
	assert_int_equal(dvar_replica_local_id(NULL), -1);
	assert_null(dvar_replica_strategy(NULL));
	dvar_strategy_free(NULL);
}

static void test_runtime_strategy__threads_persist(void **state)
{
	dvar_strategy *s = tu_strategy(3, 0);
	struct ids first, again;
	int threads;

	(void)state;
	memset(&first, 0, sizeof first);
	assert_int_equal(dvar_strategy_run(s, ids_fn, &first), DVAR_OK);
	threads = thread_count();
	assert_true(threads > 3);
	for (int k = 0; k < 20; k++) {
		memset(&again, 0, sizeof again);
		assert_int_equal(dvar_strategy_run(s, k % 2 ? sum_fn : ids_fn, &again), DVAR_OK);
		if (k % 2)
			continue;
		for (int l = 0; l < 3; l++)
			assert_true(pthread_equal(again.thread[l], first.thread[l]));
	}
	assert_int_equal(thread_count(), threads);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- failures */

enum { FAIL_BEFORE, FAIL_BETWEEN, FAIL_AFTER };

struct failing {
	int victim; /* the global id that fails */
	int when;
	int rc1[MAXR], rc2[MAXR];
	char msg2[MAXR][DVAR_ERROR_MESSAGE_MAX];
};

/* Everyone does two all_reduces; the victim fails before the first, between
 * them, or after both. */
static int failing_fn(dvar_replica *ctx, void *arg)
{
	struct failing *f = arg;
	int g = dvar_replica_id(ctx), l = dvar_replica_local_id(ctx);
	int victim = g == f->victim;

	f->rc1[l] = f->rc2[l] = 1;
	if (victim && f->when == FAIL_BEFORE)
		return dvar_error_set(DVAR_EIO, "boom %d", g);
	f->rc1[l] = check_sum(ctx, 4);
	if (victim && f->when == FAIL_BETWEEN)
		return dvar_error_set(DVAR_EIO, "boom %d", g);
	f->rc2[l] = check_sum(ctx, 4);
	snprintf(f->msg2[l], sizeof f->msg2[l], "%s", dvar_error_last()->message);
	if (victim)
		return dvar_error_set(DVAR_EIO, "boom %d", g);
	return f->rc2[l];
}

static void run_failing(dvar_strategy *s, int victim, int when)
{
	int R = dvar_strategy_local_replicas(s), W = dvar_strategy_num_workers(s);
	int w = dvar_strategy_worker_id(s);
	char expect[128];
	struct failing f;

	memset(&f, 0, sizeof f);
	f.victim = victim;
	f.when = when;
	assert_int_equal(dvar_strategy_run(s, failing_fn, &f), DVAR_EIO);
	snprintf(expect, sizeof expect, "replica %d (worker %d, local %d): boom %d", victim,
	         victim / R, victim % R, victim);
	assert_string_equal(dvar_error_last()->message, expect);
	for (int l = 0; l < R; l++) {
		int g = w * R + l;

		if (g == victim)
			continue;
		if (when == FAIL_AFTER) {
			assert_int_equal(f.rc1[l], DVAR_OK);
			assert_int_equal(f.rc2[l], DVAR_OK);
		} else if (when == FAIL_BETWEEN) {
			/* The others block in the second all_reduce until the failure frees them. */
			assert_int_equal(f.rc1[l], DVAR_OK);
			assert_int_equal(f.rc2[l], DVAR_ECOMM);
			snprintf(expect, sizeof expect, "failed: boom %d", victim);
			assert_non_null(strstr(f.msg2[l], expect));
		} else {
			assert_int_equal(f.rc1[l], DVAR_ECOMM);
		}
	}
	(void)W;
}

static void test_runtime_strategy__failure_reaches_everyone(void **state)
{
	(void)state;
	for (int R = 1; R <= MAXR; R++) {
		dvar_strategy *s = tu_strategy(R, 0);
		int N = dvar_strategy_num_replicas_in_sync(s);

		for (int victim = 0; victim < N; victim++) {
			for (int when = FAIL_BEFORE; when <= FAIL_AFTER; when++) {
				run_failing(s, victim, when);
				/* The strategy works again after a failed run. */
				assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
			}
		}
		dvar_strategy_free(s);
	}
}

/* Only the last replica of the last worker fails, while every other replica
 * of every worker waits for it in an all_reduce. */
static void test_runtime_strategy__failure_on_one_worker(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	int N = dvar_strategy_num_replicas_in_sync(s);

	(void)state;
	run_failing(s, N - 1, FAIL_BETWEEN);
	run_failing(s, N - 1, FAIL_BEFORE);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
}

static int silent_fn(dvar_replica *ctx, void *arg)
{
	(void)arg;
	return dvar_replica_id(ctx) == 0 ? DVAR_EIO : DVAR_OK;
}

static void test_runtime_strategy__failure_without_message(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	char expect[160];

	(void)state;
	assert_int_equal(dvar_strategy_run(s, silent_fn, NULL), DVAR_EIO);
	snprintf(expect, sizeof expect, "replica 0 (worker 0, local 0): returned %d (%s)", DVAR_EIO,
	         dvar_strerror(DVAR_EIO));
	assert_string_equal(dvar_error_last()->message, expect);
	dvar_strategy_free(s);
}

/* Local replicas 1 and 2 of every worker fail; replica 0 waits in an
 * all_reduce and gets an echo. The lowest original failure wins. */
static int two_fail_fn(dvar_replica *ctx, void *arg)
{
	int l = dvar_replica_local_id(ctx), g = dvar_replica_id(ctx);
	int *rc0 = arg;

	if (l == 2)
		tu_sleep_ms(5);
	if (l > 0)
		return dvar_error_set(l == 1 ? DVAR_EIO : DVAR_EINVAL, "failure %d", g);
	*rc0 = check_sum(ctx, 3);
	return *rc0;
}

static void test_runtime_strategy__lowest_original_failure_wins(void **state)
{
	dvar_strategy *s = tu_strategy(3, 0);
	int rc0 = 0;

	(void)state;
	for (int k = 0; k < 5; k++) {
		assert_int_equal(dvar_strategy_run(s, two_fail_fn, &rc0), DVAR_EIO);
		assert_string_equal(dvar_error_last()->message,
		                    "replica 1 (worker 0, local 1): failure 1");
		assert_int_equal(rc0, DVAR_ECOMM);
	}
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- mismatches */

struct mismatch {
	int kind;
	int rc[MAXR];
};

enum { MM_BROADCAST, MM_COUNT, MM_RETURNS, MM_EXTRA };

static int mismatch_fn(dvar_replica *ctx, void *arg)
{
	struct mismatch *m = arg;
	int g = dvar_replica_id(ctx), l = dvar_replica_local_id(ctx);
	int odd = g == dvar_replica_num_replicas(ctx) - 1;
	float buf[8] = { 0 };
	int rc;

	m->rc[l] = 1;
	switch (m->kind) {
	case MM_BROADCAST:
		if (odd)
			rc = dvar_replica_broadcast(ctx, 0, DVAR_FLOAT32, buf, 4);
		else
			rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 4);
		break;
	case MM_COUNT:
		rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, odd ? 5 : 4);
		break;
	case MM_RETURNS:
		if (odd)
			return DVAR_OK;
		rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 4);
		break;
	default: /* MM_EXTRA: the odd one calls one more collective */
		rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 4);
		if (rc == DVAR_OK && odd)
			rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, DVAR_FLOAT32, buf, buf, 4);
		break;
	}
	m->rc[l] = rc;
	/* The collective failed; a later one in the same run fails at once. */
	if (rc != DVAR_OK && dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 4) !=
	                         DVAR_ECOMM)
		return dvar_error_set(DVAR_ERROR, "a collective after the failure did not fail");
	return rc;
}

static void test_runtime_strategy__mismatched_collectives(void **state)
{
	(void)state;
	for (int R = 1; R <= 3; R++) {
		dvar_strategy *s = tu_strategy(R, 0);
		int N = dvar_strategy_num_replicas_in_sync(s);

		for (int kind = MM_BROADCAST; kind <= MM_EXTRA; kind++) {
			struct mismatch m;

			if (N == 1)
				continue; /* a single replica cannot disagree with itself */
			memset(&m, 0, sizeof m);
			m.kind = kind;
			assert_int_equal(dvar_strategy_run(s, mismatch_fn, &m), DVAR_ECOMM);
			tu_assert_error_contains("must make the same collective calls");
			for (int l = 0; l < R; l++)
				assert_true(m.rc[l] == DVAR_ECOMM || (kind == MM_RETURNS && m.rc[l] == 1) ||
				            (kind == MM_EXTRA && m.rc[l] == DVAR_OK));
			assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
		}
		dvar_strategy_free(s);
	}
}

/* A refused argument fails the call on every replica, and the run goes on. */
struct refused {
	int rc1[MAXR], rc2[MAXR];
	char msg1[MAXR][DVAR_ERROR_MESSAGE_MAX];
};

static int refused_fn(dvar_replica *ctx, void *arg)
{
	struct refused *r = arg;
	int g = dvar_replica_id(ctx), l = dvar_replica_local_id(ctx);
	int n = dvar_replica_num_replicas(ctx);
	uint8_t flags[4] = { 1, 0, 1, 0 };
	int32_t v[4] = { 0 };

	if (g == n - 1)
		r->rc1[l] = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_BOOL, flags, flags, 4);
	else
		r->rc1[l] = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_INT32, v, v, 4);
	snprintf(r->msg1[l], sizeof r->msg1[l], "%s", dvar_error_last()->message);
	r->rc2[l] = check_sum(ctx, 4);
	return r->rc2[l];
}

static void test_runtime_strategy__refused_argument(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	int R = 2, w = dvar_strategy_worker_id(s), N = dvar_strategy_num_replicas_in_sync(s);
	struct refused r;

	(void)state;
	memset(&r, 0, sizeof r);
	assert_int_equal(dvar_strategy_run(s, refused_fn, &r), DVAR_OK);
	for (int l = 0; l < R; l++) {
		char expect[64];

		if (w * R + l == N - 1) {
			assert_int_equal(r.rc1[l], DVAR_EINVAL);
			assert_non_null(strstr(r.msg1[l], "all_reduce"));
		} else {
			assert_int_equal(r.rc1[l], DVAR_ECOMM);
			snprintf(expect, sizeof expect, "replica %d", N - 1);
			assert_non_null(strstr(r.msg1[l], expect));
			assert_non_null(strstr(r.msg1[l], "failed"));
		}
		assert_int_equal(r.rc2[l], DVAR_OK);
	}
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- options */

static int nop_fn(dvar_replica *ctx, void *arg)
{
	(void)ctx;
	(void)arg;
	return DVAR_OK;
}

static void test_runtime_strategy__options(void **state)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL, *probe;
	int W;

	(void)state;
	assert_int_equal(dvar_strategy_create(&probe, NULL), DVAR_OK);
	assert_int_equal(dvar_strategy_local_replicas(probe), 1);
	W = dvar_strategy_num_workers(probe);
	assert_int_equal(dvar_strategy_run(probe, NULL, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_strategy_run(NULL, nop_fn, NULL), DVAR_EINVAL);
	dvar_strategy_free(probe);

	assert_int_equal(dvar_strategy_create(NULL, &o), DVAR_EINVAL);

	o.version = 99;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_EINVAL);
	assert_null(s);
	tu_assert_error_contains("version 99");
	o.version = DVAR_STRATEGY_OPTIONS_VERSION;

	o.replicas = 0; /* means 1 */
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_int_equal(dvar_strategy_local_replicas(s), 1);
	dvar_strategy_free(s);
	s = NULL;

	o.replicas = -1;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_EINVAL);
	tu_assert_error_contains("replicas = -1");
	o.replicas = 257;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_EINVAL);
	tu_assert_error_contains("replicas = 257");
	assert_null(s);
	o.replicas = 256;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
	s = NULL;
	o.replicas = 2;

	o.timeout_ms = -5;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_EINVAL);
	tu_assert_error_contains("timeout_ms = -5");
	o.timeout_ms = 0;

	o.workers = -1;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_EINVAL);
	tu_assert_error_contains("workers = -1");
	o.workers = W + 1;
	assert_int_not_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_null(s);
	tu_assert_error_contains("workers = ");

	/* workers = 1 stays on this process even under mpirun. */
	o.workers = 1;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_int_equal(dvar_strategy_num_workers(s), 1);
	assert_int_equal(dvar_strategy_worker_id(s), 0);
	assert_int_equal(dvar_strategy_num_replicas_in_sync(s), 2);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
	s = NULL;

	/* The world size, said explicitly. */
	o.workers = W;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_int_equal(dvar_strategy_num_workers(s), W);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
	s = NULL;

	/* Chunks of any size (tiny ones are rounded up). */
	o.workers = DVAR_WORKERS_AUTO;
	o.chunk_bytes = 1;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
}

/* run is not reentrant. */
static int reenter_fn(dvar_replica *ctx, void *arg)
{
	int *rc = arg;

	rc[dvar_replica_local_id(ctx)] = dvar_strategy_run(dvar_replica_strategy(ctx), nop_fn, NULL);
	return DVAR_OK;
}

static void test_runtime_strategy__run_is_not_reentrant(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	int rc[2] = { 0, 0 };

	(void)state;
	assert_int_equal(dvar_strategy_run(s, reenter_fn, rc), DVAR_OK);
	assert_int_equal(rc[0], DVAR_EINVAL);
	assert_int_equal(rc[1], DVAR_EINVAL);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- function scopes */

static const char tf_reason[] =
	"\n"
	"ConcreteFunction that uses distributed variables in certain way cannot be saved.\n"
	"If you're saving with\n"
	"\n"
	"tf.saved_model.save(..., signatures=f.get_concrete_function())\n"
	"\n"
	"do\n"
	"\n"
	"@tf.function(input_signature=...)\n"
	"def f_with_input_signature():\n"
	"  ...\n"
	"\n"
	"tf.saved_model.save(..., signatures=f_with_input_signature)`\n"
	"\n"
	"instead.";

static int mark_fn(dvar_replica *ctx, void *arg)
{
	const char *reason = arg;

	for (int i = 0; i < 10; i++)
		dvar_strategy_mark_unsaveable(dvar_replica_strategy(ctx), reason);
	return DVAR_OK;
}

static void test_runtime_strategy__function_scopes(void **state)
{
	dvar_strategy *s = tu_strategy(3, 0);
	char expect[2048];

	(void)state;
	assert_string_equal(dvar_unsaveable_reason, tf_reason);
	assert_int_equal(dvar_unsaveable_reason[0], '\n');

	/* Outside a scope: saveable, and marks are ignored. */
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_OK);
	dvar_strategy_mark_unsaveable(s, dvar_unsaveable_reason);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_OK);
	assert_int_equal(dvar_strategy_function_end(s), DVAR_EINVAL);

	assert_int_equal(dvar_strategy_function_begin(s, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_strategy_function_begin(s, ""), DVAR_EINVAL);
	assert_int_equal(dvar_strategy_function_begin(s, "train_step"), DVAR_OK);
	assert_int_equal(dvar_strategy_function_begin(s, "other"), DVAR_EINVAL);
	tu_assert_error_contains("train_step");
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_OK);

	/* Every replica marks the same reason: it is recorded once. */
	assert_int_equal(dvar_strategy_run(s, mark_fn, (void *)dvar_unsaveable_reason), DVAR_OK);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_EINVAL);
	snprintf(expect, sizeof expect,
	         "Unable to save function train_step for the following reason(s):\n%s", tf_reason);
	assert_string_equal(dvar_error_last()->message, expect);
	assert_non_null(strstr(dvar_error_last()->message, "f_with_input_signature"));

	/* A second, different reason is appended. */
	assert_int_equal(dvar_strategy_run(s, mark_fn, "another reason"), DVAR_OK);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_EINVAL);
	snprintf(expect, sizeof expect,
	         "Unable to save function train_step for the following reason(s):\n%s\nanother reason",
	         tf_reason);
	assert_string_equal(dvar_error_last()->message, expect);

	assert_int_equal(dvar_strategy_function_end(s), DVAR_OK);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_OK);

	/* A new scope starts clean. */
	assert_int_equal(dvar_strategy_function_begin(s, "f"), DVAR_OK);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_OK);
	dvar_strategy_mark_unsaveable(s, dvar_unsaveable_reason);
	assert_int_equal(dvar_strategy_check_saveable(s), DVAR_EINVAL);
	snprintf(expect, sizeof expect, "Unable to save function f for the following reason(s):\n%s",
	         tf_reason);
	assert_string_equal(dvar_error_last()->message, expect);
	/* Freeing a strategy with an open scope is fine. */
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- MPI only */

struct sleeper {
	int rc[MAXR];
	char msg[MAXR][DVAR_ERROR_MESSAGE_MAX];
};

static int sleeper_fn(dvar_replica *ctx, void *arg)
{
	struct sleeper *sl = arg;
	dvar_strategy *s = dvar_replica_strategy(ctx);
	int l = dvar_replica_local_id(ctx);
	float buf[4] = { 1, 2, 3, 4 };

	if (dvar_strategy_worker_id(s) == dvar_strategy_num_workers(s) - 1)
		tu_sleep_ms(1500);
	sl->rc[l] = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 4);
	snprintf(sl->msg[l], sizeof sl->msg[l], "%s", dvar_error_last()->message);
	return sl->rc[l];
}

static void test_runtime_strategy__timeout(void **state)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;
	struct sleeper sl;
	double start;

	(void)state;
	o.replicas = 2;
	o.timeout_ms = 300;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	if (dvar_strategy_num_workers(s) == 1) {
		/* Nobody to wait for: a run works, and the timeout is tested under mpirun. */
		assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
		dvar_strategy_free(s);
		skip();
	}
	memset(&sl, 0, sizeof sl);
	start = dvar_now();
	assert_int_equal(dvar_strategy_run(s, sleeper_fn, &sl), DVAR_ECOMM);
	tu_assert_error_contains("timed out after 300 ms");
	for (int l = 0; l < 2; l++) {
		assert_int_equal(sl.rc[l], DVAR_ECOMM);
		assert_non_null(strstr(sl.msg[l], "timed out"));
	}
	assert_true(dvar_now() - start < 30.0);
	/* The strategy is broken now: everything fails at once. */
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_ECOMM);
	tu_assert_error_contains("strategy is broken after an earlier timeout");
	dvar_strategy_free(s);

	/* A fresh strategy works. */
	s = tu_strategy(2, 0);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
}

static void test_runtime_strategy__workers_disagree_on_replicas(void **state)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), w = dvar_strategy_worker_id(s);

	(void)state;
	dvar_strategy_free(s);
	s = NULL;
	if (W == 1)
		skip(); /* one worker agrees with itself: tested under mpirun */
	o.replicas = w == 1 ? 3 : 2;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_EINVAL);
	assert_null(s);
	assert_string_equal(dvar_error_last()->message,
	                    "worker 1 has 3 replicas but worker 0 has 2: every worker must have the "
	                    "same number of replicas");
	/* One worker refuses its options: creation fails everywhere. */
	o.replicas = w == W - 1 ? 300 : 2;
	assert_int_not_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_null(s);
	tu_assert_error_contains("replicas = 300");
	/* And creation works again afterwards. */
	s = tu_strategy(2, 0);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_strategy__ids_and_counts),
		cmocka_unit_test(test_runtime_strategy__threads_persist),
		cmocka_unit_test(test_runtime_strategy__failure_reaches_everyone),
		cmocka_unit_test(test_runtime_strategy__failure_on_one_worker),
		cmocka_unit_test(test_runtime_strategy__failure_without_message),
		cmocka_unit_test(test_runtime_strategy__lowest_original_failure_wins),
		cmocka_unit_test(test_runtime_strategy__mismatched_collectives),
		cmocka_unit_test(test_runtime_strategy__refused_argument),
		cmocka_unit_test(test_runtime_strategy__options),
		cmocka_unit_test(test_runtime_strategy__run_is_not_reentrant),
		cmocka_unit_test(test_runtime_strategy__function_scopes),
		cmocka_unit_test(test_runtime_strategy__timeout),
		cmocka_unit_test(test_runtime_strategy__workers_disagree_on_replicas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
