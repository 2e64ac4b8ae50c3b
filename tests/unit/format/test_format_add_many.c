/*
 * tests/unit/format/test_format_add_many.c - dvar_writer_add_many saves what
 * the same dvar_writer_add calls save: small packed tensors, one-chunk and
 * many-chunk ones, several dtypes, a variable given as two slices in one call
 * (written one group after the other), with NONE, LZ4 and AUTO; every chunk
 * verifies. With NONE the data file does not depend on the threads. A request
 * that fails its checks is named, the ones before it are added and the
 * writer stays usable. dvar_reader_verify, which checks every chunk of such
 * a checkpoint in one loop, names each damaged one, in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define CHUNK ((uint64_t)1 << 20)
#define N_VARS 12

typedef struct {
	char name[16];
	int dtype;
	dvar_shape shape;
	void *data;
	size_t bytes;
} var;

typedef struct {
	char *dir;
	var v[N_VARS];
	int32_t *halves; /* "halves": [2000, 300] int32, given as two slices */
} fixture;

static const int64_t sizes[N_VARS] = { 3, 1000, 16, 262144, 70000, 5, 1 << 20, 4096, 300000,
	                               17, 65536, 2 };
static const int dtypes[N_VARS] = { DVAR_FLOAT32, DVAR_FLOAT32, DVAR_INT64, DVAR_FLOAT32,
	                            DVAR_FLOAT16, DVAR_INT8, DVAR_FLOAT32, DVAR_FLOAT64,
	                            DVAR_INT32, DVAR_FLOAT32, DVAR_BFLOAT16, DVAR_UINT8 };

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	for (int k = 0; k < N_VARS; k++) {
		var *v = &f->v[k];
		snprintf(v->name, sizeof(v->name), "v%02d", k);
		v->dtype = dtypes[k];
		dvar_shape_init(&v->shape, 1, &sizes[k]);
		v->bytes = (size_t)sizes[k] * dvar_dtype_size(v->dtype);
		v->data = malloc(v->bytes);
		assert_non_null(v->data);
		tu_fill_random(v->data, v->bytes, (unsigned)k + 1);
		/* Half of v03 zero, so that lz4 has something to take. */
		if (k == 3)
			memset(v->data, 0, v->bytes / 2);
	}
	f->halves = malloc(2000 * 300 * sizeof(int32_t));
	assert_non_null(f->halves);
	for (int i = 0; i < 2000 * 300; i++)
		f->halves[i] = i * 7 - 3;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	for (int k = 0; k < N_VARS; k++)
		free(f->v[k].data);
	free(f->halves);
	tu_rmtree(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

/* The requests: every variable, with "halves" as two slices, one in the
 * middle of the list and one at its end. */
static size_t requests(fixture *f, dvar_write_request *q, dvar_shape *hs, dvar_slice *ha,
                       dvar_slice *hb)
{
	size_t n = 0;
	dvar_shape_init(hs, 2, (int64_t[]){ 2000, 300 });
	dvar_slice_full(ha, hs);
	*hb = *ha;
	ha->length[0] = 1234;
	hb->start[0] = 1234;
	hb->length[0] = 2000 - 1234;
	for (int k = 0; k < N_VARS; k++) {
		q[n++] = (dvar_write_request){ f->v[k].name, f->v[k].dtype, &f->v[k].shape, NULL,
			                       f->v[k].data };
		if (k == N_VARS / 2)
			q[n++] = (dvar_write_request){ "halves", DVAR_INT32, hs, ha, f->halves };
	}
	q[n++] = (dvar_write_request){ "halves", DVAR_INT32, hs, hb, f->halves + 1234 * 300 };
	return n;
}

static void save_many(fixture *f, const char *path, dvar_compress mode, int threads)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_write_request q[N_VARS + 2];
	dvar_shape hs;
	dvar_slice ha, hb;
	dvar_writer *w;
	o.chunk_size = CHUNK;
	o.compress = mode;
	o.threads = threads;
	size_t n = requests(f, q, &hs, &ha, &hb);
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add_many(w, q, n), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

static void bad_chunk(void *ud, const dvar_bad_chunk *b)
{
	(void)ud;
	fail_msg("%s: %s", b->var, b->message);
}

/* Every variable of the fixture reads back as its bytes; every chunk verifies. */
static void assert_saved(const fixture *f, const char *path)
{
	dvar_reader *r;
	size_t i;
	uint64_t nbad = 0;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), N_VARS + 1);
	for (int k = 0; k < N_VARS; k++) {
		void *got = malloc(f->v[k].bytes + 1);
		assert_int_equal(dvar_reader_find(r, f->v[k].name, &i), DVAR_OK);
		assert_int_equal(dvar_reader_read(r, i, NULL, got, f->v[k].bytes), DVAR_OK);
		assert_memory_equal(got, f->v[k].data, f->v[k].bytes);
		free(got);
	}
	int32_t *got = malloc(2000 * 300 * sizeof(int32_t));
	assert_int_equal(dvar_reader_find(r, "halves", &i), DVAR_OK);
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
	assert_int_equal(info.num_slices, 2);
	assert_int_equal(dvar_reader_read(r, i, NULL, got, 2000 * 300 * sizeof(int32_t)), DVAR_OK);
	assert_memory_equal(got, f->halves, 2000 * 300 * sizeof(int32_t));
	free(got);
	assert_int_equal(dvar_reader_verify(r, bad_chunk, NULL, &nbad), DVAR_OK);
	assert_int_equal(nbad, 0);
	dvar_reader_free(r);
}

static void every_mode(void **state)
{
	fixture *f = *state;
	static const dvar_compress modes[] = { DVAR_COMPRESS_NONE, DVAR_COMPRESS_LZ4,
		                               DVAR_COMPRESS_AUTO };
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		char name[32];
		snprintf(name, sizeof(name), "mode-%zu", m);
		char *path = tu_path(f->dir, name);
		save_many(f, path, modes[m], 4);
		assert_saved(f, path);
		free(path);
	}
}

/* With NONE, one thread and four lay the data file out alike. */
static void same_file_any_threads(void **state)
{
	fixture *f = *state;
	char *one = tu_path(f->dir, "one"), *four = tu_path(f->dir, "four");
	save_many(f, one, DVAR_COMPRESS_NONE, 1);
	save_many(f, four, DVAR_COMPRESS_NONE, 4);
	char *d1 = tu_path(one, "data-00000-of-00001"), *d4 = tu_path(four, "data-00000-of-00001");
	size_t n1, n4;
	unsigned char *b1 = tu_slurp(d1, &n1), *b4 = tu_slurp(d4, &n4);
	assert_int_equal(n1, n4);
	assert_memory_equal(b1, b4, n1);
	free(b1);
	free(b4);
	free(d1);
	free(d4);
	free(one);
	free(four);
}

/* A request failing its checks: named, those before it added, the writer
 * usable; then NULL arguments. */
static void bad_request(void **state)
{
	fixture *f = *state;
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_shape other;
	dvar_writer *w;
	char *path = tu_path(f->dir, "bad");
	dvar_shape_init(&other, 1, (int64_t[]){ 4 });
	dvar_write_request q[4] = {
		{ "v00", f->v[0].dtype, &f->v[0].shape, NULL, f->v[0].data },
		{ "v06", f->v[6].dtype, &f->v[6].shape, NULL, f->v[6].data },
		{ "v00", f->v[0].dtype, &other, NULL, f->v[0].data }, /* added as [3] just before */
		{ "v01", f->v[1].dtype, &f->v[1].shape, NULL, f->v[1].data },
	};
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add_many(w, q, 4), DVAR_ESHAPE);
	tu_assert_error_contains("variable 'v00' was added as float32 [3]");
	q[0] = (dvar_write_request){ "v07", 99, &f->v[7].shape, NULL, f->v[7].data };
	assert_int_equal(dvar_writer_add_many(w, q, 1), DVAR_EINVAL);
	tu_assert_error_contains("variable 'v07': unknown dtype 99");
	q[0] = (dvar_write_request){ "v08", f->v[8].dtype, NULL, NULL, f->v[8].data };
	assert_int_equal(dvar_writer_add_many(w, q, 1), DVAR_EINVAL);
	tu_assert_error_contains("request 0 has no shape");
	assert_int_equal(dvar_writer_add_many(w, NULL, 1), DVAR_EINVAL);
	assert_int_equal(dvar_writer_add_many(NULL, q, 1), DVAR_EINVAL);
	assert_int_equal(dvar_writer_add_many(w, NULL, 0), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	dvar_reader *r;
	size_t i;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), 2);
	assert_int_equal(dvar_reader_find(r, "v06", &i), DVAR_OK);
	float *got = malloc(f->v[6].bytes);
	assert_int_equal(dvar_reader_read(r, i, NULL, got, f->v[6].bytes), DVAR_OK);
	assert_memory_equal(got, f->v[6].data, f->v[6].bytes);
	assert_int_equal(dvar_reader_find(r, "v01", &i), DVAR_ENOTFOUND);
	free(got);
	dvar_reader_free(r);
	free(path);
}

typedef struct {
	char seen[8][64];
	int n;
} bad_log;

static void log_bad(void *ud, const dvar_bad_chunk *b)
{
	bad_log *log = ud;
	assert_true(log->n < 8);
	assert_int_equal(b->code, DVAR_ECORRUPT);
	snprintf(log->seen[log->n++], sizeof(log->seen[0]), "%s#%llu", b->var,
	         (unsigned long long)b->chunk);
}

/* A byte flipped in chunk c of variable name (offset 10 into it). */
static void damage(const char *path, const char *name, size_t c)
{
	dvar_reader *r;
	size_t i;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	off_t at = (off_t)dvar_reader_entry(r, i)->slices[0].chunks[c].offset + 10;
	dvar_reader_free(r);
	char *data = tu_path(path, "data-00000-of-00001");
	tu_flip_byte(data, (uint64_t)at);
	free(data);
}

/* Damage in a packed slice, two one-chunk slices and one chunk of a long
 * one: each named with its chunk, in name order, and nothing else. */
static void verify_names_each(void **state)
{
	fixture *f = *state;
	char *path = tu_path(f->dir, "damaged");
	save_many(f, path, DVAR_COMPRESS_NONE, 4);
	damage(path, "v01", 0);
	damage(path, "v03", 0);
	damage(path, "v04", 0);
	damage(path, "v06", 2);
	dvar_reader *r;
	bad_log log = { .n = 0 };
	uint64_t nbad = 0;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_verify(r, log_bad, &log, &nbad), DVAR_OK);
	dvar_reader_free(r);
	assert_int_equal(nbad, 4);
	assert_int_equal(log.n, 4);
	assert_string_equal(log.seen[0], "v01#0");
	assert_string_equal(log.seen[1], "v03#0");
	assert_string_equal(log.seen[2], "v04#0");
	assert_string_equal(log.seen[3], "v06#2");
	free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_mode),
		cmocka_unit_test(same_file_any_threads),
		cmocka_unit_test(bad_request),
		cmocka_unit_test(verify_names_each),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
