/*
 * tests/unit/runtime/test_runtime_exchange.c - the coordinator's own
 * cross-worker steps (dvar_strategy_all_to_all, dvar_strategy_agree): the
 * bytes every worker receives from every other, sizes of zero, messages
 * split below the MPI count limit, a failure on one worker failing the step
 * everywhere, workers at different steps (or one inside a run) failing
 * instead of hanging, a call from inside a run, and a timeout.
 *
 * The same program runs alone and under `mpirun -np 2` and `-np 3`: every
 * expectation is computed from the worker count and id, and every rank
 * makes the same calls in the same order and asserts the same things.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "runtime/engine.h"
#include "runtime/runtime.h"

/* What worker `from` sends worker `to`: a length and a byte pattern. */
static uint64_t pair_len(int from, int to, int variant)
{
	switch (variant) {
	case 0: return (uint64_t)(from * 10 + to + 1);
	case 1: return from == to ? 0 : (uint64_t)(3 * from + 5 * to); /* zeros included */
	case 2: return (uint64_t)(1000 + 37 * from + 11 * to);        /* many small messages */
	default: return (uint64_t)((3u << 20) + (unsigned)from * 4099u + (unsigned)to * 7u);
	}
}

static unsigned char pair_byte(int from, int to, uint64_t i)
{
	return (unsigned char)(from * 31 + to * 7 + (int)(i * 13 % 251));
}

/* One exchange with the pattern of variant; checks everything received. */
static void exchange(dvar_strategy *s, int variant)
{
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	uint64_t *send_bytes = calloc((size_t)W, sizeof *send_bytes);
	uint64_t *recv_bytes = calloc((size_t)W, sizeof *recv_bytes);
	uint64_t total = 0, at = 0;
	unsigned char *send;
	void *recv = NULL;

	assert_non_null(send_bytes);
	assert_non_null(recv_bytes);
	for (int to = 0; to < W; to++)
		total += send_bytes[to] = pair_len(me, to, variant);
	send = malloc(total ? total : 1);
	assert_non_null(send);
	for (int to = 0; to < W; to++)
		for (uint64_t i = 0; i < send_bytes[to]; i++)
			send[at++] = pair_byte(me, to, i);
	if (dvar_strategy_all_to_all(s, DVAR_OK, send, send_bytes, &recv, recv_bytes,
	                              "test exchange") != DVAR_OK)
		fail_msg("all_to_all (variant %d): %s", variant, dvar_error_last()->message);
	assert_non_null(recv);
	at = 0;
	for (int from = 0; from < W; from++) {
		const unsigned char *got = (const unsigned char *)recv + at;

		assert_int_equal(recv_bytes[from], pair_len(from, me, variant));
		for (uint64_t i = 0; i < recv_bytes[from]; i++)
			if (got[i] != pair_byte(from, me, i))
				fail_msg("variant %d: byte %llu from worker %d is %d, expected %d", variant,
				         (unsigned long long)i, from, got[i], pair_byte(from, me, i));
		at += recv_bytes[from];
	}
	free(recv);
	free(send);
	free(send_bytes);
	free(recv_bytes);
}

static void test_runtime_exchange__all_to_all(void **state)
{
	(void)state;
	for (int r = 1; r <= 3; r += 2) {
		dvar_strategy *s = tu_strategy(r, 0);

		for (int variant = 0; variant < 4; variant++)
			exchange(s, variant);
		/* Messages split far below the MPI limit reach the same bytes. */
		dvar_comm__set_message_max(7);
		exchange(s, 1);
		exchange(s, 2);
		dvar_comm__set_message_max(0);
		exchange(s, 0);
		dvar_strategy_free(s);
	}
	/* The same with a timeout (the data goes through a staging copy). */
	{
		dvar_strategy *s = tu_strategy(1, 20000);

		exchange(s, 1);
		exchange(s, 3);
		dvar_strategy_free(s);
	}
}

static void test_runtime_exchange__agree(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);

	(void)state;
	assert_int_equal(dvar_strategy_agree(s, DVAR_OK, "test agreement"), DVAR_OK);
	assert_int_equal(dvar_strategy_agree(s, DVAR_OK, "test agreement"), DVAR_OK);
	dvar_strategy_free(s);
}

/* Worker `bad` fails before the step: every worker fails with its code and
 * message, and the next step works. */
static void test_runtime_exchange__failure_reaches_everyone(void **state)
{
	dvar_strategy *s = tu_strategy(1, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	int bad = W - 1;
	uint64_t send_bytes[8] = { 0 }, recv_bytes[8];
	char expect[256];
	void *recv = (void *)&recv;
	int rc, local;

	(void)state;
	assert_true(W <= 8);
	local = me == bad ? dvar_error_set(DVAR_EINVAL, "worker-local problem on %d", me) : DVAR_OK;
	rc = dvar_strategy_all_to_all(s, local, NULL, send_bytes, &recv, recv_bytes, "failing step");
	assert_int_equal(rc, DVAR_EINVAL);
	assert_null(recv);
	if (W > 1)
		snprintf(expect, sizeof expect, "worker %d: worker-local problem on %d", bad, bad);
	else
		snprintf(expect, sizeof expect, "worker-local problem on %d", bad);
	assert_string_equal(dvar_error_last()->message, expect);

	/* The same through an agreement, with two failing workers: the lowest wins. */
	local = me == bad || me == 0 ? dvar_error_set(DVAR_ENOMEM, "short of memory on %d", me)
	                             : DVAR_OK;
	rc = dvar_strategy_agree(s, local, "failing agreement");
	assert_int_equal(rc, DVAR_ENOMEM);
	if (W > 1)
		assert_string_equal(dvar_error_last()->message, "worker 0: short of memory on 0");
	else
		assert_string_equal(dvar_error_last()->message, "short of memory on 0");

	/* A bad argument on one worker is a failure before the step too. */
	rc = dvar_strategy_all_to_all(s, DVAR_OK, NULL, me == bad ? NULL : send_bytes, &recv,
	                               recv_bytes, "bad arguments");
	assert_int_equal(rc, DVAR_EINVAL);
	tu_assert_error_contains("send_bytes is NULL");

	exchange(s, 0);
	dvar_strategy_free(s);
}

static int nothing_fn(dvar_replica *ctx, void *arg)
{
	(void)ctx;
	(void)arg;
	return DVAR_OK;
}

static int sum_fn(dvar_replica *ctx, void *arg)
{
	float buf[4] = { 1, 2, 3, 4 };

	(void)arg;
	return dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, 4);
}

/* The odd worker agrees on odd_step with odd_rc while the others make an
 * empty all-to-all named step: the result on this worker. */
static int agree_against_all_to_all(dvar_strategy *s, int odd, int odd_rc, const char *odd_step,
                                    const char *step)
{
	uint64_t send_bytes[8] = { 0 }, recv_bytes[8];
	void *recv = NULL;
	int rc;

	if (odd)
		return dvar_strategy_agree(s, odd_rc, odd_step);
	rc = dvar_strategy_all_to_all(s, DVAR_OK, NULL, send_bytes, &recv, recv_bytes, step);
	assert_null(recv);
	return rc;
}

/* Workers at different steps fail, on every worker, and stay in step. */
static void test_runtime_exchange__mismatch(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	int odd = me == W - 1;
	int rc;

	(void)state;
	if (W == 1) {
		/* Nobody to disagree with. */
		assert_int_equal(dvar_strategy_agree(s, DVAR_OK, "a"), DVAR_OK);
		dvar_strategy_free(s);
		return;
	}
	/* Another text. */
	rc = dvar_strategy_agree(s, DVAR_OK, odd ? "step B" : "step A");
	assert_int_equal(rc, DVAR_ECOMM);
	tu_assert_error_contains("(step B)");
	tu_assert_error_contains("(step A)");
	tu_assert_error_contains("every worker must make the same cross-worker calls");
	exchange(s, 0);

	/* An agreement against an all-to-all of the same text. */
	rc = agree_against_all_to_all(s, odd, DVAR_OK, "step", "step");
	assert_int_equal(rc, DVAR_ECOMM);
	tu_assert_error_contains("agreement");
	exchange(s, 0);

	/* A worker that failed on its way to another step: its failure, not the
	 * mismatch, on every worker. */
	rc = agree_against_all_to_all(s, odd,
	                              odd ? dvar_error_set(DVAR_ENOMEM, "out of memory here") : DVAR_OK,
	                              "step B", "step A");
	assert_int_equal(rc, DVAR_ENOMEM);
	tu_assert_error_contains("out of memory here");
	exchange(s, 0);

	/* One worker inside a run with a collective, the others at a step. */
	if (odd)
		rc = dvar_strategy_run(s, sum_fn, NULL);
	else
		rc = dvar_strategy_agree(s, DVAR_OK, "step");
	assert_int_equal(rc, DVAR_ECOMM);
	tu_assert_error_contains("cross-worker agreement");
	exchange(s, 0);

	/* One worker inside a run without collectives. */
	if (odd)
		rc = dvar_strategy_run(s, nothing_fn, NULL);
	else
		rc = dvar_strategy_agree(s, DVAR_OK, "step");
	assert_int_equal(rc, DVAR_ECOMM);
	tu_assert_error_contains("cross-worker agreement");
	exchange(s, 0);
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_OK);
	dvar_strategy_free(s);
}

struct inside {
	int rc[4];
	char msg[4][DVAR_ERROR_MESSAGE_MAX];
};

static int inside_fn(dvar_replica *ctx, void *arg)
{
	struct inside *in = arg;
	int l = dvar_replica_local_id(ctx);

	in->rc[l] = dvar_strategy_agree(dvar_replica_strategy(ctx), DVAR_OK, "inside");
	snprintf(in->msg[l], sizeof in->msg[l], "%s", dvar_error_last()->message);
	return DVAR_OK;
}

static void test_runtime_exchange__inside_run(void **state)
{
	dvar_strategy *s = tu_strategy(2, 0);
	struct inside in;

	(void)state;
	memset(&in, 0, sizeof in);
	assert_int_equal(dvar_strategy_run(s, inside_fn, &in), DVAR_OK);
	for (int l = 0; l < 2; l++) {
		assert_int_equal(in.rc[l], DVAR_EINVAL);
		assert_non_null(strstr(in.msg[l], "called inside dvar_strategy_run"));
	}
	assert_int_equal(dvar_strategy_agree(NULL, DVAR_OK, "x"), DVAR_EINVAL);
	exchange(s, 0);
	dvar_strategy_free(s);
}

static void test_runtime_exchange__timeout(void **state)
{
	dvar_strategy *s = tu_strategy(1, 300);
	int W = dvar_strategy_num_workers(s), me = dvar_strategy_worker_id(s);
	uint64_t send_bytes[8] = { 0 }, recv_bytes[8];
	void *recv = NULL;
	double start;
	int rc;

	(void)state;
	if (W == 1) {
		/* Nobody to be late: an exchange works, and the timeout is tested under mpirun. */
		exchange(s, 0);
		dvar_strategy_free(s);
		skip();
	}
	start = dvar_now();
	if (me == W - 1)
		tu_sleep_ms(1500);
	rc = dvar_strategy_all_to_all(s, DVAR_OK, NULL, send_bytes, &recv, recv_bytes, "late step");
	assert_int_equal(rc, DVAR_ECOMM);
	tu_assert_error_contains("timed out after 300 ms");
	assert_null(recv);
	assert_true(dvar_now() - start < 30.0);
	/* Broken: everything fails at once. */
	assert_int_equal(dvar_strategy_agree(s, DVAR_OK, "after"), DVAR_ECOMM);
	tu_assert_error_contains("strategy is broken after an earlier timeout");
	assert_int_equal(dvar_strategy_run(s, sum_fn, NULL), DVAR_ECOMM);
	dvar_strategy_free(s);

	/* A fresh strategy works. */
	s = tu_strategy(1, 0);
	exchange(s, 1);
	dvar_strategy_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_exchange__all_to_all),
		cmocka_unit_test(test_runtime_exchange__agree),
		cmocka_unit_test(test_runtime_exchange__failure_reaches_everyone),
		cmocka_unit_test(test_runtime_exchange__mismatch),
		cmocka_unit_test(test_runtime_exchange__inside_run),
		cmocka_unit_test(test_runtime_exchange__timeout),
	};

	return cmocka_run_group_tests_name("runtime/exchange", tests, NULL, NULL);
}
