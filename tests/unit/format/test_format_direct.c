/*
 * tests/unit/format/test_format_direct.c - the reader's ways of landing
 * bytes give the same values as the plain buffered read: O_DIRECT reads
 * (forced, and refused as a file system may refuse them), whole chunks and
 * the whole blocks of partial chunks read straight into the destination,
 * row ranges ending at and around chunk and block edges, destinations not
 * aligned like the file, TensorFlow tensors at unaligned offsets, several
 * threads reading through one reader; damage is still found on every path.
 * A read that can only go through the page cache runs on at most as many
 * threads as CPUs, and reads ahead of its tasks when it is cold.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/ahead.h"
#include "format/format.h"
#include "format/tf.h"

#define COLS 1024                       /* 4 KiB rows of float32 */
#define ROWS 1600                       /* 6.25 MiB: three 2 MiB chunks and a short one */
#define ROW_BYTES (COLS * sizeof(float))
#define CHUNK ((uint64_t)2 << 20)
#define BLOCK_ROWS (DVAR_BLOCK_SIZE / ROW_BYTES)
#define CHUNK_ROWS (CHUNK / ROW_BYTES)

static const int modes[] = { DVAR_DIRECT_OFF, DVAR_DIRECT_AUTO, DVAR_DIRECT_ALWAYS,
                             DVAR_DIRECT_REFUSED };
static const char *const mode_names[] = { "off", "auto", "always", "refused" };

typedef struct {
	char *dir, *ck, *tf;
	float *want;    /* "big" (and the TF tensor "t"): element k = k */
	int direct_ok;  /* the scratch folder's file system takes O_DIRECT reads */
} fixture;

/* Whether O_DIRECT reads work where path is (tmpfs before Linux 6.6 refuses them). */
static int direct_works(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECT);
	void *p = NULL;
	int ok = 0;
	if (fd >= 0 && posix_memalign(&p, 4096, 4096) == 0)
		ok = pread(fd, p, 4096, 0) == 4096;
	free(p);
	if (fd >= 0)
		close(fd);
	return ok;
}

static void write_fixture(fixture *f)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w;
	dvar_shape big, small;
	dvar_shape_init(&big, 2, (int64_t[]){ ROWS, COLS });
	dvar_shape_init(&small, 1, (int64_t[]){ 3 });
	float three[3] = { 1, 2, 3 };
	o.chunk_size = CHUNK;
	o.compress = DVAR_COMPRESS_NONE;
	assert_int_equal(dvar_writer_open(&w, f->ck, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "a", DVAR_FLOAT32, &small, NULL, three), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "big", DVAR_FLOAT32, &big, NULL, f->want), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	/* A TensorBundle packs tensors back to back: "t" starts 12 bytes in. */
	dvar_tf_writer *tw;
	assert_int_equal(dvar_tf_writer_open(&tw, f->tf, NULL), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add(tw, "a", DVAR_FLOAT32, &small, NULL, three), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add(tw, "t", DVAR_FLOAT32, &big, NULL, f->want), DVAR_OK);
	assert_int_equal(dvar_tf_writer_commit(tw), DVAR_OK);
	dvar_tf_writer_free(tw);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	assert_int_equal(tu_setup_dir((void **)&f->dir), 0);
	f->ck = tu_path(f->dir, "ck");
	f->tf = tu_path(f->dir, "model.ckpt");
	f->want = malloc((size_t)ROWS * ROW_BYTES);
	assert_non_null(f->want);
	for (size_t k = 0; k < (size_t)ROWS * COLS; k++)
		f->want[k] = (float)k;
	write_fixture(f);
	char *data = tu_path(f->ck, "data-00000-of-00001");
	f->direct_ok = direct_works(data);
	if (!f->direct_ok)
		print_message("O_DIRECT reads fail under %s: only the fallback is exercised\n", f->dir);
	free(data);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	dvar_reader__direct(DVAR_DIRECT_AUTO);
	dvar_ahead__tune(0, 0);
	free(f->ck);
	free(f->tf);
	free(f->want);
	tu_teardown_dir((void **)&f->dir);
	free(f);
	return 0;
}

static dvar_reader *open_ok(const char *path)
{
	dvar_reader *r = NULL;
	dvar_read_options o = DVAR_READ_OPTIONS_INIT;
	o.threads = 3;
	assert_int_equal(dvar_reader_open(&r, path, &o), DVAR_OK);
	return r;
}

static size_t find_ok(dvar_reader *r, const char *name)
{
	size_t i;
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	return i;
}

/* Rows [a, b) of name into dst (cols [c0, c0 + nc)). */
static int read_rows(dvar_reader *r, const char *name, int64_t a, int64_t b, int64_t c0,
                     int64_t nc, float *dst)
{
	dvar_slice sl = { 2, { a, c0 }, { b - a, nc } };
	return dvar_reader_read(r, find_ok(r, name), &sl, dst, (size_t)((b - a) * nc) * sizeof(float));
}

static void assert_rows(const fixture *f, const float *got, int64_t a, int64_t b, int64_t c0,
                        int64_t nc)
{
	for (int64_t i = a; i < b; i++)
		for (int64_t j = 0; j < nc; j++)
			if (got[(i - a) * nc + j] != f->want[i * COLS + c0 + j])
				fail_msg("row %lld col %lld: %g, not %g", (long long)i, (long long)(c0 + j),
				         (double)got[(i - a) * nc + j], (double)f->want[i * COLS + c0 + j]);
}

/* A page-aligned buffer of n bytes at offset skew from a page. */
static float *buffer(size_t n, size_t skew, void **base)
{
	assert_int_equal(posix_memalign(base, 4096, n + 4096), 0);
	memset(*base, 0xa5, n + 4096);
	return (float *)((char *)*base + skew);
}

/* Bytes read for rows [a, b) of all columns of "big": per chunk, the
 * checksum blocks that hold them. */
static uint64_t blocks_for(int64_t a, int64_t b)
{
	uint64_t n = 0, lo = (uint64_t)a * ROW_BYTES, hi = (uint64_t)b * ROW_BYTES;
	uint64_t end = (uint64_t)ROWS * ROW_BYTES;
	for (uint64_t c = lo / CHUNK * CHUNK; c < hi; c += CHUNK) {
		uint64_t clen = end - c < CHUNK ? end - c : CHUNK;
		uint64_t x = lo > c ? lo - c : 0, y = hi - c < clen ? hi - c : clen;
		x = x / DVAR_BLOCK_SIZE * DVAR_BLOCK_SIZE;
		y = (y + DVAR_BLOCK_SIZE - 1) / DVAR_BLOCK_SIZE * DVAR_BLOCK_SIZE;
		n += (y < clen ? y : clen) - x;
	}
	return n;
}

/* Whole reads in every mode, into aligned and unaligned destinations: the
 * middle of a long chunk goes around the page cache into any of them (into
 * one not aligned like the file through a page-aligned buffer); the short
 * last chunk, through the cache, goes through a bounce buffer when the
 * destination is 16 or 48 bytes into a page (as NumPy's arrays are), not
 * when it is 64 bytes in. */
static void test_format_direct__whole(void **state)
{
	static const size_t skews[] = { 0, 16, 48, 64 };
	fixture *f = *state;
	void *base;
	size_t n = (size_t)ROWS * ROW_BYTES;
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
		for (size_t k = 0; k < sizeof(skews) / sizeof(skews[0]); k++) {
			size_t skew = skews[k];
			dvar_reader__direct(modes[m]);
			dvar_reader *r = open_ok(f->ck);
			float *dst = buffer(n, skew, &base);
			assert_int_equal(read_rows(r, "big", 0, ROWS, 0, COLS, dst), DVAR_OK);
			assert_memory_equal(dst, f->want, n);
			assert_int_equal(((unsigned char *)dst)[n], 0xa5);
			assert_int_equal(dvar_reader_bytes_read(r), n);
			uint64_t direct = dvar_reader__bytes_via(r, DVAR_VIA_DIRECT);
			/* Forced: every whole 4 KiB of the chunks at least 1 MiB long
			 * (the short last one is not). */
			if (modes[m] == DVAR_DIRECT_ALWAYS && f->direct_ok)
				assert_int_equal(direct, 3 * CHUNK);
			else if (modes[m] != DVAR_DIRECT_AUTO)
				assert_int_equal(direct, 0);
			assert_int_equal(dvar_reader__bytes_via(r, DVAR_VIA_BOUNCE),
			                 skew == 16 || skew == 48 ? n - direct : 0);
			print_message("whole, %s, skew %zu: %llu bytes direct\n", mode_names[m], skew,
			              (unsigned long long)direct);
			dvar_reader_free(r);
			free(base);
		}
}

/* Threads a default reader starts for a whole read of "big" (4 chunks, 3 of
 * them long enough for O_DIRECT): the whole pool (DVAR_IO_DEPTH more than
 * the CPUs), whose reads keep the disk busy, wherever the destination lies;
 * as many as CPUs when every read goes through the page cache, which reads
 * ahead for them. */
static void test_format_direct__width(void **state)
{
	static const struct {
		int mode;
		size_t skew;
	} cases[] = { { DVAR_DIRECT_AUTO, 0 }, { DVAR_DIRECT_AUTO, 16 }, { DVAR_DIRECT_OFF, 0 } };
	fixture *f = *state;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int tasks = 4, pool = dvar_pool_io_threads(0);
	int narrow = (cpus < tasks ? (int)cpus : tasks) - 1, wide = (pool < tasks ? pool : tasks) - 1;
	size_t n = (size_t)ROWS * ROW_BYTES;
	void *base;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		dvar_reader__direct(cases[k].mode);
		int before = tu_threads_settled();
		int workers = cases[k].mode == DVAR_DIRECT_OFF ? narrow : wide;
		dvar_reader *r = NULL;
		assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
		assert_true(tu_threads_reach(before));
		float *dst = buffer(n, cases[k].skew, &base);
		assert_int_equal(read_rows(r, "big", 0, ROWS, 0, COLS, dst), DVAR_OK);
		assert_memory_equal(dst, f->want, n);
		print_message("width, %s, skew %zu, %ld CPUs: %d workers expected\n",
		              cases[k].mode == DVAR_DIRECT_OFF ? "off" : "auto", cases[k].skew, cpus,
		              workers);
		assert_true(tu_threads_reach(before + workers));
		dvar_reader_free(r);
		free(base);
	}
	dvar_reader__direct(DVAR_DIRECT_AUTO);
}

/* Whether the page at off of path is in the page cache. */
static int page_cached(const char *path, uint64_t off)
{
	int fd = open(path, O_RDONLY);
	unsigned char in = 0;
	assert_true(fd >= 0);
	void *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, (off_t)(off / 4096 * 4096));
	assert_true(m != MAP_FAILED);
	assert_int_equal(mincore(m, 4096, &in), 0);
	munmap(m, 4096);
	close(fd);
	return in & 1;
}

/* Drops path's pages from the page cache: whether they went (tmpfs keeps them). */
static int drop_pages(const char *path)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	return !page_cached(path, 0);
}

/* Cached pages are read through the cache: only the forced mode goes around it. */
static void test_format_direct__cached(void **state)
{
	fixture *f = *state;
	void *base;
	size_t n = (size_t)ROWS * ROW_BYTES;
	dvar_reader__direct(DVAR_DIRECT_OFF);
	dvar_reader *r = open_ok(f->ck);
	float *dst = buffer(n, 0, &base);
	assert_int_equal(read_rows(r, "big", 0, ROWS, 0, COLS, dst), DVAR_OK); /* caches it */
	dvar_reader_free(r);
	dvar_reader__direct(DVAR_DIRECT_AUTO);
	r = open_ok(f->ck);
	memset(dst, 0, n);
	assert_int_equal(read_rows(r, "big", 0, ROWS, 0, COLS, dst), DVAR_OK);
	assert_memory_equal(dst, f->want, n);
	assert_int_equal(dvar_reader__bytes_via(r, DVAR_VIA_DIRECT), 0);
	dvar_reader_free(r);
	free(base);
}

/* A cold read into a destination 16 bytes into a page. By default, and
 * with a version 1 struct (which has no flags: whatever lies where they
 * would be is not read), the long chunks' middles go around the page cache
 * through a page-aligned buffer and stay out of it (no thread reading
 * ahead), the short last chunk through the cache. With DVAR_READ_CACHED
 * all of it goes through the cache and stays there. */
static void test_format_direct__cold_unaligned(void **state)
{
	static const struct {
		unsigned int version, flags;
	} cases[] = { { DVAR_READ_OPTIONS_VERSION, 0 },
		          { DVAR_READ_OPTIONS_VERSION, DVAR_READ_CACHED },
		          { 1, ~0u } };
	fixture *f = *state;
	size_t n = (size_t)ROWS * ROW_BYTES;
	char *data = tu_path(f->ck, "data-00000-of-00001");
	void *base;
	float *dst = buffer(n, 16, &base);
	dvar_reader__direct(DVAR_DIRECT_AUTO);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		dvar_read_options o = DVAR_READ_OPTIONS_INIT;
		o.version = cases[k].version;
		o.flags = cases[k].flags;
		o.threads = 3;
		int cold = drop_pages(data);
		dvar_reader *r = NULL;
		assert_int_equal(dvar_reader_open(&r, f->ck, &o), DVAR_OK);
		memset(dst, 0, n);
		assert_int_equal(read_rows(r, "big", 0, ROWS, 0, COLS, dst), DVAR_OK);
		assert_memory_equal(dst, f->want, n);
		assert_int_equal(((unsigned char *)dst)[n], 0xa5);
		uint64_t direct = dvar_reader__bytes_via(r, DVAR_VIA_DIRECT);
		uint64_t mid =
		    dvar_reader_entry(r, find_ok(r, "big"))->slices[0].chunks[1].offset + CHUNK / 2;
		if (cases[k].flags == DVAR_READ_CACHED) {
			assert_int_equal(direct, 0);
			assert_true(page_cached(data, mid));
		} else if (cold && f->direct_ok) {
			assert_int_equal(direct, 3 * CHUNK);
			assert_false(page_cached(data, mid));
		} else {
			print_message("cold_unaligned: %s stayed cached or refuses O_DIRECT\n", data);
		}
		assert_int_equal(dvar_reader__bytes_via(r, DVAR_VIA_BOUNCE), n - direct);
		dvar_reader_free(r);
	}
	dvar_read_options o = DVAR_READ_OPTIONS_INIT;
	o.version = DVAR_READ_OPTIONS_VERSION + 1;
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, f->ck, &o), DVAR_EINVAL);
	tu_assert_error_contains("dvar_read_options: version");
	assert_null(r);
	o.version = DVAR_READ_OPTIONS_VERSION;
	o.flags = DVAR_READ_CACHED | 4u;
	assert_int_equal(dvar_reader_open(&r, f->ck, &o), DVAR_EINVAL);
	tu_assert_error_contains("dvar_read_options: unknown flags 0x4");
	assert_null(r);
	free(data);
	free(base);
}

/* The reads ahead a reader started so far. */
static uint64_t leads(void)
{
	uint64_t started, ranges;
	dvar_ahead__stats(&started, &ranges);
	return started;
}

/* A cold read through the page cache (O_DIRECT off, as where the file
 * system refuses it) has a thread reading ahead of its tasks (here for any
 * size, one chunk ahead): whole, in row ranges, and batched, the values are
 * the plain read's. A warm read starts none. (What the thread asks for is
 * test_format_ahead's.) */
static void test_format_direct__ahead(void **state)
{
	fixture *f = *state;
	const int64_t C = (int64_t)CHUNK_ROWS;
	const int64_t ranges[][2] = { { 0, ROWS }, { C - 1, 3 * C + 1 }, { 5, ROWS - 5 } };
	size_t n = (size_t)ROWS * ROW_BYTES;
	char *data = tu_path(f->ck, "data-00000-of-00001");
	void *base;
	float *dst = buffer(n, 16, &base);
	dvar_reader__direct(DVAR_DIRECT_OFF);
	dvar_ahead__tune(1, CHUNK);
	for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
		int64_t a = ranges[k][0], b = ranges[k][1];
		int cold = drop_pages(data);
		uint64_t before = leads();
		dvar_reader *r = open_ok(f->ck);
		memset(dst, 0, n);
		assert_int_equal(read_rows(r, "big", a, b, 0, COLS, dst), DVAR_OK);
		assert_rows(f, dst, a, b, 0, COLS);
		assert_int_equal(dvar_reader__bytes_via(r, DVAR_VIA_DIRECT), 0);
		if (cold)
			assert_int_equal(leads(), before + 1);
		else
			print_message("ahead: the page cache kept %s, so no read was cold\n", data);
		dvar_reader_free(r);
	}

	/* Batched, "big" after "a", cold; then the same again, warm. */
	float three[3];
	for (int warm = 0; warm < 2; warm++) {
		int cold = !warm && drop_pages(data);
		uint64_t before = leads();
		dvar_reader *r = open_ok(f->ck);
		dvar_read_request req[2] = { { find_ok(r, "a"), NULL, three, sizeof(three) },
			                     { find_ok(r, "big"), NULL, dst, n } };
		memset(dst, 0, n);
		assert_int_equal(dvar_reader_read_many(r, req, 2), DVAR_OK);
		assert_memory_equal(dst, f->want, n);
		assert_true(three[0] == 1 && three[1] == 2 && three[2] == 3);
		if (cold)
			assert_int_equal(leads(), before + 1);
		if (warm)
			assert_int_equal(leads(), before);
		dvar_reader_free(r);
	}
	dvar_ahead__tune(0, 0);
	dvar_reader__direct(DVAR_DIRECT_AUTO);
	free(data);
	free(base);
}

/* Row ranges starting and ending at, just before and just after chunk and
 * block edges, every column or some: the values, and only the blocks needed. */
static void test_format_direct__edges(void **state)
{
	fixture *f = *state;
	const int64_t C = (int64_t)CHUNK_ROWS, B = (int64_t)BLOCK_ROWS;
	const int64_t ranges[][2] = {
		{ 0, C }, { C, 2 * C }, { C - 1, C + 1 }, { C + 1, 2 * C - 1 }, { 3, 5 },
		{ B - 1, B + 1 }, { B, 2 * B }, { 1, C + B + 1 }, { C - B, 3 * C + 3 },
		{ 3 * C, ROWS }, { 3 * C + 1, ROWS }, { ROWS - 1, ROWS }, { 2 * B + 3, 3 * C - B - 5 },
		{ 0, ROWS }, { 5, ROWS - 5 },
	};
	const int64_t cols[][2] = { { 0, COLS }, { 0, 1 }, { 5, COLS - 5 } };
	size_t nr = sizeof(ranges) / sizeof(ranges[0]);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		dvar_reader__direct(modes[m]);
		dvar_reader *r = open_ok(f->ck);
		for (size_t k = 0; k < nr; k++)
			for (size_t c = 0; c < 3; c++)
				for (size_t skew = 0; skew <= 4; skew += 4) {
					int64_t a = ranges[k][0], b = ranges[k][1], c0 = cols[c][0], nc = cols[c][1];
					size_t n = (size_t)((b - a) * nc) * sizeof(float);
					void *base;
					float *dst = buffer(n, skew, &base);
					uint64_t before = dvar_reader_bytes_read(r);
					assert_int_equal(read_rows(r, "big", a, b, c0, nc, dst), DVAR_OK);
					assert_rows(f, dst, a, b, c0, nc);
					/* Past the end of the destination nothing was written. */
					assert_int_equal(((unsigned char *)dst)[n], 0xa5);
					if (nc == COLS)
						assert_int_equal(dvar_reader_bytes_read(r) - before, blocks_for(a, b));
					free(base);
				}
		dvar_reader_free(r);
	}
}

/* Row ranges of a TF tensor at an unaligned offset: exactly the bytes of
 * the rows are read, O_DIRECT for the aligned middle when the destination
 * lines up with the file. */
static void test_format_direct__tf_rows(void **state)
{
	fixture *f = *state;
	const int64_t ranges[][2] = { { 0, ROWS }, { 0, 1 }, { ROWS - 1, ROWS }, { 1, ROWS - 1 },
	                              { 300, 900 }, { 1023, 1025 } };
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		dvar_reader__direct(modes[m]);
		dvar_reader *r = open_ok(f->tf);
		uint64_t off = dvar_reader_entry(r, find_ok(r, "t"))->slices[0].chunks[0].offset;
		assert_int_not_equal(off % 4096, 0);
		for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
			int64_t a = ranges[k][0], b = ranges[k][1];
			size_t n = (size_t)(b - a) * ROW_BYTES;
			void *base;
			/* The first needed byte at the same place in a page as in the file. */
			float *dst = buffer(n, (size_t)((off + (uint64_t)a * ROW_BYTES) % 4096), &base);
			uint64_t before = dvar_reader_bytes_read(r);
			uint64_t dbefore = dvar_reader__bytes_via(r, DVAR_VIA_DIRECT);
			assert_int_equal(read_rows(r, "t", a, b, 0, COLS, dst), DVAR_OK);
			assert_rows(f, dst, a, b, 0, COLS);
			assert_int_equal(dvar_reader_bytes_read(r) - before, n);
			uint64_t direct = dvar_reader__bytes_via(r, DVAR_VIA_DIRECT) - dbefore;
			if (modes[m] == DVAR_DIRECT_ALWAYS && f->direct_ok && n >= (3u << 20))
				assert_true(direct >= n - 8192 && direct <= n);
			else if (modes[m] != DVAR_DIRECT_AUTO && modes[m] != DVAR_DIRECT_ALWAYS)
				assert_int_equal(direct, 0);
			free(base);
		}
		dvar_reader_free(r);
	}
}

typedef struct {
	const fixture *f;
	dvar_reader *r;
	int64_t a, b;
	int rc;
	int same;
} reader_job;

static void *read_job(void *p)
{
	reader_job *j = p;
	size_t n = (size_t)(j->b - j->a) * ROW_BYTES;
	void *base = NULL;
	float *dst;
	if (posix_memalign(&base, 4096, n)) {
		j->rc = DVAR_ENOMEM;
		return NULL;
	}
	dst = base;
	for (int rep = 0; rep < 3 && !j->rc; rep++) {
		memset(dst, 0, n);
		j->rc = read_rows(j->r, "big", j->a, j->b, 0, COLS, dst);
		j->same = !j->rc && memcmp(dst, j->f->want + j->a * COLS, n) == 0;
		if (!j->same)
			break;
	}
	free(base);
	return NULL;
}

/* Several threads through one reader (the O_DIRECT set-up of its file
 * raced for), forced and refused. */
static void test_format_direct__threads(void **state)
{
	fixture *f = *state;
	const int64_t C = (int64_t)CHUNK_ROWS;
	for (int m = DVAR_DIRECT_ALWAYS; m <= DVAR_DIRECT_REFUSED; m++) {
		dvar_reader__direct(m);
		dvar_reader *r = open_ok(f->ck);
		reader_job jobs[4] = { { f, r, 0, ROWS, 0, 0 }, { f, r, C - 7, 2 * C + 9, 0, 0 },
		                       { f, r, 3, C, 0, 0 }, { f, r, 2 * C, ROWS, 0, 0 } };
		pthread_t th[4];
		for (int k = 0; k < 4; k++)
			assert_int_equal(pthread_create(&th[k], NULL, read_job, &jobs[k]), 0);
		for (int k = 0; k < 4; k++) {
			pthread_join(th[k], NULL);
			assert_int_equal(jobs[k].rc, DVAR_OK);
			assert_true(jobs[k].same);
		}
		if (m == DVAR_DIRECT_REFUSED)
			assert_int_equal(dvar_reader__bytes_via(r, DVAR_VIA_DIRECT), 0);
		else if (f->direct_ok)
			assert_true(dvar_reader__bytes_via(r, DVAR_VIA_DIRECT) > 0);
		dvar_reader_free(r);
	}
}

/* A flipped byte is found on every path: whole chunks straight into place,
 * the whole blocks of a partial chunk, an edge block read through scratch
 * for the rows next to it, a TF tensor read whole. */
static void test_format_direct__damage(void **state)
{
	fixture *f = *state;
	const int64_t C = (int64_t)CHUNK_ROWS, B = (int64_t)BLOCK_ROWS;
	size_t n = (size_t)ROWS * ROW_BYTES;
	void *base;
	float *dst = buffer(n, 0, &base);
	dvar_reader *r = open_ok(f->ck);
	uint64_t at = dvar_reader_entry(r, find_ok(r, "big"))->slices[0].chunks[1].offset;
	dvar_reader_free(r);
	/* Row C + 2B + 1 of "big": chunk 1, its third block. */
	char *data = tu_path(f->ck, "data-00000-of-00001");
	tu_flip_byte(data, (off_t)(at + (uint64_t)(2 * B + 1) * ROW_BYTES + 8));
	/* Read cold through the page cache, reading ahead. */
	dvar_reader__direct(DVAR_DIRECT_OFF);
	dvar_ahead__tune(1, CHUNK);
	drop_pages(data);
	r = open_ok(f->ck);
	float *skewed = (float *)((char *)base + 16);
	assert_int_equal(read_rows(r, "big", 0, ROWS - 1, 0, COLS, skewed), DVAR_ECORRUPT);
	tu_assert_error_contains("checksum mismatch in block 2");
	dvar_reader_free(r);
	dvar_ahead__tune(0, 0);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		dvar_reader__direct(modes[m]);
		r = open_ok(f->ck);
		assert_int_equal(read_rows(r, "big", 0, ROWS, 0, COLS, dst), DVAR_ECORRUPT);
		tu_assert_error_contains("checksum mismatch in block 2");
		/* Straight into place, the block in the middle of the range. */
		assert_int_equal(read_rows(r, "big", C + 1, 2 * C - 1, 0, COLS, dst), DVAR_ECORRUPT);
		tu_assert_error_contains("variable 'big'");
		/* The damaged block is an edge: the row after it is wanted, not the damaged one. */
		assert_int_equal(read_rows(r, "big", C + 3 * B - 1, C + 5 * B, 0, COLS, dst), DVAR_ECORRUPT);
		assert_int_equal(read_rows(r, "big", C + 2 * B + 2, C + 2 * B + 3, 0, COLS, dst),
		                 DVAR_ECORRUPT);
		/* Rows in other blocks read. */
		assert_int_equal(read_rows(r, "big", C + 3 * B, 2 * C + 5, 0, COLS, dst), DVAR_OK);
		assert_rows(f, dst, C + 3 * B, 2 * C + 5, 0, COLS);
		dvar_reader_free(r);
	}
	free(data);

	data = dvar_tf_data_path(f->tf, 0, 1);
	r = open_ok(f->tf);
	at = dvar_reader_entry(r, find_ok(r, "t"))->slices[0].chunks[0].offset;
	dvar_reader_free(r);
	tu_flip_byte(data, (off_t)(at + (uint64_t)ROWS / 2 * ROW_BYTES));
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		dvar_reader__direct(modes[m]);
		r = open_ok(f->tf);
		float *tdst = (float *)((char *)base + at % 4096);
		assert_int_equal(read_rows(r, "t", 0, ROWS, 0, COLS, tdst), DVAR_ECORRUPT);
		tu_assert_error_contains("checksum mismatch");
		dvar_reader_free(r);
	}
	free(data);
	free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_direct__whole),
		cmocka_unit_test(test_format_direct__cached),
		cmocka_unit_test(test_format_direct__cold_unaligned),
		cmocka_unit_test(test_format_direct__width),
		cmocka_unit_test(test_format_direct__edges),
		cmocka_unit_test(test_format_direct__ahead),
		cmocka_unit_test(test_format_direct__tf_rows),
		cmocka_unit_test(test_format_direct__threads),
		cmocka_unit_test(test_format_direct__damage),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
