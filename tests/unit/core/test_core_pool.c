/*
 * tests/unit/core/test_core_pool.c - the thread pool: every task runs once,
 * the first failure in task order wins and its message reaches the caller,
 * the pool's threads really run at once, a loop of a given width runs on no
 * more threads, workers start only when a loop needs them, and concurrent
 * callers serialize.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "core/core.h"

struct sum_ctx {
	size_t n;
	uint64_t *square;
	atomic_int *runs;
	atomic_uint_fast64_t total;
};

static int sum_task(void *p, size_t i)
{
	struct sum_ctx *c = p;

	c->square[i] = (uint64_t)i * i;
	atomic_fetch_add(&c->runs[i], 1);
	atomic_fetch_add(&c->total, i);
	return DVAR_OK;
}

/* Run sum_task over n and check every task ran exactly once. */
static void check_sum(dvar_pool *pool, size_t n)
{
	struct sum_ctx c = { n, calloc(n + 1, sizeof(uint64_t)), calloc(n + 1, sizeof(atomic_int)), 0 };

	assert_non_null(c.square);
	assert_non_null(c.runs);
	assert_int_equal(dvar_pool_for(pool, n, sum_task, &c), DVAR_OK);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(atomic_load(&c.runs[i]), 1);
		assert_int_equal(c.square[i], (uint64_t)i * i);
	}
	assert_int_equal(atomic_load(&c.total), (uint64_t)n * (n - 1) / 2); /* 0 for n = 0 too */
	free(c.square);
	free(c.runs);
}

static void test_core_pool__create_sizes(void **state)
{
	dvar_pool *pool = NULL;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 4), DVAR_OK);
	assert_int_equal(dvar_pool_size(pool), 4);
	dvar_pool_free(pool);
	assert_int_equal(dvar_pool_create(&pool, 0), DVAR_OK);
	assert_int_equal(dvar_pool_size(pool), cpus > 0 ? cpus : 1);
	dvar_pool_free(pool);
	assert_int_equal(dvar_pool_create(&pool, -3), DVAR_OK);
	assert_int_equal(dvar_pool_size(pool), cpus > 0 ? cpus : 1);
	dvar_pool_free(pool);
	assert_int_equal(dvar_pool_create(&pool, 1), DVAR_OK);
	assert_int_equal(dvar_pool_size(pool), 1);
	dvar_pool_free(pool);
	dvar_pool_free(NULL);
	/* The CPUs counted once are sysconf's, and the same on every call. */
	assert_int_equal(dvar_cpus(), cpus > 0 ? cpus : 1);
	assert_int_equal(dvar_cpus(), cpus > 0 ? cpus : 1);
	/* An I/O pool: as asked, else DVAR_IO_DEPTH more than the CPUs. */
	assert_int_equal(dvar_pool_io_threads(3), 3);
	assert_int_equal(dvar_pool_io_threads(1), 1);
	assert_int_equal(dvar_pool_io_threads(0), (cpus > 0 ? cpus : 1) + DVAR_IO_DEPTH);
	assert_int_equal(dvar_pool_io_threads(-1), (cpus > 0 ? cpus : 1) + DVAR_IO_DEPTH);
}

static void test_core_pool__sum(void **state)
{
	dvar_pool *pool;

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 4), DVAR_OK);
	check_sum(pool, 10000);
	dvar_pool_free(pool);
	/* the single-thread pool runs everything on the caller */
	assert_int_equal(dvar_pool_create(&pool, 1), DVAR_OK);
	check_sum(pool, 10000);
	dvar_pool_free(pool);
}

static void test_core_pool__sequential_calls(void **state)
{
	dvar_pool *pool;

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 3), DVAR_OK);
	for (size_t n = 0; n < 300; n++)
		check_sum(pool, n % 37);
	check_sum(pool, 0);
	check_sum(pool, 1);
	check_sum(pool, 2);
	dvar_pool_free(pool);
}

struct fail_ctx {
	atomic_int ran;
};

/* Tasks 300, 700 and 900 fail. 300 fails last in time (it sleeps), so the
 * pool must pick by task order, not by arrival. */
static int failing_task(void *p, size_t i)
{
	struct fail_ctx *c = p;

	atomic_fetch_add(&c->ran, 1);
	switch (i) {
	case 300:
		tu_sleep_ms(50);
		return dvar_error_set(DVAR_ECORRUPT, "task %zu: checksum mismatch", i);
	case 700:
		return dvar_error_set(DVAR_EIO, "task %zu: read failed", i);
	case 900:
		return dvar_error_set(DVAR_ESHAPE, "task %zu: bad shape", i);
	}
	return DVAR_OK;
}

static void check_first_failure(int size)
{
	struct fail_ctx c = { 0 };
	dvar_pool *pool;

	assert_int_equal(dvar_pool_create(&pool, size), DVAR_OK);
	dvar_error_clear();
	assert_int_equal(dvar_pool_for(pool, 1000, failing_task, &c), DVAR_ECORRUPT);
	assert_int_equal(atomic_load(&c.ran), 1000);
	assert_int_equal(dvar_error_last()->code, DVAR_ECORRUPT);
	assert_string_equal(dvar_error_last()->message, "task 300: checksum mismatch");

	/* A loop with no failure after a failed one reports success. */
	check_sum(pool, 500);

	/* Only tasks past 300 fail: the earliest of those wins. */
	atomic_store(&c.ran, 0);
	assert_int_equal(dvar_pool_for(pool, 800, failing_task, &c), DVAR_ECORRUPT);
	atomic_store(&c.ran, 0);
	dvar_error_clear();
	assert_int_equal(dvar_pool_for(pool, 299, failing_task, &c), DVAR_OK);
	assert_int_equal(atomic_load(&c.ran), 299);
	dvar_pool_free(pool);
}

static void test_core_pool__first_failure_in_task_order(void **state)
{
	(void)state;
	check_first_failure(4);
	check_first_failure(2);
	check_first_failure(1);
}

struct window_ctx {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int inside;
	int want;
	int reached;
};

/* Each task waits (up to 10 s) until want tasks are inside at once. A thread
 * takes its next task only after finishing one, so reaching want proves that
 * want distinct threads ran. */
static int window_task(void *p, size_t i)
{
	struct window_ctx *c = p;
	struct timespec deadline;

	(void)i;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 10;
	pthread_mutex_lock(&c->lock);
	if (++c->inside == c->want) {
		c->reached = 1;
		pthread_cond_broadcast(&c->cv);
	}
	while (!c->reached)
		if (pthread_cond_timedwait(&c->cv, &c->lock, &deadline) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&c->lock);
	return DVAR_OK;
}

static void test_core_pool__threads_run_at_once(void **state)
{
	struct window_ctx c = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 4, 0 };
	dvar_pool *pool;

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 4), DVAR_OK);
	assert_int_equal(dvar_pool_for(pool, 4, window_task, &c), DVAR_OK);
	assert_int_equal(c.reached, 1);
	assert_int_equal(c.inside, 4);
	dvar_pool_free(pool);
}

struct width_ctx {
	pthread_mutex_t lock;
	pthread_t seen[8];
	int num_seen;
	atomic_int inside, most_inside, ran;
};

static int width_task(void *p, size_t i)
{
	struct width_ctx *c = p;
	int now = atomic_fetch_add(&c->inside, 1) + 1, most = atomic_load(&c->most_inside);
	struct timespec ms = { 0, 1000000 };

	(void)i;
	while (now > most && !atomic_compare_exchange_weak(&c->most_inside, &most, now))
		;
	pthread_mutex_lock(&c->lock);
	int k = 0;
	while (k < c->num_seen && !pthread_equal(c->seen[k], pthread_self()))
		k++;
	if (k == c->num_seen && k < 8)
		c->seen[c->num_seen++] = pthread_self();
	pthread_mutex_unlock(&c->lock);
	nanosleep(&ms, NULL); /* time for every thread allowed in to join */
	atomic_fetch_sub(&c->inside, 1);
	atomic_fetch_add(&c->ran, 1);
	return DVAR_OK;
}

static void test_core_pool__width(void **state)
{
	dvar_pool *pool;

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 4), DVAR_OK);
	for (int width = 1; width <= 3; width++) {
		struct width_ctx c = { .lock = PTHREAD_MUTEX_INITIALIZER };
		assert_int_equal(dvar_pool_for_width(pool, 40, width, width_task, &c), DVAR_OK);
		assert_int_equal(atomic_load(&c.ran), 40);
		assert_true(atomic_load(&c.most_inside) <= width);
		assert_true(c.num_seen <= width);
		if (width == 1)
			assert_true(pthread_equal(c.seen[0], pthread_self()));
	}
	/* A narrow loop leaves the next one its whole width. */
	struct window_ctx w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 4, 0 };
	assert_int_equal(dvar_pool_for_width(pool, 4, 0, window_task, &w), DVAR_OK);
	assert_int_equal(w.reached, 1);
	dvar_pool_free(pool);
}

static void test_core_pool__workers_start_when_needed(void **state)
{
	dvar_pool *pool;
	int before = tu_threads_settled();

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 6), DVAR_OK);
	assert_true(tu_threads_reach(before));
	check_sum(pool, 1); /* one task: the caller alone */
	assert_true(tu_threads_reach(before));
	struct width_ctx c = { .lock = PTHREAD_MUTEX_INITIALIZER };
	assert_int_equal(dvar_pool_for_width(pool, 40, 3, width_task, &c), DVAR_OK);
	assert_true(tu_threads_reach(before + 2));
	check_sum(pool, 3); /* three tasks need two workers: none more */
	assert_true(tu_threads_reach(before + 2));
	check_sum(pool, 1000);
	assert_true(tu_threads_reach(before + 5));
	dvar_pool_free(pool);
}

struct caller_arg {
	dvar_pool *pool;
	int id;
	int failures_ok;
};

struct tagged_ctx {
	int id;
	atomic_int ran;
};

static int tagged_task(void *p, size_t i)
{
	struct tagged_ctx *c = p;

	atomic_fetch_add(&c->ran, 1);
	if (i == 5 && c->id == 1)
		return dvar_error_set(DVAR_EIO, "caller %d task %zu", c->id, i);
	return DVAR_OK;
}

static void *caller_main(void *p)
{
	struct caller_arg *a = p;

	a->failures_ok = 1;
	for (int round = 0; round < 200; round++) {
		struct tagged_ctx c = { a->id, 0 };
		size_t n = 1 + (size_t)(round % 50);
		int rc = dvar_pool_for(a->pool, n, tagged_task, &c);
		int want = a->id == 1 && n > 5 ? DVAR_EIO : DVAR_OK;

		if (rc != want || atomic_load(&c.ran) != (int)n)
			a->failures_ok = 0;
		if (want == DVAR_EIO && strcmp(dvar_error_last()->message, "caller 1 task 5") != 0)
			a->failures_ok = 0;
	}
	return NULL;
}

static void test_core_pool__concurrent_callers(void **state)
{
	dvar_pool *pool;
	struct caller_arg a, b;
	pthread_t ta, tb;

	(void)state;
	assert_int_equal(dvar_pool_create(&pool, 3), DVAR_OK);
	a = (struct caller_arg){ pool, 1, 0 };
	b = (struct caller_arg){ pool, 2, 0 };
	assert_int_equal(pthread_create(&ta, NULL, caller_main, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, caller_main, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_true(a.failures_ok);
	assert_true(b.failures_ok);
	dvar_pool_free(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_pool__create_sizes),
		cmocka_unit_test(test_core_pool__sum),
		cmocka_unit_test(test_core_pool__sequential_calls),
		cmocka_unit_test(test_core_pool__first_failure_in_task_order),
		cmocka_unit_test(test_core_pool__threads_run_at_once),
		cmocka_unit_test(test_core_pool__width),
		cmocka_unit_test(test_core_pool__workers_start_when_needed),
		cmocka_unit_test(test_core_pool__concurrent_callers),
	};
	return cmocka_run_group_tests_name("core/pool", tests, NULL, NULL);
}
