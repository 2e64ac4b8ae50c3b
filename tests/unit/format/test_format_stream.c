/*
 * tests/unit/format/test_format_stream.c - streamed slices
 * (dvar_writer_begin_slice / dvar_writer_write / dvar_writer_end_slice):
 * for every piece size, the checkpoint's files are byte for byte those of
 * dvar_writer_add of the whole buffer (raw chunks with several threads, lz4
 * chunks with one); the values read back; and the misuses (bytes too many or
 * too few, calls out of order) fail clearly without committing anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

/* What one test checkpoint holds: variables saved whole or in slices. */
typedef struct {
	const char *name;
	int dtype;
	int rank;
	int64_t dims[3];
	int nslices;           /* 0: whole; else row blocks along axis 0 */
	int64_t rows[4];       /* first row of each block; the last runs to the end */
} var_spec;

static const var_spec specs[] = {
	{ "big/float32", DVAR_FLOAT32, 2, { 97, 211 }, 0, { 0 } },         /* ~80 KiB: many chunks */
	{ "sharded/int16", DVAR_INT16, 2, { 13, 1500 }, 3, { 0, 5, 9 } },  /* uneven shards */
	{ "scalar/float64", DVAR_FLOAT64, 0, { 0 }, 0, { 0 } },
	{ "tiny/bool", DVAR_BOOL, 1, { 7 }, 0, { 0 } },
	{ "empty/int64", DVAR_INT64, 2, { 0, 5 }, 0, { 0 } },
	{ "exact/uint8", DVAR_UINT8, 1, { 8192 }, 2, { 0, 4096 } },        /* whole 4 KiB chunks */
	{ "cube/bfloat16", DVAR_BFLOAT16, 3, { 9, 7, 130 }, 2, { 0, 4 } },
};
#define NUM_SPECS (sizeof(specs) / sizeof(specs[0]))

static dvar_shape spec_shape(const var_spec *v)
{
	dvar_shape s;
	assert_int_equal(dvar_shape_init(&s, v->rank, v->dims), DVAR_OK);
	return s;
}

static size_t spec_bytes(const var_spec *v)
{
	dvar_shape s = spec_shape(v);
	uint64_t n;
	assert_int_equal(dvar_shape_num_bytes(&s, v->dtype, &n), DVAR_OK);
	return (size_t)n;
}

/* Slice k of v: rows [rows[k], rows[k+1]) (or the whole variable). */
static dvar_slice spec_slice(const var_spec *v, int k)
{
	dvar_shape s = spec_shape(v);
	dvar_slice sl;
	dvar_slice_full(&sl, &s);
	if (v->nslices) {
		int64_t end = k + 1 < v->nslices ? v->rows[k + 1] : v->dims[0];
		sl.start[0] = v->rows[k];
		sl.length[0] = end - v->rows[k];
	}
	return sl;
}

/* The bytes of slice sl of a variable whose rows are contiguous in full. */
static const unsigned char *slice_bytes(const var_spec *v, const unsigned char *full,
                                        const dvar_slice *sl, size_t *len)
{
	size_t row = v->rank ? spec_bytes(v) / (size_t)(v->dims[0] ? v->dims[0] : 1) : spec_bytes(v);
	if (v->rank && v->dims[0] == 0)
		row = 0;
	*len = v->rank ? row * (size_t)sl->length[0] : spec_bytes(v);
	return full + (v->rank ? row * (size_t)sl->start[0] : 0);
}

static unsigned char **make_data(void)
{
	unsigned char **data = calloc(NUM_SPECS, sizeof(*data));
	for (size_t i = 0; i < NUM_SPECS; i++) {
		size_t n = spec_bytes(&specs[i]);
		data[i] = malloc(n + 1);
		tu_fill_random(data[i], n, 1000 + i);
		if (specs[i].dtype == DVAR_BOOL)
			for (size_t k = 0; k < n; k++)
				data[i][k] &= 1;
		/* Some compressible rows, so that lz4 chunks appear next to raw ones. */
		if (i == 0)
			memset(data[i], 0, n / 2);
	}
	return data;
}

static void free_data(unsigned char **data)
{
	for (size_t i = 0; i < NUM_SPECS; i++)
		free(data[i]);
	free(data);
}

/*
 * Write every spec into path: whole buffers through dvar_writer_add when
 * piece is 0, otherwise streamed in pieces of `piece` bytes (the last
 * shorter). Attributes are set on two variables.
 */
static void write_ckpt(const char *path, unsigned char **data, dvar_compress compress, int threads,
                       size_t piece)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 8192;
	o.compress = compress;
	o.threads = threads;
	o.flags = DVAR_WRITE_NO_FSYNC;
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	for (size_t i = 0; i < NUM_SPECS; i++) {
		const var_spec *v = &specs[i];
		dvar_shape shape = spec_shape(v);
		for (int k = 0; k < (v->nslices ? v->nslices : 1); k++) {
			dvar_slice sl = spec_slice(v, k);
			size_t len;
			const unsigned char *p = slice_bytes(v, data[i], &sl, &len);
			if (!piece) {
				assert_int_equal(dvar_writer_add(w, v->name, v->dtype, &shape,
				                                 v->nslices ? &sl : NULL, p), DVAR_OK);
				continue;
			}
			assert_int_equal(dvar_writer_begin_slice(w, v->name, v->dtype, &shape,
			                                         v->nslices ? &sl : NULL), DVAR_OK);
			for (size_t at = 0; at < len; at += piece) {
				size_t n = len - at < piece ? len - at : piece;
				int rc = dvar_writer_write(w, p + at, n);
				if (rc)
					fail_msg("write: %s", dvar_error_last()->message);
			}
			assert_int_equal(dvar_writer_write(w, NULL, 0), DVAR_OK);
			assert_int_equal(dvar_writer_end_slice(w), DVAR_OK);
		}
	}
	assert_int_equal(dvar_writer_set_attr(w, "sharded/int16", "kind", "sharded"), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "big/float32", "note", "x"), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

/* The two checkpoints' index and data files are the same bytes. */
static void assert_same_files(const char *a, const char *b)
{
	static const char *const names[] = { "index", "data-00000-of-00001" };
	for (size_t k = 0; k < 2; k++) {
		char *pa = tu_path(a, names[k]), *pb = tu_path(b, names[k]);
		size_t la, lb;
		unsigned char *da = tu_slurp(pa, &la), *db = tu_slurp(pb, &lb);
		if (la != lb)
			fail_msg("%s: %zu bytes whole, %zu streamed", names[k], la, lb);
		assert_memory_equal(da, db, la);
		free(da);
		free(db);
		free(pa);
		free(pb);
	}
}

static void check_values(const char *path, unsigned char **data)
{
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), NUM_SPECS);
	for (size_t i = 0; i < NUM_SPECS; i++) {
		size_t vi, n = spec_bytes(&specs[i]);
		assert_int_equal(dvar_reader_find(r, specs[i].name, &vi), DVAR_OK);
		unsigned char *got = malloc(n + 1);
		assert_int_equal(dvar_reader_read(r, vi, NULL, got, n), DVAR_OK);
		assert_memory_equal(got, data[i], n);
		free(got);
	}
	uint64_t bad = 1;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
}

static void same_bytes(const char *dir, dvar_compress compress, int threads)
{
	static const size_t pieces[] = { 1, 3, 7, 4095, 4096, 4097, 8192, 10000, 65536, 1 << 20 };
	unsigned char **data = make_data();
	char *whole = tu_path(dir, "whole");
	write_ckpt(whole, data, compress, threads, 0);
	check_values(whole, data);
	for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
		char name[32];
		snprintf(name, sizeof(name), "piece-%zu", pieces[k]);
		char *streamed = tu_path(dir, name);
		write_ckpt(streamed, data, compress, threads, pieces[k]);
		assert_same_files(whole, streamed);
		check_values(streamed, data);
		tu_rmtree(streamed);
		free(streamed);
	}
	free(whole);
	free_data(data);
}

/* Raw chunks get their offsets in chunk order: any thread count gives the same bytes. */
static void test_format_stream__raw_same_bytes_any_threads(void **state)
{
	same_bytes(*state, DVAR_COMPRESS_NONE, 3);
}

static void test_format_stream__lz4_same_bytes_one_thread(void **state)
{
	same_bytes(*state, DVAR_COMPRESS_LZ4, 1);
}

static void test_format_stream__lz4_values_many_threads(void **state)
{
	/* lz4 chunks land in the order they finish: only the values are fixed. */
	unsigned char **data = make_data();
	char *path = tu_path(*state, "ck");
	write_ckpt(path, data, DVAR_COMPRESS_LZ4, 4, 777);
	check_values(path, data);
	free(path);
	free_data(data);
}

static dvar_writer *open_writer(const char *dir, const char *name)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 4096;
	o.threads = 2;
	o.flags = DVAR_WRITE_NO_FSYNC;
	char *path = tu_path(dir, name);
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	free(path);
	return w;
}

static void assert_nothing_committed(const char *dir, const char *name)
{
	char *path = tu_path(dir, name);
	struct stat st;
	assert_int_not_equal(stat(path, &st), 0);
	free(path);
}

static void test_format_stream__too_many_bytes(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	dvar_shape shape;
	dvar_shape_init(&shape, 1, (int64_t[]){ 3000 });
	unsigned char buf[12001] = { 0 };
	assert_int_equal(dvar_writer_begin_slice(w, "x", DVAR_FLOAT32, &shape, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_write(w, buf, 5000), DVAR_OK);
	assert_int_equal(dvar_writer_write(w, buf, 7001), DVAR_EINVAL);
	tu_assert_error_contains("variable 'x': the whole variable holds 12000 bytes; 5000 were written "
	                         "and 7001 more were given");
	/* The slice is abandoned and the writer with it. */
	assert_int_equal(dvar_writer_write(w, buf, 1), DVAR_EINVAL);
	tu_assert_error_contains("no slice is open");
	assert_int_not_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	assert_nothing_committed(dir, "ck");
}

static void test_format_stream__too_few_bytes(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	dvar_shape shape;
	dvar_shape_init(&shape, 2, (int64_t[]){ 10, 3 });
	dvar_slice sl;
	dvar_slice_full(&sl, &shape);
	sl.start[0] = 4;
	sl.length[0] = 6;
	unsigned char buf[200] = { 0 };
	assert_int_equal(dvar_writer_begin_slice(w, "y", DVAR_INT64, &shape, &sl), DVAR_OK);
	assert_int_equal(dvar_writer_write(w, buf, 100), DVAR_OK);
	assert_int_equal(dvar_writer_end_slice(w), DVAR_EINVAL);
	tu_assert_error_contains("variable 'y': slice 4,6:- holds 144 bytes; only 100 were written");
	assert_int_not_equal(dvar_writer_commit(w), DVAR_OK);
	tu_assert_error_contains("not committed: an earlier write failed");
	dvar_writer_free(w);
	assert_nothing_committed(dir, "ck");
}

static void test_format_stream__calls_out_of_order(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	dvar_shape shape;
	dvar_shape_init(&shape, 1, (int64_t[]){ 4 });
	float v[4] = { 1, 2, 3, 4 };
	void *entries;
	size_t len;

	assert_int_equal(dvar_writer_write(w, v, 4), DVAR_EINVAL);
	tu_assert_error_contains("no slice is open");
	assert_int_equal(dvar_writer_end_slice(w), DVAR_EINVAL);
	tu_assert_error_contains("no slice is open");
	assert_int_equal(dvar_writer_begin_slice(w, "a", DVAR_FLOAT32, &shape, NULL), DVAR_OK);
	/* Only write and end while a slice is open. */
	assert_int_equal(dvar_writer_add(w, "b", DVAR_FLOAT32, &shape, NULL, v), DVAR_EINVAL);
	tu_assert_error_contains("a slice of variable 'a' is being written");
	assert_int_equal(dvar_writer_begin_slice(w, "b", DVAR_FLOAT32, &shape, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_writer_set_attr(w, "a", "k", "v"), DVAR_EINVAL);
	assert_int_equal(dvar_writer_commit(w), DVAR_EINVAL);
	tu_assert_error_contains("dvar_writer_end_slice must come first");
	assert_int_equal(dvar_writer_finish_part(w, &entries, &len), DVAR_EINVAL);
	/* None of that broke the open slice. */
	assert_int_equal(dvar_writer_write(w, v, 6), DVAR_OK);
	assert_int_equal(dvar_writer_write(w, (char *)v + 6, 10), DVAR_OK);
	assert_int_equal(dvar_writer_end_slice(w), DVAR_OK);
	/* The usual checks at begin: overlaps, dtype and shape, names. */
	dvar_slice half;
	dvar_slice_full(&half, &shape);
	half.length[0] = 2;
	assert_int_equal(dvar_writer_begin_slice(w, "a", DVAR_FLOAT32, &shape, &half), DVAR_ESHAPE);
	tu_assert_error_contains("overlaps");
	assert_int_equal(dvar_writer_begin_slice(w, "a", DVAR_INT32, &shape, NULL), DVAR_ESHAPE);
	assert_int_equal(dvar_writer_begin_slice(w, "", DVAR_INT32, &shape, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_writer_begin_slice(w, "c", 99, &shape, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_writer_begin_slice(w, "c", DVAR_INT32, NULL, NULL), DVAR_EINVAL);
	/* A failed begin leaves the writer usable. */
	assert_int_equal(dvar_writer_set_attr(w, "a", "kind", "plain"), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	char *path = tu_path(dir, "ck");
	dvar_reader *r;
	float got[4];
	const char *kind;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), 1);
	assert_int_equal(dvar_reader_read(r, 0, NULL, got, sizeof(got)), DVAR_OK);
	assert_memory_equal(got, v, sizeof(v));
	assert_int_equal(dvar_reader_var_attr(r, 0, "kind", &kind), DVAR_OK);
	assert_string_equal(kind, "plain");
	dvar_reader_free(r);
	free(path);
}

/* A writer freed with a slice open commits nothing and leaks nothing (ASan). */
static void test_format_stream__free_while_open(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	dvar_shape shape;
	dvar_shape_init(&shape, 1, (int64_t[]){ 100000 });
	unsigned char *buf = calloc(1, 300000);
	assert_int_equal(dvar_writer_begin_slice(w, "z", DVAR_UINT8, &shape, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_write(w, buf, 50000), DVAR_OK);
	dvar_writer_free(w);
	free(buf);
	assert_nothing_committed(dir, "ck");
}

/* Slices of one variable may mix dvar_writer_add and streaming; each chunk once. */
static void test_format_stream__mixed_with_add(void **state)
{
	const char *dir = *state;
	dvar_writer *w = open_writer(dir, "ck");
	dvar_shape shape;
	dvar_shape_init(&shape, 2, (int64_t[]){ 300, 17 });
	size_t n = 300 * 17;
	int32_t *v = malloc(n * sizeof(int32_t));
	for (size_t i = 0; i < n; i++)
		v[i] = (int32_t)(i * 2654435761u);
	dvar_slice top, bottom;
	dvar_slice_full(&top, &shape);
	dvar_slice_full(&bottom, &shape);
	top.length[0] = 100;
	bottom.start[0] = 100;
	bottom.length[0] = 200;
	assert_int_equal(dvar_writer_add(w, "m", DVAR_INT32, &shape, &top, v), DVAR_OK);
	assert_int_equal(dvar_writer_begin_slice(w, "m", DVAR_INT32, &shape, &bottom), DVAR_OK);
	for (size_t at = 100 * 17 * 4; at < n * 4; at += 1000) {
		size_t len = n * 4 - at < 1000 ? n * 4 - at : 1000;
		assert_int_equal(dvar_writer_write(w, (char *)v + at, len), DVAR_OK);
	}
	assert_int_equal(dvar_writer_end_slice(w), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	char *path = tu_path(dir, "ck");
	dvar_reader *r;
	dvar_var_info info;
	int32_t *got = malloc(n * sizeof(int32_t));
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_int_equal(info.num_slices, 2);
	assert_int_equal(info.raw_bytes, n * 4);
	assert_int_equal(dvar_reader_read(r, 0, NULL, got, n * 4), DVAR_OK);
	assert_memory_equal(got, v, n * 4);
	dvar_reader_free(r);
	free(got);
	free(v);
	free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_stream__raw_same_bytes_any_threads, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__lz4_same_bytes_one_thread, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__lz4_values_many_threads, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__too_many_bytes, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__too_few_bytes, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__calls_out_of_order, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__free_while_open, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_stream__mixed_with_add, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/stream", tests, NULL, NULL);
}
