/*
 * tests/unit/format/test_format_fixture.c - the committed checkpoints in
 * fixtures/v1 and fixtures/v2 must always read back with these exact values,
 * so that no change can silently break reading old checkpoints.
 *
 * `test_unit_format_fixture --write DIR` writes the v1 fixture's content
 * anew, `--write-v2 DIR` the v2 one (two parts, with attributes); only when
 * the format version changes, and the old ones stay.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

/* float16 and bfloat16 bit patterns of 1, -2, 0.5, 65504 and 1, -2.5. */
static const uint16_t half_bits[4] = { 0x3c00, 0xc000, 0x3800, 0x7bff };
static const double half_vals[4] = { 1, -2, 0.5, 65504 };
static const uint16_t bf16_bits[2] = { 0x3f80, 0xc020 };
static const int64_t ints[5] = { -2, -1, 0, 1, INT64_C(9007199254740993) };
static const uint8_t bools[4] = { 1, 0, 1, 1 };

static float emb_at(int r, int c) { return r % 2 ? 0.0f : (float)(r * 16 + c) + 0.125f; }
static double mat_at(int i, int j) { return i * 4 + j + 0.25; }
static float sharded_at(int r, int c) { return (float)(r * 3 + c) - 7.5f; }

/*
 * The fixture's variables. One writer (w1 NULL): as fixtures/v1. Two parts:
 * as fixtures/v2, part 0 in w, part 1 in w1, with attributes.
 */
static int add_all(dvar_writer *w, dvar_writer *w1)
{
	dvar_writer *second = w1 ? w1 : w;
	dvar_shape s;
	int rc = 0;
	float scalar = 3.5f;
	dvar_shape_init(&s, 0, NULL);
	rc |= dvar_writer_add(w, "scalar_f32", DVAR_FLOAT32, &s, NULL, &scalar);
	if (w1) {
		rc |= dvar_writer_set_attr(w, "scalar_f32", "kind", "mirrored");
		rc |= dvar_writer_set_attr(w, "scalar_f32", "synchronization", "ON_WRITE");
		rc |= dvar_writer_set_attr(w, "scalar_f32", "aggregation", "NONE");
	}
	double mat[12];
	for (int i = 0; i < 12; i++)
		mat[i] = mat_at(i / 4, i % 4);
	dvar_shape_init(&s, 2, (int64_t[]){ 3, 4 });
	rc |= dvar_writer_add(w, "matrix_f64", DVAR_FLOAT64, &s, NULL, mat);
	dvar_shape_init(&s, 1, (int64_t[]){ 5 });
	rc |= dvar_writer_add(w, "int_vec", DVAR_INT64, &s, NULL, ints);
	if (w1) {
		rc |= dvar_writer_set_attr(w, "int_vec", "kind", "sync_on_read");
		rc |= dvar_writer_set_attr(w, "int_vec", "synchronization", "ON_READ");
		rc |= dvar_writer_set_attr(w, "int_vec", "aggregation", "SUM");
	}
	dvar_shape_init(&s, 1, (int64_t[]){ 4 });
	rc |= dvar_writer_add(w, "bool_vec", DVAR_BOOL, &s, NULL, bools);
	rc |= dvar_writer_add(second, "half", DVAR_FLOAT16, &s, NULL, half_bits);
	dvar_shape_init(&s, 1, (int64_t[]){ 2 });
	rc |= dvar_writer_add(second, "bf16", DVAR_BFLOAT16, &s, NULL, bf16_bits);
	static float emb[256 * 16];
	for (int i = 0; i < 256 * 16; i++)
		emb[i] = emb_at(i / 16, i % 16);
	dvar_shape_init(&s, 2, (int64_t[]){ 256, 16 });
	rc |= dvar_writer_add(second, "emb", DVAR_FLOAT32, &s, NULL, emb);
	float sh[30];
	for (int i = 0; i < 30; i++)
		sh[i] = sharded_at(i / 3, i % 3);
	dvar_shape_init(&s, 2, (int64_t[]){ 10, 3 });
	const int rows[4] = { 0, 4, 7, 10 };
	for (int p = 0; p < 3; p++) {
		dvar_slice sl = { 2, { rows[p], 0 }, { rows[p + 1] - rows[p], 3 } };
		rc |= dvar_writer_add(p ? second : w, "sharded", DVAR_FLOAT32, &s, &sl, sh + rows[p] * 3);
	}
	if (w1) {
		rc |= dvar_writer_set_attr(w, "sharded", "kind", "sharded");
		rc |= dvar_writer_set_attr(w1, "sharded", "kind", "sharded");
	}
	dvar_shape_init(&s, 2, (int64_t[]){ 0, 5 });
	rc |= dvar_writer_add(second, "empty", DVAR_FLOAT32, &s, NULL, NULL);
	return rc;
}

static int write_fixture(const char *dir, int version)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 4096;
	o.compress = DVAR_COMPRESS_LZ4;
	dvar_writer *w = NULL, *w1 = NULL;
	void *e0 = NULL, *e1 = NULL;
	size_t n0 = 0, n1 = 0;
	int rc;
	if (version == 1) {
		if (!(rc = dvar_writer_open(&w, dir, &o)) && !(rc = add_all(w, NULL)))
			rc = dvar_writer_commit(w);
	} else if (!(rc = dvar_writer_open_part(&w, dir, "fixture", 0, 2, &o)) &&
	           !(rc = dvar_writer_open_part(&w1, dir, "fixture", 1, 2, &o)) &&
	           !(rc = add_all(w, w1)) && !(rc = dvar_writer_finish_part(w1, &e1, &n1)) &&
	           !(rc = dvar_writer_finish_part(w, &e0, &n0))) {
		const void *entries[2] = { e1, e0 };
		size_t lens[2] = { n1, n0 };
		rc = dvar_writer_commit_parts(w, entries, lens, 2);
	}
	if (rc && version == 2)
		dvar_writer_abort_parts(dir, "fixture");
	dvar_writer_free(w);
	dvar_writer_free(w1);
	dvar_free(e0);
	dvar_free(e1);
	return rc;
}

static char *fixture_path(const char *name)
{
	const char *src = getenv("DVAR_SOURCE_DIR");
	assert_non_null(src);
	char *fixtures = tu_path(src, "fixtures"), *p = tu_path(fixtures, name);
	free(fixtures);
	return p;
}

static void read_var(dvar_reader *r, const char *name, const char *slice, void *out, size_t bytes)
{
	size_t i;
	dvar_var_info info;
	dvar_slice s;
	if (dvar_reader_find(r, name, &i) || dvar_reader_var(r, i, &info) ||
	    (slice && dvar_slice_parse(&s, slice, &info.shape)) ||
	    dvar_reader_read(r, i, slice ? &s : NULL, out, bytes))
		fail_msg("reading %s: %s", name, dvar_error_last()->message);
}

/* Every value of the fixture's variables, as add_all wrote them. */
static void check_values(dvar_reader *r)
{
	assert_int_equal(dvar_reader_num_vars(r), 9);

	float f;
	read_var(r, "scalar_f32", NULL, &f, sizeof(f));
	assert_true(f == 3.5f);
	double mat[12], d[4];
	read_var(r, "matrix_f64", NULL, mat, sizeof(mat));
	for (int i = 0; i < 12; i++)
		assert_true(mat[i] == mat_at(i / 4, i % 4));
	int64_t iv[5];
	read_var(r, "int_vec", NULL, iv, sizeof(iv));
	assert_memory_equal(iv, ints, sizeof(ints));
	uint8_t bv[4];
	read_var(r, "bool_vec", NULL, bv, sizeof(bv));
	assert_memory_equal(bv, bools, sizeof(bools));
	uint16_t hv[4];
	read_var(r, "half", NULL, hv, sizeof(hv));
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_FLOAT16, hv, 4), DVAR_OK);
	for (int i = 0; i < 4; i++)
		assert_true(d[i] == half_vals[i]);
	uint16_t bf[2];
	read_var(r, "bf16", NULL, bf, sizeof(bf));
	assert_int_equal(dvar_dtype_to_f64(d, DVAR_BFLOAT16, bf, 2), DVAR_OK);
	assert_true(d[0] == 1.0 && d[1] == -2.5);

	static float emb[256 * 16];
	read_var(r, "emb", NULL, emb, sizeof(emb));
	for (int i = 0; i < 256 * 16; i++)
		assert_true(emb[i] == emb_at(i / 16, i % 16));
	float part[3 * 2];
	read_var(r, "emb", "100,3:14,2", part, sizeof(part));
	for (int i = 0; i < 6; i++)
		assert_true(part[i] == emb_at(100 + i / 2, 14 + i % 2));
	size_t vi;
	dvar_var_info info;
	assert_int_equal(dvar_reader_find(r, "emb", &vi), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, vi, &info), DVAR_OK);
	assert_int_equal(info.num_chunks, 4);
	assert_true(info.stored_bytes < info.raw_bytes);

	/* Rows 3..7 cross all three saved slices. */
	float sh[5 * 3];
	read_var(r, "sharded", "3,5:-", sh, sizeof(sh));
	for (int i = 0; i < 15; i++)
		assert_true(sh[i] == sharded_at(3 + i / 3, i % 3));
	assert_int_equal(dvar_reader_find(r, "sharded", &vi), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, vi, &info), DVAR_OK);
	assert_int_equal(info.num_slices, 3);

	read_var(r, "empty", NULL, NULL, 0);
	uint64_t bad;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
}

static void test_format_fixture__v1_values(void **state)
{
	(void)state;
	char *path = fixture_path("v1");
	dvar_reader *r;
	if (dvar_reader_open(&r, path, NULL))
		fail_msg("%s", dvar_error_last()->message);
	check_values(r);
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++)
		assert_int_equal(dvar_reader_var_num_attrs(r, i), 0);
	dvar_reader_free(r);
	free(path);
}

static void expect_attrs(dvar_reader *r, const char *name, const char *const *kv, size_t n)
{
	size_t i;
	const char *k, *v;
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_num_attrs(r, i), n);
	for (size_t a = 0; a < n; a++) {
		assert_int_equal(dvar_reader_var_attr_at(r, i, a, &k, &v), DVAR_OK);
		assert_string_equal(k, kv[2 * a]);
		assert_string_equal(v, kv[2 * a + 1]);
	}
}

/* Version 2: the same values from two data files, with attributes. */
static void test_format_fixture__v2_values(void **state)
{
	(void)state;
	char *path = fixture_path("v2");
	dvar_reader *r;
	if (dvar_reader_open(&r, path, NULL))
		fail_msg("%s", dvar_error_last()->message);
	check_values(r);
	static const char *const mirrored[] = { "aggregation", "NONE", "kind", "mirrored",
	                                        "synchronization", "ON_WRITE" };
	static const char *const summed[] = { "aggregation", "SUM", "kind", "sync_on_read",
	                                      "synchronization", "ON_READ" };
	static const char *const sharded[] = { "kind", "sharded" };
	expect_attrs(r, "scalar_f32", mirrored, 3);
	expect_attrs(r, "int_vec", summed, 3);
	expect_attrs(r, "sharded", sharded, 1);
	expect_attrs(r, "emb", NULL, 0);
	char *d0 = tu_path(path, "data-00000-of-00002"), *d1 = tu_path(path, "data-00001-of-00002");
	assert_true(dvar_fs_exists(d0) && dvar_fs_exists(d1));
	free(d0);
	free(d1);
	dvar_reader_free(r);
	free(path);
}

int main(int argc, char **argv)
{
	if (argc == 3 && (strcmp(argv[1], "--write") == 0 || strcmp(argv[1], "--write-v2") == 0)) {
		if (write_fixture(argv[2], strcmp(argv[1], "--write") == 0 ? 1 : 2)) {
			fprintf(stderr, "%s\n", dvar_error_last()->message);
			return 1;
		}
		return 0;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_fixture__v1_values),
		cmocka_unit_test(test_format_fixture__v2_values),
	};
	return cmocka_run_group_tests_name("format/fixture", tests, NULL, NULL);
}
