/*
 * tests/unit/core/test_core_shapes.c - shape validation, overflow-checked
 * element and byte counts, equality and the "[3,2]" text.
 */
#include <string.h>

#include "testutil.h"
#include "core/core.h"

static void test_core_shapes__rank0(void **state)
{
	dvar_shape s;
	uint64_t n = 99;
	char buf[8];

	(void)state;
	assert_int_equal(dvar_shape_init(&s, 0, NULL), DVAR_OK);
	assert_int_equal(s.rank, 0);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 1);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT64, &n), DVAR_OK);
	assert_int_equal(n, 8);
	assert_int_equal(dvar_shape_format(&s, buf, sizeof buf), 2);
	assert_string_equal(buf, "[]");
}

static void test_core_shapes__init_and_counts(void **state)
{
	const int64_t dims[] = { 3, 2, 5 };
	dvar_shape s;
	uint64_t n;
	char buf[32];

	(void)state;
	assert_int_equal(dvar_shape_init(&s, 3, dims), DVAR_OK);
	assert_int_equal(s.rank, 3);
	assert_int_equal(s.dims[0], 3);
	assert_int_equal(s.dims[1], 2);
	assert_int_equal(s.dims[2], 5);
	for (int d = 3; d < DVAR_MAX_RANK; d++)
		assert_int_equal(s.dims[d], 0);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 30);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT32, &n), DVAR_OK);
	assert_int_equal(n, 120);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_BFLOAT16, &n), DVAR_OK);
	assert_int_equal(n, 60);
	assert_int_equal(dvar_shape_format(&s, buf, sizeof buf), 7);
	assert_string_equal(buf, "[3,2,5]");
}

static void test_core_shapes__max_rank(void **state)
{
	const int64_t dims[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
	dvar_shape s, before;
	uint64_t n;
	char buf[64];

	(void)state;
	assert_int_equal(dvar_shape_init(&s, 8, dims), DVAR_OK);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 40320);
	dvar_shape_format(&s, buf, sizeof buf);
	assert_string_equal(buf, "[1,2,3,4,5,6,7,8]");

	before = s;
	assert_int_equal(dvar_shape_init(&s, 9, dims), DVAR_EINVAL);
	tu_assert_error_contains("shape rank 9 exceeds the maximum of 8");
	assert_memory_equal(&s, &before, sizeof s);
	assert_int_equal(dvar_shape_init(&s, -1, dims), DVAR_EINVAL);
	tu_assert_error_contains("shape rank -1 is negative");
	assert_int_equal(dvar_shape_init(&s, 2, NULL), DVAR_EINVAL);
	assert_memory_equal(&s, &before, sizeof s);
}

static void test_core_shapes__negative_dim(void **state)
{
	const int64_t dims[] = { 3, -1 };
	dvar_shape s, before;
	uint64_t n;

	(void)state;
	memset(&s, 0x5a, sizeof s);
	before = s;
	assert_int_equal(dvar_shape_init(&s, 2, dims), DVAR_EINVAL);
	tu_assert_error_contains("shape [3,-1]: dimension 1 is negative");
	assert_memory_equal(&s, &before, sizeof s);

	/* A hand-built bad shape is refused by the counters too. */
	s.rank = 2;
	s.dims[0] = 4;
	s.dims[1] = -7;
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_EINVAL);
	tu_assert_error_contains("shape [4,-7]: dimension 1 is negative");
	s.rank = 12;
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_INT8, &n), DVAR_EINVAL);
	tu_assert_error_contains("rank 12");
}

static void test_core_shapes__zero_size(void **state)
{
	const int64_t dims[] = { 3, 0, 5 };
	const int64_t huge[] = { 0, INT64_MAX, INT64_MAX, INT64_MAX };
	const int64_t huge_last[] = { INT64_MAX, INT64_MAX, INT64_MAX, 0 };
	dvar_shape s;
	uint64_t n = 1;
	char buf[80];

	(void)state;
	assert_int_equal(dvar_shape_init(&s, 3, dims), DVAR_OK);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 0);
	n = 1;
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT64, &n), DVAR_OK);
	assert_int_equal(n, 0);
	dvar_shape_format(&s, buf, sizeof buf);
	assert_string_equal(buf, "[3,0,5]");

	/* A zero anywhere makes the product 0, however big the other dims. */
	assert_int_equal(dvar_shape_init(&s, 4, huge), DVAR_OK);
	n = 1;
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT64, &n), DVAR_OK);
	assert_int_equal(n, 0);
	assert_int_equal(dvar_shape_init(&s, 4, huge_last), DVAR_OK);
	n = 1;
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 0);
}

static void test_core_shapes__overflow(void **state)
{
	const int64_t d3[] = { 4294967296LL, 4294967296LL, 16 };
	const int64_t d2[] = { 4294967296LL, 4294967296LL };
	const int64_t big[] = { 1LL << 61 };
	const int64_t ok[] = { 1LL << 60 };
	dvar_shape s;
	uint64_t n = 77;

	(void)state;
	assert_int_equal(dvar_shape_init(&s, 3, d3), DVAR_OK);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT32, &n), DVAR_EINVAL);
	tu_assert_error_contains("shape [4294967296,4294967296,16] of float32: "
	                         "byte count overflows 64 bits");
	assert_int_equal(n, 77);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_EINVAL);
	tu_assert_error_contains("shape [4294967296,4294967296,16]: element count overflows 64 bits");

	/* 2^64 elements overflow; as bytes of int8 too. */
	assert_int_equal(dvar_shape_init(&s, 2, d2), DVAR_OK);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_EINVAL);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_INT8, &n), DVAR_EINVAL);
	tu_assert_error_contains("of int8: byte count overflows 64 bits");

	/* 2^63 bytes fit in a uint64_t but not in an off_t. */
	assert_int_equal(dvar_shape_init(&s, 1, big), DVAR_OK);
	assert_int_equal(dvar_shape_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 1ull << 61);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT32, &n), DVAR_EINVAL);
	tu_assert_error_contains("shape [2305843009213693952] of float32: byte count "
	                         "9223372036854775808 exceeds the maximum of 9223372036854775807");
	assert_int_equal(dvar_shape_init(&s, 1, ok), DVAR_OK);
	assert_int_equal(dvar_shape_num_bytes(&s, DVAR_FLOAT32, &n), DVAR_OK);
	assert_int_equal(n, 1ull << 62);
}

static void test_core_shapes__bad_dtype(void **state)
{
	const int64_t dims[] = { 2 };
	dvar_shape s;
	uint64_t n;

	(void)state;
	assert_int_equal(dvar_shape_init(&s, 1, dims), DVAR_OK);
	assert_int_equal(dvar_shape_num_bytes(&s, 99, &n), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype 99");
}

static void test_core_shapes__equal(void **state)
{
	const int64_t a[] = { 4, 3 }, b[] = { 4, 2 }, c[] = { 4, 3, 1 };
	dvar_shape sa, sa2, sb, sc, s0, s0b;

	(void)state;
	dvar_shape_init(&sa, 2, a);
	dvar_shape_init(&sb, 2, b);
	dvar_shape_init(&sc, 3, c);
	dvar_shape_init(&s0, 0, NULL);
	memset(&sa2, 0x77, sizeof sa2);
	sa2.rank = 2;
	sa2.dims[0] = 4;
	sa2.dims[1] = 3;
	memset(&s0b, 0x11, sizeof s0b);
	s0b.rank = 0;
	assert_true(dvar_shape_equal(&sa, &sa));
	assert_true(dvar_shape_equal(&sa, &sa2)); /* dims past rank do not count */
	assert_false(dvar_shape_equal(&sa, &sb));
	assert_false(dvar_shape_equal(&sa, &sc));
	assert_false(dvar_shape_equal(&sc, &sa));
	assert_true(dvar_shape_equal(&s0, &s0b));
	assert_false(dvar_shape_equal(&s0, &sa));
}

static void test_core_shapes__format_truncates(void **state)
{
	const int64_t dims[] = { 3, 2 };
	const int64_t wide[8] = { INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
	                          INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX };
	dvar_shape s;
	char buf[200];

	(void)state;
	dvar_shape_init(&s, 2, dims);
	memset(buf, 'x', sizeof buf);
	assert_int_equal(dvar_shape_format(&s, buf, 4), 5);
	assert_string_equal(buf, "[3,");
	assert_int_equal(buf[4], 'x');
	assert_int_equal(dvar_shape_format(&s, buf, 1), 5);
	assert_string_equal(buf, "");
	buf[0] = 'z';
	assert_int_equal(dvar_shape_format(&s, buf, 0), 5);
	assert_int_equal(buf[0], 'z');
	assert_int_equal(dvar_shape_format(&s, NULL, 0), 5);

	dvar_shape_init(&s, 8, wide);
	assert_int_equal(dvar_shape_format(&s, buf, sizeof buf), 8 * 19 + 7 + 2);
	assert_int_equal(strlen(buf), 8 * 19 + 7 + 2);
	assert_memory_equal(buf, "[9223372036854775807,9223372036854775807,", 41);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_shapes__rank0),
		cmocka_unit_test(test_core_shapes__init_and_counts),
		cmocka_unit_test(test_core_shapes__max_rank),
		cmocka_unit_test(test_core_shapes__negative_dim),
		cmocka_unit_test(test_core_shapes__zero_size),
		cmocka_unit_test(test_core_shapes__overflow),
		cmocka_unit_test(test_core_shapes__bad_dtype),
		cmocka_unit_test(test_core_shapes__equal),
		cmocka_unit_test(test_core_shapes__format_truncates),
	};
	return cmocka_run_group_tests_name("core/shapes", tests, NULL, NULL);
}
