/*
 * tests/unit/runtime/test_cuda_kernels.c - the CUDA kernels' element code
 * (runtime/cuda/kernels.cu) against the host kernels, byte for byte, on any
 * machine: dvar_cuda_k_host_check runs the device's __host__ __device__
 * functions on the host. Reduce for every numeric dtype and operator over 1
 * to 256 sources (both of the device's pointer lists), divide, a sum
 * divided in the same pass (a MEAN) and the SUM split, over data full of
 * NaNs (quiet and signalling, with payloads, both signs), infinities,
 * signed zeros, subnormals, rounding ties and integer extremes. Where two
 * NaNs meet (two NaN sources, or a NaN source after an inf - inf) both
 * follow runtime/narrow.h's rule, so every element is compared byte for
 * byte, NaN results included.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "elements.h"
#include "core/core.h"
#include "runtime/runtime.h"
#include "runtime/cuda/kernels.h"

static const dvar_kernel_op all_ops[] = { DVAR_KOP_ADD, DVAR_KOP_SUB, DVAR_KOP_MIN,
	                                  DVAR_KOP_MAX };
static const char *const op_names[] = { "ADD", "SUB", "MIN", "MAX" };

static const size_t counts[] = { 1, 3, 1000, 4097 };
#define NUM_COUNTS (sizeof counts / sizeof counts[0])

#define MAX_SOURCES DVAR_CUDA_MAX_SOURCES

/* ---------------------------------------------------------------- element bits */

/* The exponent and quiet-bit masks of a floating dtype. */
static void float_masks(int dtype, uint64_t *exp, uint64_t *quiet, uint64_t *mant)
{
	switch (dtype) {
	case DVAR_FLOAT16: *exp = 0x7c00; *quiet = 0x200; *mant = 0x3ff; break;
	case DVAR_BFLOAT16: *exp = 0x7f80; *quiet = 0x40; *mant = 0x7f; break;
	case DVAR_FLOAT32: *exp = 0x7f800000; *quiet = 0x400000; *mant = 0x7fffff; break;
	default:
		*exp = 0x7ff0000000000000ull;
		*quiet = 0x8000000000000ull;
		*mant = 0xfffffffffffffull;
		break;
	}
}

static int bits_nan(int dtype, uint64_t v)
{
	uint64_t exp, quiet, mant;

	float_masks(dtype, &exp, &quiet, &mant);
	return (v & exp) == exp && (v & mant) != 0;
}

/* ---------------------------------------------------------------- data */

/* Special values of each floating dtype, as bits: signed zeros, infinities,
 * quiet and signalling NaNs with payloads and both signs, subnormals, the
 * extremes, and values that make ties. */
static const uint64_t f16_specials[] = { 0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e55,
	                                 0x7c01, 0xfd23, 0x7dff, 0x0001, 0x83ff, 0x0400, 0x7bff,
	                                 0xfbff, 0x3c00, 0xbc00, 0x1000, 0x3c01, 0x4c00 };
static const uint64_t bf16_specials[] = { 0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fd5,
	                                  0x7f81, 0xffa3, 0x7fbf, 0x0001, 0x807f, 0x0080, 0x7f7f,
	                                  0xff7f, 0x3f80, 0xbf80, 0x3b80, 0x3f81, 0x4380 };
static const uint64_t f32_specials[] = { 0x00000000, 0x80000000, 0x7f800000, 0xff800000,
	                                 0x7fc00000, 0xffc00000, 0x7fc12345, 0x7f800001,
	                                 0xffa5a5a5, 0x7fbfffff, 0x00000001, 0x807fffff,
	                                 0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000,
	                                 0xbf800000, 0x33800000, 0x3f800001, 0x4b800000 };
static const uint64_t f64_specials[] = {
	0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
	0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff8123456789abcull, 0x7ff0000000000001ull,
	0xfff5a5a5a5a5a5a5ull, 0x7ff7ffffffffffffull, 0x0000000000000001ull, 0x800fffffffffffffull,
	0x0010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull, 0x3ff0000000000000ull,
	0xbff0000000000000ull, 0x3ca0000000000000ull, 0x3ff0000000000001ull, 0x4340000000000000ull
};
#define NUM_SPECIALS 20

/* Integer extremes as bits (truncated to the width): 0, 1, -1 / UINT_MAX,
 * INT_MIN, INT_MAX, and their neighbours. */
static uint64_t int_special(int dtype, unsigned k)
{
	unsigned bits = 8 * (unsigned)dvar_dtype_size(dtype);
	uint64_t sign = 1ull << (bits - 1);

	switch (k % 8) {
	case 0: return 0;
	case 1: return 1;
	case 2: return ~0ull;     /* -1, UINT_MAX */
	case 3: return sign;      /* INT_MIN */
	case 4: return sign - 1;  /* INT_MAX */
	case 5: return sign + 1;  /* INT_MIN + 1 */
	case 6: return ~0ull - 1; /* -2, UINT_MAX - 1 */
	default: return 2;
	}
}

/* A value with an exponent near 1.0's (within +-spread binades), random
 * mantissa and sign: sums of these round, and often tie. */
static uint64_t moderate(int dtype, uint64_t r, int spread)
{
	int e = (int)(r % (unsigned)(2 * spread + 1)) - spread;
	uint64_t sign = (r >> 8) & 1;
	uint64_t m = r >> 9;

	switch (dtype) {
	case DVAR_FLOAT16: return (sign << 15) | ((uint64_t)(15 + e) << 10) | (m & 0x3ff);
	case DVAR_BFLOAT16: return (sign << 15) | ((uint64_t)(127 + e) << 7) | (m & 0x7f);
	case DVAR_FLOAT32: return (sign << 31) | ((uint64_t)(127 + e) << 23) | (m & 0x7fffff);
	default: return (sign << 63) | ((uint64_t)(1023 + e) << 52) | (m & 0xfffffffffffffull);
	}
}

/*
 * Fill count elements of dtype. special_in: one element in special_in is a
 * special value (a table entry or an integer extreme); the others are
 * random bits or, for floats, moderate values (or small integers).
 */
static void fill(int dtype, void *buf, size_t count, uint64_t seed, unsigned special_in)
{
	uint64_t s = seed * 0x2545f4914f6cdd1dull + (uint64_t)dtype;

	for (size_t i = 0; i < count; i++) {
		uint64_t r = tu_rand(&s);
		uint64_t pick = tu_rand(&s);
		uint64_t v;

		if (pick % special_in == 0) {
			if (!elem_is_float(dtype))
				v = int_special(dtype, (unsigned)(r >> 3));
			else if (dtype == DVAR_FLOAT16)
				v = f16_specials[r % NUM_SPECIALS];
			else if (dtype == DVAR_BFLOAT16)
				v = bf16_specials[r % NUM_SPECIALS];
			else if (dtype == DVAR_FLOAT32)
				v = f32_specials[r % NUM_SPECIALS];
			else
				v = f64_specials[r % NUM_SPECIALS];
		} else if ((pick >> 20) % 4 == 0) {
			v = r; /* random bits: NaN payloads, subnormals, anything */
		} else if (elem_is_float(dtype)) {
			v = moderate(dtype, r, (pick >> 24) % 2 ? 3 : 12);
		} else {
			v = (r % 201) - 100; /* small, both signs */
		}
		elem_put_bits(dtype, buf, i, v);
	}
}

/* Replace the NaNs among count elements by zeros. */
static void scrub_nans(int dtype, void *buf, size_t count)
{
	if (!elem_is_float(dtype))
		return;
	for (size_t i = 0; i < count; i++)
		if (bits_nan(dtype, elem_get_bits(dtype, buf, i)))
			elem_put_bits(dtype, buf, i, 0);
}

/* ---------------------------------------------------------------- reduce */

/* NaN results compared byte for byte so far (reported). */
static size_t nan_results;

/* Compare the device code's reduce with kernels.c's over srcs, byte for byte. */
static void check_reduce(int dtype, dvar_kernel_op op, const void *const *srcs, int n,
                           size_t count)
{
	size_t size = dvar_dtype_size(dtype);
	unsigned char *ref = malloc(count * size);
	unsigned char *out = malloc(count * size);

	assert_non_null(ref);
	assert_non_null(out);
	memset(ref, 0xa5, count * size);
	memset(out, 0x5a, count * size);
	dvar_kernel_reduce(dtype, op, ref, srcs, n, count);
	assert_int_equal(dvar_cuda_k_host_check(0, dtype, op, out, srcs, n, count, 0), 0);
	if (elem_is_float(dtype))
		for (size_t i = 0; i < count; i++)
			nan_results += bits_nan(dtype, elem_get_bits(dtype, ref, i)) &&
			               elem_get_bits(dtype, ref, i) == elem_get_bits(dtype, out, i);
	if (memcmp(ref, out, count * size) != 0) {
		for (size_t i = 0; i < count; i++) {
			uint64_t want = elem_get_bits(dtype, ref, i);
			uint64_t got = elem_get_bits(dtype, out, i);

			if (want == got)
				continue;
			print_error("%s %s n=%d count=%zu: element %zu is %#llx, kernels.c gives "
			            "%#llx\n",
			            dvar_dtype_name(dtype), op_names[op], n, count, i,
			            (unsigned long long)got, (unsigned long long)want);
			for (int k = 0; k < n && k < 8; k++)
				print_error("  source %d: %#llx\n", k,
				            (unsigned long long)elem_get_bits(dtype, srcs[k], i));
			fail();
		}
	}
	free(ref);
	free(out);
}

static void test_cuda_kernels__reduce_random(void **state)
{
	static const int ns[] = { 1, 2, 3, 7, 64, 65, 130, 256 };
	size_t compared = 0;

	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++) {
		int dtype = elem_numeric_dtypes[d];
		size_t size = dvar_dtype_size(dtype);

		for (size_t c = 0; c < NUM_COUNTS; c++) {
			size_t count = counts[c];
			void *src[MAX_SOURCES];

			for (int k = 0; k < MAX_SOURCES; k++) {
				src[k] = malloc(count * size);
				assert_non_null(src[k]);
			}
			for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
				int n = ns[j];

				/* Many specials with few sources; with many, few
				 * enough that most elements hold no NaN. */
				for (int k = 0; k < n; k++)
					fill(dtype, src[k], count, 1000 * j + 7 * k + c,
					     n <= 7 ? 5 : 400);
				for (size_t o = 0; o < 4; o++) {
					check_reduce(dtype, all_ops[o], (const void *const *)src,
					             n, count);
					compared += count;
				}
			}
			for (int k = 0; k < MAX_SOURCES; k++)
				free(src[k]);
		}
	}
	print_message("%zu elements compared, %zu NaN results byte for byte\n", compared,
	              nan_results);
}

/* n sources, dst aliasing source at, against kernels.c doing the same. */
static void check_alias(int dtype, dvar_kernel_op op, int n, int at, size_t count)
{
	size_t bytes = count * dvar_dtype_size(dtype);
	unsigned char *a[MAX_SOURCES] = { 0 }, *b[MAX_SOURCES] = { 0 };
	const void *sa[MAX_SOURCES], *sb[MAX_SOURCES];

	for (int k = 0; k < n; k++) {
		a[k] = malloc(bytes);
		b[k] = malloc(bytes);
		assert_non_null(a[k]);
		assert_non_null(b[k]);
		/* No NaN, so that none meets another and the results are exact. */
		fill(dtype, a[k], count, 77 + k + 300 * (uint64_t)op, 50);
		scrub_nans(dtype, a[k], count);
		memcpy(b[k], a[k], bytes);
		sa[k] = a[k];
		sb[k] = b[k];
	}
	dvar_kernel_reduce(dtype, op, a[at], sa, n, count);
	assert_int_equal(dvar_cuda_k_host_check(0, dtype, op, b[at], sb, n, count, 0), 0);
	assert_memory_equal(a[at], b[at], bytes);
	for (int k = 0; k < n; k++) {
		free(a[k]);
		free(b[k]);
	}
}

/* dst aliasing a source, as the collectives reduce in place: the first, one
 * in the middle, the last, with few sources and with more than 64. */
static void test_cuda_kernels__reduce_aliasing(void **state)
{
	static const int ns[] = { 3, 130 };

	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++) {
		int dtype = elem_numeric_dtypes[d];

		for (size_t j = 0; j < 2; j++)
			for (size_t o = 0; o < 4; o++) {
				check_alias(dtype, all_ops[o], ns[j], 0, 1000);
				check_alias(dtype, all_ops[o], ns[j], ns[j] / 2, 1000);
				check_alias(dtype, all_ops[o], ns[j], ns[j] - 1, 1000);
			}
	}
}

/* Every pair and triple of integer extremes, every operator. */
static void test_cuda_kernels__int_extremes(void **state)
{
	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++) {
		int dtype = elem_numeric_dtypes[d];
		uint64_t a[512], b[512], c[512];
		void *pa, *pb, *pc;
		size_t count = 0;

		if (elem_is_float(dtype))
			continue;
		pa = malloc(512 * 8);
		pb = malloc(512 * 8);
		pc = malloc(512 * 8);
		for (unsigned i = 0; i < 8; i++)
			for (unsigned j = 0; j < 8; j++)
				for (unsigned k = 0; k < 8; k++) {
					a[count] = int_special(dtype, i);
					b[count] = int_special(dtype, j);
					c[count] = int_special(dtype, k);
					elem_put_bits(dtype, pa, count, a[count]);
					elem_put_bits(dtype, pb, count, b[count]);
					elem_put_bits(dtype, pc, count, c[count]);
					count++;
				}
		for (size_t o = 0; o < 4; o++) {
			const void *s[3] = { pa, pb, pc };

			check_reduce(dtype, all_ops[o], s, 2, count);
			check_reduce(dtype, all_ops[o], s, 3, count);
		}
		free(pa);
		free(pb);
		free(pc);
	}
}

/* One element of n sources through both, expecting bits. */
static void expect_reduce(int dtype, dvar_kernel_op op, const uint64_t *in, int n, uint64_t want,
                          int against_host)
{
	unsigned char buf[8][8], out[8], ref[8];
	const void *s[8];

	for (int k = 0; k < n; k++) {
		elem_put_bits(dtype, buf[k], 0, in[k]);
		s[k] = buf[k];
	}
	assert_int_equal(dvar_cuda_k_host_check(0, dtype, op, out, s, n, 1, 0), 0);
	if (elem_get_bits(dtype, out, 0) != want)
		fail_msg("%s %s of %d: %#llx, want %#llx", dvar_dtype_name(dtype), op_names[op], n,
		         (unsigned long long)elem_get_bits(dtype, out, 0), (unsigned long long)want);
	if (against_host) {
		dvar_kernel_reduce(dtype, op, ref, s, n, 1);
		assert_int_equal(elem_get_bits(dtype, ref, 0), want);
	}
}

/* Rounding ties, overflow, NaN rules, signed zeros, written out. */
static void test_cuda_kernels__float_cases(void **state)
{
	(void)state;
	/* float16: 1 + 2^-11 ties to 1 (even); (1 + 2^-10) + 2^-11 to 1 + 2^-9;
	 * 65504 + 16 ties up to infinity; subnormal + subnormal exact. */
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3c00, 0x1000 }, 2, 0x3c00, 1);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3c01, 0x1000 }, 2, 0x3c02, 1);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x7bff, 0x4c00 }, 2, 0x7c00, 1);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x0001, 0x03ff }, 2, 0x0400, 1);
	/* Rounded after every step: (1 + 2^-11) + 2^-11 is 1, not 1 + 2^-10. */
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3c00, 0x1000, 0x1000 }, 3,
	              0x3c00, 1);
	/* bfloat16 likewise: 1 + 2^-8 ties to 1; (1 + 2^-7) + 2^-8 up. */
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3f80, 0x3b80 }, 2, 0x3f80, 1);
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3f81, 0x3b80 }, 2, 0x3f82, 1);
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3f80, 0x3b80, 0x3b80 }, 3,
	              0x3f80, 1);
	/* One NaN: it comes back quiet with its payload and sign. */
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3c00, 0xfd23 }, 2, 0xff23, 1);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_SUB, (uint64_t[]){ 0x7c01, 0x3c00 }, 2, 0x7e01, 1);
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x3f80, 0xffa3 }, 2, 0xffe3, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_ADD, (uint64_t[]){ 0x3f800000, 0x7f800001 }, 2,
	              0x7fc00001, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_SUB, (uint64_t[]){ 0x3f800000, 0xffa5a5a5 }, 2,
	              0xffe5a5a5, 1);
	expect_reduce(DVAR_FLOAT64, DVAR_KOP_ADD,
	              (uint64_t[]){ 0x7ff0000000000001ull, 0x3ff0000000000000ull }, 2,
	              0x7ff8000000000001ull, 1);
	/* inf - inf: the host's default NaN, negative. */
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x7c00, 0xfc00 }, 2, 0xfe00, 1);
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_SUB, (uint64_t[]){ 0x7f80, 0x7f80 }, 2, 0xffc0, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_ADD, (uint64_t[]){ 0x7f800000, 0xff800000 }, 2,
	              0xffc00000, 1);
	expect_reduce(DVAR_FLOAT64, DVAR_KOP_SUB,
	              (uint64_t[]){ 0xfff0000000000000ull, 0xfff0000000000000ull }, 2,
	              0xfff8000000000000ull, 1);
	/* Two NaNs: SUB keeps the left one (in kernels.c too); ADD keeps the
	 * left one on the device (kernels.c: depends on gcc's operand order). */
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_SUB, (uint64_t[]){ 0x7f800001, 0xffc00002 }, 2,
	              0x7fc00001, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_ADD, (uint64_t[]){ 0x7f800001, 0xffc00002 }, 2,
	              0x7fc00001, 0);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_ADD,
	              (uint64_t[]){ 0x3f800000, 0x7fc00003, 0x7fa00000 }, 3, 0x7fc00003, 0);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x7c00, 0xfc00, 0x7d00 }, 3,
	              0xfe00, 0);
	/* MIN and MAX pick the NaN: float32/float64 unchanged (a signalling
	 * NaN stays signalling), float16/bfloat16 quieted by the final store. */
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_MIN, (uint64_t[]){ 0x3f800000, 0x7f800001 }, 2,
	              0x7f800001, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_MAX, (uint64_t[]){ 0xffa5a5a5, 0x3f800000 }, 2,
	              0xffa5a5a5, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_MIN, (uint64_t[]){ 0x7f800001, 0x7fc00002 }, 2,
	              0x7f800001, 1);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_MAX, (uint64_t[]){ 0x3c00, 0x7c01 }, 2, 0x7e01, 1);
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_MIN, (uint64_t[]){ 0xff81, 0x3c00, 0x7fc0 }, 3,
	              0xffc1, 1);
	/* Signed zeros: equal, so MIN and MAX keep the right operand. */
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_MIN, (uint64_t[]){ 0x80000000, 0x00000000 }, 2,
	              0x00000000, 1);
	expect_reduce(DVAR_FLOAT32, DVAR_KOP_MAX, (uint64_t[]){ 0x00000000, 0x80000000 }, 2,
	              0x80000000, 1);
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x8000, 0x0000 }, 2, 0x0000, 1);
	expect_reduce(DVAR_FLOAT64, DVAR_KOP_ADD,
	              (uint64_t[]){ 0x8000000000000000ull, 0x8000000000000000ull }, 2,
	              0x8000000000000000ull, 1);
	/* One source: a copy, a signalling NaN left as it is. */
	expect_reduce(DVAR_FLOAT16, DVAR_KOP_ADD, (uint64_t[]){ 0x7c01 }, 1, 0x7c01, 1);
	expect_reduce(DVAR_BFLOAT16, DVAR_KOP_MAX, (uint64_t[]){ 0x7f81 }, 1, 0x7f81, 1);
}

/* ---------------------------------------------------------------- divide, split */

/* Fail naming the first element where out and ref differ, if one does. */
static void expect_same(int dtype, const void *ref, const void *out, size_t count,
                        const char *what)
{
	for (size_t i = 0; i < count; i++)
		if (elem_get_bits(dtype, ref, i) != elem_get_bits(dtype, out, i))
			fail_msg("%s %s: element %zu is %#llx, the host code gives %#llx",
			         dvar_dtype_name(dtype), what, i,
			         (unsigned long long)elem_get_bits(dtype, out, i),
			         (unsigned long long)elem_get_bits(dtype, ref, i));
}

static const int64_t divisors[] = { 1, 2, 3, 7, 257, 2049, 1000003, 16777217,
	                            ((int64_t)1 << 40) + 1, INT64_MAX };
#define NUM_DIVISORS (sizeof divisors / sizeof divisors[0])

static void check_divide(int dtype, size_t count, int64_t divisor, uint64_t seed)
{
	size_t bytes = count * dvar_dtype_size(dtype);
	unsigned char *ref = malloc(bytes);
	unsigned char *out = malloc(bytes);
	char what[64];

	assert_non_null(ref);
	assert_non_null(out);
	fill(dtype, ref, count, seed, 4);
	memcpy(out, ref, bytes);
	dvar_kernel_divide(dtype, ref, count, divisor);
	assert_int_equal(dvar_cuda_k_host_check(1, dtype, DVAR_KOP_ADD, out, NULL, 0, count,
	                                        divisor),
	                 0);
	snprintf(what, sizeof what, "/ %lld", (long long)divisor);
	expect_same(dtype, ref, out, count, what);
	free(ref);
	free(out);
}

static void test_cuda_kernels__divide(void **state)
{
	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++)
		for (size_t c = 0; c < NUM_COUNTS; c++)
			for (size_t v = 0; v < NUM_DIVISORS; v++)
				check_divide(elem_numeric_dtypes[d], counts[c], divisors[v],
				             31 * v + c);
}

/* A sum divided in the same pass (dvar_cuda_k_reduce_to, a MEAN on one
 * GPU) against kernels.c's reduce followed by its divide; the destination
 * is the first source, as in an in-place all-reduce. */
static void test_cuda_kernels__reduce_divide(void **state)
{
	static const int ns[] = { 1, 2, 3, 65 };
	enum { COUNT = 1000 };

	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++) {
		int dtype = elem_numeric_dtypes[d];
		size_t bytes = COUNT * dvar_dtype_size(dtype);

		for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
			for (size_t v = 0; v < NUM_DIVISORS; v++) {
				int n = ns[j];
				unsigned char *a[65], *b[65];
				const void *sa[65], *sb[65];
				char what[64];

				for (int k = 0; k < n; k++) {
					a[k] = malloc(bytes);
					b[k] = malloc(bytes);
					assert_non_null(a[k]);
					assert_non_null(b[k]);
					fill(dtype, a[k], COUNT, 5 * v + 11 * k + j, 5);
					memcpy(b[k], a[k], bytes);
					sa[k] = a[k];
					sb[k] = b[k];
				}
				dvar_kernel_reduce(dtype, DVAR_KOP_ADD, a[0], sa, n, COUNT);
				dvar_kernel_divide(dtype, a[0], COUNT, divisors[v]);
				assert_int_equal(
				    dvar_cuda_k_host_check(0, dtype, DVAR_KOP_ADD, b[0], sb, n, COUNT, divisors[v]),
				    0);
				snprintf(what, sizeof what, "sum of %d / %lld", n, (long long)divisors[v]);
				expect_same(dtype, a[0], b[0], COUNT, what);
				for (int k = 0; k < n; k++) {
					free(a[k]);
					free(b[k]);
				}
			}
	}
}

static int64_t split_arg(int replica_id, int num_replicas)
{
	return (int64_t)(((uint64_t)(uint32_t)num_replicas << 32) | (uint32_t)replica_id);
}

/* Replica id's share of total against variable.c's, into another buffer
 * and in place (part == total). */
static void check_split(int dtype, const void *total, size_t count, int id, int n)
{
	size_t bytes = count * dvar_dtype_size(dtype);
	unsigned char *ref = malloc(bytes);
	unsigned char *out = malloc(bytes);
	const void *srcs[1] = { total };
	char what[64];

	assert_non_null(ref);
	assert_non_null(out);
	snprintf(what, sizeof what, "split %d of %d", id, n);
	assert_int_equal(dvar_variable_split_sum(dtype, total, ref, count, id, n), DVAR_OK);
	memset(out, 0x5a, bytes);
	assert_int_equal(dvar_cuda_k_host_check(2, dtype, DVAR_KOP_ADD, out, srcs, 1, count,
	                                        split_arg(id, n)),
	                 0);
	expect_same(dtype, ref, out, count, what);
	memcpy(out, total, bytes);
	srcs[0] = out;
	assert_int_equal(dvar_cuda_k_host_check(2, dtype, DVAR_KOP_ADD, out, srcs, 1, count,
	                                        split_arg(id, n)),
	                 0);
	expect_same(dtype, ref, out, count, what);
	free(ref);
	free(out);
}

static void test_cuda_kernels__split_sum(void **state)
{
	/* N that float16 (2049, 4097), bfloat16 (257) and float32 (16777217)
	 * cannot hold, rounded as divisor_in does. */
	static const int ns[] = { 1, 2, 3, 7, 257, 2049, 4097, 1000003, 16777217 };

	(void)state;
	for (size_t d = 0; d < ELEM_NUM_NUMERIC; d++) {
		int dtype = elem_numeric_dtypes[d];

		for (size_t c = 0; c < NUM_COUNTS; c++) {
			unsigned char *total = malloc(counts[c] * dvar_dtype_size(dtype));

			assert_non_null(total);
			for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
				int n = ns[j];
				int ids[4] = { 0, 1, n / 2, n - 1 };

				fill(dtype, total, counts[c], 53 * j + c, 4);
				for (int k = 0; k < 4; k++)
					if (ids[k] < n && (k == 0 || ids[k] != ids[k - 1]))
						check_split(dtype, total, counts[c], ids[k], n);
			}
			free(total);
		}
	}
}

/* ---------------------------------------------------------------- refusals */

static void test_cuda_kernels__refused(void **state)
{
	unsigned char a[16] = { 0 }, b[16] = { 0 };
	const void *s[2] = { a, b };

	(void)state;
	/* bool has no arithmetic; 7, 8 and 99 are no dvar dtype. */
	for (int kind = 0; kind < 3; kind++) {
		assert_int_equal(dvar_cuda_k_host_check(kind, DVAR_BOOL, DVAR_KOP_ADD, a, s, 2, 4,
		                                        kind == 2 ? split_arg(0, 2) : 2),
		                 -1);
		assert_int_equal(dvar_cuda_k_host_check(kind, 7, DVAR_KOP_ADD, a, s, 2, 4,
		                                        kind == 2 ? split_arg(0, 2) : 2),
		                 -1);
		assert_int_equal(dvar_cuda_k_host_check(kind, 99, DVAR_KOP_ADD, a, s, 2, 4,
		                                        kind == 2 ? split_arg(0, 2) : 2),
		                 -1);
	}
	assert_int_equal(dvar_cuda_k_host_check(0, DVAR_FLOAT32, (dvar_kernel_op)4, a, s, 2, 4, 0),
	                 -1);
	assert_int_equal(dvar_cuda_k_host_check(0, DVAR_FLOAT32, (dvar_kernel_op)-1, a, s, 2, 4, 0),
	                 -1);
	assert_int_equal(dvar_cuda_k_host_check(0, DVAR_FLOAT32, DVAR_KOP_ADD, a, s, 0, 4, 0), -1);
	assert_int_equal(dvar_cuda_k_host_check(0, DVAR_FLOAT32, DVAR_KOP_ADD, a, s,
	                                        DVAR_CUDA_MAX_SOURCES + 1, 4, 0),
	                 -1);
	assert_int_equal(dvar_cuda_k_host_check(3, DVAR_FLOAT32, DVAR_KOP_ADD, a, s, 2, 4, 0), -1);
	/* A divisor with another operator than ADD (a MEAN sums). */
	assert_int_equal(dvar_cuda_k_host_check(0, DVAR_FLOAT32, DVAR_KOP_SUB, a, s, 2, 4, 2), -1);
	/* A replica outside [0, N). */
	assert_int_equal(dvar_cuda_k_host_check(2, DVAR_INT32, DVAR_KOP_ADD, a, s, 1, 4,
	                                        split_arg(2, 2)),
	                 -1);
	assert_int_equal(dvar_cuda_k_host_check(2, DVAR_INT32, DVAR_KOP_ADD, a, s, 1, 4,
	                                        split_arg(0, 0)),
	                 -1);
	/* count 0 touches nothing. */
	memset(a, 0x11, sizeof a);
	assert_int_equal(dvar_cuda_k_host_check(0, DVAR_INT32, DVAR_KOP_ADD, a, s, 2, 0, 0), 0);
	assert_int_equal(dvar_cuda_k_host_check(1, DVAR_INT32, DVAR_KOP_ADD, a, s, 0, 0, 3), 0);
	for (size_t i = 0; i < sizeof a; i++)
		assert_int_equal(a[i], 0x11);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_kernels__reduce_random),
		cmocka_unit_test(test_cuda_kernels__reduce_aliasing),
		cmocka_unit_test(test_cuda_kernels__int_extremes),
		cmocka_unit_test(test_cuda_kernels__float_cases),
		cmocka_unit_test(test_cuda_kernels__divide),
		cmocka_unit_test(test_cuda_kernels__reduce_divide),
		cmocka_unit_test(test_cuda_kernels__split_sum),
		cmocka_unit_test(test_cuda_kernels__refused),
	};
	return cmocka_run_group_tests_name("runtime/cuda_kernels", tests, NULL, NULL);
}
