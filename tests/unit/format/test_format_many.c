/*
 * tests/unit/format/test_format_many.c - dvar_reader_read_many gives, for
 * every request, the bytes dvar_reader_read gives: small packed tensors, a
 * large raw one, lz4 chunks, a variable saved as two slices, row ranges
 * across chunk and slice edges, the same variable twice, a delta's patched
 * and unchanged variables; with O_DIRECT off and forced. Every request is
 * checked before anything is read, and damage is named.
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

#define SMALL 40
#define BIG_ROWS 1600
#define COLS 1024
#define SP_ROWS 512
#define SH_ROWS 700
#define SH_COLS 64

typedef struct {
	char *dir, *base, *delta;
	float *big, *sparse;
	int32_t *sh;
} fixture;

static dvar_shape shape2(int64_t a, int64_t b)
{
	dvar_shape s;
	dvar_shape_init(&s, 2, (int64_t[]){ a, b });
	return s;
}

static dvar_shape shape1(int64_t a)
{
	dvar_shape s;
	dvar_shape_init(&s, 1, (int64_t[]){ a });
	return s;
}

static size_t small_len(int k)
{
	return 1 + (size_t)k * 73 % 3000;
}

static void write_base(fixture *f)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w;
	dvar_shape sb = shape2(BIG_ROWS, COLS), sp = shape2(SP_ROWS, COLS), ss = shape2(SH_ROWS, SH_COLS);
	float small[3000];
	char name[16];

	o.chunk_size = (uint64_t)2 << 20;
	o.compress = DVAR_COMPRESS_LZ4; /* "big" is random: its chunks stay raw */
	assert_int_equal(dvar_writer_open(&w, f->base, &o), DVAR_OK);
	for (int k = 0; k < SMALL; k++) {
		dvar_shape s = shape1((int64_t)small_len(k));
		for (size_t i = 0; i < small_len(k); i++)
			small[i] = (float)k * 10000 + (float)i;
		snprintf(name, sizeof(name), "s%02d", k);
		assert_int_equal(dvar_writer_add(w, name, DVAR_FLOAT32, &s, NULL, small), DVAR_OK);
	}
	assert_int_equal(dvar_writer_add(w, "big", DVAR_FLOAT32, &sb, NULL, f->big), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "sparse", DVAR_FLOAT32, &sp, NULL, f->sparse), DVAR_OK);
	/* "sh" as two saved slices, rows [0, 300) and [300, 700). */
	dvar_slice a, b;
	dvar_slice_full(&a, &ss);
	b = a;
	a.length[0] = 300;
	b.start[0] = 300;
	b.length[0] = SH_ROWS - 300;
	assert_int_equal(dvar_writer_add(w, "sh", DVAR_INT32, &ss, &a, f->sh), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "sh", DVAR_INT32, &ss, &b, f->sh + 300 * SH_COLS), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

/* A delta over the base: rows 3 and 900 of "big" patched, the rest unchanged. */
static void write_delta(fixture *f)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w;
	dvar_shape sb = shape2(BIG_ROWS, COLS), sp = shape2(SP_ROWS, COLS), ss = shape2(SH_ROWS, SH_COLS);
	int64_t rows[2] = { 3, 900 };
	float *patch = malloc(2 * COLS * sizeof(float));
	char name[16];

	assert_non_null(patch);
	for (int k = 0; k < 2; k++)
		for (int c = 0; c < COLS; c++)
			patch[k * COLS + c] = f->big[rows[k] * COLS + c] = -1.0f - (float)c;
	assert_int_equal(dvar_writer_open(&w, f->delta, &o), DVAR_OK);
	assert_int_equal(dvar_writer_set_base(w, "ckpt-1"), DVAR_OK);
	for (int k = 0; k < SMALL; k++) {
		dvar_shape s = shape1((int64_t)small_len(k));
		snprintf(name, sizeof(name), "s%02d", k);
		assert_int_equal(dvar_writer_add_unchanged(w, name, DVAR_FLOAT32, &s), DVAR_OK);
	}
	assert_int_equal(dvar_writer_add_rows(w, "big", DVAR_FLOAT32, &sb, rows, 2, patch), DVAR_OK);
	assert_int_equal(dvar_writer_add_unchanged(w, "sparse", DVAR_FLOAT32, &sp), DVAR_OK);
	assert_int_equal(dvar_writer_add_unchanged(w, "sh", DVAR_INT32, &ss), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	free(patch);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	f->base = tu_path(f->dir, "ckpt-1");
	f->delta = tu_path(f->dir, "ckpt-2");
	f->big = malloc((size_t)BIG_ROWS * COLS * sizeof(float));
	f->sparse = calloc((size_t)SP_ROWS * COLS, sizeof(float));
	f->sh = malloc((size_t)SH_ROWS * SH_COLS * sizeof(int32_t));
	assert_true(f->big && f->sparse && f->sh);
	tu_fill_random(f->big, (size_t)BIG_ROWS * COLS * sizeof(float), 7);
	for (int r = 0; r < SP_ROWS; r += 2)
		for (int c = 0; c < COLS; c++)
			f->sparse[r * COLS + c] = (float)(r + c);
	for (int i = 0; i < SH_ROWS * SH_COLS; i++)
		f->sh[i] = i * 3 - 5;
	write_base(f);
	write_delta(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	dvar_reader__direct(DVAR_DIRECT_AUTO);
	tu_rmtree(f->dir);
	free(f->dir);
	free(f->base);
	free(f->delta);
	free(f->big);
	free(f->sparse);
	free(f->sh);
	free(f);
	return 0;
}

/* The requests of one batch: every variable whole, then row ranges. */
typedef struct {
	dvar_read_request req[SMALL + 16];
	dvar_slice slices[SMALL + 16];
	size_t n;
} plan;

static void add(plan *p, const dvar_reader *r, const char *name, int64_t row0, int64_t rows,
                int64_t col0, int64_t cols)
{
	dvar_var_info info;
	dvar_read_request *q = &p->req[p->n];
	uint64_t bytes;

	assert_int_equal(dvar_reader_find(r, name, &q->var), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, q->var, &info), DVAR_OK);
	q->slice = NULL;
	dvar_shape_num_bytes(&info.shape, info.dtype, &bytes);
	if (rows >= 0) {
		dvar_slice *s = &p->slices[p->n];
		dvar_slice_full(s, &info.shape);
		s->start[0] = row0;
		s->length[0] = rows;
		if (cols >= 0) {
			s->start[1] = col0;
			s->length[1] = cols;
		}
		dvar_shape ws;
		dvar_slice_shape(s, &ws);
		dvar_shape_num_bytes(&ws, info.dtype, &bytes);
		q->slice = s;
	}
	q->dst_bytes = (size_t)bytes;
	q->dst = malloc(bytes ? (size_t)bytes : 1);
	assert_non_null(q->dst);
	memset(q->dst, 0xA5, (size_t)bytes);
	p->n++;
}

static void make_plan(plan *p, const dvar_reader *r)
{
	char name[16];
	p->n = 0;
	/* Rows first and last, so the batch is not in index order. */
	add(p, r, "big", 100, 1200, 7, 900);   /* across chunks, columns cut */
	add(p, r, "sh", 250, 100, -1, -1);     /* across the two saved slices */
	add(p, r, "sparse", 10, 11, -1, -1);
	for (int k = SMALL - 1; k >= 0; k--) {
		snprintf(name, sizeof(name), "s%02d", k);
		add(p, r, name, 0, -1, 0, -1);
	}
	add(p, r, "big", 0, -1, 0, -1);
	add(p, r, "sparse", 0, -1, 0, -1);
	add(p, r, "sh", 0, -1, 0, -1);
	add(p, r, "big", 899, 3, -1, -1);      /* the same variable again, a patched row */
}

static void free_plan(plan *p)
{
	for (size_t k = 0; k < p->n; k++)
		free(p->req[k].dst);
}

/* Each request of a batch against dvar_reader_read of the same request. */
static void check_batch(const char *path, int mode)
{
	dvar_reader *r;
	plan p;

	dvar_reader__direct(mode);
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	make_plan(&p, r);
	assert_int_equal(dvar_reader_read_many(r, p.req, p.n), DVAR_OK);
	for (size_t k = 0; k < p.n; k++) {
		void *one = malloc(p.req[k].dst_bytes ? p.req[k].dst_bytes : 1);
		assert_non_null(one);
		assert_int_equal(dvar_reader_read(r, p.req[k].var, p.req[k].slice, one, p.req[k].dst_bytes),
		                 DVAR_OK);
		assert_memory_equal(one, p.req[k].dst, p.req[k].dst_bytes);
		free(one);
	}
	dvar_reader_free(r);
	free_plan(&p);
	dvar_reader__direct(DVAR_DIRECT_AUTO);
}

static void same_as_one_by_one(void **state)
{
	fixture *f = *state;
	static const int modes[] = { DVAR_DIRECT_OFF, DVAR_DIRECT_ALWAYS, DVAR_DIRECT_REFUSED };
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		check_batch(f->base, modes[m]);
		check_batch(f->delta, modes[m]);
	}
}

/* The values themselves, not only agreement: "big" whole from the delta. */
static void values(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	plan p;
	assert_int_equal(dvar_reader_open(&r, f->delta, NULL), DVAR_OK);
	make_plan(&p, r);
	assert_int_equal(dvar_reader_read_many(r, p.req, p.n), DVAR_OK);
	size_t whole_big = 3 + SMALL;
	assert_int_equal(p.req[whole_big].dst_bytes, (size_t)BIG_ROWS * COLS * sizeof(float));
	assert_memory_equal(p.req[whole_big].dst, f->big, p.req[whole_big].dst_bytes);
	assert_memory_equal(p.req[whole_big + 1].dst, f->sparse, p.req[whole_big + 1].dst_bytes);
	assert_memory_equal(p.req[whole_big + 2].dst, f->sh, p.req[whole_big + 2].dst_bytes);
	assert_memory_equal(p.req[1].dst, f->sh + 250 * SH_COLS, 100 * SH_COLS * sizeof(int32_t));
	float *s00 = p.req[3 + SMALL - 1].dst; /* "s00": one element */
	assert_int_equal(p.req[3 + SMALL - 1].dst_bytes, sizeof(float));
	assert_true(s00[0] == 0.0f);
	float *s39 = p.req[3].dst;
	for (size_t i = 0; i < small_len(39); i++)
		assert_true(s39[i] == 390000.0f + (float)i);
	dvar_reader_free(r);
	free_plan(&p);
}

static void bad_requests(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	plan p;
	assert_int_equal(dvar_reader_open(&r, f->base, NULL), DVAR_OK);
	make_plan(&p, r);
	assert_int_equal(dvar_reader_read_many(r, p.req, 0), DVAR_OK);
	assert_int_equal(dvar_reader_read_many(NULL, p.req, p.n), DVAR_EINVAL);
	assert_int_equal(dvar_reader_read_many(r, NULL, 2), DVAR_EINVAL);
	tu_assert_error_contains("2 requests at NULL");
	assert_int_equal(dvar_reader_read_many(r, p.req, SIZE_MAX), DVAR_EINVAL);
	tu_assert_error_contains("more than memory can hold");

	/* A bad request anywhere stops the batch before any read: the first
	 * requests' destinations keep their fill. */
	size_t var = p.req[5].var;
	p.req[5].var = 9999;
	assert_int_equal(dvar_reader_read_many(r, p.req, p.n), DVAR_EINVAL);
	tu_assert_error_contains("variable index 9999 is out of range");
	assert_int_equal(((unsigned char *)p.req[0].dst)[0], 0xA5);
	p.req[5].var = var;

	p.req[2].dst_bytes -= 4;
	assert_int_equal(dvar_reader_read_many(r, p.req, p.n), DVAR_EINVAL);
	tu_assert_error_contains("reading variable 'sparse': the destination holds");
	p.req[2].dst_bytes += 4;

	dvar_slice past = *p.req[1].slice;
	past.length[0] = SH_ROWS;
	p.req[1].slice = &past;
	assert_int_equal(dvar_reader_read_many(r, p.req, p.n), DVAR_ESHAPE);
	tu_assert_error_contains("reading variable 'sh'");
	dvar_reader_free(r);
	free_plan(&p);
}

/* Damage in one variable fails the batch, naming it. */
static void damage_named(void **state)
{
	fixture *f = *state;
	char *copy = tu_path(f->dir, "damaged");
	char cmd[4096];
	dvar_reader *r;
	plan p;
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", f->base, copy);
	assert_int_equal(system(cmd), 0);
	/* "big" is the first 6.25 MiB slice written after 160 KiB of small ones. */
	char *data = tu_path(copy, "data-00000-of-00001");
	int fd = open(data, O_RDWR);
	unsigned char byte;
	assert_true(fd >= 0);
	off_t at = (off_t)3 << 20;
	assert_int_equal(pread(fd, &byte, 1, at), 1);
	byte ^= 0x40;
	assert_int_equal(pwrite(fd, &byte, 1, at), 1);
	close(fd);
	assert_int_equal(dvar_reader_open(&r, copy, NULL), DVAR_OK);
	make_plan(&p, r);
	assert_int_equal(dvar_reader_read_many(r, p.req, p.n), DVAR_ECORRUPT);
	tu_assert_error_contains("'big'");
	dvar_reader_free(r);
	free_plan(&p);
	free(data);
	free(copy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_as_one_by_one),
		cmocka_unit_test(values),
		cmocka_unit_test(bad_requests),
		cmocka_unit_test(damage_named),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
