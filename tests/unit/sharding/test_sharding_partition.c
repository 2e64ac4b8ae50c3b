/*
 * tests/unit/sharding/test_sharding_partition.c - partitioners (TF's
 * expected values, constructor errors, huge shapes where TF's doubles are
 * not the exact ceilings), their text form, and the div layout.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "dvar/sharding.h"

/* TensorFlow's DT_STRING, which dvar_partitioner_apply accepts for parity. */
#define TF_STRING 7

static dvar_shape shape_of(int rank, const int64_t *dims)
{
	dvar_shape s;

	memset(&s, 0, sizeof s);
	s.rank = rank;
	for (int d = 0; d < rank; d++)
		s.dims[d] = dims[d];
	return s;
}

static dvar_partitioner fixed(int64_t n)
{
	dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(n);
	return p;
}

static dvar_partitioner min_size(int64_t bytes, int64_t max_shards)
{
	dvar_partitioner p = DVAR_PARTITIONER_MIN_SIZE_INIT;

	p.min_shard_bytes = bytes;
	p.max_shards = max_shards;
	return p;
}

static dvar_partitioner max_size(int64_t bytes, int64_t max_shards)
{
	dvar_partitioner p = DVAR_PARTITIONER_MAX_SIZE_INIT(bytes);

	p.max_shards = max_shards;
	return p;
}

static int64_t apply(const dvar_partitioner *p, int rank, const int64_t *dims, int dtype)
{
	dvar_shape s = shape_of(rank, dims);
	int64_t num = -99;

	assert_int_equal(dvar_partitioner_apply(p, &s, dtype, &num), DVAR_OK);
	return num;
}

/* Every row of the reference's table (§2.9): the first six are TF's
 * PartitionerTest, the rest derived from TF's formulas. */
static void test_sharding_partition__tf_table(void **state)
{
	const int64_t d10_3[] = { 10, 3 }, d6_1[] = { 6, 1 }, d3[] = { 3 }, d10[] = { 10 };
	const int64_t d1024[] = { 1024, 1024 }, d10_2[] = { 10, 2 };
	dvar_partitioner p;

	(void)state;
	p = fixed(2);
	assert_int_equal(apply(&p, 2, d10_3, DVAR_FLOAT32), 2);
	p = min_size(4, 2);
	assert_int_equal(apply(&p, 2, d6_1, DVAR_FLOAT32), 2);
	p = min_size(4, 10);
	assert_int_equal(apply(&p, 2, d6_1, DVAR_FLOAT32), 6);
	p = max_size(4, 0);
	assert_int_equal(apply(&p, 2, d6_1, DVAR_FLOAT32), 6);
	p = max_size(4, 2);
	assert_int_equal(apply(&p, 2, d6_1, DVAR_FLOAT32), 2);
	p = max_size(1024, 0);
	assert_int_equal(apply(&p, 2, d6_1, DVAR_FLOAT32), 1);

	p = fixed(4);
	assert_int_equal(apply(&p, 1, d3, DVAR_FLOAT32), 3);
	p = min_size(64 << 20, 2);
	assert_int_equal(apply(&p, 1, d10, DVAR_INT64), 1); /* 80 B / 64 MiB -> 1 */
	p = min_size(16, 8);
	assert_int_equal(apply(&p, 2, d10_3, DVAR_FLOAT32), 8); /* 120 / 16 = 7.5 -> 8 */
	p = (dvar_partitioner)DVAR_PARTITIONER_MIN_SIZE_INIT;
	assert_int_equal(apply(&p, 2, d1024, DVAR_FLOAT32), 1); /* max_shards defaults to 1 */
	p = min_size(256 << 10, 16);
	assert_int_equal(apply(&p, 2, d1024, DVAR_FLOAT32), 16);
	p = max_size(20, 0);
	assert_int_equal(apply(&p, 2, d10_3, DVAR_FLOAT32), 10); /* 12 B per row */
	p = max_size(25, 0);
	assert_int_equal(apply(&p, 2, d10_3, DVAR_FLOAT32), 5);
	p = max_size(36, 0);
	assert_int_equal(apply(&p, 2, d10_3, DVAR_FLOAT32), 4);
	p = max_size(100, 0);
	assert_int_equal(apply(&p, 2, d10_2, TF_STRING), 4); /* 32 B per row -> 3 rows a shard */
	p.bytes_per_string = 8;
	assert_int_equal(apply(&p, 2, d10_2, TF_STRING), 2); /* 16 B per row -> 6 rows a shard */
	/* The same 32-byte rows as numbers. */
	{
		const int64_t d10_4[] = { 10, 4 };

		p = max_size(100, 0);
		assert_int_equal(apply(&p, 2, d10_4, DVAR_FLOAT64), 4);
	}
}

static void test_sharding_partition__edges(void **state)
{
	const int64_t d0[] = { 0 }, d0_3[] = { 0, 3 }, d10_0[] = { 10, 0 }, d5[] = { 5 };
	dvar_partitioner p;

	(void)state;
	/* Rank 0: never partitioned, whatever the partitioner. */
	p = fixed(4);
	assert_int_equal(apply(&p, 0, NULL, DVAR_FLOAT32), 1);
	p = min_size(1, 100);
	assert_int_equal(apply(&p, 0, NULL, DVAR_FLOAT64), 1);
	p = max_size(1, 0);
	assert_int_equal(apply(&p, 0, NULL, DVAR_INT8), 1);

	/* FIXED is min(num_shards, rows), 0 for 0 rows as in TF; the size
	 * partitioners give at least 1 (MaxSize: where TF divides by zero). */
	p = fixed(4);
	assert_int_equal(apply(&p, 1, d0, DVAR_FLOAT32), 0);
	assert_int_equal(apply(&p, 2, d10_0, DVAR_FLOAT32), 4);
	p = min_size(1, 100);
	assert_int_equal(apply(&p, 1, d0, DVAR_FLOAT32), 1);
	assert_int_equal(apply(&p, 2, d10_0, DVAR_FLOAT32), 1);
	p = max_size(1, 0);
	assert_int_equal(apply(&p, 2, d0_3, DVAR_FLOAT32), 1);
	assert_int_equal(apply(&p, 2, d10_0, DVAR_FLOAT32), 1);

	/* MinSize never exceeds the rows; max_shards caps both. */
	p = min_size(1, 100);
	assert_int_equal(apply(&p, 1, d5, DVAR_FLOAT64), 5);
	p = max_size(1, 3);
	assert_int_equal(apply(&p, 1, d5, DVAR_FLOAT64), 3);
	p = max_size(1, 0);
	assert_int_equal(apply(&p, 1, d5, DVAR_FLOAT64), 5);
	/* bool has 1-byte elements */
	p = max_size(2, 0);
	assert_int_equal(apply(&p, 1, d5, DVAR_BOOL), 3);
}

typedef struct {
	int rank;
	int64_t dims[3];
	int dtype;
	int64_t bytes;      /* min_shard_bytes or max_shard_bytes */
	int64_t max_shards;
	int64_t expect;     /* TF's result (Python, float division) */
	int64_t exact;      /* the exact integer ceiling, where it differs */
} huge_case;

/*
 * MinSizePartitioner divides num_elements * bytes by min_shard_bytes with
 * Python's true division (correctly rounded) and takes the ceiling of that
 * double; the expected values were computed with CPython. Where `exact` is
 * set, the exact integer ceiling is different and TF's double is what dvar
 * must give.
 */
static void test_sharding_partition__min_size_huge(void **state)
{
	static const huge_case cases[] = {
		{ 1, { 1152921504606846977 }, DVAR_UINT8, 1099511627776, INT64_MAX, 1048576,
		  1048577 },
		{ 1, { INT64_MAX }, DVAR_FLOAT64, 4611686018427387903, INT64_MAX, 16, 17 },
		/* ties to even: 2^53 + 0.5 -> 2^53, 2^53 + 1.5 -> 2^53 + 2 */
		{ 1, { 18014398509481985 }, DVAR_UINT8, 2, INT64_MAX, 9007199254740992,
		  9007199254740993 },
		{ 1, { 18014398509481987 }, DVAR_UINT8, 2, INT64_MAX, 9007199254740994, 0 },
		{ 1, { 36028797018963970 }, DVAR_UINT8, 4, INT64_MAX, 9007199254740992,
		  9007199254740993 },
		{ 1, { 36028797018963974 }, DVAR_UINT8, 4, INT64_MAX, 9007199254740994, 0 },
		{ 1, { 8435023966861788952 }, DVAR_UINT8, 974809195292013, INT64_MAX, 8653, 8654 },
		{ 1, { 3981038837403310985 }, DVAR_UINT8, 962766345200317, INT64_MAX, 4135, 4136 },
		{ 1, { 1140625398713218099 }, DVAR_UINT8, 16959207200934, INT64_MAX, 67257, 67258 },
		/* products past 64 bits */
		{ 2, { 4611686018427387904, 16 }, DVAR_FLOAT64, 1024, INT64_MAX, 576460752303423488,
		  0 },
		{ 2, { 4060322922450001831, 1089118788062 }, DVAR_BFLOAT16, 505059257790158350,
		  INT64_MAX, 17511505480715, 17511505480716 },
		{ 2, { 1889822358739604028, 745194530575 }, DVAR_FLOAT32, 204391450613722,
		  INT64_MAX, 27560551701403736, 27560551701403738 },
		{ 2, { 4223293458462125550, 612120906982 }, DVAR_INT32, 232214041521315047,
		  INT64_MAX, 44530747672426, 44530747672427 },
		{ 2, { INT64_MAX, 1048576 }, DVAR_UINT64, 4611686018427387905, INT64_MAX, 16777216,
		  0 },
		/* past 128 bits: capped by the rows */
		{ 3, { INT64_MAX, INT64_MAX, INT64_MAX }, DVAR_FLOAT64, 3, INT64_MAX, INT64_MAX, 0 },
		{ 1, { 9007199254740993 }, DVAR_UINT8, 3, INT64_MAX, 3002399751580331, 0 },
		{ 1, { 4052555153018976267 }, DVAR_INT16, 3486784402, 1000, 1000, 0 },
		{ 2, { 8751522060614153272, 2 }, DVAR_FLOAT64, 222681842206352480, INT64_MAX, 629, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dvar_partitioner p = min_size(cases[i].bytes, cases[i].max_shards);
		int64_t got = apply(&p, cases[i].rank, cases[i].dims, cases[i].dtype);

		if (got != cases[i].expect)
			fail_msg("case %zu: got %lld, TF gives %lld", i, (long long)got,
			         (long long)cases[i].expect);
		assert_true(cases[i].exact != got);
	}
}

/* MaxSizePartitioner's doubles, computed with CPython. */
static void test_sharding_partition__max_size_huge(void **state)
{
	static const huge_case cases[] = {
		/* 2^53 + 1 rows of 1 byte, 1 byte a shard: TF's 1.0 * rows rounds
		 * to 2^53, one shard fewer than rows */
		{ 1, { 9007199254740993 }, DVAR_UINT8, 1, 0, 9007199254740992, 0 },
		/* TF says 2^63: saturated at INT64_MAX */
		{ 1, { INT64_MAX }, DVAR_UINT8, 1, 0, INT64_MAX, 0 },
		{ 1, { INT64_MAX }, DVAR_UINT8, 3, 0, 3074457345618258432, 0 },
		{ 1, { INT64_MAX }, DVAR_UINT8, 3, 5, 5, 0 },
		{ 2, { 1000000000000000007, 3 }, DVAR_FLOAT32, 1000001, 0, 12000048000192, 0 },
		{ 3, { 1099511627779, 1073741825, 5 }, DVAR_FLOAT16, 35184372088832, 0, 335626261,
		  0 },
		{ 3, { 1000, 4611686018427387904, 4611686018427387904 }, DVAR_FLOAT64,
		  4611686018427387904, 0, 1000, 0 },
		{ 2, { 7, 3 }, DVAR_FLOAT64, INT64_MAX, 0, 1, 0 },
		{ 2, { 4611686018427387904, 3 }, DVAR_FLOAT32, INT64_MAX, 0, 6, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dvar_partitioner p = max_size(cases[i].bytes, cases[i].max_shards);
		int64_t got = apply(&p, cases[i].rank, cases[i].dims, cases[i].dtype);

		if (got != cases[i].expect)
			fail_msg("case %zu: got %lld, TF gives %lld", i, (long long)got,
			         (long long)cases[i].expect);
	}
}

static void check_fails(const dvar_partitioner *p, const char *message)
{
	assert_int_equal(dvar_partitioner_check(p), DVAR_EINVAL);
	assert_string_equal(dvar_error_last()->message, message);
}

/* TF's constructor messages, verbatim; the first bad argument wins. */
static void test_sharding_partition__check_errors(void **state)
{
	dvar_partitioner p;

	(void)state;
	p = fixed(0);
	check_fails(&p, "Argument `num_shards` must be positive. Received: 0");
	p = fixed(-3);
	check_fails(&p, "Argument `num_shards` must be positive. Received: -3");
	p = fixed(1);
	assert_int_equal(dvar_partitioner_check(&p), DVAR_OK);

	p = min_size(0, 1);
	check_fails(&p, "Argument `min_shard_bytes` must be positive. Received: 0");
	p = min_size(-1, 0);
	check_fails(&p, "Argument `min_shard_bytes` must be positive. Received: -1");
	p = min_size(1, 0);
	check_fails(&p, "Argument `max_shards` must be positive. Received: 0");
	p = min_size(1, 1);
	p.bytes_per_string = 0;
	check_fails(&p, "Argument `bytes_per_string` must be positive. Received: 0");
	p = (dvar_partitioner)DVAR_PARTITIONER_MIN_SIZE_INIT;
	assert_int_equal(dvar_partitioner_check(&p), DVAR_OK);

	p = max_size(0, 0);
	check_fails(&p, "Argument `max_shard_bytes` must be positive. Received 0");
	p = max_size(-7, -1);
	check_fails(&p, "Argument `max_shard_bytes` must be positive. Received -7");
	p = max_size(1, -1);
	check_fails(&p, "Argument `max_shards` must be positive. Received -1");
	p = max_size(1, 0);
	p.bytes_per_string = -2;
	check_fails(&p, "Argument `bytes_per_string` must be positive. Received: -2");
	p = max_size(1, 0); /* 0 is TF's None */
	assert_int_equal(dvar_partitioner_check(&p), DVAR_OK);

	p = fixed(1);
	p.kind = 9;
	check_fails(&p, "unknown partitioner kind 9");
	check_fails(NULL, "partitioner is NULL");
}

static void test_sharding_partition__apply_errors(void **state)
{
	const int64_t good[] = { 4, 2 }, neg[] = { 4, -2 };
	dvar_partitioner p = fixed(2), bad = min_size(0, 1);
	dvar_shape s = shape_of(2, good);
	int64_t num = 42;

	(void)state;
	assert_int_equal(dvar_partitioner_apply(&bad, &s, DVAR_FLOAT32, &num), DVAR_EINVAL);
	tu_assert_error_contains("Argument `min_shard_bytes` must be positive. Received: 0");
	assert_int_equal(dvar_partitioner_apply(&p, &s, 0, &num), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype 0");
	s = shape_of(2, neg);
	assert_int_equal(dvar_partitioner_apply(&p, &s, DVAR_FLOAT32, &num), DVAR_EINVAL);
	tu_assert_error_contains("shape [4,-2]: dimension 1 is negative");
	s = shape_of(2, good);
	s.rank = 9;
	assert_int_equal(dvar_partitioner_apply(&p, &s, DVAR_FLOAT32, &num), DVAR_EINVAL);
	tu_assert_error_contains("shape rank 9 is outside 0..8");
	s.rank = 2;
	assert_int_equal(dvar_partitioner_apply(&p, NULL, DVAR_FLOAT32, &num), DVAR_EINVAL);
	assert_int_equal(dvar_partitioner_apply(&p, &s, DVAR_FLOAT32, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_partitioner_apply(NULL, &s, DVAR_FLOAT32, &num), DVAR_EINVAL);
	assert_int_equal(num, 42);
}

static void roundtrip(const char *text, const char *canonical, const dvar_partitioner *expect)
{
	dvar_partitioner p, again;
	char buf[64];

	if (dvar_partitioner_parse(&p, text) != DVAR_OK)
		fail_msg("'%s': %s", text, dvar_error_last()->message);
	assert_int_equal(p.kind, expect->kind);
	assert_int_equal(p.num_shards, expect->num_shards);
	assert_int_equal(p.min_shard_bytes, expect->min_shard_bytes);
	assert_int_equal(p.max_shard_bytes, expect->max_shard_bytes);
	assert_int_equal(p.max_shards, expect->max_shards);
	assert_int_equal(p.bytes_per_string, expect->bytes_per_string);
	assert_int_equal(dvar_partitioner_format(&p, buf, sizeof buf), strlen(canonical));
	assert_string_equal(buf, canonical);
	assert_int_equal(dvar_partitioner_parse(&again, buf), DVAR_OK);
	assert_memory_equal(&again, &p, sizeof p);
}

static void test_sharding_partition__parse_format(void **state)
{
	dvar_partitioner e;

	(void)state;
	e = fixed(4);
	roundtrip("fixed:4", "fixed:4", &e);
	e = (dvar_partitioner)DVAR_PARTITIONER_MIN_SIZE_INIT;
	roundtrip("min-size:262144:1", "min-size:262144:1", &e);
	roundtrip("min-size:256K", "min-size:262144:1", &e);
	roundtrip("min-size:256k:1", "min-size:262144:1", &e);
	e = min_size(64 << 20, 2);
	roundtrip("min-size:64M:2", "min-size:67108864:2", &e);
	e = max_size(1 << 20, 0);
	roundtrip("max-size:1M", "max-size:1048576", &e);
	roundtrip("max-size:1048576:0", "max-size:1048576", &e);
	e = max_size(1LL << 30, 8);
	roundtrip("max-size:1G:8", "max-size:1073741824:8", &e);
	e = max_size(INT64_MAX - (1LL << 30) + 1, 0);
	roundtrip("max-size:8589934591G", "max-size:9223372035781033984", &e);
	e = min_size(INT64_MAX, INT64_MAX);
	roundtrip("min-size:9223372036854775807:9223372036854775807",
	          "min-size:9223372036854775807:9223372036854775807", &e);
}

static void test_sharding_partition__format_truncates(void **state)
{
	dvar_partitioner p = (dvar_partitioner)DVAR_PARTITIONER_MIN_SIZE_INIT;
	char buf[8];

	(void)state;
	memset(buf, 'x', sizeof buf);
	assert_int_equal(dvar_partitioner_format(&p, buf, sizeof buf), 17);
	assert_string_equal(buf, "min-siz");
	assert_int_equal(dvar_partitioner_format(&p, NULL, 0), 17);
	p.kind = 0;
	assert_int_equal(dvar_partitioner_format(&p, buf, sizeof buf), 14);
}

static void parse_fails(const char *text, const char *message)
{
	dvar_partitioner p = fixed(77), before = p;

	assert_int_equal(dvar_partitioner_parse(&p, text), DVAR_EINVAL);
	if (strcmp(dvar_error_last()->message, message) != 0)
		fail_msg("'%s': got \"%s\", want \"%s\"", text, dvar_error_last()->message, message);
	assert_memory_equal(&p, &before, sizeof p);
}

#define FORMS "'fixed:N', 'min-size:BYTES[:MAX_SHARDS]' or 'max-size:BYTES[:MAX_SHARDS]'"

static void test_sharding_partition__parse_errors(void **state)
{
	dvar_partitioner p;

	(void)state;
	parse_fails("", "partitioner '': expected " FORMS);
	parse_fails("fixed", "partitioner 'fixed': expected " FORMS);
	parse_fails("FIXED:2", "partitioner 'FIXED:2': expected " FORMS);
	parse_fails("fixed:", "partitioner 'fixed:': expected a number at the end");
	parse_fails("fixed:x", "partitioner 'fixed:x': expected a number at 'x'");
	parse_fails("fixed: 2", "partitioner 'fixed: 2': expected a number at ' 2'");
	parse_fails("fixed:4:2", "partitioner 'fixed:4:2': unexpected ':2'; expected " FORMS);
	parse_fails("fixed:4K", "partitioner 'fixed:4K': unexpected 'K'; expected " FORMS);
	parse_fails("min-size:1T", "partitioner 'min-size:1T': unexpected 'T'; expected " FORMS);
	parse_fails("min-size:1:", "partitioner 'min-size:1:': expected a number at the end");
	parse_fails("min-size:1:2K", "partitioner 'min-size:1:2K': unexpected 'K'; expected " FORMS);
	parse_fails("min-size:1:2:3", "partitioner 'min-size:1:2:3': unexpected ':3'; expected "
	            FORMS);
	parse_fails("max-size:9223372036854775808",
	            "partitioner 'max-size:9223372036854775808': number '9223372036854775808' is "
	            "too large");
	parse_fails("max-size:8589934592G",
	            "partitioner 'max-size:8589934592G': number '8589934592G' is too large");
	parse_fails("max-size:99999999999999999999999",
	            "partitioner 'max-size:99999999999999999999999': number "
	            "'99999999999999999999999' is too large");
	/* Numbers that parse but do not check: TF's constructor messages. */
	parse_fails("fixed:0",
	            "partitioner 'fixed:0': Argument `num_shards` must be positive. Received: 0");
	parse_fails("min-size:0", "partitioner 'min-size:0': Argument `min_shard_bytes` must be "
	            "positive. Received: 0");
	parse_fails("min-size:1K:0", "partitioner 'min-size:1K:0': Argument `max_shards` must be "
	            "positive. Received: 0");
	parse_fails("max-size:-5", "partitioner 'max-size:-5': Argument `max_shard_bytes` must be "
	            "positive. Received -5");
	parse_fails("max-size:-1K", "partitioner 'max-size:-1K': Argument `max_shard_bytes` must "
	            "be positive. Received -1024");
	parse_fails("max-size:1:-1", "partitioner 'max-size:1:-1': Argument `max_shards` must be "
	            "positive. Received -1");
	assert_int_equal(dvar_partitioner_parse(&p, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_partitioner_parse(NULL, "fixed:1"), DVAR_EINVAL);
}

static void check_layout(int64_t rows, int64_t parts, int64_t expect_n, const int64_t *sizes)
{
	int64_t offsets[64], n = -1, n2 = -1;

	assert_int_equal(dvar_div_layout(rows, parts, offsets, &n), DVAR_OK);
	assert_int_equal(n, expect_n);
	assert_int_equal(offsets[0], 0);
	for (int64_t i = 0; i < n; i++)
		assert_int_equal(offsets[i + 1] - offsets[i], sizes[i]);
	assert_int_equal(offsets[n], rows);
	assert_true(dvar_div_layout_is(offsets, n));
	/* offsets may be NULL to learn n first */
	assert_int_equal(dvar_div_layout(rows, parts, NULL, &n2), DVAR_OK);
	assert_int_equal(n2, n);
}

static void test_sharding_partition__div_layout(void **state)
{
	const int64_t s10_4[] = { 3, 3, 2, 2 }, s10_3[] = { 4, 3, 3 }, s5_2[] = { 3, 2 };
	const int64_t ones[] = { 1, 1, 1, 1, 1, 1, 1 }, empty[] = { 0 }, s32_3[] = { 11, 11, 10 };
	int64_t offsets[8], n = 5;

	(void)state;
	check_layout(10, 4, 4, s10_4);
	{
		int64_t o[5];

		assert_int_equal(dvar_div_layout(10, 4, o, &n), DVAR_OK);
		assert_int_equal(o[1], 3);
		assert_int_equal(o[2], 6);
		assert_int_equal(o[3], 8);
		assert_int_equal(o[4], 10);
	}
	check_layout(10, 3, 3, s10_3);
	check_layout(5, 2, 2, s5_2);
	check_layout(3, 4, 3, ones);   /* FixedShards(4) on 3 rows: 3 shards */
	check_layout(7, 7, 7, ones);
	check_layout(0, 3, 1, empty);  /* one empty shard */
	check_layout(0, 1, 1, empty);
	check_layout(32, 3, 3, s32_3); /* §2.8: base 10, extra 2 */
	check_layout(1, 1, 1, ones);

	/* the largest row count */
	{
		int64_t o[4];

		assert_int_equal(dvar_div_layout(INT64_MAX, 3, o, &n), DVAR_OK);
		assert_int_equal(n, 3);
		assert_int_equal(o[1], INT64_MAX / 3 + 1);
		assert_int_equal(o[3], INT64_MAX);
		assert_true(dvar_div_layout_is(o, 3));
	}

	n = 5;
	assert_int_equal(dvar_div_layout(10, 0, offsets, &n), DVAR_EINVAL);
	tu_assert_error_contains("div layout: 0 partitions; need at least 1");
	assert_int_equal(dvar_div_layout(-1, 2, offsets, &n), DVAR_EINVAL);
	tu_assert_error_contains("div layout: row count -1 is negative");
	assert_int_equal(dvar_div_layout(10, 2, offsets, NULL), DVAR_EINVAL);
	assert_int_equal(n, 5);
}

static void test_sharding_partition__div_layout_is(void **state)
{
	const int64_t a[] = { 0, 3, 6, 8, 10 }, b[] = { 0, 4, 7, 10 }, c[] = { 0, 0 };
	const int64_t not1[] = { 0, 4, 6 };        /* issue #19265: [4,2] is not [3,3] */
	const int64_t not2[] = { 0, 2, 3, 5 };     /* 2,1,2 */
	const int64_t not3[] = { 0, 3, 5, 8, 10 }; /* 3,2,3,2 */
	const int64_t not4[] = { 0, 1, 1 };        /* more shards than rows */
	const int64_t not5[] = { 0, 0, 0 };
	const int64_t not6[] = { 1, 3, 5 };        /* not from 0 */
	const int64_t not7[] = { 0, 3, 2, 4 };     /* decreasing */
	const int64_t not8[] = { 0, -1 };

	(void)state;
	assert_true(dvar_div_layout_is(a, 4));
	assert_true(dvar_div_layout_is(b, 3));
	assert_true(dvar_div_layout_is(c, 1));
	assert_false(dvar_div_layout_is(not1, 2));
	assert_false(dvar_div_layout_is(not2, 3));
	assert_false(dvar_div_layout_is(not3, 4));
	assert_false(dvar_div_layout_is(not4, 2));
	assert_false(dvar_div_layout_is(not5, 2));
	assert_false(dvar_div_layout_is(not6, 2));
	assert_false(dvar_div_layout_is(not7, 3));
	assert_false(dvar_div_layout_is(not8, 1));
	assert_false(dvar_div_layout_is(a, 0));
	assert_false(dvar_div_layout_is(NULL, 1));
}

/* Every way to cut up to 7 rows into up to 4 shards: exactly the layouts
 * dvar_div_layout makes are div layouts. */
static void test_sharding_partition__div_layout_is_exhaustive(void **state)
{
	(void)state;
	for (int64_t rows = 0; rows <= 7; rows++) {
		for (int64_t n = 1; n <= 4; n++) {
			int64_t cut[5] = { 0 }, want[8], wn, k;
			int found = 0;

			assert_int_equal(dvar_div_layout(rows, n, want, &wn), DVAR_OK);
			/* cut[1..n-1] run over every non-decreasing sequence in [0, rows] */
			cut[n] = rows;
			for (;;) {
				int is = dvar_div_layout_is(cut, n);
				int same = wn == n && memcmp(cut, want, (size_t)(n + 1) * sizeof *cut) == 0;

				if (is != same)
					fail_msg("rows %lld, %lld shards: dvar_div_layout_is %d, layout %d",
					         (long long)rows, (long long)n, is, same);
				found += is;
				/* the next sequence */
				k = n - 1;
				while (k >= 1 && cut[k] == rows)
					k--;
				if (k < 1)
					break;
				cut[k]++;
				for (int64_t j = k + 1; j < n; j++)
					cut[j] = cut[k];
			}
			assert_int_equal(found, wn == n ? 1 : 0);
		}
	}
}

/* The partitioner then the layout, as ParameterServerStrategy does (§2.6). */
static void test_sharding_partition__strategy_examples(void **state)
{
	const int64_t d5_2[] = { 5, 2 }, d6_1[] = { 6, 1 }, d10[] = { 10 }, d3[] = { 3 };
	int64_t offsets[8], n;
	dvar_partitioner p;

	(void)state;
	p = fixed(2);
	assert_int_equal(dvar_div_layout(5, apply(&p, 2, d5_2, DVAR_INT64), offsets, &n), DVAR_OK);
	assert_int_equal(n, 2);
	assert_int_equal(offsets[1], 3);
	assert_int_equal(dvar_div_layout(6, apply(&p, 2, d6_1, DVAR_INT64), offsets, &n), DVAR_OK);
	assert_int_equal(offsets[1], 3);
	p = fixed(4);
	assert_int_equal(dvar_div_layout(10, apply(&p, 1, d10, DVAR_INT64), offsets, &n), DVAR_OK);
	assert_int_equal(n, 4);
	assert_int_equal(offsets[1], 3);
	assert_int_equal(offsets[2], 6);
	assert_int_equal(offsets[3], 8);
	assert_int_equal(dvar_div_layout(3, apply(&p, 1, d3, DVAR_INT64), offsets, &n), DVAR_OK);
	assert_int_equal(n, 3);
	/* testPartitionToOne: MinSize(64 MiB, 2) on (10,) int64 gives one partition */
	p = min_size(64 << 20, 2);
	assert_int_equal(apply(&p, 1, d10, DVAR_INT64), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sharding_partition__tf_table),
		cmocka_unit_test(test_sharding_partition__edges),
		cmocka_unit_test(test_sharding_partition__min_size_huge),
		cmocka_unit_test(test_sharding_partition__max_size_huge),
		cmocka_unit_test(test_sharding_partition__check_errors),
		cmocka_unit_test(test_sharding_partition__apply_errors),
		cmocka_unit_test(test_sharding_partition__parse_format),
		cmocka_unit_test(test_sharding_partition__format_truncates),
		cmocka_unit_test(test_sharding_partition__parse_errors),
		cmocka_unit_test(test_sharding_partition__div_layout),
		cmocka_unit_test(test_sharding_partition__div_layout_is),
		cmocka_unit_test(test_sharding_partition__div_layout_is_exhaustive),
		cmocka_unit_test(test_sharding_partition__strategy_examples),
	};
	return cmocka_run_group_tests_name("sharding/partition", tests, NULL, NULL);
}
