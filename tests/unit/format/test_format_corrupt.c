/*
 * tests/unit/format/test_format_corrupt.c - damaged checkpoints give clear
 * errors that name the place, never wrong numbers: a flipped byte in a data
 * file (raw and lz4 chunks), a truncated or missing data file, a garbage,
 * truncated or too-new index.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define ROWS 64
#define COLS 1024 /* 256 KiB of float32: 8 chunks of 32 KiB */

typedef struct {
	char *dir, *ck, *data, *index;
	float *values;
} fixture;

static int make(void **state, dvar_compress compress)
{
	fixture *f = calloc(1, sizeof(*f));
	f->dir = tu_mkdtemp();
	f->ck = tu_path(f->dir, "ck");
	f->data = tu_path(f->ck, "data-00000-of-00001");
	f->index = tu_path(f->ck, "index");
	f->values = malloc(ROWS * COLS * sizeof(float));
	for (int i = 0; i < ROWS * COLS; i++)
		f->values[i] = (i / COLS) % 2 ? 0.0f : (float)i * 0.5f;
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 32768;
	o.compress = compress;
	o.flags = DVAR_WRITE_NO_FSYNC;
	const int64_t dims[2] = { ROWS, COLS };
	dvar_shape shape;
	dvar_shape_init(&shape, 2, dims);
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, f->ck, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "weights", DVAR_FLOAT32, &shape, NULL, f->values), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	*state = f;
	return 0;
}

static int setup_raw(void **state) { return make(state, DVAR_COMPRESS_NONE); }
static int setup_lz4(void **state) { return make(state, DVAR_COMPRESS_LZ4); }

static int teardown(void **state)
{
	fixture *f = *state;
	tu_rmtree(f->dir);
	free(f->dir); free(f->ck); free(f->data); free(f->index); free(f->values);
	free(f);
	return 0;
}

typedef struct {
	int count;
	char first[1024];
	uint64_t first_chunk, first_offset;
} bad_log;

static void on_bad(void *ud, const dvar_bad_chunk *b)
{
	bad_log *log = ud;
	if (!log->count++) {
		snprintf(log->first, sizeof(log->first), "%s | %s | %s", b->var, b->file, b->message);
		log->first_chunk = b->chunk;
		log->first_offset = b->offset;
	}
}

static int read_all(const char *path, float *out)
{
	dvar_reader *r;
	int rc = dvar_reader_open(&r, path, NULL);
	if (rc)
		return rc;
	rc = dvar_reader_read(r, 0, NULL, out, ROWS * COLS * sizeof(float));
	dvar_reader_free(r);
	return rc;
}

/* expect or alt must appear in the verify report and in the read error. */
static void flipped_byte(fixture *f, const char *expect, const char *alt)
{
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	bad_log log = { 0 };
	uint64_t nbad;
	assert_int_equal(dvar_reader_verify(r, on_bad, &log, &nbad), DVAR_OK);
	assert_int_equal(nbad, 0);
	dvar_reader_free(r);

	struct stat st;
	assert_int_equal(stat(f->data, &st), 0);
	tu_flip_byte(f->data, 2 * 32768 + 100 < st.st_size ? 2 * 32768 + 100 : st.st_size / 2);

	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_verify(r, on_bad, &log, &nbad), DVAR_OK);
	assert_int_equal(nbad, 1);
	assert_int_equal(log.count, 1);
	assert_non_null(strstr(log.first, "weights"));
	assert_non_null(strstr(log.first, "data-00000-of-00001"));
	assert_true(strstr(log.first, expect) || strstr(log.first, alt));
	dvar_reader_free(r);

	float *out = malloc(ROWS * COLS * sizeof(float));
	assert_int_equal(read_all(f->ck, out), DVAR_ECORRUPT);
	tu_assert_error_contains("variable 'weights' slice -:- chunk");
	const char *msg = dvar_error_last()->message;
	assert_true(strstr(msg, expect) || strstr(msg, alt));
	free(out);
}

static void test_format_corrupt__flipped_byte_raw(void **state)
{
	flipped_byte(*state, "checksum mismatch in block", "checksum mismatch in block");
}

static void test_format_corrupt__flipped_byte_lz4(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	dvar_var_info info;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_true(info.stored_bytes < info.raw_bytes);
	dvar_reader_free(r);
	/* A flipped byte in lz4 data either breaks decompression or the checksum. */
	flipped_byte(f, "checksum mismatch: stored", "lz4 data does not decompress");
}

static void test_format_corrupt__truncated_data(void **state)
{
	fixture *f = *state;
	struct stat st;
	assert_int_equal(stat(f->data, &st), 0);
	assert_int_equal(truncate(f->data, st.st_size / 2), 0);
	float *out = malloc(ROWS * COLS * sizeof(float));
	assert_int_equal(read_all(f->ck, out), DVAR_ECORRUPT);
	tu_assert_error_contains("data file is truncated");
	tu_assert_error_contains("data-00000-of-00001");
	dvar_reader *r;
	uint64_t nbad;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &nbad), DVAR_OK);
	assert_true(nbad >= 1);
	dvar_reader_free(r);
	free(out);
}

static void test_format_corrupt__missing_data(void **state)
{
	fixture *f = *state;
	assert_int_equal(unlink(f->data), 0);
	float *out = malloc(ROWS * COLS * sizeof(float));
	assert_int_equal(read_all(f->ck, out), DVAR_ECORRUPT);
	tu_assert_error_contains("data file is missing");
	free(out);
}

/* verify's report of one chunk: its code. */
static void keep_code(void *userdata, const dvar_bad_chunk *bad)
{
	*(int *)userdata = bad->code;
}

/* A data file that is there but cannot be opened (a link to itself):
 * an I/O failure naming it, not damage, for a read and for verify. */
static void test_format_corrupt__unopenable_data(void **state)
{
	fixture *f = *state;
	assert_int_equal(unlink(f->data), 0);
	assert_int_equal(symlink(f->data, f->data), 0);
	float *out = malloc(ROWS * COLS * sizeof(float));
	assert_int_equal(read_all(f->ck, out), DVAR_EIO);
	tu_assert_error_contains("data file cannot be opened");
	tu_assert_error_contains("data-00000-of-00001");
	dvar_reader *r;
	uint64_t nbad = 0;
	int code = 0;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_verify(r, keep_code, &code, &nbad), DVAR_OK);
	assert_true(nbad >= 1);
	assert_int_equal(code, DVAR_EIO);
	dvar_reader_free(r);
	free(out);
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(p, 1, n, fp), n);
	fclose(fp);
}

static void test_format_corrupt__garbage_index(void **state)
{
	fixture *f = *state;
	char junk[300];
	tu_fill_random(junk, sizeof(junk), 3);
	write_file(f->index, junk, sizeof(junk));
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("index");
	tu_assert_error_contains("not a readable table");
	assert_null(r);
}

static void test_format_corrupt__truncated_index(void **state)
{
	fixture *f = *state;
	struct stat st;
	assert_int_equal(stat(f->index, &st), 0);
	assert_int_equal(truncate(f->index, st.st_size - 10), 0);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("checkpoint '");
	tu_assert_error_contains("index");
	/* An empty index file too. */
	assert_int_equal(truncate(f->index, 0), 0);
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_ECORRUPT);
}

static void test_format_corrupt__flipped_index_byte(void **state)
{
	fixture *f = *state;
	tu_flip_byte(f->index, 20);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("index");
}

/* Replace the index with a hand-made one: n entries, keys in sorted order. */
static void write_index(const char *path, size_t n, dvar_bytes *keys, dvar_bytes *vals)
{
	dvar_index_builder *b;
	unlink(path);
	assert_int_equal(dvar_index_builder_open(&b, path), DVAR_OK);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(dvar_index_builder_add(b, keys[i].data, keys[i].len, vals[i].data, vals[i].len), DVAR_OK);
		free(keys[i].data);
		free(vals[i].data);
	}
	assert_int_equal(dvar_index_builder_finish(b, 1), DVAR_OK);
	dvar_index_builder_free(b);
}

/* An index written by a future version that old readers must refuse. */
static void test_format_corrupt__newer_version(void **state)
{
	fixture *f = *state;
	dvar_bytes k[1] = { { 0 } }, v[1] = { { 0 } };
	uint64_t size = 0;
	dvar_header h = { 7, 5, 1, &size, DVAR_BLOCK_SIZE, 0 };
	assert_int_equal(dvar_header_encode(&v[0], &h), DVAR_OK);
	write_index(f->index, 1, k, v);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_EVERSION);
	tu_assert_error_contains("checkpoint format version 7 needs a reader of version 5 or newer; this dvar reads version 4");
}

/* A variable entry that claims a million slices the index does not hold. */
static void test_format_corrupt__slice_count_lie(void **state)
{
	fixture *f = *state;
	dvar_bytes k[2] = { { 0 } }, v[2] = { { 0 } };
	uint64_t size = 0;
	dvar_header h = { 1, 1, 1, &size, DVAR_BLOCK_SIZE, 1 };
	dvar_var_entry var = { 0 };
	var.dtype = DVAR_FLOAT32;
	var.num_slices = 1000000;
	assert_int_equal(dvar_header_encode(&v[0], &h), DVAR_OK);
	assert_int_equal(dvar_key_var(&k[1], "liar"), DVAR_OK);
	assert_int_equal(dvar_var_encode(&v[1], &var, 0), DVAR_OK);
	write_index(f->index, 2, k, v);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("index lists 1000000 slices in its variable entries but holds 0 slice entries");
}

/* A slice entry whose chunk count is absurd must fail before any allocation. */
static void test_format_corrupt__hostile_entry(void **state)
{
	(void)state;
	unsigned char evil[] = { 1, 0, 10, 0, 0x80, 0x20, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01 };
	dvar_slice_entry se;
	assert_int_equal(dvar_slice_entry_decode(&se, evil, sizeof(evil), "test"), DVAR_ECORRUPT);
	tu_assert_error_contains("index entry test");
	/* rank 1 [0,1), file 0, 4 bytes in chunks of 2^40 bytes. */
	unsigned char big[] = { 1, 0, 1, 0, 4, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1 };
	assert_int_equal(dvar_slice_entry_decode(&se, big, sizeof(big), "big"), DVAR_ECORRUPT);
	tu_assert_error_contains("index entry big: chunk size 1099511627776 is out of range");
}

static void test_format_corrupt__not_a_checkpoint(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, f->dir, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains("is neither a checkpoint (no index) nor a checkpoint root (no checkpoint file)");
	char *nowhere = tu_path(f->dir, "nowhere");
	assert_int_equal(dvar_reader_open(&r, nowhere, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains("does not exist");
	free(nowhere);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_corrupt__flipped_byte_raw, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__flipped_byte_lz4, setup_lz4, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__truncated_data, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__missing_data, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__unopenable_data, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__garbage_index, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__truncated_index, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__flipped_index_byte, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__newer_version, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__slice_count_lie, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__hostile_entry, setup_raw, teardown),
		cmocka_unit_test_setup_teardown(test_format_corrupt__not_a_checkpoint, setup_raw, teardown),
	};
	return cmocka_run_group_tests_name("format/corrupt", tests, NULL, NULL);
}
