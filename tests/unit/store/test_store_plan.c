/*
 * tests/unit/store/test_store_plan.c - the save plan alone (store/plan.h,
 * docs/STORE.md "The save plan"): known assignments, one writer per value,
 * holders respected, determinism, balance within what greedy largest-first
 * promises, and the edge cases (one worker, more workers than values,
 * zero-byte values, no values, bad arguments).
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "store/plan.h"

#define ANY DVAR_PLAN_ANY_WORKER
#define MAX_W 8

/* values[i] = { bytes[i], holders ? holders[i] : ANY }, planned for W workers. */
static void plan(const size_t *bytes, const int *holders, size_t n, int W, int *writers)
{
	dvar_plan_value *v = calloc(n ? n : 1, sizeof *v);

	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		v[i].nbytes = bytes[i];
		v[i].holder = holders ? holders[i] : ANY;
	}
	assert_int_equal(dvar_store_plan(v, n, W, writers), DVAR_OK);
	free(v);
}

/* Every value has one writer, a worker; a held value its holder. The bytes
 * per worker go into load (MAX_W entries); they add up to the list's. */
static void check_plan(const size_t *bytes, const int *holders, size_t n, int W,
                       const int *writers, uint64_t *load)
{
	uint64_t total = 0, sum = 0;

	memset(load, 0, MAX_W * sizeof *load);
	for (size_t i = 0; i < n; i++) {
		assert_in_range(writers[i], 0, W - 1);
		if (holders && holders[i] != ANY)
			assert_int_equal(writers[i], holders[i]);
		load[writers[i]] += bytes[i];
		total += bytes[i];
	}
	for (int w = 0; w < W; w++)
		sum += load[w];
	assert_int_equal(sum, total);
}

static void test_store_plan__known_assignment(void **state)
{
	/* Largest first onto the least loaded: 8 → 0, 7 → 1, 5 → 2, 3 → 2,
	 * 2 → 1, then 1 → 0 (0 and 2 tie at 8: the lowest id). */
	const size_t bytes[] = { 5, 3, 8, 2, 7, 1 };
	const int expect[] = { 2, 2, 0, 1, 1, 0 };
	int writers[6];
	uint64_t load[MAX_W];

	(void)state;
	plan(bytes, NULL, 6, 3, writers);
	assert_memory_equal(writers, expect, sizeof expect);
	check_plan(bytes, NULL, 6, 3, writers, load);
	assert_int_equal(load[0], 9);
	assert_int_equal(load[1], 9);
	assert_int_equal(load[2], 8);
}

static void test_store_plan__holders_first(void **state)
{
	/* The chief's 10 and a shard of 6 load worker 0 (16), a shard of 6
	 * worker 1 (6); then 8 → 1 (14), 4 → 1 (18), 4 → 0 (20). */
	const size_t bytes[] = { 10, 6, 6, 8, 4, 4 };
	const int holders[] = { 0, 1, 0, ANY, ANY, ANY };
	const int expect[] = { 0, 1, 0, 1, 1, 0 };
	int writers[6];
	uint64_t load[MAX_W];

	(void)state;
	plan(bytes, holders, 6, 2, writers);
	assert_memory_equal(writers, expect, sizeof expect);
	check_plan(bytes, holders, 6, 2, writers, load);
	assert_int_equal(load[0], 20);
	assert_int_equal(load[1], 18);
}

static void test_store_plan__shards_stay_with_their_owners(void **state)
{
	/* Owners write their own shards however heavy; the rest go around them. */
	const size_t bytes[] = { 100, 100, 50, 50, 100 };
	const int holders[] = { 1, 1, ANY, ANY, 2 };
	const int expect[] = { 1, 1, 0, 0, 2 };
	int writers[5];
	uint64_t load[MAX_W];

	(void)state;
	plan(bytes, holders, 5, 3, writers);
	assert_memory_equal(writers, expect, sizeof expect);
	check_plan(bytes, holders, 5, 3, writers, load);
}

static void test_store_plan__ties_in_list_order(void **state)
{
	/* After the 9 on worker 0, the equal values go in list order, each onto
	 * the least loaded: 1, 2, 1, 2 (the other order would give 2, 1, 2, 1). */
	const size_t bytes[] = { 5, 5, 9, 5, 5 };
	const int expect[] = { 1, 2, 0, 1, 2 };
	int writers[5];

	(void)state;
	plan(bytes, NULL, 5, 3, writers);
	assert_memory_equal(writers, expect, sizeof expect);
}

/* n random values (sizes distinct when distinct is set), some held. */
static void random_list(uint64_t *seed, size_t n, int W, int distinct, size_t *bytes,
                        int *holders)
{
	for (size_t i = 0; i < n; i++) {
		bytes[i] = (size_t)(tu_rand(seed) % 100000);
		if (distinct)
			bytes[i] = bytes[i] * n + i; /* distinct, still in random order */
		holders[i] = tu_rand(seed) % 4 == 0 ? (int)(tu_rand(seed) % (uint64_t)W) : ANY;
	}
}

static void test_store_plan__deterministic(void **state)
{
	enum { N = 200 };
	size_t bytes[N], pbytes[N];
	int holders[N], pholders[N], a[N], b[N], perm[N];
	uint64_t seed = 7;

	(void)state;
	for (int W = 1; W <= MAX_W; W++) {
		/* The same list: the same plan. */
		random_list(&seed, N, W, 0, bytes, holders);
		plan(bytes, holders, N, W, a);
		plan(bytes, holders, N, W, b);
		assert_memory_equal(a, b, sizeof a);

		/* With distinct sizes the order of the list does not matter: each
		 * value gets the same writer wherever it stands. */
		random_list(&seed, N, W, 1, bytes, holders);
		plan(bytes, holders, N, W, a);
		for (int i = 0; i < N; i++)
			perm[i] = i;
		for (int i = N - 1; i > 0; i--) {
			int k = (int)(tu_rand(&seed) % (uint64_t)(i + 1)), t = perm[i];

			perm[i] = perm[k];
			perm[k] = t;
		}
		for (int i = 0; i < N; i++) {
			pbytes[i] = bytes[perm[i]];
			pholders[i] = holders[perm[i]];
		}
		plan(pbytes, pholders, N, W, b);
		for (int i = 0; i < N; i++)
			assert_int_equal(b[i], a[perm[i]]);
	}
}

static void test_store_plan__equal_values_spread_by_one(void **state)
{
	enum { N = 101, BYTES = 4096 };
	size_t bytes[N];
	int writers[N];
	uint64_t load[MAX_W];

	(void)state;
	for (int i = 0; i < N; i++)
		bytes[i] = BYTES;
	for (int W = 1; W <= MAX_W; W++) {
		uint64_t lo = UINT64_MAX, hi = 0;

		plan(bytes, NULL, N, W, writers);
		check_plan(bytes, NULL, N, W, writers, load);
		for (int w = 0; w < W; w++) {
			lo = load[w] < lo ? load[w] : lo;
			hi = load[w] > hi ? load[w] : hi;
		}
		/* N / W values each, the remainder one more on the lowest ids. */
		assert_true(hi - lo <= BYTES);
		for (int w = 0; w < W; w++)
			assert_int_equal(load[w], (uint64_t)BYTES * (N / W + (w < N % W)));
	}
}

/*
 * Greedy largest-first onto the least loaded: the worker that ends with the
 * most bytes got its last balanced value while it had the fewest, so it
 * ends at most one balanced value above the least loaded one, unless its
 * own held values alone put it higher.
 */
static void test_store_plan__balanced_within_one_value(void **state)
{
	enum { N = 300 };
	size_t bytes[N];
	int holders[N], writers[N];
	uint64_t load[MAX_W], seed = 11;

	(void)state;
	for (int round = 0; round < 50; round++) {
		int W = 1 + (int)(tu_rand(&seed) % MAX_W);
		size_t n = 1 + (size_t)(tu_rand(&seed) % N), largest = 0;
		uint64_t held[MAX_W] = { 0 }, lo = UINT64_MAX, hi = 0, held_hi = 0;

		random_list(&seed, n, W, 0, bytes, holders);
		if (round % 2)
			for (size_t i = 0; i < n; i++)
				holders[i] = ANY;
		plan(bytes, holders, n, W, writers);
		check_plan(bytes, holders, n, W, writers, load);
		for (size_t i = 0; i < n; i++) {
			if (holders[i] != ANY)
				held[holders[i]] += bytes[i];
			else if (bytes[i] > largest)
				largest = bytes[i];
		}
		for (int w = 0; w < W; w++) {
			lo = load[w] < lo ? load[w] : lo;
			hi = load[w] > hi ? load[w] : hi;
			held_hi = held[w] > held_hi ? held[w] : held_hi;
		}
		assert_true(hi <= (lo + largest > held_hi ? lo + largest : held_hi));
	}
}

static void test_store_plan__one_worker(void **state)
{
	const size_t bytes[] = { 3, 0, 7, 1 };
	const int holders[] = { ANY, 0, ANY, ANY };
	int writers[4];

	(void)state;
	plan(bytes, holders, 4, 1, writers);
	for (int i = 0; i < 4; i++)
		assert_int_equal(writers[i], 0);
}

static void test_store_plan__more_workers_than_values(void **state)
{
	/* One value each, the largest on worker 0; workers 3 and 4 write nothing. */
	const size_t bytes[] = { 3, 9, 1 };
	const int expect[] = { 1, 0, 2 };
	int writers[3];

	(void)state;
	plan(bytes, NULL, 3, 5, writers);
	assert_memory_equal(writers, expect, sizeof expect);
}

static void test_store_plan__zero_bytes(void **state)
{
	/* Empty values load nobody: all on worker 0 alone, and after the 5
	 * on worker 0 they go to worker 1. */
	const size_t none[] = { 0, 0, 0 };
	const size_t mixed[] = { 0, 5, 0 };
	const int expect_none[] = { 0, 0, 0 };
	const int expect_mixed[] = { 1, 0, 1 };
	int writers[3];

	(void)state;
	plan(none, NULL, 3, 3, writers);
	assert_memory_equal(writers, expect_none, sizeof expect_none);
	plan(mixed, NULL, 3, 2, writers);
	assert_memory_equal(writers, expect_mixed, sizeof expect_mixed);
	/* No values at all. */
	assert_int_equal(dvar_store_plan(NULL, 0, 4, NULL), DVAR_OK);
}

static void test_store_plan__bad_arguments(void **state)
{
	dvar_plan_value v = { 8, ANY };
	int writer = -7;

	(void)state;
	assert_int_equal(dvar_store_plan(&v, 1, 0, &writer), DVAR_EINVAL);
	tu_assert_error_contains("needs a worker");
	v.holder = 2;
	assert_int_equal(dvar_store_plan(&v, 1, 2, &writer), DVAR_EINVAL);
	tu_assert_error_contains("held by worker 2 of 2");
	v.holder = -2;
	assert_int_equal(dvar_store_plan(&v, 1, 2, &writer), DVAR_EINVAL);
	assert_int_equal(writer, -7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_plan__known_assignment),
		cmocka_unit_test(test_store_plan__holders_first),
		cmocka_unit_test(test_store_plan__shards_stay_with_their_owners),
		cmocka_unit_test(test_store_plan__ties_in_list_order),
		cmocka_unit_test(test_store_plan__deterministic),
		cmocka_unit_test(test_store_plan__equal_values_spread_by_one),
		cmocka_unit_test(test_store_plan__balanced_within_one_value),
		cmocka_unit_test(test_store_plan__one_worker),
		cmocka_unit_test(test_store_plan__more_workers_than_values),
		cmocka_unit_test(test_store_plan__zero_bytes),
		cmocka_unit_test(test_store_plan__bad_arguments),
	};
	return cmocka_run_group_tests_name("store/plan", tests, NULL, NULL);
}
