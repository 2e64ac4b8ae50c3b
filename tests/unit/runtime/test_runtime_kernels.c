/*
 * tests/unit/runtime/test_runtime_kernels.c - the elementwise kernels: every
 * numeric dtype with every operator, integer wrap-around, NaN propagation,
 * float16 and bfloat16 rounding (ties to even, overflow to infinity,
 * subnormals) checked against a reference that rounds in double, aliasing
 * of dst with the sources, counts around the block size, divide, and the
 * argument check.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "elements.h"
#include "core/core.h"
#include "runtime/runtime.h"

static const int int_dtypes[] = { DVAR_UINT8, DVAR_UINT16, DVAR_UINT32, DVAR_UINT64,
	                          DVAR_INT8,  DVAR_INT16,  DVAR_INT32,  DVAR_INT64 };
#define NUM_INT_DTYPES (sizeof int_dtypes / sizeof int_dtypes[0])

static int is_signed(int dtype)
{
	return dtype == DVAR_INT8 || dtype == DVAR_INT16 || dtype == DVAR_INT32 ||
	       dtype == DVAR_INT64;
}

/* ---------------------------------------------------------------- integer helpers */

static uint64_t mask_of(int dtype)
{
	size_t bits = 8 * dvar_dtype_size(dtype);

	return bits == 64 ? ~0ull : (1ull << bits) - 1;
}

/* Bits as the dtype's value, sign-extended for signed dtypes. */
static int64_t as_signed(int dtype, uint64_t bits)
{
	size_t nbits = 8 * dvar_dtype_size(dtype);
	uint64_t sign = 1ull << (nbits - 1);

	bits &= mask_of(dtype);
	if (nbits < 64 && (bits & sign))
		bits |= ~mask_of(dtype);
	return (int64_t)bits;
}

/* a < b as the dtype compares them. */
static int int_less(int dtype, uint64_t a, uint64_t b)
{
	if (is_signed(dtype))
		return as_signed(dtype, a) < as_signed(dtype, b);
	return (a & mask_of(dtype)) < (b & mask_of(dtype));
}

static uint64_t int_ref(int dtype, dvar_kernel_op op, uint64_t a, uint64_t b)
{
	switch (op) {
	case DVAR_KOP_ADD: return (a + b) & mask_of(dtype);
	case DVAR_KOP_SUB: return (a - b) & mask_of(dtype);
	case DVAR_KOP_MIN: return (int_less(dtype, b, a) ? b : a) & mask_of(dtype);
	case DVAR_KOP_MAX: return (int_less(dtype, a, b) ? b : a) & mask_of(dtype);
	}
	return 0;
}

/* ---------------------------------------------------------------- integers */

static void test_runtime_kernels__int_literals(void **state)
{
	int8_t i8[2][3] = { { 127, -128, -7 }, { 1, -1, 2 } };
	uint8_t u8[2][3] = { { 255, 0, 200 }, { 1, 1, 100 } };
	int64_t i64[2][2] = { { INT64_MAX, INT64_MIN }, { 1, 1 } };
	uint64_t u64[2][2] = { { UINT64_MAX, 0 }, { 1, 1 } };
	int16_t i16[2][2] = { { -5, 300 }, { 7, -300 } };
	uint32_t u32[2][2] = { { 5, 0xfffffff0u }, { 7, 3 } };
	int8_t d8[3];
	uint8_t du8[3];
	int64_t d64[2];
	uint64_t du64[2];
	int16_t d16[2];
	uint32_t d32[2];

	(void)state;
	dvar_kernel_reduce(DVAR_INT8, DVAR_KOP_ADD, d8, (const void *[]){ i8[0], i8[1] }, 2, 3);
	assert_int_equal(d8[0], -128); /* 127 + 1 wraps */
	assert_int_equal(d8[1], 127);  /* -128 + -1 wraps */
	assert_int_equal(d8[2], -5);
	dvar_kernel_reduce(DVAR_INT8, DVAR_KOP_SUB, d8, (const void *[]){ i8[0], i8[1] }, 2, 3);
	assert_int_equal(d8[0], 126);
	assert_int_equal(d8[1], -127);
	assert_int_equal(d8[2], -9);
	dvar_kernel_reduce(DVAR_INT8, DVAR_KOP_MIN, d8, (const void *[]){ i8[0], i8[1] }, 2, 3);
	assert_int_equal(d8[0], 1);
	assert_int_equal(d8[1], -128);
	assert_int_equal(d8[2], -7);
	dvar_kernel_reduce(DVAR_INT8, DVAR_KOP_MAX, d8, (const void *[]){ i8[0], i8[1] }, 2, 3);
	assert_int_equal(d8[0], 127);
	assert_int_equal(d8[1], -1);
	assert_int_equal(d8[2], 2);

	dvar_kernel_reduce(DVAR_UINT8, DVAR_KOP_ADD, du8, (const void *[]){ u8[0], u8[1] }, 2, 3);
	assert_int_equal(du8[0], 0);
	assert_int_equal(du8[1], 1);
	assert_int_equal(du8[2], 44); /* 300 mod 256 */
	dvar_kernel_reduce(DVAR_UINT8, DVAR_KOP_SUB, du8, (const void *[]){ u8[0], u8[1] }, 2, 3);
	assert_int_equal(du8[0], 254);
	assert_int_equal(du8[1], 255); /* 0 - 1 wraps */
	assert_int_equal(du8[2], 100);
	dvar_kernel_reduce(DVAR_UINT8, DVAR_KOP_MAX, du8, (const void *[]){ u8[0], u8[1] }, 2, 3);
	assert_int_equal(du8[0], 255);
	assert_int_equal(du8[1], 1);
	assert_int_equal(du8[2], 200);

	dvar_kernel_reduce(DVAR_INT64, DVAR_KOP_ADD, d64, (const void *[]){ i64[0], i64[1] }, 2, 2);
	assert_true(d64[0] == INT64_MIN);
	assert_true(d64[1] == INT64_MIN + 1);
	dvar_kernel_reduce(DVAR_INT64, DVAR_KOP_SUB, d64, (const void *[]){ i64[0], i64[1] }, 2, 2);
	assert_true(d64[0] == INT64_MAX - 1);
	assert_true(d64[1] == INT64_MAX); /* INT64_MIN - 1 wraps */
	dvar_kernel_reduce(DVAR_INT64, DVAR_KOP_MIN, d64, (const void *[]){ i64[0], i64[1] }, 2, 2);
	assert_true(d64[0] == 1);
	assert_true(d64[1] == INT64_MIN);

	dvar_kernel_reduce(DVAR_UINT64, DVAR_KOP_ADD, du64, (const void *[]){ u64[0], u64[1] }, 2,
	                   2);
	assert_true(du64[0] == 0);
	assert_true(du64[1] == 1);
	dvar_kernel_reduce(DVAR_UINT64, DVAR_KOP_MIN, du64, (const void *[]){ u64[0], u64[1] }, 2,
	                   2);
	assert_true(du64[0] == 1);
	assert_true(du64[1] == 0);

	dvar_kernel_reduce(DVAR_INT16, DVAR_KOP_MAX, d16, (const void *[]){ i16[0], i16[1] }, 2, 2);
	assert_int_equal(d16[0], 7);
	assert_int_equal(d16[1], 300);
	dvar_kernel_reduce(DVAR_UINT32, DVAR_KOP_ADD, d32, (const void *[]){ u32[0], u32[1] }, 2,
	                   2);
	assert_int_equal(d32[0], 12);
	assert_int_equal(d32[1], 0xfffffff3u);
	/* uint32 compares unsigned: 0xfffffff0 is the larger. */
	dvar_kernel_reduce(DVAR_UINT32, DVAR_KOP_MIN, d32, (const void *[]){ u32[0], u32[1] }, 2,
	                   2);
	assert_int_equal(d32[0], 5);
	assert_int_equal(d32[1], 3);
}

/* Every integer dtype and op over values at the edges of the range. */
static void test_runtime_kernels__int_table(void **state)
{
	(void)state;
	for (size_t d = 0; d < NUM_INT_DTYPES; d++) {
		int dt = int_dtypes[d];
		uint64_t m = mask_of(dt);
		uint64_t smax = m >> 1, smin = smax + 1;
		const uint64_t as[] = { smax, smin, 7, (uint64_t)-7, 0, m, 1, smax };
		const uint64_t bs[] = { 1, m, 5, 2, m, m, smin, smin };
		const size_t n = sizeof as / sizeof as[0];
		unsigned char a[8 * 8], b[8 * 8], out[8 * 8];

		for (size_t i = 0; i < n; i++) {
			elem_put_bits(dt, a, i, as[i]);
			elem_put_bits(dt, b, i, bs[i]);
		}
		for (int op = DVAR_KOP_ADD; op <= DVAR_KOP_MAX; op++) {
			const void *srcs[2] = { a, b };

			dvar_kernel_reduce(dt, (dvar_kernel_op)op, out, srcs, 2, n);
			for (size_t i = 0; i < n; i++) {
				uint64_t want =
				        int_ref(dt, (dvar_kernel_op)op, as[i] & m, bs[i] & m);
				if (elem_get_bits(dt, out, i) != want)
					fail_msg("%s op %d element %zu: got %#llx, want %#llx",
					         dvar_dtype_name(dt), op, i,
					         (unsigned long long)elem_get_bits(dt, out, i),
					         (unsigned long long)want);
			}
		}
		/* Signed types: min(-1, 1) is -1; unsigned: -1 is the maximum. */
		elem_put_bits(dt, a, 0, (uint64_t)-1);
		elem_put_bits(dt, b, 0, 1);
		dvar_kernel_reduce(dt, DVAR_KOP_MIN, out, (const void *[]){ a, b }, 2, 1);
		assert_int_equal(elem_get_bits(dt, out, 0), is_signed(dt) ? m : 1);
	}
}

/* ---------------------------------------------------------------- floats */

static void test_runtime_kernels__float32_float64(void **state)
{
	float fa[] = { 1.5f, INFINITY, NAN, 2.0f, -3.0f, 3e38f, 1.0f };
	float fb[] = { 2.25f, -INFINITY, 1.0f, NAN, 4.0f, 3e38f, -1.0f };
	double da[] = { 1.5, INFINITY, NAN, 2.0, -3.0, 1e308, 0.1 };
	double db[] = { 2.25, -INFINITY, 1.0, NAN, 4.0, 1e308, 0.2 };
	float fo[7];
	double dout[7];

	(void)state;
	dvar_kernel_reduce(DVAR_FLOAT32, DVAR_KOP_ADD, fo, (const void *[]){ fa, fb }, 2, 7);
	assert_true(fo[0] == 3.75f);
	assert_true(isnan(fo[1])); /* inf + -inf */
	assert_true(isnan(fo[2]));
	assert_true(isnan(fo[3]));
	assert_true(fo[4] == 1.0f);
	assert_true(isinf(fo[5]) && fo[5] > 0);
	assert_true(fo[6] == 0.0f && !signbit(fo[6]));
	dvar_kernel_reduce(DVAR_FLOAT32, DVAR_KOP_SUB, fo, (const void *[]){ fa, fb }, 2, 7);
	assert_true(fo[0] == -0.75f);
	assert_true(isinf(fo[1]) && fo[1] > 0);
	assert_true(fo[4] == -7.0f);
	assert_true(fo[5] == 0.0f);
	assert_true(fo[6] == 2.0f);
	dvar_kernel_reduce(DVAR_FLOAT32, DVAR_KOP_MIN, fo, (const void *[]){ fa, fb }, 2, 7);
	assert_true(fo[0] == 1.5f);
	assert_true(isinf(fo[1]) && fo[1] < 0);
	assert_true(isnan(fo[2])); /* NaN first */
	assert_true(isnan(fo[3])); /* NaN second */
	assert_true(fo[4] == -3.0f);
	dvar_kernel_reduce(DVAR_FLOAT32, DVAR_KOP_MAX, fo, (const void *[]){ fa, fb }, 2, 7);
	assert_true(fo[0] == 2.25f);
	assert_true(isinf(fo[1]) && fo[1] > 0);
	assert_true(isnan(fo[2]));
	assert_true(isnan(fo[3]));
	assert_true(fo[4] == 4.0f);

	dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_ADD, dout, (const void *[]){ da, db }, 2, 7);
	assert_true(dout[0] == 3.75);
	assert_true(isnan(dout[1]) && isnan(dout[2]) && isnan(dout[3]));
	assert_true(dout[4] == 1.0);
	assert_true(isinf(dout[5]));
	assert_true(dout[6] == 0.1 + 0.2); /* 0.30000000000000004: no extra precision */
	dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_SUB, dout, (const void *[]){ da, db }, 2, 7);
	assert_true(dout[0] == -0.75);
	assert_true(dout[4] == -7.0);
	dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_MIN, dout, (const void *[]){ da, db }, 2, 7);
	assert_true(dout[0] == 1.5 && isinf(dout[1]) && dout[1] < 0);
	assert_true(isnan(dout[2]) && isnan(dout[3]));
	assert_true(dout[4] == -3.0);
	dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_MAX, dout, (const void *[]){ da, db }, 2, 7);
	assert_true(dout[0] == 2.25 && isinf(dout[1]) && dout[1] > 0);
	assert_true(isnan(dout[2]) && isnan(dout[3]));
	assert_true(dout[4] == 4.0);

	/* Left to right: (1e16 + 1) + 1 rounds twice in float64, 1e16 + (1 + 1) does not. */
	{
		double x[] = { 1e16 }, one[] = { 1.0 };
		dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_ADD, dout,
		                   (const void *[]){ x, one, one }, 3, 1);
		assert_true(dout[0] == 1e16);
		dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_ADD, dout,
		                   (const void *[]){ one, one, x }, 3, 1);
		assert_true(dout[0] == 1e16 + 2);
	}
}

/* Round a double to a binary format with p significand bits, smallest
 * normal exponent emin and largest finite value maxf, nearest-even. */
static double ref_round(double x, int p, int emin, double maxf)
{
	int e;
	double q, r;

	if (isnan(x) || isinf(x) || x == 0)
		return x;
	frexp(fabs(x), &e);
	e -= 1; /* the leading bit's exponent */
	if (e < emin)
		e = emin;
	q = ldexp(1.0, e - (p - 1));
	r = rint(x / q) * q; /* rint: nearest-even in the default mode */
	if (fabs(r) > maxf)
		return copysign(INFINITY, x);
	return r;
}

static double ref_f16(double x)
{
	return ref_round(x, 11, -14, 65504.0);
}

static double ref_bf16(double x)
{
	return ref_round(x, 8, -126, ldexp(255.0, 120)); /* (2 - 2^-7) * 2^127 */
}

static double widen(int dtype, uint16_t bits)
{
	double d;

	assert_int_equal(dvar_dtype_to_f64(&d, dtype, &bits, 1), DVAR_OK);
	return d;
}

/* The result of a narrow-float kernel equals the reference value (same sign
 * for zeros), or both are NaN. */
static void check_narrow(int dtype, uint16_t got, double want, const char *what, size_t i)
{
	double g = widen(dtype, got);

	if (isnan(want) ? isnan(g) : (g == want && signbit(g) == signbit(want)))
		return;
	fail_msg("%s %s element %zu: got %#06x = %.17g, want %.17g", dvar_dtype_name(dtype), what,
	         i, got, g, want);
}

static double ref_op(dvar_kernel_op op, double a, double b, double (*round)(double))
{
	switch (op) {
	case DVAR_KOP_ADD: return round(a + b);
	case DVAR_KOP_SUB: return round(a - b);
	case DVAR_KOP_MIN: return (a < b || isnan(a)) ? a : b;
	case DVAR_KOP_MAX: return (a > b || isnan(a)) ? a : b;
	}
	return 0;
}

static const char *const op_names[] = { "add", "sub", "min", "max" };

static void test_runtime_kernels__float16_cases(void **state)
{
	/* 2048 + 1 = 2049 is a tie between 2048 and 2050: even 2048.
	 * 2050 + 1 = 2051 ties to 2052 (even mantissa). 65504 + 16 = 65520
	 * ties to the next even, which is infinity; 65504 + 8 rounds down.
	 * 60000 + 60000 overflows. Subnormals: 2^-24 + 2^-24; the largest
	 * subnormal + 2^-24 is the smallest normal. -1 + 1 = +0. */
	const uint16_t a[] = { 0x6800, 0x6801, 0x7bff, 0x7bff, 0x7b53, 0x0001, 0x03ff,
		               0xbc00, 0x7c00, 0x7c00, 0x7e00, 0x3c00, 0xfb53 };
	const uint16_t b[] = { 0x3c00, 0x3c00, 0x4c00, 0x4800, 0x7b53, 0x0001, 0x0001,
		               0x3c00, 0x3c00, 0xfc00, 0x3c00, 0x7e00, 0x7b53 };
	const uint16_t add[] = { 0x6800, 0x6802, 0x7c00, 0x7bff, 0x7c00, 0x0002, 0x0400,
		                 0x0000, 0x7c00, 0,      0,      0,      0x0000 };
	const size_t n = sizeof a / sizeof a[0];
	uint16_t out[16];

	(void)state;
	dvar_kernel_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, out, (const void *[]){ a, b }, 2, n);
	for (size_t i = 0; i < n; i++) {
		if (i == 9 || i == 10 || i == 11) {
			assert_true(isnan(
			        widen(DVAR_FLOAT16, out[i]))); /* inf - inf, NaN + x, x + NaN */
			continue;
		}
		if (out[i] != add[i])
			fail_msg("float16 add element %zu: got %#06x, want %#06x", i, out[i],
			         add[i]);
	}
	/* 0x0400 - 0x0001 is the largest subnormal; -60000 - 60000 is -inf. */
	{
		const uint16_t x[] = { 0x0400, 0xfb53, 0x3c00 }, y[] = { 0x0001, 0x7b53, 0x3c00 };
		dvar_kernel_reduce(DVAR_FLOAT16, DVAR_KOP_SUB, out, (const void *[]){ x, y }, 2, 3);
		assert_int_equal(out[0], 0x03ff);
		assert_int_equal(out[1], 0xfc00);
		assert_int_equal(out[2], 0x0000);
	}
	/* Rounding after every step: 2048 + 1 + 1 = 2048 (each addition ties
	 * down), while 1 + 1 + 2048 = 2050. */
	{
		const uint16_t big[] = { 0x6800 }, one[] = { 0x3c00 };
		dvar_kernel_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, out,
		                   (const void *[]){ big, one, one }, 3, 1);
		assert_int_equal(out[0], 0x6800);
		dvar_kernel_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, out,
		                   (const void *[]){ one, one, big }, 3, 1);
		assert_int_equal(out[0], 0x6801);
	}
	/* MIN / MAX: NaN wins from either side; signs; infinities. */
	{
		const uint16_t x[] = { 0x3c00, 0x7e00, 0xc000, 0x7c00, 0x0001 };
		const uint16_t y[] = { 0x7e00, 0x3c00, 0x4200, 0xfc00, 0x8001 };
		dvar_kernel_reduce(DVAR_FLOAT16, DVAR_KOP_MIN, out, (const void *[]){ x, y }, 2, 5);
		assert_true(isnan(widen(DVAR_FLOAT16, out[0])));
		assert_true(isnan(widen(DVAR_FLOAT16, out[1])));
		assert_int_equal(out[2], 0xc000);
		assert_int_equal(out[3], 0xfc00);
		assert_int_equal(out[4], 0x8001);
		dvar_kernel_reduce(DVAR_FLOAT16, DVAR_KOP_MAX, out, (const void *[]){ x, y }, 2, 5);
		assert_true(isnan(widen(DVAR_FLOAT16, out[0])));
		assert_true(isnan(widen(DVAR_FLOAT16, out[1])));
		assert_int_equal(out[2], 0x4200);
		assert_int_equal(out[3], 0x7c00);
		assert_int_equal(out[4], 0x0001);
	}
}

static void test_runtime_kernels__bfloat16_cases(void **state)
{
	/* 256 + 1 ties to 256; 258 + 1 ties to 260; the largest finite value
	 * doubled overflows; subnormal + subnormal; inf + -inf is NaN. */
	const uint16_t a[] = { 0x4380, 0x4381, 0x7f7f, 0x0001, 0x7f80, 0x3f80, 0x4380 };
	const uint16_t b[] = { 0x3f80, 0x3f80, 0x7f7f, 0x0001, 0xff80, 0x7fc0, 0x4040 };
	const uint16_t add[] = { 0x4380, 0x4382, 0x7f80, 0x0002, 0, 0, 0x4382 };
	uint16_t out[8];

	(void)state;
	dvar_kernel_reduce(DVAR_BFLOAT16, DVAR_KOP_ADD, out, (const void *[]){ a, b }, 2, 7);
	for (size_t i = 0; i < 7; i++) {
		if (i == 4 || i == 5) {
			assert_true(isnan(widen(DVAR_BFLOAT16, out[i])));
			continue;
		}
		if (out[i] != add[i])
			fail_msg("bfloat16 add element %zu: got %#06x, want %#06x", i, out[i],
			         add[i]);
	}
	dvar_kernel_reduce(DVAR_BFLOAT16, DVAR_KOP_MIN, out, (const void *[]){ a, b }, 2, 7);
	assert_int_equal(out[0], 0x3f80);
	assert_int_equal(out[4], 0xff80);
	assert_true(isnan(widen(DVAR_BFLOAT16, out[5])));
	dvar_kernel_reduce(DVAR_BFLOAT16, DVAR_KOP_MAX, out, (const void *[]){ b, a }, 2, 7);
	assert_int_equal(out[0], 0x4380);
	assert_int_equal(out[4], 0x7f80);
	assert_true(isnan(widen(DVAR_BFLOAT16, out[5])));
}

/* Random bit patterns (NaNs, infinities and subnormals included) through every
 * op with 2 and 3 sources, against the double reference. */
static void check_narrow_random(int dtype, double (*round)(double), uint64_t seed)
{
	enum { N = 1 << 16 };
	uint16_t *s[3], *out = malloc(N * 2);

	for (int k = 0; k < 3; k++) {
		s[k] = malloc(N * 2);
		assert_non_null(s[k]);
		tu_fill_random(s[k], N * 2, seed + k);
	}
	/* Also every pattern once, plus zero: the conversions are exact. */
	for (size_t i = 0; i < N; i++)
		s[0][i] = (uint16_t)i;
	for (int op = DVAR_KOP_ADD; op <= DVAR_KOP_MAX; op++) {
		for (int n = 2; n <= 3; n++) {
			dvar_kernel_reduce(dtype, (dvar_kernel_op)op, out, (const void *const *)s,
			                   n, N);
			for (size_t i = 0; i < N; i++) {
				double want = widen(dtype, s[0][i]);
				for (int k = 1; k < n; k++)
					want = ref_op((dvar_kernel_op)op, want,
					              widen(dtype, s[k][i]), round);
				check_narrow(dtype, out[i], want, op_names[op], i);
			}
		}
	}
	for (int k = 0; k < 3; k++)
		free(s[k]);
	free(out);
}

static void test_runtime_kernels__float16_random(void **state)
{
	(void)state;
	check_narrow_random(DVAR_FLOAT16, ref_f16, 16);
}

static void test_runtime_kernels__bfloat16_random(void **state)
{
	(void)state;
	check_narrow_random(DVAR_BFLOAT16, ref_bf16, 1616);
}

/* ---------------------------------------------------------------- counts, aliasing */

static double id_round(double x)
{
	return x;
}

static void fill_values(int dtype, void *buf, size_t count, uint64_t seed)
{
	size_t size = dvar_dtype_size(dtype);

	tu_fill_random(buf, count * size, seed);
	/* Floats: small integers, so that sums are exact and any order of a
	 * wrong kernel would still show. */
	if (dtype == DVAR_FLOAT32) {
		float *f = buf;
		for (size_t i = 0; i < count; i++)
			f[i] = (float)(int)(((unsigned char *)buf)[i * 4] % 64) - 32.0f;
	} else if (dtype == DVAR_FLOAT64) {
		double *d = buf;
		for (size_t i = 0; i < count; i++)
			d[i] = (double)(int)(((unsigned char *)buf)[i * 8] % 64) - 32.0;
	}
}

static void expect_elementwise(int dtype, dvar_kernel_op op, const void *got,
                               unsigned char *const *srcs, int n, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		if (dtype == DVAR_FLOAT32 || dtype == DVAR_FLOAT64) {
			double acc = 0, x = 0, g = 0;
			for (int k = 0; k < n; k++) {
				if (dtype == DVAR_FLOAT32) {
					float f;
					memcpy(&f, srcs[k] + i * 4, 4);
					x = f;
				} else {
					memcpy(&x, srcs[k] + i * 8, 8);
				}
				acc = k == 0 ? x : ref_op(op, acc, x, id_round);
			}
			if (dtype == DVAR_FLOAT32) {
				float f;
				memcpy(&f, (const char *)got + i * 4, 4);
				g = f;
			} else {
				memcpy(&g, (const char *)got + i * 8, 8);
			}
			if (g != acc)
				fail_msg("%s op %d n %d count %zu element %zu: got %g, want %g",
				         dvar_dtype_name(dtype), op, n, count, i, g, acc);
		} else if (dtype == DVAR_FLOAT16 || dtype == DVAR_BFLOAT16) {
			double (*round)(double) = dtype == DVAR_FLOAT16 ? ref_f16 : ref_bf16;
			uint16_t h, gh;
			double acc = 0;
			for (int k = 0; k < n; k++) {
				memcpy(&h, srcs[k] + i * 2, 2);
				acc = k == 0 ? widen(dtype, h)
				             : ref_op(op, acc, widen(dtype, h), round);
			}
			memcpy(&gh, (const char *)got + i * 2, 2);
			check_narrow(dtype, gh, acc, "reduce", i);
		} else {
			uint64_t acc = 0;
			for (int k = 0; k < n; k++) {
				uint64_t x = elem_get_bits(dtype, srcs[k], i);
				acc = k == 0 ? x : int_ref(dtype, op, acc, x);
			}
			if (elem_get_bits(dtype, got, i) != acc)
				fail_msg("%s op %d n %d count %zu element %zu: got %#llx, want "
				         "%#llx",
				         dvar_dtype_name(dtype), op, n, count, i,
				         (unsigned long long)elem_get_bits(dtype, got, i),
				         (unsigned long long)acc);
		}
	}
}

/* Every dtype and op, 1..5 sources, counts around the block size, into a
 * separate dst and into each source in turn. */
static void test_runtime_kernels__counts_and_aliasing(void **state)
{
	static const size_t counts[] = { 1, 7, 1023, 1024, 1025, 3001 };
	enum { MAXN = 5 };

	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++) {
		int dt = elem_numeric_dtypes[d];
		size_t size = dvar_dtype_size(dt);

		for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
			size_t count = counts[c];
			unsigned char *orig[MAXN], *work[MAXN], *out = malloc(count * size);

			assert_non_null(out);
			for (int k = 0; k < MAXN; k++) {
				orig[k] = malloc(count * size);
				work[k] = malloc(count * size);
				assert_non_null(orig[k]);
				assert_non_null(work[k]);
				fill_values(dt, orig[k], count, 1000 * d + 10 * c + k);
			}
			for (int op = DVAR_KOP_ADD; op <= DVAR_KOP_MAX; op++) {
				for (int n = 1; n <= MAXN; n++) {
					memset(out, 0xa5, count * size);
					dvar_kernel_reduce(dt, (dvar_kernel_op)op, out,
					                   (const void *const *)orig, n, count);
					expect_elementwise(dt, (dvar_kernel_op)op, out, orig, n,
					                   count);
					/* dst is source a, for every a. */
					for (int alias = 0; alias < n; alias++) {
						for (int k = 0; k < n; k++)
							memcpy(work[k], orig[k], count * size);
						dvar_kernel_reduce(
						        dt, (dvar_kernel_op)op, work[alias],
						        (const void *const *)work, n, count);
						expect_elementwise(dt, (dvar_kernel_op)op,
						                   work[alias], orig, n, count);
					}
				}
			}
			for (int k = 0; k < MAXN; k++) {
				free(orig[k]);
				free(work[k]);
			}
			free(out);
		}
	}
}

/* The same buffer several times over: x + x + x, x - x, min(x, x). */
static void test_runtime_kernels__same_source_repeated(void **state)
{
	int32_t x[5] = { 1, -2, 3, INT32_MAX, INT32_MIN };
	int32_t want_add[5] = { 3, -6, 9, INT32_MAX - 2, INT32_MIN };
	float f[3] = { 1.5f, -2.0f, NAN };

	(void)state;
	dvar_kernel_reduce(DVAR_INT32, DVAR_KOP_ADD, x, (const void *[]){ x, x, x }, 3, 5);
	/* INT32_MAX * 3 wraps to INT32_MAX - 2; INT32_MIN * 3 wraps to INT32_MIN. */
	assert_memory_equal(x, want_add, sizeof x);
	dvar_kernel_reduce(DVAR_FLOAT32, DVAR_KOP_SUB, f, (const void *[]){ f, f }, 2, 3);
	assert_true(f[0] == 0.0f && f[1] == 0.0f && isnan(f[2]));
}

/* Elements need not be aligned to their size. */
static void test_runtime_kernels__unaligned(void **state)
{
	unsigned char a[8 * 9 + 1], b[8 * 9 + 1], out[8 * 9 + 1];
	double va[9], vb[9], vo[9];

	(void)state;
	for (int i = 0; i < 9; i++) {
		va[i] = i * 1.25;
		vb[i] = 100 - i;
	}
	memcpy(a + 1, va, sizeof va);
	memcpy(b + 1, vb, sizeof vb);
	dvar_kernel_reduce(DVAR_FLOAT64, DVAR_KOP_ADD, out + 1, (const void *[]){ a + 1, b + 1 }, 2,
	                   9);
	memcpy(vo, out + 1, sizeof vo);
	for (int i = 0; i < 9; i++)
		assert_true(vo[i] == i * 1.25 + 100 - i);
	dvar_kernel_apply(DVAR_FLOAT64, DVAR_KOP_SUB, out + 1, b + 1, 9);
	memcpy(vo, out + 1, sizeof vo);
	for (int i = 0; i < 9; i++)
		assert_true(vo[i] == i * 1.25);
	dvar_kernel_divide(DVAR_FLOAT64, out + 1, 9, 5);
	memcpy(vo, out + 1, sizeof vo);
	for (int i = 0; i < 9; i++)
		assert_true(vo[i] == i * 1.25 / 5);
}

/* ---------------------------------------------------------------- apply */

static void test_runtime_kernels__apply(void **state)
{
	int16_t d[4] = { 10, -10, INT16_MAX, 5 }, s[4] = { 3, 3, 1, 5 };
	uint16_t h[2] = { 0x6800, 0x3c00 }, one[2] = { 0x3c00, 0x3c00 };
	float f[3] = { 1.0f, 2.0f, 3.0f }, g[3] = { 0.5f, NAN, 4.0f };

	(void)state;
	dvar_kernel_apply(DVAR_INT16, DVAR_KOP_SUB, d, s, 4);
	assert_int_equal(d[0], 7);
	assert_int_equal(d[1], -13);
	assert_int_equal(d[2], INT16_MAX - 1);
	assert_int_equal(d[3], 0);
	dvar_kernel_apply(DVAR_INT16, DVAR_KOP_ADD, d, d, 4); /* src == dst */
	assert_int_equal(d[0], 14);
	assert_int_equal(d[1], -26);
	assert_int_equal(d[2], -4); /* (INT16_MAX - 1) * 2 wraps */
	dvar_kernel_apply(DVAR_FLOAT16, DVAR_KOP_ADD, h, one, 2);
	assert_int_equal(h[0], 0x6800); /* 2048 + 1 = 2048 */
	assert_int_equal(h[1], 0x4000); /* 1 + 1 = 2 */
	dvar_kernel_apply(DVAR_FLOAT32, DVAR_KOP_MAX, f, g, 3);
	assert_true(f[0] == 1.0f && isnan(f[1]) && f[2] == 4.0f);
	dvar_kernel_apply(DVAR_FLOAT32, DVAR_KOP_MIN, g, f, 3);
	assert_true(g[0] == 0.5f && isnan(g[1]) && g[2] == 4.0f);
}

/* ---------------------------------------------------------------- the NaN of a NaN result */

/* One float dtype's bits: two NaN operands (signalling, with payloads), the
 * first quieted, the second quieted, the default NaN, +inf, -inf and 1. */
typedef struct {
	int dtype;
	uint64_t nan1, nan2, quiet1, quiet2, dflt, inf, ninf, one;
} nan_bits;

static const nan_bits nan_cases[] = {
	{ DVAR_FLOAT16, 0x7c23, 0xfd56, 0x7e23, 0xff56, 0xfe00, 0x7c00, 0xfc00, 0x3c00 },
	{ DVAR_BFLOAT16, 0x7f81, 0xffa3, 0x7fc1, 0xffe3, 0xffc0, 0x7f80, 0xff80, 0x3f80 },
	{ DVAR_FLOAT32, 0x7f800123, 0xffa00456, 0x7fc00123, 0xffe00456, 0xffc00000, 0x7f800000,
	  0xff800000, 0x3f800000 },
	{ DVAR_FLOAT64, 0x7ff0000000000123ull, 0xfff4000000000456ull, 0x7ff8000000000123ull,
	  0xfffc000000000456ull, 0xfff8000000000000ull, 0x7ff0000000000000ull,
	  0xfff0000000000000ull, 0x3ff0000000000000ull },
};

/* Reduce n sources, each element i of source k set to bits[k], over a count
 * that takes gcc's vector loop and its tail; every element must be want. */
static void check_nan_rule(int dtype, dvar_kernel_op op, const uint64_t *bits, int n,
                           uint64_t want)
{
	enum { COUNT = 1024 + 37 };
	size_t size = dvar_dtype_size(dtype);
	unsigned char *src[3], *dst = malloc(COUNT * size);
	const void *srcs[3];

	assert_non_null(dst);
	for (int k = 0; k < n; k++) {
		src[k] = malloc(COUNT * size);
		assert_non_null(src[k]);
		for (size_t i = 0; i < COUNT; i++)
			elem_put_bits(dtype, src[k], i, bits[k]);
		srcs[k] = src[k];
	}
	dvar_kernel_reduce(dtype, op, dst, srcs, n, COUNT);
	for (size_t i = 0; i < COUNT; i++)
		if (elem_get_bits(dtype, dst, i) != want)
			fail_msg("%s %s of %d sources: element %zu is %#llx, not %#llx",
			         dvar_dtype_name(dtype), op == DVAR_KOP_ADD ? "ADD" : "SUB", n, i,
			         (unsigned long long)elem_get_bits(dtype, dst, i),
			         (unsigned long long)want);
	for (int k = 0; k < n; k++)
		free(src[k]);
	free(dst);
}

/*
 * runtime/narrow.h's rule, the one the GPU kernels follow too: the left
 * NaN operand quieted, else the right one, else the negative default NaN
 * for a NaN made from numbers, the same in the vector loop and the tail
 * (gcc swapped the operands of a commutative addition in one of them).
 */
static void test_runtime_kernels__nan_rule(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof nan_cases / sizeof nan_cases[0]; c++) {
		const nan_bits *b = &nan_cases[c];
		int dt = b->dtype;

		for (int sub = 0; sub < 2; sub++) {
			dvar_kernel_op op = sub ? DVAR_KOP_SUB : DVAR_KOP_ADD;
			uint64_t inf_inf[3] = { b->inf, sub ? b->inf : b->ninf, b->nan2 };

			check_nan_rule(dt, op, (uint64_t[]){ b->nan1, b->nan2 }, 2, b->quiet1);
			check_nan_rule(dt, op, (uint64_t[]){ b->one, b->nan2 }, 2, b->quiet2);
			check_nan_rule(dt, op, (uint64_t[]){ b->nan1, b->one }, 2, b->quiet1);
			check_nan_rule(dt, op, inf_inf, 2, b->dflt);
			/* A running result that became NaN by itself meets a NaN:
			 * the running result, the left operand, wins. */
			check_nan_rule(dt, op, inf_inf, 3, b->dflt);
		}
	}
}

/* ---------------------------------------------------------------- divide */

static void test_runtime_kernels__divide_integers(void **state)
{
	int32_t i32[6] = { -7, 7, -1, 1, INT32_MIN, INT32_MAX };
	int8_t i8[3] = { -128, 127, -3 };
	uint8_t u8[2] = { 255, 7 };
	int64_t i64[3] = { INT64_MIN, INT64_MAX, -9 };
	uint64_t u64[2] = { UINT64_MAX, 9 };
	int16_t i16[2] = { -300, 300 };

	(void)state;
	dvar_kernel_divide(DVAR_INT32, i32, 6, 2);
	assert_int_equal(i32[0], -3); /* toward zero, not -4 */
	assert_int_equal(i32[1], 3);
	assert_int_equal(i32[2], 0);
	assert_int_equal(i32[3], 0);
	assert_int_equal(i32[4], INT32_MIN / 2);
	assert_int_equal(i32[5], INT32_MAX / 2);
	dvar_kernel_divide(DVAR_INT8, i8, 3, 3);
	assert_int_equal(i8[0], -42);
	assert_int_equal(i8[1], 42);
	assert_int_equal(i8[2], -1);
	dvar_kernel_divide(DVAR_UINT8, u8, 2, 2);
	assert_int_equal(u8[0], 127);
	assert_int_equal(u8[1], 3);
	dvar_kernel_divide(DVAR_INT64, i64, 3, 4);
	assert_true(i64[0] == INT64_MIN / 4);
	assert_true(i64[1] == INT64_MAX / 4);
	assert_true(i64[2] == -2);
	dvar_kernel_divide(DVAR_UINT64, u64, 2, 3);
	assert_true(u64[0] == UINT64_MAX / 3);
	assert_true(u64[1] == 3);
	/* A divisor beyond the dtype's range. */
	dvar_kernel_divide(DVAR_INT16, i16, 2, 1000);
	assert_int_equal(i16[0], 0);
	assert_int_equal(i16[1], 0);
	/* Divisor 1 changes nothing. */
	i64[0] = INT64_MIN;
	dvar_kernel_divide(DVAR_INT64, i64, 1, 1);
	assert_true(i64[0] == INT64_MIN);
	/* Every integer dtype: -7 / 2 = -3 for signed, 249 / 2 etc. for unsigned. */
	for (size_t d = 0; d < NUM_INT_DTYPES; d++) {
		int dt = int_dtypes[d];
		unsigned char buf[16];
		elem_put_bits(dt, buf, 0, (uint64_t)-7);
		elem_put_bits(dt, buf, 1, 9);
		dvar_kernel_divide(dt, buf, 2, 2);
		if (is_signed(dt))
			assert_int_equal(as_signed(dt, elem_get_bits(dt, buf, 0)), -3);
		else
			assert_int_equal(elem_get_bits(dt, buf, 0), (mask_of(dt) - 6) / 2);
		assert_int_equal(elem_get_bits(dt, buf, 1), 4);
	}
}

static void test_runtime_kernels__divide_floats(void **state)
{
	float f[4] = { 7.0f, -1.0f, NAN, INFINITY };
	double d[3] = { 1.0, 7.0, -INFINITY };
	/* float16: 3 / 2 = 1.5; subnormals: 3 * 2^-24 / 2 ties to 2 * 2^-24,
	 * 1 * 2^-24 / 2 ties to 0, 5 * 2^-24 / 2 ties to 2 * 2^-24; 1 / 3
	 * rounds to 0x3555; NaN stays NaN. */
	uint16_t h[6] = { 0x4200, 0x0003, 0x0001, 0x0005, 0x3c00, 0x7e00 };
	/* bfloat16: 1 / 3 = 0x3eab; 3 / 2 = 1.5 (0x3fc0). */
	uint16_t b[2] = { 0x3f80, 0x4040 };

	(void)state;
	dvar_kernel_divide(DVAR_FLOAT32, f, 4, 2);
	assert_true(f[0] == 3.5f && f[1] == -0.5f && isnan(f[2]) && isinf(f[3]));
	dvar_kernel_divide(DVAR_FLOAT64, d, 3, 3);
	assert_true(d[0] == 1.0 / 3.0 && d[1] == 7.0 / 3.0 && isinf(d[2]) && d[2] < 0);
	dvar_kernel_divide(DVAR_FLOAT16, h, 4, 2);
	assert_int_equal(h[0], 0x3e00);
	assert_int_equal(h[1], 0x0002);
	assert_int_equal(h[2], 0x0000);
	assert_int_equal(h[3], 0x0002);
	dvar_kernel_divide(DVAR_FLOAT16, h + 4, 2, 3);
	assert_int_equal(h[4], 0x3555);
	assert_true(isnan(widen(DVAR_FLOAT16, h[5])));
	dvar_kernel_divide(DVAR_BFLOAT16, b, 1, 3);
	assert_int_equal(b[0], 0x3eab);
	dvar_kernel_divide(DVAR_BFLOAT16, b + 1, 1, 2);
	assert_int_equal(b[1], 0x3fc0);
	/* Against the reference over every float16 pattern, divisors 3 and 7. */
	{
		uint16_t *all = malloc(65536 * 2);
		assert_non_null(all);
		for (int dv = 3; dv <= 7; dv += 4) {
			for (size_t i = 0; i < 65536; i++)
				all[i] = (uint16_t)i;
			dvar_kernel_divide(DVAR_FLOAT16, all, 65536, dv);
			for (size_t i = 0; i < 65536; i++)
				check_narrow(DVAR_FLOAT16, all[i],
				             ref_f16(widen(DVAR_FLOAT16, (uint16_t)i) / dv),
				             "divide", i);
			for (size_t i = 0; i < 65536; i++)
				all[i] = (uint16_t)i;
			dvar_kernel_divide(DVAR_BFLOAT16, all, 65536, dv);
			for (size_t i = 0; i < 65536; i++)
				check_narrow(DVAR_BFLOAT16, all[i],
				             ref_bf16(widen(DVAR_BFLOAT16, (uint16_t)i) / dv),
				             "divide", i);
		}
		free(all);
	}
}

/* ---------------------------------------------------------------- check */

static void test_runtime_kernels__check(void **state)
{
	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++)
		for (int op = DVAR_KOP_ADD; op <= DVAR_KOP_MAX; op++)
			assert_int_equal(
			        dvar_kernel_check(elem_numeric_dtypes[d], (dvar_kernel_op)op, "x"),
			        DVAR_OK);
	assert_int_equal(dvar_kernel_check(DVAR_BOOL, DVAR_KOP_ADD, "all_reduce"), DVAR_EINVAL);
	tu_assert_error_contains("all_reduce");
	tu_assert_error_contains("bool");
	assert_int_equal(dvar_kernel_check(99, DVAR_KOP_MAX, "reduce 'w'"), DVAR_EINVAL);
	tu_assert_error_contains("reduce 'w'");
	tu_assert_error_contains("99");
	assert_int_equal(dvar_kernel_check(0, DVAR_KOP_ADD, "gather"), DVAR_EINVAL);
	tu_assert_error_contains("dtype 0");
	assert_int_equal(dvar_kernel_check(DVAR_FLOAT32, (dvar_kernel_op)4, "apply"), DVAR_EINVAL);
	tu_assert_error_contains("apply");
	tu_assert_error_contains("operator 4");
	assert_int_equal(dvar_kernel_check(DVAR_FLOAT32, (dvar_kernel_op)-1, NULL), DVAR_EINVAL);
}

static void test_runtime_kernels__is_floating(void **state)
{
	(void)state;
	assert_true(dvar_kernel_is_floating(DVAR_FLOAT16));
	assert_true(dvar_kernel_is_floating(DVAR_BFLOAT16));
	assert_true(dvar_kernel_is_floating(DVAR_FLOAT32));
	assert_true(dvar_kernel_is_floating(DVAR_FLOAT64));
	for (size_t d = 0; d < NUM_INT_DTYPES; d++)
		assert_false(dvar_kernel_is_floating(int_dtypes[d]));
	assert_false(dvar_kernel_is_floating(DVAR_BOOL));
	assert_false(dvar_kernel_is_floating(99));
}

/* ---------------------------------------------------------------- bandwidth */

/* Not a timed assertion: prints how a float32 SUM of 4 sources of 16 MiB
 * compares with memcpy of one source, so a regression to a multi-pass or
 * scalar loop shows in the test log. */
static void test_runtime_kernels__bandwidth_report(void **state)
{
	const size_t bytes = 16u << 20, count = bytes / 4;
	unsigned char *b[5];
	double t_copy = 1e30, t_reduce = 1e30;

	(void)state;
	for (int k = 0; k < 5; k++) {
		b[k] = malloc(bytes);
		assert_non_null(b[k]);
		memset(b[k], 0, bytes);
	}
	for (int r = 0; r < 3; r++) {
		double t = dvar_now();
		memcpy(b[4], b[0], bytes);
		t = dvar_now() - t;
		if (t < t_copy)
			t_copy = t;
		t = dvar_now();
		dvar_kernel_reduce(DVAR_FLOAT32, DVAR_KOP_ADD, b[4], (const void *const *)b, 4,
		                   count);
		t = dvar_now() - t;
		if (t < t_reduce)
			t_reduce = t;
	}
	print_message("float32 sum of 4 x 16 MiB: %.2f GB/s of output, memcpy of 16 MiB %.2f GB/s "
	              "(reduce moves 5 buffers, memcpy 2)\n",
	              bytes / t_reduce / 1e9, bytes / t_copy / 1e9);
	for (int k = 0; k < 5; k++)
		free(b[k]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtime_kernels__int_literals),
		cmocka_unit_test(test_runtime_kernels__int_table),
		cmocka_unit_test(test_runtime_kernels__float32_float64),
		cmocka_unit_test(test_runtime_kernels__float16_cases),
		cmocka_unit_test(test_runtime_kernels__bfloat16_cases),
		cmocka_unit_test(test_runtime_kernels__float16_random),
		cmocka_unit_test(test_runtime_kernels__bfloat16_random),
		cmocka_unit_test(test_runtime_kernels__counts_and_aliasing),
		cmocka_unit_test(test_runtime_kernels__same_source_repeated),
		cmocka_unit_test(test_runtime_kernels__unaligned),
		cmocka_unit_test(test_runtime_kernels__apply),
		cmocka_unit_test(test_runtime_kernels__nan_rule),
		cmocka_unit_test(test_runtime_kernels__divide_integers),
		cmocka_unit_test(test_runtime_kernels__divide_floats),
		cmocka_unit_test(test_runtime_kernels__check),
		cmocka_unit_test(test_runtime_kernels__is_floating),
		cmocka_unit_test(test_runtime_kernels__bandwidth_report),
	};
	return cmocka_run_group_tests_name("runtime/kernels", tests, NULL, NULL);
}
