/*
 * tests/unit/core/test_core_dtypes.c - dtype sizes and names, and the exact
 * widening of every dtype (float16 and bfloat16 in particular) to double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"

static const struct {
	int dtype;
	size_t size;
	const char *name;
} all_dtypes[] = {
	{ DVAR_BOOL, 1, "bool" },         { DVAR_INT8, 1, "int8" },
	{ DVAR_INT16, 2, "int16" },       { DVAR_INT32, 4, "int32" },
	{ DVAR_INT64, 8, "int64" },       { DVAR_UINT8, 1, "uint8" },
	{ DVAR_UINT16, 2, "uint16" },     { DVAR_UINT32, 4, "uint32" },
	{ DVAR_UINT64, 8, "uint64" },     { DVAR_FLOAT16, 2, "float16" },
	{ DVAR_BFLOAT16, 2, "bfloat16" }, { DVAR_FLOAT32, 4, "float32" },
	{ DVAR_FLOAT64, 8, "float64" },
};
#define NUM_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static void test_core_dtypes__names_and_sizes(void **state)
{
	(void)state;
	for (size_t i = 0; i < NUM_DTYPES; i++) {
		dvar_dtype back = (dvar_dtype)0;
		assert_int_equal(dvar_dtype_size(all_dtypes[i].dtype), all_dtypes[i].size);
		assert_string_equal(dvar_dtype_name(all_dtypes[i].dtype), all_dtypes[i].name);
		assert_int_equal(dvar_dtype_from_name(&back, all_dtypes[i].name), DVAR_OK);
		assert_int_equal(back, all_dtypes[i].dtype);
	}
	/* The enum values are TensorFlow's DataType numbers. */
	assert_int_equal(DVAR_FLOAT32, 1);
	assert_int_equal(DVAR_BFLOAT16, 14);
	assert_int_equal(DVAR_FLOAT16, 19);
}

static void test_core_dtypes__unknown(void **state)
{
	dvar_dtype out = DVAR_INT8;
	double d = 7.0;
	uint8_t byte = 1;

	(void)state;
	for (int bad = -1; bad < 30; bad++) {
		if (dvar_dtype_name(bad))
			continue;
		assert_int_equal(dvar_dtype_size(bad), 0);
	}
	assert_int_equal(dvar_dtype_size(7), 0);
	assert_null(dvar_dtype_name(7));
	assert_null(dvar_dtype_name(0));

	assert_int_equal(dvar_dtype_from_name(&out, "float"), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype name 'float'");
	assert_int_equal(out, DVAR_INT8);
	assert_int_equal(dvar_dtype_from_name(&out, "Float32"), DVAR_EINVAL);
	assert_int_equal(dvar_dtype_from_name(&out, ""), DVAR_EINVAL);
	assert_int_equal(dvar_dtype_from_name(&out, NULL), DVAR_EINVAL);

	assert_int_equal(dvar_dtype_to_f64(&d, 42, &byte, 1), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype 42");
	assert_true(d == 7.0);
}

static double half(uint16_t h)
{
	double d = -123.0;
	assert_int_equal(dvar_dtype_to_f64(&d, DVAR_FLOAT16, &h, 1), DVAR_OK);
	return d;
}

static double bf16(uint16_t b)
{
	double d = -123.0;
	assert_int_equal(dvar_dtype_to_f64(&d, DVAR_BFLOAT16, &b, 1), DVAR_OK);
	return d;
}

static void test_core_dtypes__float16(void **state)
{
	(void)state;
	assert_true(half(0x3c00) == 1.0);
	assert_true(half(0xc000) == -2.0);
	assert_true(half(0x3555) == 0x1.554p-2);
	assert_true(half(0x7bff) == 65504.0);
	assert_true(half(0x0001) == ldexp(1.0, -24));
	assert_true(half(0x03ff) == 1023.0 * ldexp(1.0, -24));
	assert_true(half(0x0400) == ldexp(1.0, -14));
	assert_true(half(0x8001) == -ldexp(1.0, -24));
	assert_true(half(0x0000) == 0.0 && !signbit(half(0x0000)));
	assert_true(half(0x8000) == 0.0 && signbit(half(0x8000)));
	assert_true(isinf(half(0x7c00)) && half(0x7c00) > 0);
	assert_true(isinf(half(0xfc00)) && half(0xfc00) < 0);
	assert_true(isnan(half(0x7e00)));
	assert_true(isnan(half(0x7c01)));
	assert_true(isnan(half(0xfe00)));
}

/* Every one of the 65536 halves against the textbook formula. */
static void test_core_dtypes__float16_exhaustive(void **state)
{
	uint16_t *h = malloc(65536 * sizeof *h);
	double *d = malloc(65536 * sizeof *d);

	(void)state;
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_FLOAT16, h, 65536), DVAR_OK);
	for (uint32_t i = 0; i < 65536; i++) {
		int sign = i >> 15, exp = (i >> 10) & 0x1f, mant = i & 0x3ff;
		double want;
		if (exp == 0x1f) {
			if (mant)
				assert_true(isnan(d[i]));
			else
				assert_true(isinf(d[i]));
			assert_int_equal(!!signbit(d[i]), sign);
			continue;
		}
		want = exp ? ldexp(1024 + mant, exp - 25) : ldexp(mant, -24);
		if (sign)
			want = -want;
		if (d[i] != want || !!signbit(d[i]) != sign)
			fail_msg("half 0x%04x gave %a, want %a", i, d[i], want);
	}
	free(h);
	free(d);
}

static void test_core_dtypes__bfloat16(void **state)
{
	(void)state;
	assert_true(bf16(0x3f80) == 1.0);
	assert_true(bf16(0xc020) == -2.5);
	assert_true(bf16(0x4049) == 3.140625);
	assert_true(bf16(0x0001) == ldexp(1.0, -133)); /* smallest subnormal */
	assert_true(bf16(0x8000) == 0.0 && signbit(bf16(0x8000)));
	assert_true(isinf(bf16(0x7f80)) && bf16(0x7f80) > 0);
	assert_true(isinf(bf16(0xff80)) && bf16(0xff80) < 0);
	assert_true(isnan(bf16(0x7fc0)));
	assert_true(bf16(0x7f7f) == 0x1.fep127);
}

static void test_core_dtypes__integers(void **state)
{
	int64_t i64[] = { INT64_MAX, INT64_MIN, -1, 0, 12345678901234LL };
	uint64_t u64[] = { UINT64_MAX, 0, (1ull << 53) + 1 };
	int32_t i32[] = { INT32_MAX, INT32_MIN };
	uint32_t u32[] = { UINT32_MAX };
	int16_t i16[] = { INT16_MIN, INT16_MAX };
	uint16_t u16[] = { UINT16_MAX };
	int8_t i8[] = { -128, 127 };
	uint8_t u8[] = { 255, 0 };
	uint8_t b[] = { 0, 1, 2, 255 };
	double d[8];

	(void)state;
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_INT64, i64, 5), DVAR_OK);
	assert_true(d[0] == 9223372036854775808.0); /* rounds to 2^63 */
	assert_true(d[1] == -9223372036854775808.0);
	assert_true(d[2] == -1.0 && d[3] == 0.0 && d[4] == 12345678901234.0);

	assert_int_equal(dvar_dtype_to_f64(d, DVAR_UINT64, u64, 3), DVAR_OK);
	assert_true(d[0] == 18446744073709551616.0);
	assert_true(d[1] == 0.0);
	assert_true(d[2] == 9007199254740992.0); /* 2^53 + 1 rounds to even */

	assert_int_equal(dvar_dtype_to_f64(d, DVAR_INT32, i32, 2), DVAR_OK);
	assert_true(d[0] == 2147483647.0 && d[1] == -2147483648.0);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_UINT32, u32, 1), DVAR_OK);
	assert_true(d[0] == 4294967295.0);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_INT16, i16, 2), DVAR_OK);
	assert_true(d[0] == -32768.0 && d[1] == 32767.0);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_UINT16, u16, 1), DVAR_OK);
	assert_true(d[0] == 65535.0);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_INT8, i8, 2), DVAR_OK);
	assert_true(d[0] == -128.0 && d[1] == 127.0);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_UINT8, u8, 2), DVAR_OK);
	assert_true(d[0] == 255.0 && d[1] == 0.0);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_BOOL, b, 4), DVAR_OK);
	assert_true(d[0] == 0.0 && d[1] == 1.0 && d[2] == 1.0 && d[3] == 1.0);
}

static void test_core_dtypes__floats_unaligned(void **state)
{
	unsigned char buf[1 + 3 * sizeof(double)];
	float f[] = { 1.5f, -0.0f, 3.4028235e38f };
	double g[] = { 0.1, -1e308, 5e-324 };
	double d[3];

	(void)state;
	memcpy(buf + 1, f, sizeof f);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_FLOAT32, buf + 1, 3), DVAR_OK);
	assert_true(d[0] == 1.5 && d[1] == 0.0 && signbit(d[1]) && d[2] == (double)3.4028235e38f);
	memcpy(buf + 1, g, sizeof g);
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_FLOAT64, buf + 1, 3), DVAR_OK);
	assert_true(d[0] == 0.1 && d[1] == -1e308 && d[2] == 5e-324);
	/* n = 0 touches nothing. */
	d[0] = 9.0;
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_FLOAT64, NULL, 0), DVAR_OK);
	assert_true(d[0] == 9.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_dtypes__names_and_sizes),
		cmocka_unit_test(test_core_dtypes__unknown),
		cmocka_unit_test(test_core_dtypes__float16),
		cmocka_unit_test(test_core_dtypes__float16_exhaustive),
		cmocka_unit_test(test_core_dtypes__bfloat16),
		cmocka_unit_test(test_core_dtypes__integers),
		cmocka_unit_test(test_core_dtypes__floats_unaligned),
	};
	return cmocka_run_group_tests_name("core/dtypes", tests, NULL, NULL);
}
