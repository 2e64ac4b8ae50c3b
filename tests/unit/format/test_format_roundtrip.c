/*
 * tests/unit/format/test_format_roundtrip.c - what is written reads back
 * bit for bit: every dtype, ranks 0..8 (zero-size dimensions included),
 * multi-chunk tensors, raw and lz4 chunks, variables saved as several slices,
 * and random hyperrectangles read back compared element by element with a
 * reference copy.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

static const int all_dtypes[] = { DVAR_BOOL, DVAR_INT8, DVAR_INT16, DVAR_INT32, DVAR_INT64,
                                  DVAR_UINT8, DVAR_UINT16, DVAR_UINT32, DVAR_UINT64, DVAR_FLOAT16,
                                  DVAR_BFLOAT16, DVAR_FLOAT32, DVAR_FLOAT64 };
#define NUM_DTYPES (sizeof(all_dtypes) / sizeof(all_dtypes[0]))

static dvar_write_options opts_for(dvar_compress c, uint64_t chunk)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.compress = c;
	o.chunk_size = chunk;
	o.threads = 2;
	o.flags = DVAR_WRITE_NO_FSYNC;
	return o;
}

/* Data that lz4 compresses well but not trivially: runs of zeros between random words. */
static void fill_row_sparse(unsigned char *p, size_t n, uint64_t seed)
{
	tu_fill_random(p, n, seed);
	for (size_t i = 0; i < n; i += 512)
		if ((i / 512) % 2)
			memset(p + i, 0, n - i < 512 ? n - i : 512);
}

/* The reference copy of a hyperrectangle, one element at a time. */
static void naive_extract(const unsigned char *full, const dvar_shape *shape, const dvar_slice *s,
                          size_t esize, unsigned char *out)
{
	uint64_t n = 1;
	for (int d = 0; d < s->rank; d++)
		n *= (uint64_t)s->length[d];
	for (uint64_t e = 0; e < n; e++) {
		uint64_t rem = e, flat = 0;
		int64_t idx[DVAR_MAX_RANK];
		for (int d = s->rank - 1; d >= 0; d--) {
			idx[d] = s->start[d] + (int64_t)(rem % (uint64_t)s->length[d]);
			rem /= (uint64_t)s->length[d];
		}
		for (int d = 0; d < s->rank; d++)
			flat = flat * (uint64_t)shape->dims[d] + (uint64_t)idx[d];
		memcpy(out + e * esize, full + flat * esize, esize);
	}
}

static void random_slice(uint64_t *rng, const dvar_shape *shape, dvar_slice *s)
{
	s->rank = shape->rank;
	for (int d = 0; d < shape->rank; d++) {
		int64_t dim = shape->dims[d];
		s->start[d] = dim ? (int64_t)(tu_rand(rng) % (uint64_t)(dim + 1)) : 0;
		int64_t left = dim - s->start[d];
		s->length[d] = left ? (int64_t)(tu_rand(rng) % (uint64_t)(left + 1)) : 0;
	}
}

static void check_read(dvar_reader *r, size_t vi, const unsigned char *full, const dvar_shape *shape,
                       int dtype, const dvar_slice *s)
{
	size_t esize = dvar_dtype_size(dtype);
	uint64_t n;
	assert_int_equal(dvar_slice_num_elements(s, &n), DVAR_OK);
	unsigned char *got = malloc(n * esize + 1), *want = malloc(n * esize + 1);
	naive_extract(full, shape, s, esize, want);
	memset(got, 0xAB, n * esize);
	int rc = dvar_reader_read(r, vi, s, got, n * esize);
	if (rc)
		fail_msg("read failed: %s", dvar_error_last()->message);
	assert_memory_equal(got, want, n * esize);
	free(got);
	free(want);
}

static void test_format_roundtrip__every_dtype_and_rank(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "ck");
	dvar_write_options o = opts_for(DVAR_COMPRESS_AUTO, 4096);
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	/* Shapes of rank 0..8, some with a zero-size dimension. */
	static const int64_t dims[9][8] = {
		{ 0 }, { 1000 }, { 33, 17 }, { 4, 0, 3 }, { 3, 5, 7, 2 }, { 2, 3, 2, 3, 5 },
		{ 2, 2, 3, 1, 2, 3 }, { 1, 2, 1, 3, 2, 1, 2 }, { 2, 1, 2, 2, 1, 3, 2, 2 }
	};
	unsigned char *data[NUM_DTYPES][9];
	dvar_shape shapes[9];
	char name[64];
	for (int rank = 0; rank <= 8; rank++)
		assert_int_equal(dvar_shape_init(&shapes[rank], rank, dims[rank]), DVAR_OK);
	for (size_t t = 0; t < NUM_DTYPES; t++) {
		for (int rank = 0; rank <= 8; rank++) {
			uint64_t bytes;
			assert_int_equal(dvar_shape_num_bytes(&shapes[rank], all_dtypes[t], &bytes), DVAR_OK);
			data[t][rank] = malloc(bytes + 1);
			tu_fill_random(data[t][rank], bytes, t * 100 + (uint64_t)rank);
			snprintf(name, sizeof(name), "%s/rank%d", dvar_dtype_name(all_dtypes[t]), rank);
			assert_int_equal(dvar_writer_add(w, name, all_dtypes[t], &shapes[rank], NULL, data[t][rank]), DVAR_OK);
		}
	}
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), NUM_DTYPES * 9);
	uint64_t rng = 7;
	for (size_t t = 0; t < NUM_DTYPES; t++) {
		for (int rank = 0; rank <= 8; rank++) {
			size_t vi;
			dvar_var_info info;
			snprintf(name, sizeof(name), "%s/rank%d", dvar_dtype_name(all_dtypes[t]), rank);
			assert_int_equal(dvar_reader_find(r, name, &vi), DVAR_OK);
			assert_int_equal(dvar_reader_var(r, vi, &info), DVAR_OK);
			assert_string_equal(info.name, name);
			assert_int_equal(info.dtype, all_dtypes[t]);
			assert_true(dvar_shape_equal(&info.shape, &shapes[rank]));
			assert_int_equal(info.num_slices, 1);
			dvar_slice s;
			dvar_slice_full(&s, &shapes[rank]);
			check_read(r, vi, data[t][rank], &shapes[rank], all_dtypes[t], &s);
			for (int k = 0; k < 5; k++) {
				random_slice(&rng, &shapes[rank], &s);
				check_read(r, vi, data[t][rank], &shapes[rank], all_dtypes[t], &s);
			}
			free(data[t][rank]);
		}
	}
	uint64_t bad = 99;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	free(path);
}

/* A large variable saved in uneven row slices, with raw or lz4 chunks. */
static void sliced_roundtrip(const char *dir, dvar_compress compress, int sparse)
{
	char *path = tu_path(dir, "sliced");
	const int64_t dims[3] = { 97, 13, 24 };
	dvar_shape shape;
	dvar_shape_init(&shape, 3, dims);
	size_t esize = 4, bytes = 97 * 13 * 24 * esize;
	unsigned char *full = malloc(bytes);
	if (sparse)
		fill_row_sparse(full, bytes, 42);
	else
		tu_fill_random(full, bytes, 42);

	dvar_write_options o = opts_for(compress, 8192);
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	/* Row blocks [0,30) [30,31) [31,97), the last split by columns too. */
	dvar_slice parts[4];
	memset(parts, 0, sizeof(parts));
	const int64_t spec[4][6] = { { 0, 30, 0, 13, 0, 24 }, { 30, 1, 0, 13, 0, 24 },
	                             { 31, 66, 0, 5, 0, 24 }, { 31, 66, 5, 8, 0, 24 } };
	for (int p = 0; p < 4; p++) {
		parts[p].rank = 3;
		for (int d = 0; d < 3; d++) {
			parts[p].start[d] = spec[p][2 * d];
			parts[p].length[d] = spec[p][2 * d + 1];
		}
		uint64_t n;
		dvar_slice_num_elements(&parts[p], &n);
		unsigned char *buf = malloc(n * esize);
		naive_extract(full, &shape, &parts[p], esize, buf);
		assert_int_equal(dvar_writer_add(w, "table", DVAR_FLOAT32, &shape, &parts[p], buf), DVAR_OK);
		free(buf);
	}
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	dvar_reader *r;
	dvar_var_info info;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_int_equal(info.num_slices, 4);
	assert_int_equal(info.raw_bytes, bytes);
	/* AUTO's choice depends on how fast lz4 runs here: only LZ4 is certain to compress. */
	if (compress == DVAR_COMPRESS_LZ4)
		assert_true(info.stored_bytes < bytes * 3 / 4);
	else if (compress == DVAR_COMPRESS_NONE)
		assert_int_equal(info.stored_bytes, bytes);
	else
		assert_true(info.stored_bytes <= bytes);
	for (int p = 0; p < 4; p++) {
		dvar_slice got;
		assert_int_equal(dvar_reader_var_slice(r, 0, (size_t)p, &got), DVAR_OK);
		assert_memory_equal(&got, &parts[p], sizeof(got));
	}
	dvar_slice s;
	dvar_slice_full(&s, &shape);
	check_read(r, 0, full, &shape, DVAR_FLOAT32, &s);
	uint64_t rng = 99;
	for (int k = 0; k < 200; k++) {
		random_slice(&rng, &shape, &s);
		check_read(r, 0, full, &shape, DVAR_FLOAT32, &s);
	}
	dvar_reader_free(r);
	free(full);
	tu_rmtree(path);
	free(path);
}

static void test_format_roundtrip__sliced_raw(void **state)
{
	sliced_roundtrip(*state, DVAR_COMPRESS_NONE, 0);
}

static void test_format_roundtrip__sliced_lz4(void **state)
{
	sliced_roundtrip(*state, DVAR_COMPRESS_LZ4, 1);
}

static void test_format_roundtrip__sliced_auto_sparse(void **state)
{
	sliced_roundtrip(*state, DVAR_COMPRESS_AUTO, 1);
}

/* A partial read of a raw variable reads the blocks it needs, not the chunks. */
static void test_format_roundtrip__partial_read_bytes(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "partial");
	const int64_t dims[2] = { 4096, 256 }; /* 4 MiB of float32, one chunk */
	dvar_shape shape;
	dvar_shape_init(&shape, 2, dims);
	size_t bytes = 4096 * 256 * 4;
	unsigned char *full = malloc(bytes);
	tu_fill_random(full, bytes, 5);
	dvar_write_options o = opts_for(DVAR_COMPRESS_NONE, 0);
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "v", DVAR_FLOAT32, &shape, NULL, full), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	dvar_slice s;
	assert_int_equal(dvar_slice_parse(&s, "1000,512:-", &shape), DVAR_OK);
	check_read(r, 0, full, &shape, DVAR_FLOAT32, &s);
	/* 512 KiB needed; at most one extra block on each side. */
	assert_true(dvar_reader_bytes_read(r) <= 512 * 1024 + 2 * DVAR_BLOCK_SIZE);
	dvar_reader_free(r);
	free(full);
	free(path);
}

/* A default writer keeps DVAR_IO_DEPTH writes in flight beside a thread
 * per CPU, however few the CPUs: a tensor of 8 chunks starts that many
 * threads (at most 8), the caller's included, and reads back equal. */
static void test_format_roundtrip__writer_threads(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "threads");
	int pool = dvar_pool_io_threads(0);
	const int64_t dims[2] = { 8 * 16, 1024 }; /* 8 chunks of 64 KiB */
	dvar_shape shape;
	dvar_shape_init(&shape, 2, dims);
	size_t bytes = 8 * 16 * 1024 * 4;
	unsigned char *full = malloc(bytes);
	tu_fill_random(full, bytes, 9);
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.compress = DVAR_COMPRESS_NONE;
	o.chunk_size = 64 << 10;
	o.flags = DVAR_WRITE_NO_FSYNC;
	int before = tu_threads_settled();
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "v", DVAR_FLOAT32, &shape, NULL, full), DVAR_OK);
	assert_true(tu_threads_reach(before + (pool < 8 ? pool : 8) - 1));
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	dvar_slice all;
	dvar_slice_full(&all, &shape);
	check_read(r, 0, full, &shape, DVAR_FLOAT32, &all);
	dvar_reader_free(r);
	free(full);
	free(path);
}

static void test_format_roundtrip__bad_arguments(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "args");
	dvar_writer *w;
	dvar_write_options o = opts_for(DVAR_COMPRESS_AUTO, 1000);
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_EINVAL);
	tu_assert_error_contains("chunk size 1000 must be a multiple of 4096");
	assert_false(dvar_fs_exists(path));
	o = opts_for(DVAR_COMPRESS_AUTO, 0);
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	const int64_t d2[2] = { 4, 3 };
	const int64_t huge[3] = { INT64_C(1) << 32, INT64_C(1) << 32, 16 };
	dvar_shape shape, big;
	dvar_shape_init(&shape, 2, d2);
	dvar_shape_init(&big, 3, huge);
	float buf[12] = { 0 };
	assert_int_equal(dvar_writer_add(w, "", DVAR_FLOAT32, &shape, NULL, buf), DVAR_EINVAL);
	tu_assert_error_contains("variable name must be 1 to 1024 bytes");
	assert_int_equal(dvar_writer_add(w, "x", 77, &shape, NULL, buf), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype 77");
	assert_int_equal(dvar_writer_add(w, "huge", DVAR_FLOAT32, &big, NULL, buf), DVAR_EINVAL);
	tu_assert_error_contains("variable 'huge'");
	dvar_slice s;
	s.rank = 2;
	s.start[0] = 3; s.length[0] = 2; s.start[1] = 0; s.length[1] = 3;
	assert_int_equal(dvar_writer_add(w, "x", DVAR_FLOAT32, &shape, &s, buf), DVAR_ESHAPE);
	tu_assert_error_contains("variable 'x'");
	s.start[0] = 0;
	assert_int_equal(dvar_writer_add(w, "x", DVAR_FLOAT32, &shape, &s, buf), DVAR_OK);
	s.start[0] = 1;
	assert_int_equal(dvar_writer_add(w, "x", DVAR_FLOAT32, &shape, &s, buf), DVAR_ESHAPE);
	tu_assert_error_contains("variable 'x': slice 1,2:- overlaps slice 0,2:- added before");
	assert_int_equal(dvar_writer_add(w, "x", DVAR_INT32, &shape, &s, buf), DVAR_ESHAPE);
	tu_assert_error_contains("variable 'x' was added as float32 [4,3], now as int32 [4,3]");
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	/* Only rows 0..1 were saved: reading rows 1..3 must fail, not return garbage. */
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_slice_parse(&s, "1,3:-", &shape), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, 0, &s, buf, 9 * 4), DVAR_ESHAPE);
	tu_assert_error_contains("variable 'x': slice 1,3:- is not covered by the 1 saved slices: 6 of 9 elements are missing");
	assert_int_equal(dvar_slice_parse(&s, "0,2:-", &shape), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, 0, &s, buf, 5), DVAR_EINVAL);
	tu_assert_error_contains("the destination holds 5 bytes, the slice needs 24");
	size_t vi;
	assert_int_equal(dvar_reader_find(r, "nope", &vi), DVAR_ENOTFOUND);
	tu_assert_error_contains("variable 'nope' not found");
	dvar_reader_free(r);

	assert_int_equal(dvar_writer_open(&w, path, NULL), DVAR_EEXISTS);
	tu_assert_error_contains("already exists");
	free(path);
}

/* A slice of many chunks: its own add fails. */
static int fails_in_its_add(const char *path, const unsigned char *data)
{
	const int64_t dims[1] = { 4 << 20 };
	dvar_shape shape;
	dvar_shape_init(&shape, 1, dims);
	dvar_write_options o = opts_for(DVAR_COMPRESS_NONE, 65536);
	dvar_writer *w;
	int ok = dvar_writer_open(&w, path, &o) == DVAR_OK &&
	         dvar_writer_add(w, "big", DVAR_UINT8, &shape, NULL, data) == DVAR_EIO &&
	         strstr(dvar_error_last()->message, "variable 'big'") &&
	         strstr(dvar_error_last()->message, "File too large") &&
	         dvar_writer_add(w, "more", DVAR_UINT8, &shape, NULL, data) == DVAR_EINVAL &&
	         dvar_writer_commit(w) == DVAR_EIO &&
	         strstr(dvar_error_last()->message, "not committed: an earlier write failed");
	dvar_writer_free(w);
	return ok;
}

/* Slices of one chunk each (written whole, not packed): the write past the
 * limit, the fifth 256 KiB slice's, fails in its own add, naming t4; the
 * writer is unusable after it and the commit says why. */
static int fails_in_one_chunk(const char *path, const unsigned char *data)
{
	const int64_t dims[1] = { 256 << 10 };
	dvar_shape shape;
	dvar_shape_init(&shape, 1, dims);
	dvar_write_options o = opts_for(DVAR_COMPRESS_NONE, 4 << 20);
	dvar_writer *w;
	int rc = DVAR_OK, k;
	if (dvar_writer_open(&w, path, &o) != DVAR_OK)
		return 0;
	for (k = 0; k < 16 && rc == DVAR_OK; k++) {
		char name[8];
		snprintf(name, sizeof(name), "t%d", k);
		rc = dvar_writer_add(w, name, DVAR_UINT8, &shape, NULL, data + ((size_t)k << 10));
	}
	int ok = rc == DVAR_EIO && k == 5 && strstr(dvar_error_last()->message, "variable 't4': ") &&
	         strstr(dvar_error_last()->message, "File too large") &&
	         dvar_writer_add(w, "more", DVAR_UINT8, &shape, NULL, data) == DVAR_EINVAL &&
	         dvar_writer_commit(w) == DVAR_EIO &&
	         strstr(dvar_error_last()->message, "not committed: an earlier write failed");
	if (!ok)
		fprintf(stderr, "after %d adds: %s\n", k, dvar_error_last()->message);
	dvar_writer_free(w);
	return ok;
}

/* The same slices in one dvar_writer_add_many: every write past the limit
 * fails; the first slice in request order among them, t4, is named. */
static int fails_in_add_many(const char *path, const unsigned char *data)
{
	const int64_t dims[1] = { 256 << 10 };
	dvar_shape shape;
	dvar_shape_init(&shape, 1, dims);
	dvar_write_options o = opts_for(DVAR_COMPRESS_NONE, 4 << 20);
	dvar_write_request req[16];
	char names[16][8];
	dvar_writer *w;
	if (dvar_writer_open(&w, path, &o) != DVAR_OK)
		return 0;
	for (int k = 0; k < 16; k++) {
		snprintf(names[k], sizeof(names[k]), "t%d", k);
		req[k] = (dvar_write_request){ names[k], DVAR_UINT8, &shape, NULL,
			                       data + ((size_t)k << 10) };
	}
	int ok = dvar_writer_add_many(w, req, 16) == DVAR_EIO &&
	         strstr(dvar_error_last()->message, "variable 't4': ") &&
	         strstr(dvar_error_last()->message, "File too large") &&
	         dvar_writer_add_many(w, req, 1) == DVAR_EINVAL &&
	         dvar_writer_commit(w) == DVAR_EIO &&
	         strstr(dvar_error_last()->message, "not committed: an earlier write failed");
	if (!ok)
		fprintf(stderr, "add_many: %s\n", dvar_error_last()->message);
	dvar_writer_free(w);
	return ok;
}

/* The save a full disk interrupts (here: a file-size limit, EFBIG) commits
 * nothing and leaves nothing behind. In a child, which the limit binds. */
static void write_error_commits_nothing(const char *dir, int (*scenario)(const char *path,
                                                                         const unsigned char *data))
{
	char *path = tu_path(dir, "full");
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit lim = { 1 << 20, 1 << 20 };
		signal(SIGXFSZ, SIG_IGN);
		setrlimit(RLIMIT_FSIZE, &lim);
		unsigned char *data = malloc(4u << 20);
		tu_fill_random(data, 4u << 20, 1);
		int ok = scenario(path, data);
		if (!ok)
			fprintf(stderr, "unexpected: %s\n", dvar_error_last()->message);
		_exit(ok ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_false(dvar_fs_exists(path));
	/* Not even the hidden temporary directory is left. */
	tu_assert_listing(dir, "");
	free(path);
}

static void test_format_roundtrip__write_error_commits_nothing(void **state)
{
	write_error_commits_nothing(*state, fails_in_its_add);
}

static void test_format_roundtrip__one_chunk_write_error_commits_nothing(void **state)
{
	write_error_commits_nothing(*state, fails_in_one_chunk);
}

static void test_format_roundtrip__add_many_write_error_commits_nothing(void **state)
{
	write_error_commits_nothing(*state, fails_in_add_many);
}

/* A Ctrl-C's handler, as dvar_writer_set_cancel sees it: set at the first
 * progress report, after the first chunk the calling thread wrote. */
static volatile sig_atomic_t cancel_flag;

static void cancel_at_first_report(void *ud, uint64_t done, uint64_t total)
{
	(void)ud, (void)done, (void)total;
	cancel_flag = 1;
}

/* A cancel stops dvar_writer_add_many of 256 chunks within the call (it
 * returns DVAR_ECANCELED, not DVAR_OK), the writer refuses more, the commit
 * says why, and nothing is left; the same for a streamed slice, and for a
 * flag already up before the first add. */
static void test_format_roundtrip__cancel(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "cancelled");
	const int64_t dims[1] = { 4 << 20 };
	unsigned char *data = malloc(4u << 20);
	dvar_write_options o = opts_for(DVAR_COMPRESS_NONE, 64 << 10);
	dvar_write_request req[4];
	dvar_shape shape;
	dvar_writer *w;

	assert_non_null(data);
	tu_fill_random(data, 4u << 20, 5);
	dvar_shape_init(&shape, 1, dims);
	for (int k = 0; k < 4; k++)
		req[k] = (dvar_write_request){ k == 0 ? "a" : k == 1 ? "b" : k == 2 ? "c" : "d",
			                       DVAR_UINT8, &shape, NULL, data };
	o.progress = cancel_at_first_report;
	assert_int_equal(dvar_writer_set_cancel(NULL, &cancel_flag), DVAR_EINVAL);

	/* In the middle of one call. */
	cancel_flag = 0;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_set_cancel(w, &cancel_flag), DVAR_OK);
	assert_int_equal(dvar_writer_add_many(w, req, 4), DVAR_ECANCELED);
	assert_non_null(strstr(dvar_error_last()->message, "cancelled"));
	assert_non_null(strstr(dvar_error_last()->message, path));
	assert_int_equal(dvar_writer_add(w, "e", DVAR_UINT8, &shape, NULL, data), DVAR_EINVAL);
	assert_int_equal(dvar_writer_commit(w), DVAR_ECANCELED);
	assert_non_null(strstr(dvar_error_last()->message, "not committed: cancelled"));
	dvar_writer_free(w);
	tu_assert_listing(dir, "");

	/* A streamed slice: its next full chunk is not written. */
	cancel_flag = 0;
	o.progress = NULL;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_set_cancel(w, &cancel_flag), DVAR_OK);
	assert_int_equal(dvar_writer_begin_slice(w, "s", DVAR_UINT8, &shape, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_write(w, data, 1u << 20), DVAR_OK);
	cancel_flag = 1;
	assert_int_equal(dvar_writer_write(w, data, 1u << 20), DVAR_ECANCELED);
	assert_int_equal(dvar_writer_commit(w), DVAR_ECANCELED);
	dvar_writer_free(w);
	tu_assert_listing(dir, "");

	/* Up before anything is added; cleared again, the same writer is
	 * still refused (the add broke it), and a new one saves. */
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_set_cancel(w, &cancel_flag), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "a", DVAR_UINT8, &shape, NULL, data), DVAR_ECANCELED);
	cancel_flag = 0;
	assert_int_equal(dvar_writer_commit(w), DVAR_EIO);
	dvar_writer_free(w);
	tu_assert_listing(dir, "");
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_set_cancel(w, &cancel_flag), DVAR_OK);
	assert_int_equal(dvar_writer_add_many(w, req, 4), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	/* And holds the values. */
	unsigned char *got = malloc(4u << 20);
	dvar_reader *r;
	size_t vi;
	assert_non_null(got);
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), 4);
	for (int k = 0; k < 4; k++) {
		memset(got, 0, 4u << 20);
		assert_int_equal(dvar_reader_find(r, req[k].name, &vi), DVAR_OK);
		assert_int_equal(dvar_reader_read(r, vi, NULL, got, 4u << 20), DVAR_OK);
		assert_memory_equal(got, data, 4u << 20);
	}
	dvar_reader_free(r);
	free(got);
	free(data);
	free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_roundtrip__every_dtype_and_rank, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__sliced_raw, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__sliced_lz4, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__sliced_auto_sparse, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__partial_read_bytes, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__writer_threads, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__bad_arguments, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__write_error_commits_nothing, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__one_chunk_write_error_commits_nothing, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__add_many_write_error_commits_nothing, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_roundtrip__cancel, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/roundtrip", tests, NULL, NULL);
}
