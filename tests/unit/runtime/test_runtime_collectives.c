/*
 * tests/unit/runtime/test_runtime_collectives.c - the replica-context
 * collectives, checked against values computed here: all_reduce with every
 * op and numeric dtype (in place and not, wrapping integers, rounding
 * halves), a 64 MiB buffer, bit-for-bit determinism within and across
 * workers, all_reduce_n, broadcast from every root, all_gather along axes
 * 0 and 1 with uneven and empty parts, and refused arguments.
 *
 * The same program runs alone and under `mpirun -np 2/3`. Replica functions
 * must not call cmocka's asserts (they run on replica threads): they count
 * mismatches in a per-replica report that the test thread asserts on.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "elements.h"
#include "core/core.h"
#include "runtime/runtime.h"

#define MAXR 4

/* What one replica saw. */
typedef struct {
	int bad;                    /* mismatches */
	char first[256];            /* the first one */
	int rc[8];
} report;

static void note(report *r, const char *fmt, ...)
{
	va_list ap;

	if (r->bad++ == 0) {
		va_start(ap, fmt);
		vsnprintf(r->first, sizeof r->first, fmt, ap);
		va_end(ap);
	}
}

static void assert_clean(const report *reps, int R)
{
	for (int l = 0; l < R; l++) {
		if (reps[l].bad)
			fail_msg("local replica %d: %d mismatches, first: %s", l, reps[l].bad, reps[l].first);
	}
}

static dvar_strategy *make(int replicas, size_t chunk_bytes)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;

	o.replicas = replicas;
	o.chunk_bytes = chunk_bytes;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	return s;
}

/* ---------------------------------------------------------------- element codecs */

static int is_unsigned(int dt)
{
	return dt == DVAR_UINT8 || dt == DVAR_UINT16 || dt == DVAR_UINT32 || dt == DVAR_UINT64;
}

/* Store an integer value in element i (integers wrap to the width). */
static void put_int(int dt, void *buf, size_t i, int64_t v)
{
	switch (dt) {
	case DVAR_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	case DVAR_INT8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)v; break;
	case DVAR_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
	case DVAR_INT16: ((int16_t *)buf)[i] = (int16_t)(uint16_t)v; break;
	case DVAR_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
	case DVAR_INT32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)v; break;
	case DVAR_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
	case DVAR_INT64: ((int64_t *)buf)[i] = v; break;
	case DVAR_FLOAT16: ((uint16_t *)buf)[i] = tu_f32_to_f16((float)v); break;
	case DVAR_BFLOAT16: ((uint16_t *)buf)[i] = tu_f32_to_bf16((float)v); break;
	case DVAR_FLOAT32: ((float *)buf)[i] = (float)v; break;
	case DVAR_FLOAT64: ((double *)buf)[i] = (double)v; break;
	}
}

/* The integer in an element of dtype dt after wrapping to its width. */
static int64_t wrap(int dt, int64_t v)
{
	switch (dt) {
	case DVAR_UINT8: return (uint8_t)v;
	case DVAR_INT8: return (int8_t)(uint8_t)v;
	case DVAR_UINT16: return (uint16_t)v;
	case DVAR_INT16: return (int16_t)(uint16_t)v;
	case DVAR_UINT32: return (uint32_t)v;
	case DVAR_INT32: return (int32_t)(uint32_t)v;
	}
	return v;
}

/* The input of global replica g at element i: small integers, so that every
 * partial sum is exact in every dtype (|sum| <= 10 * N fits int8 and the
 * 8 significant bits of bfloat16 for N <= 12). */
static int64_t input(int dt, int g, size_t i)
{
	int64_t v = (int64_t)((g * 31 + (int)(i % 1000) * 7) % 21);

	return is_unsigned(dt) ? v : v - 10;
}

/* Expected element i of op over n replicas, written into out. */
static void expect(int dt, int op, int n, size_t i, void *out)
{
	int64_t sum = 0, mn = INT64_MAX, mx = INT64_MIN;

	for (int g = 0; g < n; g++) {
		int64_t v = input(dt, g, i);

		sum += v;
		mn = v < mn ? v : mn;
		mx = v > mx ? v : mx;
	}
	switch (op) {
	case DVAR_REDUCE_SUM: put_int(dt, out, 0, sum); return;
	case DVAR_REDUCE_MIN: put_int(dt, out, 0, mn); return;
	case DVAR_REDUCE_MAX: put_int(dt, out, 0, mx); return;
	}
	/* MEAN: the sum divided by N, as runtime.h says per dtype. */
	if (!elem_is_float(dt)) {
		put_int(dt, out, 0, wrap(dt, sum) / n);
	} else if (dt == DVAR_FLOAT64) {
		((double *)out)[0] = (double)sum / n;
	} else {
		float q = (float)sum / (float)n;

		if (dt == DVAR_FLOAT32)
			((float *)out)[0] = q;
		else if (dt == DVAR_FLOAT16)
			((uint16_t *)out)[0] = tu_f32_to_f16(q);
		else
			((uint16_t *)out)[0] = tu_f32_to_bf16(q);
	}
}

/* ---------------------------------------------------------------- all_reduce, every dtype */

static const size_t sizes[] = { 1, 7, 1023 };

static int dtypes_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	unsigned char *src = malloc(1023 * 8), *dst = malloc(1023 * 8), want[8];

	if (!src || !dst) {
		free(src);
		free(dst);
		return dvar_error_set(DVAR_ENOMEM, "test: out of memory");
	}
	for (int d = 0; d < (int)ELEM_NUM_NUMERIC; d++) {
		int dt = elem_numeric_dtypes[d];
		size_t es = dvar_dtype_size(dt);

		for (int op = DVAR_REDUCE_SUM; op <= DVAR_REDUCE_MAX; op++) {
			for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
				for (int in_place = 0; in_place < 2; in_place++) {
					size_t count = sizes[k];
					void *out = in_place ? src : dst;
					int rc;

					for (size_t i = 0; i < count; i++)
						put_int(dt, src, i, input(dt, g, i));
					memset(dst, 0xee, count * es);
					rc = dvar_replica_all_reduce(ctx, (dvar_reduce_op)op, dt, src, out, count);
					if (rc != DVAR_OK) {
						note(rep, "%s op %d count %zu: rc %d: %s", dvar_dtype_name(dt), op,
						     count, rc, dvar_error_last()->message);
						continue;
					}
					for (size_t i = 0; i < count; i++) {
						expect(dt, op, n, i, want);
						if (memcmp((char *)out + i * es, want, es) != 0) {
							note(rep, "%s op %d count %zu in_place %d: element %zu differs",
							     dvar_dtype_name(dt), op, count, in_place, i);
							break;
						}
					}
				}
			}
		}
	}
	free(src);
	free(dst);
	return DVAR_OK;
}

static void test_runtime_collectives__all_reduce_every_dtype(void **state)
{
	(void)state;
	for (int R = 1; R <= 3; R += 2) {
		dvar_strategy *s = make(R, 0);
		report reps[MAXR];

		memset(reps, 0, sizeof reps);
		assert_int_equal(dvar_strategy_run(s, dtypes_fn, reps), DVAR_OK);
		assert_clean(reps, R);
		dvar_strategy_free(s);
	}
	/* Small chunks: many pieces through the cross-worker pipeline. */
	{
		dvar_strategy *s = make(2, 96);
		report reps[MAXR];

		memset(reps, 0, sizeof reps);
		assert_int_equal(dvar_strategy_run(s, dtypes_fn, reps), DVAR_OK);
		assert_clean(reps, 2);
		dvar_strategy_free(s);
	}
}

/* Integer sums wrap modulo 2^bits; MEAN divides the wrapped sum. */
static int wrap_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	static const int dts[] = { DVAR_UINT8,  DVAR_INT8,   DVAR_INT16,
	                           DVAR_INT32,  DVAR_UINT64, DVAR_INT64 };

	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
		int dt = dts[d], bits = (int)dvar_dtype_size(dt) * 8;
		uint64_t base = (uint64_t)1 << (bits - 2);

		for (int op = DVAR_REDUCE_SUM; op <= DVAR_REDUCE_MEAN; op++) {
			unsigned char buf[8 * 3], want[8];
			int64_t sum = 0;

			for (int i = 0; i < 3; i++)
				put_int(dt, buf, (size_t)i, (int64_t)(base * (uint64_t)(i + 1)) + g);
			if (dvar_replica_all_reduce(ctx, (dvar_reduce_op)op, dt, buf, buf, 3) != DVAR_OK) {
				note(rep, "%s: %s", dvar_dtype_name(dt), dvar_error_last()->message);
				continue;
			}
			for (int i = 0; i < 3; i++) {
				uint64_t usum = 0;

				for (int h = 0; h < n; h++)
					usum += base * (uint64_t)(i + 1) + (uint64_t)h;
				sum = wrap(dt, (int64_t)usum);
				if (op == DVAR_REDUCE_MEAN) {
					if (dt == DVAR_UINT64)
						sum = (int64_t)((uint64_t)sum / (uint64_t)n);
					else
						sum = sum / n;
				}
				put_int(dt, want, 0, sum);
				if (memcmp(buf + (size_t)i * dvar_dtype_size(dt), want, dvar_dtype_size(dt)) != 0)
					note(rep, "%s op %d: element %d differs", dvar_dtype_name(dt), op, i);
			}
		}
	}
	return DVAR_OK;
}

static void test_runtime_collectives__integers_wrap(void **state)
{
	dvar_strategy *s = make(2, 0);
	report reps[MAXR];

	(void)state;
	memset(reps, 0, sizeof reps);
	assert_int_equal(dvar_strategy_run(s, wrap_fn, reps), DVAR_OK);
	assert_clean(reps, 2);
	dvar_strategy_free(s);
}

/* Halves round after every addition. With one worker the additions go in
 * replica order, so the expected value is that sequence rounded step by
 * step; with several, the result must at least be the same everywhere. */
static int halves_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	dvar_strategy *s = dvar_replica_strategy(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	int W = dvar_strategy_num_workers(s);

	for (int half = 0; half < 2; half++) {
		int dt = half ? DVAR_BFLOAT16 : DVAR_FLOAT16;
		uint16_t buf[64], first[64];

		for (int i = 0; i < 64; i++) {
			float v = 1.0f + (float)(g * 64 + i) * (half ? 0.0078125f : 0.0009765625f) / 3.0f;

			buf[i] = half ? tu_f32_to_bf16(v) : tu_f32_to_f16(v);
		}
		if (dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, dt, buf, buf, 64) != DVAR_OK) {
			note(rep, "%s", dvar_error_last()->message);
			continue;
		}
		memcpy(first, buf, sizeof buf);
		/* Everyone ends with replica 0's bytes. */
		if (dvar_replica_broadcast(ctx, 0, dt, first, 64) != DVAR_OK ||
		    memcmp(first, buf, sizeof buf) != 0)
			note(rep, "%s: the replicas disagree", dvar_dtype_name(dt));
		if (W > 1)
			continue;
		for (int i = 0; i < 64; i++) {
			float acc = 0;

			for (int h = 0; h < n; h++) {
				float v = 1.0f + (float)(h * 64 + i) * (half ? 0.0078125f : 0.0009765625f) / 3.0f;
				float x = half ? tu_bf16_to_f32(tu_f32_to_bf16(v))
				                : tu_f16_to_f32(tu_f32_to_f16(v));

				acc = h == 0 ? x : acc + x;
				acc = half ? tu_bf16_to_f32(tu_f32_to_bf16(acc))
				           : tu_f16_to_f32(tu_f32_to_f16(acc));
			}
			if (buf[i] != (half ? tu_f32_to_bf16(acc) : tu_f32_to_f16(acc))) {
				note(rep, "%s element %d: 0x%04x, expected 0x%04x", dvar_dtype_name(dt), i,
				     buf[i], half ? tu_f32_to_bf16(acc) : tu_f32_to_f16(acc));
				break;
			}
		}
	}
	return DVAR_OK;
}

static void test_runtime_collectives__halves_round_every_step(void **state)
{
	dvar_strategy *s = make(4, 0);
	report reps[MAXR];

	(void)state;
	memset(reps, 0, sizeof reps);
	assert_int_equal(dvar_strategy_run(s, halves_fn, reps), DVAR_OK);
	assert_clean(reps, 4);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- 64 MiB */

#define BIG_COUNT ((size_t)16 << 20) /* float32: 64 MiB */

static int big_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	float *buf = malloc(BIG_COUNT * sizeof *buf);
	double start;

	if (!buf)
		return dvar_error_set(DVAR_ENOMEM, "test: out of memory for 64 MiB");
	for (size_t i = 0; i < BIG_COUNT; i++)
		buf[i] = (float)(i % 1000) + (float)g;
	start = dvar_now();
	if (dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, buf, buf, BIG_COUNT) != DVAR_OK)
		note(rep, "%s", dvar_error_last()->message);
	if (g == 0 && getenv("DVAR_TEST_VERBOSE"))
		fprintf(stderr, "64 MiB float32 all_reduce over %d replicas: %.3f s\n", n,
		        dvar_now() - start);
	for (size_t i = 0; i < BIG_COUNT; i++) {
		float want = (float)n * (float)(i % 1000) + (float)(n * (n - 1) / 2);

		if (buf[i] != want) {
			note(rep, "element %zu: %g, expected %g", i, buf[i], want);
			break;
		}
	}
	free(buf);
	return DVAR_OK;
}

static void test_runtime_collectives__all_reduce_64mib(void **state)
{
	dvar_strategy *s = make(2, 0);
	report reps[MAXR];

	(void)state;
	memset(reps, 0, sizeof reps);
	assert_int_equal(dvar_strategy_run(s, big_fn, reps), DVAR_OK);
	assert_clean(reps, 2);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- determinism */

#define DET_COUNT 7161

struct det {
	report rep[MAXR];
	uint32_t crc[MAXR][2];
};

/* Random (non-integer) float32 and float16 data: sums that round. The same
 * bits twice, on every local replica, and on every worker (checked through
 * MIN and MAX all_reduces of the checksum). */
static int det_fn(dvar_replica *ctx, void *arg)
{
	struct det *d = arg;
	int l = dvar_replica_local_id(ctx), g = dvar_replica_id(ctx);
	report *rep = &d->rep[l];
	float *a = malloc(DET_COUNT * sizeof *a), *b = malloc(DET_COUNT * sizeof *b);
	uint16_t *h = malloc(DET_COUNT * sizeof *h);
	int64_t crc[2], lo[2], hi[2];

	if (!a || !b || !h) {
		free(a);
		free(b);
		free(h);
		return dvar_error_set(DVAR_ENOMEM, "test: out of memory");
	}
	for (int pass = 0; pass < 2; pass++) {
		uint64_t st = 1000 + (uint64_t)g;

		for (size_t i = 0; i < DET_COUNT; i++) {
			a[i] = (float)((double)(tu_rand(&st) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
			h[i] = tu_f32_to_f16(a[i] * 100.0f);
		}
		if (dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, a, pass ? b : a,
		                            DET_COUNT) != DVAR_OK ||
		    dvar_replica_all_reduce(ctx, DVAR_REDUCE_MEAN, DVAR_FLOAT16, h, h,
		                            DET_COUNT) != DVAR_OK) {
			note(rep, "%s", dvar_error_last()->message);
			break;
		}
		d->crc[l][pass] = dvar_crc32c_extend(dvar_crc32c(pass ? b : a, DET_COUNT * sizeof *a), h,
		                                     DET_COUNT * sizeof *h);
	}
	if (d->crc[l][0] != d->crc[l][1])
		note(rep, "two runs gave different bits");
	crc[0] = crc[1] = d->crc[l][0];
	if (dvar_replica_all_reduce(ctx, DVAR_REDUCE_MIN, DVAR_INT64, crc, lo, 2) != DVAR_OK ||
	    dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, DVAR_INT64, crc, hi, 2) != DVAR_OK)
		note(rep, "%s", dvar_error_last()->message);
	else if (lo[0] != hi[0])
		note(rep, "the replicas or workers disagree");
	free(a);
	free(b);
	free(h);
	return DVAR_OK;
}

static void test_runtime_collectives__deterministic(void **state)
{
	(void)state;
	for (int k = 0; k < 2; k++) {
		dvar_strategy *s = make(3, k ? 1000 : 0);
		struct det d;

		memset(&d, 0, sizeof d);
		assert_int_equal(dvar_strategy_run(s, det_fn, &d), DVAR_OK);
		assert_clean(d.rep, 3);
		for (int l = 1; l < 3; l++)
			assert_int_equal(d.crc[l][0], d.crc[0][0]);
		/* And again in a new run. */
		{
			uint32_t before = d.crc[0][0];

			memset(&d, 0, sizeof d);
			assert_int_equal(dvar_strategy_run(s, det_fn, &d), DVAR_OK);
			assert_int_equal(d.crc[0][0], before);
		}
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- all_reduce_n */

static const size_t nsizes[] = { 3, 0, 1, 1023, 7, 0, 64, 5, 11, 2 };
#define NBUFS (sizeof nsizes / sizeof nsizes[0])

static int many_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	static const int dts[] = { DVAR_INT32, DVAR_FLOAT32, DVAR_FLOAT64, DVAR_UINT8 };

	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
		int dt = dts[d];
		size_t es = dvar_dtype_size(dt);

		for (int op = DVAR_REDUCE_SUM; op <= DVAR_REDUCE_MAX; op++) {
			void *src[NBUFS], *dst[NBUFS];
			unsigned char want[8];

			for (size_t b = 0; b < NBUFS; b++) {
				src[b] = malloc(nsizes[b] * es + 1);
				dst[b] = (op & 1) ? src[b] : malloc(nsizes[b] * es + 1);
				for (size_t i = 0; i < nsizes[b]; i++)
					put_int(dt, src[b], i, input(dt, g, i + b));
			}
			if (dvar_replica_all_reduce_n(ctx, (dvar_reduce_op)op, dt, NBUFS,
			                              (const void *const *)src, dst, nsizes) != DVAR_OK)
				note(rep, "%s", dvar_error_last()->message);
			for (size_t b = 0; b < NBUFS; b++) {
				for (size_t i = 0; i < nsizes[b]; i++) {
					expect(dt, op, n, i + b, want);
					if (memcmp((char *)dst[b] + i * es, want, es) != 0) {
						note(rep, "%s op %d buffer %zu element %zu differs", dvar_dtype_name(dt),
						     op, b, i);
						break;
					}
				}
				if (dst[b] != src[b])
					free(dst[b]);
				free(src[b]);
			}
		}
	}
	/* n = 0: nothing to do, but still a collective. */
	if (dvar_replica_all_reduce_n(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, 0, NULL, NULL, NULL) !=
	    DVAR_OK)
		note(rep, "n = 0: %s", dvar_error_last()->message);
	return DVAR_OK;
}

static void test_runtime_collectives__all_reduce_n(void **state)
{
	(void)state;
	for (int k = 0; k < 2; k++) {
		dvar_strategy *s = make(3, k ? 200 : 0);
		report reps[MAXR];

		memset(reps, 0, sizeof reps);
		assert_int_equal(dvar_strategy_run(s, many_fn, reps), DVAR_OK);
		assert_clean(reps, 3);
		dvar_strategy_free(s);
	}
}

/* Different counts on one replica: DVAR_ECOMM everywhere. */
static int many_mismatch_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int last = dvar_replica_id(ctx) == dvar_replica_num_replicas(ctx) - 1;
	float a[8] = { 0 }, b[8] = { 0 };
	void *bufs[2] = { a, b };
	size_t counts[2] = { 4, last ? 5 : 4 };
	int rc = dvar_replica_all_reduce_n(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, 2,
	                                   (const void *const *)bufs, bufs, counts);

	rep->rc[0] = rc;
	return rc;
}

static void test_runtime_collectives__all_reduce_n_mismatch(void **state)
{
	dvar_strategy *s = make(2, 0);
	report reps[MAXR];

	(void)state;
	memset(reps, 0, sizeof reps);
	assert_int_equal(dvar_strategy_run(s, many_mismatch_fn, reps), DVAR_ECOMM);
	for (int l = 0; l < 2; l++)
		assert_int_equal(reps[l].rc[0], DVAR_ECOMM);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- broadcast */

#define BIG_BCAST 100000

static int bcast_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	double *big = malloc(BIG_BCAST * sizeof *big);

	if (!big)
		return dvar_error_set(DVAR_ENOMEM, "test: out of memory");
	for (int root = 0; root < n; root++) {
		int32_t small[7];
		uint16_t one = (uint16_t)(g * 3 + 1);

		for (int i = 0; i < 7; i++)
			small[i] = (g + 1) * 1000 + i;
		if (dvar_replica_broadcast(ctx, root, DVAR_INT32, small, 7) != DVAR_OK)
			note(rep, "root %d: %s", root, dvar_error_last()->message);
		for (int i = 0; i < 7; i++)
			if (small[i] != (root + 1) * 1000 + i) {
				note(rep, "root %d: element %d is %d", root, i, small[i]);
				break;
			}
		if (dvar_replica_broadcast(ctx, root, DVAR_BFLOAT16, &one, 1) != DVAR_OK ||
		    one != (uint16_t)(root * 3 + 1))
			note(rep, "root %d: one element", root);
	}
	/* A larger one, from the last replica, in several chunks. */
	for (size_t i = 0; i < BIG_BCAST; i++)
		big[i] = (double)g * 1e6 + (double)i;
	if (dvar_replica_broadcast(ctx, n - 1, DVAR_FLOAT64, big, BIG_BCAST) != DVAR_OK)
		note(rep, "big: %s", dvar_error_last()->message);
	for (size_t i = 0; i < BIG_BCAST; i++)
		if (big[i] != (double)(n - 1) * 1e6 + (double)i) {
			note(rep, "big: element %zu is %g", i, big[i]);
			break;
		}
	/* Nothing at all. */
	if (dvar_replica_broadcast(ctx, 0, DVAR_FLOAT32, NULL, 0) != DVAR_OK)
		note(rep, "empty: %s", dvar_error_last()->message);
	free(big);
	return DVAR_OK;
}

static void test_runtime_collectives__broadcast_every_root(void **state)
{
	(void)state;
	for (int R = 1; R <= 3; R += 2) {
		dvar_strategy *s = make(R, 64 << 10);
		report reps[MAXR];

		memset(reps, 0, sizeof reps);
		assert_int_equal(dvar_strategy_run(s, bcast_fn, reps), DVAR_OK);
		assert_clean(reps, R);
		dvar_strategy_free(s);
	}
}

/* ---------------------------------------------------------------- all_gather */

/* Replica g holds rows(g) = g % 3 rows (global replica 0 holds none). */
static int rows_of(int g)
{
	return g % 3;
}

static float gval(int g, int64_t a, int64_t b, int64_t c)
{
	return (float)(g * 1000 + a * 100 + b * 10 + c);
}

static int gather_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int g = dvar_replica_id(ctx), n = dvar_replica_num_replicas(ctx);
	int64_t total = 0;
	float src[2 * 2 * 2], *dst;
	dvar_shape shape, out;
	size_t need;
	int rc;

	for (int h = 0; h < n; h++)
		total += rows_of(h);
	need = (size_t)total * 2 * 2 * sizeof(float);
	dst = malloc(need + sizeof(float));
	if (!dst)
		return dvar_error_set(DVAR_ENOMEM, "test: out of memory");

	/* Axis 0: [rows, 2]. */
	shape.rank = 2;
	shape.dims[0] = rows_of(g);
	shape.dims[1] = 2;
	for (int r = 0; r < rows_of(g); r++)
		for (int c = 0; c < 2; c++)
			src[r * 2 + c] = gval(g, 0, r, c);
	memset(&out, 0, sizeof out);
	rc = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &shape, src, 0, dst, need, &out);
	if (rc != DVAR_OK || out.rank != 2 || out.dims[0] != total || out.dims[1] != 2) {
		note(rep, "axis 0: rc %d: %s", rc, dvar_error_last()->message);
	} else {
		int64_t row = 0;

		for (int h = 0; h < n; h++)
			for (int r = 0; r < rows_of(h); r++, row++)
				for (int c = 0; c < 2; c++)
					if (dst[row * 2 + c] != gval(h, 0, r, c))
						note(rep, "axis 0: row %lld col %d", (long long)row, c);
	}

	/* Axis 1: [2, rows, 2], interleaved. */
	shape.rank = 3;
	shape.dims[0] = 2;
	shape.dims[1] = rows_of(g);
	shape.dims[2] = 2;
	for (int a = 0; a < 2; a++)
		for (int r = 0; r < rows_of(g); r++)
			for (int c = 0; c < 2; c++)
				src[(a * rows_of(g) + r) * 2 + c] = gval(g, a, r, c);
	memset(&out, 0, sizeof out);
	rc = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &shape, src, 1, dst, need, &out);
	if (rc != DVAR_OK || out.rank != 3 || out.dims[0] != 2 || out.dims[1] != total ||
	    out.dims[2] != 2) {
		note(rep, "axis 1: rc %d: %s", rc, dvar_error_last()->message);
	} else {
		for (int a = 0; a < 2; a++) {
			int64_t row = 0;

			for (int h = 0; h < n; h++)
				for (int r = 0; r < rows_of(h); r++, row++)
					for (int c = 0; c < 2; c++)
						if (dst[(a * total + row) * 2 + c] != gval(h, a, r, c))
							note(rep, "axis 1: [%d, %lld, %d]", a, (long long)row, c);
		}
	}

	/* The last replica's destination is one byte short: DVAR_ESHAPE on
	 * every replica, the result's shape still reported, the run goes on. */
	memset(&out, 0, sizeof out);
	rc = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &shape, src, 1, dst,
	                             g == n - 1 && need > 0 ? need - 1 : need, &out);
	if (total > 0 && rc != DVAR_ESHAPE)
		note(rep, "short dst: rc %d", rc);
	if (out.rank != 3 || out.dims[1] != total)
		note(rep, "short dst: out_shape not set");
	/* Asking for the shape first, with no destination at all. */
	memset(&out, 0, sizeof out);
	rc = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &shape, src, 1, NULL, 0, &out);
	if ((total > 0 && rc != DVAR_ESHAPE) || out.dims[1] != total)
		note(rep, "shape query: rc %d, dims[1] %lld", rc, (long long)out.dims[1]);
	free(dst);
	return DVAR_OK;
}

static void test_runtime_collectives__all_gather(void **state)
{
	(void)state;
	for (int R = 1; R <= 4; R++) {
		dvar_strategy *s = make(R, 64);
		report reps[MAXR];

		memset(reps, 0, sizeof reps);
		assert_int_equal(dvar_strategy_run(s, gather_fn, reps), DVAR_OK);
		assert_clean(reps, R);
		dvar_strategy_free(s);
	}
}

/* Tensors that disagree in a dimension other than axis: the run fails with
 * DVAR_ESHAPE. */
static int gather_mismatch_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	int last = dvar_replica_id(ctx) == dvar_replica_num_replicas(ctx) - 1;
	float src[6] = { 0 }, dst[64];
	dvar_shape shape = { 2, { 1, last ? 3 : 2 } };

	rep->rc[0] = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &shape, src, 0, dst, sizeof dst, NULL);
	return rep->rc[0];
}

static void test_runtime_collectives__all_gather_mismatch(void **state)
{
	dvar_strategy *s = make(2, 0);
	report reps[MAXR];

	(void)state;
	memset(reps, 0, sizeof reps);
	assert_int_equal(dvar_strategy_run(s, gather_mismatch_fn, reps), DVAR_ESHAPE);
	tu_assert_error_contains("every dimension but axis");
	for (int l = 0; l < 2; l++)
		assert_true(reps[l].rc[0] == DVAR_ESHAPE || reps[l].rc[0] == DVAR_ECOMM);
	dvar_strategy_free(s);
}

/* ---------------------------------------------------------------- refused arguments */

static int refused_fn(dvar_replica *ctx, void *arg)
{
	report *rep = (report *)arg + dvar_replica_local_id(ctx);
	uint8_t flags[4] = { 1, 0, 1, 1 };
	float f[4] = { 1, 2, 3, 4 };
	dvar_shape shape = { 1, { 4 } };

	rep->rc[0] = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_BOOL, flags, flags, 4);
	if (!strstr(dvar_error_last()->message, "all_reduce"))
		note(rep, "bool: %s", dvar_error_last()->message);
	rep->rc[1] = dvar_replica_all_reduce(ctx, (dvar_reduce_op)7, DVAR_FLOAT32, f, f, 4);
	rep->rc[2] = dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, 12345, f, f, 4);
	rep->rc[3] = dvar_replica_broadcast(ctx, dvar_replica_num_replicas(ctx), DVAR_FLOAT32, f, 4);
	rep->rc[4] = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &shape, f, 1, f, sizeof f, NULL);
	/* The run goes on. */
	rep->rc[5] = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, f, f, 4);
	if (f[0] != (float)dvar_replica_num_replicas(ctx))
		note(rep, "the sum after the refusals is %g", f[0]);
	rep->rc[6] = dvar_replica_all_reduce(NULL, DVAR_REDUCE_SUM, DVAR_FLOAT32, f, f, 4);
	return DVAR_OK;
}

static void test_runtime_collectives__refused_arguments(void **state)
{
	dvar_strategy *s = make(2, 0);
	report reps[MAXR];

	(void)state;
	memset(reps, 0, sizeof reps);
	assert_int_equal(dvar_strategy_run(s, refused_fn, reps), DVAR_OK);
	assert_clean(reps, 2);
	for (int l = 0; l < 2; l++) {
		for (int k = 0; k < 5; k++)
			assert_int_equal(reps[l].rc[k], DVAR_EINVAL);
		assert_int_equal(reps[l].rc[5], DVAR_OK);
		assert_int_equal(reps[l].rc[6], DVAR_EINVAL);
	}
	dvar_strategy_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_collectives__all_reduce_every_dtype),
		cmocka_unit_test(test_runtime_collectives__integers_wrap),
		cmocka_unit_test(test_runtime_collectives__halves_round_every_step),
		cmocka_unit_test(test_runtime_collectives__all_reduce_64mib),
		cmocka_unit_test(test_runtime_collectives__deterministic),
		cmocka_unit_test(test_runtime_collectives__all_reduce_n),
		cmocka_unit_test(test_runtime_collectives__all_reduce_n_mismatch),
		cmocka_unit_test(test_runtime_collectives__broadcast_every_root),
		cmocka_unit_test(test_runtime_collectives__all_gather),
		cmocka_unit_test(test_runtime_collectives__all_gather_mismatch),
		cmocka_unit_test(test_runtime_collectives__refused_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
