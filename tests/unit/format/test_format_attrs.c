/*
 * tests/unit/format/test_format_attrs.c - variable attributes: they round
 * trip through a checkpoint in key order, their bounds hold on write, and a
 * hand-made index with hostile attribute encodings gives DVAR_ECORRUPT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

static dvar_writer *open_writer(const char *dir, const char *name)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.flags = DVAR_WRITE_NO_FSYNC;
	dvar_writer *w;
	char *ck = tu_path(dir, name);
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	free(ck);
	return w;
}

static void test_format_attrs__round_trip(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	dvar_shape s;
	float v[4] = { 1, 2, 3, 4 };
	dvar_shape_init(&s, 1, (int64_t[]){ 4 });
	assert_int_equal(dvar_writer_set_attr(w, "w", "kind", "mirrored"), DVAR_ENOTFOUND);
	assert_int_equal(dvar_writer_add(w, "w", DVAR_FLOAT32, &s, &(dvar_slice){ 1, { 0 }, { 2 } }, v),
	                 DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "w", "synchronization", "ON_READ"), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "w", "kind", "plain"), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "w", "kind", "sync_on_read"), DVAR_OK); /* replaces */
	assert_int_equal(dvar_writer_set_attr(w, "w", "aggregation", "MEAN"), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "w", "empty", ""), DVAR_OK);
	/* Attributes set after the first slice stay for the next. */
	assert_int_equal(dvar_writer_add(w, "w", DVAR_FLOAT32, &s, &(dvar_slice){ 1, { 2 }, { 2 } }, v + 2),
	                 DVAR_OK);
	char big[DVAR_ATTR_VALUE_MAX + 2];
	memset(big, 'x', sizeof(big));
	big[DVAR_ATTR_VALUE_MAX] = '\0';
	assert_int_equal(dvar_writer_set_attr(w, "w", "big", big), DVAR_OK);
	big[DVAR_ATTR_VALUE_MAX] = 'x';
	big[DVAR_ATTR_VALUE_MAX + 1] = '\0';
	assert_int_equal(dvar_writer_set_attr(w, "w", "bigger", big), DVAR_EINVAL);
	tu_assert_error_contains("variable 'w': value of attribute 'bigger' must be 0 to 4096 bytes");
	char key[DVAR_ATTR_KEY_MAX + 2];
	memset(key, 'k', sizeof(key));
	key[DVAR_ATTR_KEY_MAX + 1] = '\0';
	assert_int_equal(dvar_writer_set_attr(w, "w", key, "v"), DVAR_EINVAL);
	tu_assert_error_contains("attribute key must be 1 to 64 bytes");
	assert_int_equal(dvar_writer_set_attr(w, "w", "", "v"), DVAR_EINVAL);
	key[DVAR_ATTR_KEY_MAX] = '\0';
	assert_int_equal(dvar_writer_set_attr(w, "w", key, "longest key"), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "w", NULL, "v"), DVAR_EINVAL);

	/* A second variable with the most attributes allowed. */
	float one = 1;
	dvar_shape_init(&s, 0, NULL);
	assert_int_equal(dvar_writer_add(w, "many", DVAR_FLOAT32, &s, NULL, &one), DVAR_OK);
	for (int i = 0; i < DVAR_ATTRS_MAX; i++) {
		char k[16], val[16];
		snprintf(k, sizeof(k), "k%02d", DVAR_ATTRS_MAX - 1 - i);
		snprintf(val, sizeof(val), "v%d", DVAR_ATTRS_MAX - 1 - i);
		assert_int_equal(dvar_writer_set_attr(w, "many", k, val), DVAR_OK);
	}
	assert_int_equal(dvar_writer_set_attr(w, "many", "one-more", "x"), DVAR_EINVAL);
	tu_assert_error_contains("has 64 attributes already");
	assert_int_equal(dvar_writer_set_attr(w, "many", "k07", "again"), DVAR_OK); /* replacing is fine */
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "w", "late", "x"), DVAR_EINVAL);
	dvar_writer_free(w);

	char *ck = tu_path(dir, "ck");
	dvar_reader *r;
	size_t i;
	const char *k, *val;
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "w", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_num_attrs(r, i), 6);
	/* Bytewise key order: "kkk..." sorts after "kind". */
	static const char *keys[] = { "aggregation", "big", "empty", "kind", NULL, "synchronization" };
	static const char *vals[] = { "MEAN", NULL, "", "sync_on_read", "longest key", "ON_READ" };
	for (size_t a = 0; a < 6; a++) {
		assert_int_equal(dvar_reader_var_attr_at(r, i, a, &k, &val), DVAR_OK);
		assert_string_equal(k, keys[a] ? keys[a] : key);
		if (vals[a])
			assert_string_equal(val, vals[a]);
		else
			assert_true(strlen(val) == DVAR_ATTR_VALUE_MAX && strspn(val, "x") == DVAR_ATTR_VALUE_MAX);
	}
	assert_int_equal(dvar_reader_var_attr_at(r, i, 6, &k, &val), DVAR_EINVAL);
	assert_int_equal(dvar_reader_var_attr(r, i, "kind", &val), DVAR_OK);
	assert_string_equal(val, "sync_on_read");
	assert_int_equal(dvar_reader_var_attr(r, i, "KIND", &val), DVAR_ENOTFOUND);
	float got[4];
	assert_int_equal(dvar_reader_read(r, i, NULL, got, sizeof(got)), DVAR_OK);
	assert_memory_equal(got, v, sizeof(v));
	assert_int_equal(dvar_reader_find(r, "many", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_num_attrs(r, i), DVAR_ATTRS_MAX);
	for (size_t a = 0; a < DVAR_ATTRS_MAX; a++) {
		char want[16];
		snprintf(want, sizeof(want), "k%02zu", a);
		assert_int_equal(dvar_reader_var_attr_at(r, i, a, &k, &val), DVAR_OK);
		assert_string_equal(k, want);
		snprintf(want, sizeof(want), "v%zu", a);
		assert_string_equal(val, a == 7 ? "again" : want);
	}
	assert_int_equal(dvar_reader_var_num_attrs(r, 99), 0);
	assert_int_equal(dvar_reader_var_attr(r, 99, "kind", &val), DVAR_EINVAL);
	dvar_reader_free(r);
	free(ck);
}

/* A checkpoint whose index holds one variable "v" (float32 [0], no slices)
 * whose entry ends with the given attribute bytes. */
static int open_with_attrs(const char *dir, const char *name, const void *attrs, size_t n)
{
	char *ck = tu_path(dir, name), *index = tu_path(ck, "index");
	assert_int_equal(dvar_fs_mkdirs(ck), DVAR_OK);
	dvar_bytes hk = { 0 }, hv = { 0 }, vk = { 0 }, vv = { 0 };
	uint64_t size = 0;
	dvar_header h = { DVAR_FORMAT_FULL, DVAR_FORMAT_MIN_READER, 1, &size, DVAR_BLOCK_SIZE, 1 };
	dvar_var_entry var = { 0 };
	var.name = "v";
	var.dtype = DVAR_FLOAT32;
	var.shape.rank = 1;
	assert_int_equal(dvar_header_encode(&hv, &h), DVAR_OK);
	assert_int_equal(dvar_key_var(&vk, "v"), DVAR_OK);
	assert_int_equal(dvar_var_encode(&vv, &var, 0), DVAR_OK);
	vv.len--; /* drop the attribute count 0 */
	assert_int_equal(dvar_bytes_put(&vv, attrs, n), DVAR_OK);
	dvar_index_builder *b;
	assert_int_equal(dvar_index_builder_open(&b, index), DVAR_OK);
	assert_int_equal(dvar_index_builder_add(b, hk.data, hk.len, hv.data, hv.len), DVAR_OK);
	assert_int_equal(dvar_index_builder_add(b, vk.data, vk.len, vv.data, vv.len), DVAR_OK);
	assert_int_equal(dvar_index_builder_finish(b, 0), DVAR_OK);
	dvar_index_builder_free(b);
	free(hv.data);
	free(vk.data);
	free(vv.data);
	dvar_reader *r;
	int rc = dvar_reader_open(&r, ck, NULL);
	dvar_reader_free(r);
	free(index);
	free(ck);
	return rc;
}

static void test_format_attrs__hostile_index(void **state)
{
	const char *dir = *state;
	/* A well-formed one first, so that the failures below are the attributes'. */
	static const unsigned char good[] = { 2, 1, 'a', 1, 'x', 1, 'b', 0 };
	assert_int_equal(open_with_attrs(dir, "good", good, sizeof(good)), DVAR_OK);

	static const unsigned char too_many[] = { 65 };
	assert_int_equal(open_with_attrs(dir, "many", too_many, sizeof(too_many)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute count 65 is out of range");

	static const unsigned char empty_key[] = { 1, 0, 1, 'x' };
	assert_int_equal(open_with_attrs(dir, "empty", empty_key, sizeof(empty_key)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute #0: attribute key must be 1 to 64 bytes");

	unsigned char long_key[2 + 65 + 1] = { 1, 65 };
	memset(long_key + 2, 'k', 65);
	long_key[67] = 0;
	assert_int_equal(open_with_attrs(dir, "longkey", long_key, sizeof(long_key)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute key must be 1 to 64 bytes");

	unsigned char *long_val = calloc(1, 3 + 2 + 4097);
	long_val[0] = 1;
	long_val[1] = 1;
	long_val[2] = 'k';
	long_val[3] = 0x81; /* 4097 */
	long_val[4] = 0x20;
	memset(long_val + 5, 'v', 4097);
	assert_int_equal(open_with_attrs(dir, "longval", long_val, 5 + 4097), DVAR_ECORRUPT);
	tu_assert_error_contains("value of attribute 'k' must be 0 to 4096 bytes");
	free(long_val);

	static const unsigned char nul_value[] = { 1, 1, 'k', 3, 'a', 0, 'b' };
	assert_int_equal(open_with_attrs(dir, "nul", nul_value, sizeof(nul_value)), DVAR_ECORRUPT);
	tu_assert_error_contains("without NUL");

	static const unsigned char nul_key[] = { 1, 2, 'k', 0, 0 };
	assert_int_equal(open_with_attrs(dir, "nulkey", nul_key, sizeof(nul_key)), DVAR_ECORRUPT);

	static const unsigned char unsorted[] = { 2, 1, 'b', 0, 1, 'a', 0 };
	assert_int_equal(open_with_attrs(dir, "unsorted", unsorted, sizeof(unsorted)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute keys are not in increasing order ('a' after 'b')");

	static const unsigned char dup[] = { 2, 1, 'a', 0, 1, 'a', 1, 'x' };
	assert_int_equal(open_with_attrs(dir, "dup", dup, sizeof(dup)), DVAR_ECORRUPT);
	tu_assert_error_contains("not in increasing order");

	static const unsigned char past_end[] = { 1, 1, 'k', 100, 'v' };
	assert_int_equal(open_with_attrs(dir, "past", past_end, sizeof(past_end)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute value length 100 is out of range");

	/* A length that counts its own varint byte: one byte past the entry
	 * (an over-read the fuzzer found). */
	static const unsigned char one_past[] = { 1, 2, 'k' };
	assert_int_equal(open_with_attrs(dir, "onepast", one_past, sizeof(one_past)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute key length 2 is out of range");

	static const unsigned char huge_len[] = { 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f };
	assert_int_equal(open_with_attrs(dir, "huge", huge_len, sizeof(huge_len)), DVAR_ECORRUPT);
	tu_assert_error_contains("attribute key length");

	static const unsigned char missing[] = { 3, 1, 'a', 0 };
	assert_int_equal(open_with_attrs(dir, "missing", missing, sizeof(missing)), DVAR_ECORRUPT);

	static const unsigned char trailing[] = { 1, 1, 'a', 0, 9 };
	assert_int_equal(open_with_attrs(dir, "trailing", trailing, sizeof(trailing)), DVAR_ECORRUPT);
	tu_assert_error_contains("unexpected trailing bytes");
}

static int grab_var(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	if (klen == 2 && memcmp(key, "vx", 2) == 0)
		assert_int_equal(dvar_bytes_put(ud, val, vlen), DVAR_OK);
	if (klen == 0) { /* version 2, min_reader 1 */
		const unsigned char *h = val;
		assert_true(vlen > 12);
		assert_memory_equal(h, "DVAR\x02\0\0\0\x01\0\0\0", 12);
	}
	return 0;
}

/* What this version writes, so that version-1 readers skip the attributes
 * (they read version > 1 files whose min_reader is 1). */
static void test_format_attrs__header_versions(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	float one = 1;
	dvar_shape s;
	dvar_shape_init(&s, 0, NULL);
	assert_int_equal(dvar_writer_add(w, "x", DVAR_FLOAT32, &s, NULL, &one), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "x", "kind", "plain"), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	/* The variable entry's bytes on disk: dtype 1, rank 0, 1 slice, raw 4,
	 * stored 4, then 1 attribute: "kind" = "plain". */
	static const unsigned char want[] = { 1, 0, 1, 4, 4, 1, 4, 'k', 'i', 'n', 'd', 5, 'p', 'l', 'a', 'i', 'n' };
	char *index = tu_path(dir, "ck/index");
	dvar_bytes got = { 0 };
	assert_int_equal(dvar_index_scan(index, grab_var, &got), DVAR_OK);
	assert_int_equal(got.len, sizeof(want));
	assert_memory_equal(got.data, want, sizeof(want));
	free(got.data);
	free(index);
	/* A full checkpoint stays version 2, readable by version 1 and 2 readers. */
	assert_int_equal(DVAR_FORMAT_FULL, 2);
	assert_int_equal(DVAR_FORMAT_MIN_READER, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_attrs__round_trip, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_attrs__hostile_index, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_attrs__header_versions, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/attrs", tests, NULL, NULL);
}
