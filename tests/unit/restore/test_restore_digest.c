/*
 * tests/unit/restore/test_restore_digest.c - dvar_reader_digest: the CRC-32C
 * of the variable's row-major bytes, whatever its slices, chunks and
 * compression. Axis-0 slices (1 to 8, empty ones included, written in any
 * order) and whole variables are combined from the chunk checksums without
 * reading a byte; column slices and TensorFlow checkpoints are read. Every
 * dtype, scalars, zero-element variables, one flipped element, the TF
 * fixtures, and the refusals (string tensors, an index out of range).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "core/core.h"
#include "format/format.h"

static const int dtypes[] = {
	DVAR_FLOAT32, DVAR_FLOAT64, DVAR_INT32, DVAR_UINT8, DVAR_INT16, DVAR_INT8, DVAR_INT64,
	DVAR_BOOL, DVAR_BFLOAT16, DVAR_UINT16, DVAR_FLOAT16, DVAR_UINT32, DVAR_UINT64,
};
#define NUM_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* Rows of the test variables: with 43 x 3 columns of 8 bytes, about 38 KiB,
 * so 4 KiB chunks make about ten per slice. */
#define ROWS 37

static dvar_shape shape_of(int rank, const int64_t *dims)
{
	dvar_shape s;
	assert_int_equal(dvar_shape_init(&s, rank, dims), DVAR_OK);
	return s;
}

static size_t bytes_of(const dvar_shape *s, int dtype)
{
	uint64_t n;
	assert_int_equal(dvar_shape_num_bytes(s, dtype, &n), DVAR_OK);
	return (size_t)n;
}

/* A value of dtype: random bytes, or runs lz4 shrinks when compressible. */
static unsigned char *make_value(int dtype, size_t n, uint64_t seed, int compressible)
{
	unsigned char *p = malloc(n + 1);
	if (compressible)
		for (size_t k = 0; k < n; k++)
			p[k] = (unsigned char)((k / 256 + seed) % 5);
	else
		tu_fill_random(p, n, seed);
	if (dtype == DVAR_BOOL)
		for (size_t k = 0; k < n; k++)
			p[k] &= 1;
	return p;
}

static dvar_writer *open_writer(const char *path, dvar_compress compress)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w;
	o.chunk_size = 4096;
	o.compress = compress;
	o.flags = DVAR_WRITE_NO_FSYNC;
	if (dvar_writer_open(&w, path, &o))
		fail_msg("open %s: %s", path, dvar_error_last()->message);
	return w;
}

/*
 * Add value (of shape s) to w as the slices offsets[0..n] cut along axis 0,
 * last one first so that the index's slice order is not the row order;
 * n = 0 adds it whole.
 */
static void add_rows(dvar_writer *w, const char *name, int dtype, const dvar_shape *s,
                     const unsigned char *value, const int64_t *offsets, int n)
{
	if (n == 0) {
		if (dvar_writer_add(w, name, dtype, s, NULL, value))
			fail_msg("add %s: %s", name, dvar_error_last()->message);
		return;
	}
	size_t row = s->dims[0] ? bytes_of(s, dtype) / (size_t)s->dims[0] : 0;
	for (int k = n - 1; k >= 0; k--) {
		dvar_slice sl;
		dvar_slice_full(&sl, s);
		sl.start[0] = offsets[k];
		sl.length[0] = offsets[k + 1] - offsets[k];
		if (dvar_writer_add(w, name, dtype, s, &sl, value + row * (size_t)offsets[k]))
			fail_msg("add %s slice %d: %s", name, k, dvar_error_last()->message);
	}
}

static void commit(dvar_writer *w)
{
	if (dvar_writer_commit(w))
		fail_msg("commit: %s", dvar_error_last()->message);
	dvar_writer_free(w);
}

static dvar_reader *open_reader(const char *path)
{
	dvar_reader *r = NULL;
	if (dvar_reader_open(&r, path, NULL))
		fail_msg("open %s: %s", path, dvar_error_last()->message);
	return r;
}

static uint32_t digest_of(dvar_reader *r, const char *name)
{
	size_t i;
	uint32_t crc = 0;
	if (dvar_reader_find(r, name, &i) || dvar_reader_digest(r, i, &crc))
		fail_msg("digest of %s: %s", name, dvar_error_last()->message);
	return crc;
}

/* 1 when some chunk of the variable is lz4: the compressed runs are real. */
static int has_lz4(const dvar_reader *r, const char *name)
{
	size_t i;
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	const dvar_var_entry *v = dvar_reader_entry(r, i);
	for (size_t j = 0; j < v->num_slices; j++)
		for (size_t c = 0; c < v->slices[j].num_chunks; c++)
			if (v->slices[j].chunks[c].codec == DVAR_CODEC_LZ4)
				return 1;
	return 0;
}

/*
 * Every dtype as a [ROWS, 3, 43] variable saved whole (nslices 0) or as
 * nslices div shards along axis 0, compressed or not: the digest is the CRC
 * of the value's bytes and a fresh reader reads nothing to compute it.
 */
static void rows_case(const char *dir, int nslices, dvar_compress compress)
{
	static const int64_t dims[3] = { ROWS, 3, 43 };
	dvar_shape s = shape_of(3, dims);
	unsigned char *values[NUM_DTYPES];
	int64_t offsets[9] = { 0 }, n = 0;
	char path[64], name[32];

	if (nslices)
		assert_int_equal(dvar_div_layout(ROWS, nslices, offsets, &n), DVAR_OK);
	snprintf(path, sizeof(path), "rows-%d-%d", nslices, (int)compress);
	char *ckpt = tu_path(dir, path);
	dvar_writer *w = open_writer(ckpt, compress);
	for (size_t t = 0; t < NUM_DTYPES; t++) {
		values[t] = make_value(dtypes[t], bytes_of(&s, dtypes[t]), 100 + t,
		                       compress == DVAR_COMPRESS_LZ4);
		add_rows(w, dvar_dtype_name(dtypes[t]), dtypes[t], &s, values[t], offsets, (int)n);
	}
	commit(w);

	dvar_reader *r = open_reader(ckpt);
	for (size_t t = 0; t < NUM_DTYPES; t++) {
		snprintf(name, sizeof(name), "%s", dvar_dtype_name(dtypes[t]));
		uint32_t want = dvar_crc32c(values[t], bytes_of(&s, dtypes[t]));
		if (digest_of(r, name) != want)
			fail_msg("%s, %d slices, compress %d: digest differs", name, nslices, (int)compress);
		if (compress == DVAR_COMPRESS_LZ4)
			assert_true(has_lz4(r, name));
		free(values[t]);
	}
	assert_int_equal(dvar_reader_bytes_read(r), 0);
	dvar_reader_free(r);
	tu_rmtree(ckpt);
	free(ckpt);
}

static void test_restore_digest__rows_raw(void **state)
{
	for (int k = 0; k <= 8; k++)
		rows_case(*state, k, DVAR_COMPRESS_NONE);
}

static void test_restore_digest__rows_lz4(void **state)
{
	for (int k = 0; k <= 8; k++)
		rows_case(*state, k, DVAR_COMPRESS_LZ4);
}

/* Empty slices (no rows) among the others contribute nothing; still no read. */
static void test_restore_digest__empty_slices(void **state)
{
	static const int64_t dims[2] = { 5, 300 };
	static const int64_t offsets[] = { 0, 0, 2, 2, 2, 5, 5 };
	dvar_shape s = shape_of(2, dims);
	size_t n = bytes_of(&s, DVAR_FLOAT32);
	unsigned char *v = make_value(DVAR_FLOAT32, n, 7, 0);
	char *ckpt = tu_path(*state, "empty-slices");
	dvar_writer *w = open_writer(ckpt, DVAR_COMPRESS_NONE);
	add_rows(w, "x", DVAR_FLOAT32, &s, v, offsets, 6);
	commit(w);
	dvar_reader *r = open_reader(ckpt);
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_int_equal(info.num_slices, 6);
	assert_int_equal(digest_of(r, "x"), dvar_crc32c(v, n));
	assert_int_equal(dvar_reader_bytes_read(r), 0);
	dvar_reader_free(r);
	free(ckpt);
	free(v);
}

/* Slices that split the columns are not the row-major order: read, same digest. */
static void test_restore_digest__column_slices(void **state)
{
	static const int64_t dims[2] = { 40, 100 };
	dvar_shape s = shape_of(2, dims);
	size_t n = bytes_of(&s, DVAR_INT64);
	unsigned char *v = make_value(DVAR_INT64, n, 9, 0);
	unsigned char *left = malloc(n), *right = malloc(n);
	size_t row = 100 * 8, lw = 30 * 8, rw = row - lw;
	for (size_t i = 0; i < 40; i++) {
		memcpy(left + i * lw, v + i * row, lw);
		memcpy(right + i * rw, v + i * row + lw, rw);
	}
	dvar_slice a, b;
	dvar_slice_full(&a, &s);
	dvar_slice_full(&b, &s);
	a.length[1] = 30;
	b.start[1] = 30;
	b.length[1] = 70;
	char *ckpt = tu_path(*state, "columns");
	dvar_writer *w = open_writer(ckpt, DVAR_COMPRESS_NONE);
	assert_int_equal(dvar_writer_add(w, "x", DVAR_INT64, &s, &b, right), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "x", DVAR_INT64, &s, &a, left), DVAR_OK);
	commit(w);
	dvar_reader *r = open_reader(ckpt);
	assert_int_equal(digest_of(r, "x"), dvar_crc32c(v, n));
	assert_true(dvar_reader_bytes_read(r) >= n);
	dvar_reader_free(r);
	free(ckpt);
	free(v);
	free(left);
	free(right);
}

/* A scalar, and variables of zero elements (the CRC of no bytes is 0). */
static void test_restore_digest__scalar_and_empty(void **state)
{
	static const int64_t zero_rows[2] = { 0, 5 }, zero_cols[2] = { 3, 0 };
	dvar_shape scalar = shape_of(0, NULL), e1 = shape_of(2, zero_rows), e2 = shape_of(2, zero_cols);
	double pi = 3.14159;
	char *ckpt = tu_path(*state, "small");
	dvar_writer *w = open_writer(ckpt, DVAR_COMPRESS_NONE);
	assert_int_equal(dvar_writer_add(w, "pi", DVAR_FLOAT64, &scalar, NULL, &pi), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "no_rows", DVAR_FLOAT32, &e1, NULL, ""), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "no_cols", DVAR_INT8, &e2, NULL, ""), DVAR_OK);
	commit(w);
	dvar_reader *r = open_reader(ckpt);
	assert_int_equal(digest_of(r, "pi"), dvar_crc32c(&pi, sizeof(pi)));
	assert_int_equal(digest_of(r, "no_rows"), 0);
	assert_int_equal(digest_of(r, "no_cols"), 0);
	assert_int_equal(dvar_reader_bytes_read(r), 0);
	/* Out of range, and NULL arguments. */
	uint32_t crc;
	assert_int_equal(dvar_reader_digest(r, 3, &crc), DVAR_EINVAL);
	tu_assert_error_contains("out of range");
	assert_int_equal(dvar_reader_digest(r, 0, NULL), DVAR_EINVAL);
	dvar_reader_free(r);
	free(ckpt);
}

/* One element changed anywhere, in any slice layout: another digest. */
static void test_restore_digest__flipped_element(void **state)
{
	static const int64_t dims[2] = { 64, 50 };
	static const int64_t offsets[] = { 0, 20, 40, 64 };
	dvar_shape s = shape_of(2, dims);
	size_t n = bytes_of(&s, DVAR_FLOAT32);
	unsigned char *v = make_value(DVAR_FLOAT32, n, 11, 1);
	char *a = tu_path(*state, "a"), *b = tu_path(*state, "b");
	dvar_writer *w = open_writer(a, DVAR_COMPRESS_LZ4);
	add_rows(w, "x", DVAR_FLOAT32, &s, v, NULL, 0);
	commit(w);
	float f;
	memcpy(&f, v + 4 * 1234, 4);
	f += 1.0f;
	memcpy(v + 4 * 1234, &f, 4);
	w = open_writer(b, DVAR_COMPRESS_LZ4);
	add_rows(w, "x", DVAR_FLOAT32, &s, v, offsets, 3);
	commit(w);
	dvar_reader *ra = open_reader(a), *rb = open_reader(b);
	uint32_t da = digest_of(ra, "x"), db = digest_of(rb, "x");
	assert_int_not_equal(da, db);
	assert_int_equal(db, dvar_crc32c(v, n));
	dvar_reader_free(ra);
	dvar_reader_free(rb);
	free(a);
	free(b);
	free(v);
}

/* ---------------------------------------------------------------- TensorFlow */

static char *fixture(const char *name, const char *base)
{
	const char *src = getenv("DVAR_SOURCE_DIR");
	char *p = NULL;
	assert_non_null(src);
	assert_true(asprintf(&p, "%s/fixtures/tf/%s/%s", src, name, base) > 0);
	return p;
}

/* TF checkpoints are read: the digest is the CRC of the values. */
static void test_restore_digest__tf_fixtures(void **state)
{
	(void)state;
	static const float emb[6] = { 1, 2, 3, 5, 7, 11 };
	static const float a = 0.5f, b = 2.0f, c = 3.0f;
	char *p = fixture("embedding", "embedding.ckpt");
	dvar_reader *r = open_reader(p);
	assert_int_equal(digest_of(r, "my_embedding"), dvar_crc32c(emb, sizeof(emb)));
	assert_int_equal(dvar_reader_bytes_read(r), sizeof(emb));
	dvar_reader_free(r);
	free(p);

	p = fixture("half_plus_two", "variables");
	r = open_reader(p);
	assert_int_equal(digest_of(r, "a"), dvar_crc32c(&a, 4));
	assert_int_equal(digest_of(r, "b"), dvar_crc32c(&b, 4));
	assert_int_equal(digest_of(r, "c"), dvar_crc32c(&c, 4));
	dvar_reader_free(r);
	free(p);

	/* The object graph is a string tensor: refused, naming it. */
	p = fixture("vars_and_arithmetic", "variables");
	r = open_reader(p);
	size_t i;
	uint32_t crc;
	assert_int_equal(dvar_reader_find(r, "_CHECKPOINTABLE_OBJECT_GRAPH", &i), DVAR_OK);
	assert_int_equal(dvar_reader_digest(r, i, &crc), DVAR_ENOTSUPP);
	tu_assert_error_contains("'_CHECKPOINTABLE_OBJECT_GRAPH'");
	assert_int_equal(digest_of(r, "x/.ATTRIBUTES/VARIABLE_VALUE"), dvar_crc32c(&emb[0], 4));
	dvar_reader_free(r);
	free(p);
}

/* A TF partitioned tensor, in row slices and in column slices: the same digest. */
static void test_restore_digest__tf_partitioned(void **state)
{
	static const int64_t dims[2] = { 10, 6 };
	dvar_shape s = shape_of(2, dims);
	size_t n = bytes_of(&s, DVAR_INT32);
	unsigned char *v = make_value(DVAR_INT32, n, 13, 0), *part = malloc(n);
	char *prefix = tu_path(*state, "tf/model.ckpt");
	dvar_tf_writer *w;
	assert_int_equal(dvar_tf_writer_open(&w, prefix, NULL), DVAR_OK);
	/* "rows": two row blocks; "cols": two column blocks. */
	for (int k = 0; k < 2; k++) {
		dvar_slice sl;
		dvar_slice_full(&sl, &s);
		sl.start[0] = k ? 4 : 0;
		sl.length[0] = k ? 6 : 4;
		assert_int_equal(dvar_tf_writer_add(w, "rows", DVAR_INT32, &s, &sl,
		                                    v + (size_t)sl.start[0] * 24), DVAR_OK);
		dvar_slice_full(&sl, &s);
		sl.start[1] = k ? 2 : 0;
		sl.length[1] = k ? 4 : 2;
		for (int64_t row = 0; row < 10; row++)
			memcpy(part + (size_t)(row * sl.length[1]) * 4,
			       v + (size_t)(row * 6 + sl.start[1]) * 4, (size_t)sl.length[1] * 4);
		assert_int_equal(dvar_tf_writer_add(w, "cols", DVAR_INT32, &s, &sl, part), DVAR_OK);
	}
	assert_int_equal(dvar_tf_writer_commit(w), DVAR_OK);
	dvar_tf_writer_free(w);
	dvar_reader *r = open_reader(prefix);
	assert_int_equal(digest_of(r, "rows"), dvar_crc32c(v, n));
	assert_int_equal(digest_of(r, "cols"), dvar_crc32c(v, n));
	dvar_reader_free(r);
	free(prefix);
	free(part);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_restore_digest__rows_raw, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__rows_lz4, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__empty_slices, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__column_slices, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__scalar_and_empty, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__flipped_element, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__tf_fixtures, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_digest__tf_partitioned, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("restore/digest", tests, NULL, NULL);
}
