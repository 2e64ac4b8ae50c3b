/*
 * tests/unit/sharding/test_sharding_locate.c - which shard and row hold an
 * id: embedding_lookup's "mod" and "div" formulas (reference §3, §2.8),
 * and div checked against the div layout for every small shape.
 */
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "dvar/sharding.h"

static void locate(int strategy, int64_t rows, int64_t n, const int64_t *ids, size_t count,
                   int64_t *shard, int64_t *row)
{
	if (dvar_embedding_locate(strategy, rows, n, ids, count, shard, row) != DVAR_OK)
		fail_msg("locate: %s", dvar_error_last()->message);
}

/* The docstring's 13 ids over 5 partitions, as the ids each shard holds. */
static void test_sharding_locate__thirteen_over_five(void **state)
{
	static const int64_t mod[5][3] = { { 0, 5, 10 }, { 1, 6, 11 }, { 2, 7, 12 }, { 3, 8 },
		                           { 4, 9 } };
	static const int64_t div[5][3] = { { 0, 1, 2 }, { 3, 4, 5 }, { 6, 7, 8 }, { 9, 10 },
		                           { 11, 12 } };
	static const int sizes[5] = { 3, 3, 3, 2, 2 };
	int64_t ids[13], shard[13], row[13];

	(void)state;
	for (int i = 0; i < 13; i++)
		ids[i] = i;
	locate(DVAR_PARTITION_MOD, 13, 5, ids, 13, shard, row);
	for (int s = 0; s < 5; s++) {
		for (int r = 0; r < sizes[s]; r++) {
			assert_int_equal(shard[mod[s][r]], s);
			assert_int_equal(row[mod[s][r]], r);
		}
	}
	locate(DVAR_PARTITION_DIV, 13, 5, ids, 13, shard, row);
	for (int s = 0; s < 5; s++) {
		for (int r = 0; r < sizes[s]; r++) {
			assert_int_equal(shard[div[s][r]], s);
			assert_int_equal(row[div[s][r]], r);
		}
	}
	/* p(9) = max(3, 3) = 3; p(11) = max(3, 4) = 4 */
	assert_int_equal(shard[9], 3);
	assert_int_equal(shard[11], 4);
}

/* §2.8: base 10, extra 2 (32 rows over 3: [0,11) [11,22) [22,32)). */
static void test_sharding_locate__base_ten_extra_two(void **state)
{
	static const int64_t ids[] = { 10, 11, 21, 22, 31, 0, 12, 30 };
	static const int64_t want_shard[] = { 0, 1, 1, 2, 2, 0, 1, 2 };
	static const int64_t want_row[] = { 10, 0, 10, 0, 9, 0, 1, 8 };
	int64_t shard[8], row[8];

	(void)state;
	locate(DVAR_PARTITION_DIV, 32, 3, ids, 8, shard, row);
	assert_memory_equal(shard, want_shard, sizeof shard);
	assert_memory_equal(row, want_row, sizeof row);
}

/* test_embedding_lookup's shards [[1,2],[3,4]], [[5,6],[7,8]], [[9,10]]:
 * v2 (div) reads ids [0,3,4] as rows 0, 3, 4; v1's default mod reads
 * 3 -> shard 0 row 1 and 4 -> shard 1 row 1, i.e. rows 1 and 3. */
static void test_sharding_locate__embedding_lookup_example(void **state)
{
	static const int64_t ids[] = { 0, 3, 4 }, offsets[] = { 0, 2, 4, 5 };
	int64_t shard[3], row[3];

	(void)state;
	locate(DVAR_PARTITION_DIV, 5, 3, ids, 3, shard, row);
	for (int k = 0; k < 3; k++)
		assert_int_equal(offsets[shard[k]] + row[k], ids[k]);
	locate(DVAR_PARTITION_MOD, 5, 3, ids, 3, shard, row);
	assert_int_equal(shard[0], 0);
	assert_int_equal(row[0], 0);
	assert_int_equal(shard[1], 0);
	assert_int_equal(row[1], 1);
	assert_int_equal(shard[2], 1);
	assert_int_equal(row[2], 1);
	assert_int_equal(offsets[shard[1]] + row[1], 1); /* [3,4], not [7,8] */
	assert_int_equal(offsets[shard[2]] + row[2], 3); /* [7,8], not [9,10] */
}

/* div finds every id where dvar_div_layout put it; mod spreads them round
 * robin. Every row count up to 60 and every shard count up to the rows. */
static void test_sharding_locate__every_small_layout(void **state)
{
	int64_t ids[60], shard[60], row[60], offsets[61], n;

	(void)state;
	for (int64_t rows = 1; rows <= 60; rows++) {
		for (int64_t k = 0; k < rows; k++)
			ids[k] = rows - 1 - k; /* any order */
		for (int64_t parts = 1; parts <= rows; parts++) {
			assert_int_equal(dvar_div_layout(rows, parts, offsets, &n), DVAR_OK);
			locate(DVAR_PARTITION_DIV, rows, n, ids, (size_t)rows, shard, row);
			for (int64_t k = 0; k < rows; k++) {
				assert_in_range(shard[k], 0, n - 1);
				assert_in_range(row[k], 0, offsets[shard[k] + 1] - offsets[shard[k]] - 1);
				assert_int_equal(offsets[shard[k]] + row[k], ids[k]);
			}
			locate(DVAR_PARTITION_MOD, rows, n, ids, (size_t)rows, shard, row);
			for (int64_t k = 0; k < rows; k++) {
				assert_int_equal(shard[k], ids[k] % n);
				assert_int_equal(row[k] * n + shard[k], ids[k]);
			}
		}
	}
}

static void test_sharding_locate__huge(void **state)
{
	const int64_t ids[] = { 0, INT64_MAX - 1, INT64_MAX / 2, INT64_MAX / 2 + 1 };
	int64_t shard[4], row[4], offsets[3], n;

	(void)state;
	locate(DVAR_PARTITION_DIV, INT64_MAX, 1, ids, 4, shard, row);
	for (int k = 0; k < 4; k++) {
		assert_int_equal(shard[k], 0);
		assert_int_equal(row[k], ids[k]);
	}
	assert_int_equal(dvar_div_layout(INT64_MAX, 2, offsets, &n), DVAR_OK);
	locate(DVAR_PARTITION_DIV, INT64_MAX, 2, ids, 4, shard, row);
	for (int k = 0; k < 4; k++)
		assert_int_equal(offsets[shard[k]] + row[k], ids[k]);
	assert_int_equal(shard[2], 0);
	assert_int_equal(shard[3], 1);
	locate(DVAR_PARTITION_MOD, INT64_MAX, 2, ids, 4, shard, row);
	assert_int_equal(shard[1], 0);
	assert_int_equal(row[1], (INT64_MAX - 1) / 2);
}

static void locate_fails(int strategy, int64_t rows, int64_t n, const int64_t *ids,
                         size_t count, const char *message)
{
	int64_t shard[4] = { -7, -7, -7, -7 }, row[4] = { -7, -7, -7, -7 };

	assert_int_equal(dvar_embedding_locate(strategy, rows, n, ids, count, shard, row),
	                 DVAR_EINVAL);
	if (strcmp(dvar_error_last()->message, message) != 0)
		fail_msg("got \"%s\", want \"%s\"", dvar_error_last()->message, message);
	/* nothing written */
	for (int k = 0; k < 4; k++) {
		assert_int_equal(shard[k], -7);
		assert_int_equal(row[k], -7);
	}
}

static void test_sharding_locate__errors(void **state)
{
	const int64_t ids[] = { 0, 12, -1, 13 }, big[] = { 0, 13 }, zero[] = { 0 };
	int64_t shard[1], row[1];

	(void)state;
	/* TF's text, its missing space included */
	locate_fails(3, 13, 5, ids, 2,
	             "Unrecognized partition strategy: 3.Must be one of either `mod` or `div`.");
	locate_fails(0, 13, 5, ids, 2,
	             "Unrecognized partition strategy: 0.Must be one of either `mod` or `div`.");
	locate_fails(DVAR_PARTITION_MOD, 13, 0, ids, 2,
	             "Length of params is currently 0. Need at least one param.");
	locate_fails(DVAR_PARTITION_DIV, 13, -2, ids, 2,
	             "embedding lookup: shard count -2 is negative");
	locate_fails(DVAR_PARTITION_MOD, -1, 2, ids, 0,
	             "embedding lookup: row count -1 is negative");
	/* the first bad id and where it is */
	locate_fails(DVAR_PARTITION_DIV, 13, 5, ids, 4,
	             "embedding lookup: id -1 at position 2 is outside [0, 13)");
	locate_fails(DVAR_PARTITION_MOD, 13, 5, big, 2,
	             "embedding lookup: id 13 at position 1 is outside [0, 13)");
	/* div over more shards than rows: TF divides by rows / shards = 0 */
	locate_fails(DVAR_PARTITION_DIV, 3, 4, zero, 1,
	             "embedding lookup: \"div\" over 4 shards needs at least 4 rows, not 3 "
	             "(TensorFlow would divide by rows / shards = 0)");
	locate_fails(DVAR_PARTITION_DIV, 3, 4, NULL, 0,
	             "embedding lookup: \"div\" over 4 shards needs at least 4 rows, not 3 "
	             "(TensorFlow would divide by rows / shards = 0)");
	locate_fails(DVAR_PARTITION_DIV, 0, 2, NULL, 0,
	             "embedding lookup: \"div\" over 2 shards needs at least 2 rows, not 0 "
	             "(TensorFlow would divide by rows / shards = 0)");
	/* mod has no such limit */
	locate(DVAR_PARTITION_MOD, 3, 4, zero, 1, shard, row);
	assert_int_equal(shard[0], 0);
	assert_int_equal(row[0], 0);
	/* 0 rows in one empty shard (dvar_div_layout's) has no ids to find */
	assert_int_equal(dvar_embedding_locate(DVAR_PARTITION_DIV, 0, 1, NULL, 0, NULL, NULL),
	                 DVAR_OK);
	locate_fails(DVAR_PARTITION_DIV, 0, 1, zero, 1,
	             "embedding lookup: id 0 at position 0 is outside [0, 0)");
	/* NULL buffers with ids to locate */
	assert_int_equal(dvar_embedding_locate(DVAR_PARTITION_DIV, 13, 5, NULL, 1, shard, row),
	                 DVAR_EINVAL);
	assert_int_equal(dvar_embedding_locate(DVAR_PARTITION_DIV, 13, 5, ids, 1, NULL, row),
	                 DVAR_EINVAL);
	assert_int_equal(dvar_embedding_locate(DVAR_PARTITION_DIV, 13, 5, ids, 1, shard, NULL),
	                 DVAR_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sharding_locate__thirteen_over_five),
		cmocka_unit_test(test_sharding_locate__base_ten_extra_two),
		cmocka_unit_test(test_sharding_locate__embedding_lookup_example),
		cmocka_unit_test(test_sharding_locate__every_small_layout),
		cmocka_unit_test(test_sharding_locate__huge),
		cmocka_unit_test(test_sharding_locate__errors),
	};
	return cmocka_run_group_tests_name("sharding/locate", tests, NULL, NULL);
}
