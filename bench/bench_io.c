/*
 * bench_io.c - save and restore throughput of dvar checkpoints next to the
 * same machine's raw sequential I/O, measured in the same run.
 *
 * Each run writes and reads --size-mb of float32 tensors in several shapes
 * (dense, row-sparse, element-sparse) and times raw file I/O of the same
 * bytes, so every ratio compares figures taken minutes apart on the same
 * disk. A save (one dvar_writer_add_many of every tensor) is timed from
 * dvar_writer_open to the end of dvar_writer_commit (fsyncs included),
 * each mode twice per run in a mirrored order, NONE once more as a control
 * of what identical saves differ by, and in the dense case a raw O_DIRECT
 * write in the same order as the goal's base; a restore from
 * dvar_reader_open to the end of one dvar_reader_read_many of every tensor
 * (the goal), of one dvar_reader_read per tensor, and of the batch into
 * buffers 16 bytes past a page (where NumPy's large arrays start), the
 * three taking turns to go first. Reads are cold when the page cache can
 * be dropped (root). Buffers are allocated and pre-faulted once: first-touch
 * page faults would otherwise cost as much as the disk. Row (f) saves 5,000
 * tiny tensors to show what small tensors cost on disk. See bench/README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "dvar/dvar.h"

/* (f): many small tensors, as a model's biases and norms are. */
#define SMALL_N 5000
#define SMALL_ELEMS 64

typedef struct {
	char name[16];
	uint64_t offset; /* into the source (and destination) buffer */
	uint64_t bytes;
	dvar_shape shape;
} tensor;

typedef struct {
	tensor *t;
	size_t n, cap;
} layout;

enum {
	S_MEMCPY,
	S_CRC,
	S_RAW_WRITE_BUF,
	S_RAW_WRITE_DIRECT,
	S_RAW_READ_COLD,
	S_RAW_READ_DIRECT,
	S_RAW_WRITE_TURN,
	S_DENSE_AUTO,
	S_DENSE_NONE,
	S_DENSE_AGAIN,
	S_ROWS_AUTO,
	S_ROWS_LZ4,
	S_ROWS_NONE,
	S_ROWS_AGAIN,
	S_ELEM_AUTO,
	S_ELEM_NONE,
	S_ELEM_AGAIN,
	S_RESTORE,
	S_RESTORE_ONE,
	S_RESTORE_SKEWED,
	S_PARTIAL,
	S_RAW_RANGE,
	S_PARTIAL_READ,
	S_SMALL,
	S_COUNT
};

typedef struct {
	double gbps[BENCH_MAX_SAMPLES];
	int n;
	double bytes_ratio; /* stored/raw for saves, read/needed for partial; 0 = none */
} series;

static struct {
	uint64_t size;
	const char *dir;
	int runs;
	int threads;
	int cold; /* the page cache can be dropped */
	series s[S_COUNT];
} g;

static void record(int which, uint64_t bytes, double seconds)
{
	series *s = &g.s[which];

	s->gbps[s->n++] = bytes / seconds / 1e9;
}

/* ------------------------------------------------------------------ data */

/* A float with a random sign and 23 random mantissa bits in [2^-7, 2):
 * incompressible, like trained weights, and never NaN. */
static uint32_t rnd_float_bits(uint64_t r)
{
	return (uint32_t)(r >> 63) << 31 | (uint32_t)(120 + ((r >> 32) & 7)) << 23 |
	       (uint32_t)(r & 0x7fffff);
}

static void fill_dense(uint32_t *dst, uint64_t n)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (uint64_t i = 0; i < n; i++)
		dst[i] = rnd_float_bits(bench_xorshift(&x));
}

static void fill_element_sparse(uint32_t *dst, uint64_t n)
{
	uint64_t x = 0x2545f4914f6cdd1dull;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = bench_xorshift(&x);
		dst[i] = (r >> 31) & 1 ? rnd_float_bits(r) : 0;
	}
}

static void fill_row_sparse(uint32_t *dst, uint64_t rows, uint64_t cols)
{
	uint64_t x = 0x5851f42d4c957f2dull;

	for (uint64_t i = 0; i < rows; i++) {
		uint32_t *row = dst + i * cols;
		if (bench_xorshift(&x) >> 63) {
			memset(row, 0, cols * 4);
			continue;
		}
		for (uint64_t j = 0; j < cols; j++)
			row[j] = rnd_float_bits(bench_xorshift(&x));
	}
}

static void add_tensor(layout *l, uint64_t offset, uint64_t bytes, int rank, uint64_t cols)
{
	int64_t dims[2] = { (int64_t)(bytes / 4 / cols), (int64_t)cols };
	tensor *t;

	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->t = realloc(l->t, l->cap * sizeof(tensor));
		if (!l->t)
			bench_fatal("out of memory");
	}
	t = &l->t[l->n];
	snprintf(t->name, sizeof(t->name), "t%04zu", l->n);
	t->offset = offset;
	t->bytes = bytes;
	bench_check(dvar_shape_init(&t->shape, rank, dims), "shape");
	l->n++;
}

/*
 * A model-like mix: three quarters of the bytes in 64-256 MiB matrices of
 * 4 KiB rows, the rest in vectors of 4 KiB to 4 MiB.
 */
static layout make_mixed_layout(uint64_t size)
{
	static const uint64_t big[] = { 256 * BENCH_MIB, 128 * BENCH_MIB, 64 * BENCH_MIB };
	static const uint64_t small[] = { 4096, 16384, 65536, 262144, BENCH_MIB, 4 * BENCH_MIB };
	uint64_t large = size / 4 * 3 & ~(4 * BENCH_MIB - 1), off = 0;
	layout l = { NULL, 0, 0 };

	for (size_t i = 0; off < large; i++) {
		uint64_t b = big[i % 3] < large - off ? big[i % 3] : large - off;
		add_tensor(&l, off, b, 2, 1024);
		off += b;
	}
	for (size_t i = 0; off < size; i++) {
		uint64_t b = small[i % 6] < size - off ? small[i % 6] : size - off;
		add_tensor(&l, off, b, 1, 1);
		off += b;
	}
	return l;
}

/* ------------------------------------------------------------------ raw I/O */

/* (e): rows [rows/2 + 3, +rows/8) of t, which start inside a chunk; their
 * bytes' offset in t's data (as laid out in the source buffer). */
static uint64_t partial_slice(const tensor *t, dvar_slice *sl)
{
	dvar_slice_full(sl, &t->shape);
	sl->length[0] = t->shape.dims[0] / 8;
	sl->start[0] = t->shape.dims[0] / 2 + 3;
	return (uint64_t)sl->start[0] * (t->bytes / (uint64_t)t->shape.dims[0]);
}

/* The machine's limits: raw writes and reads of the same bytes, and memcpy. */
static void bench_raw(void *src, void *dst)
{
	char path[4096];
	double t;

	snprintf(path, sizeof(path), "%s/raw.bin", bench_scratch());

	bench_drop_caches();
	record(S_RAW_WRITE_BUF, g.size, bench_raw_write(path, src, g.size, 0, 1));
	unlink(path);

	bench_drop_caches();
	t = bench_raw_write(path, src, g.size, 1, 1);
	if (t < 0) {
		/* O_DIRECT unsupported (tmpfs): keep a buffered file for the reads */
		bench_raw_write(path, src, g.size, 0, 1);
	} else {
		record(S_RAW_WRITE_DIRECT, g.size, t);
	}
	/* without a cache drop, compare warm with warm: the dvar reads hit the cache */
	if (!g.cold)
		bench_raw_read(path, dst, g.size, 0);
	bench_drop_caches();
	record(S_RAW_READ_COLD, g.size, bench_raw_read(path, dst, g.size, 0));
	if (t >= 0) {
		bench_drop_caches();
		record(S_RAW_READ_DIRECT, g.size, bench_raw_read(path, dst, g.size, 1));
	}
	unlink(path);

	t = bench_now();
	memcpy(dst, src, g.size);
	record(S_MEMCPY, g.size, bench_now() - t);
	/* The checksum every byte saved or read costs, from memory as the
	 * replica check and an async save's copies meet it. */
	t = bench_now();
	volatile uint32_t crc = dvar_crc32c_extend(0, src, g.size);
	(void)crc;
	record(S_CRC, g.size, bench_now() - t);
}

/* ------------------------------------------------------------------ dvar */

static double save(const char *dir, const layout *l, const void *src, dvar_compress compress)
{
	dvar_write_options opts = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	double t0;

	dvar_write_request *req = calloc(l->n ? l->n : 1, sizeof *req);

	if (!req)
		bench_fatal("out of memory");
	for (size_t i = 0; i < l->n; i++)
		req[i] = (dvar_write_request){ l->t[i].name, DVAR_FLOAT32, &l->t[i].shape, NULL,
			                       (const char *)src + l->t[i].offset };
	opts.compress = compress;
	opts.threads = g.threads;
	bench_drop_caches();
	t0 = bench_now();
	bench_check(dvar_writer_open(&w, dir, &opts), "dvar_writer_open");
	bench_check(dvar_writer_add_many(w, req, l->n), "dvar_writer_add_many");
	bench_check(dvar_writer_commit(w), "dvar_writer_commit");
	t0 = bench_now() - t0;
	dvar_writer_free(w);
	free(req);
	return t0;
}

static dvar_reader *open_reader(const char *dir)
{
	dvar_read_options opts = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL;

	opts.threads = g.threads;
	bench_check(dvar_reader_open(&r, dir, &opts), "dvar_reader_open");
	return r;
}

/* Every tensor of l into dst: all in one dvar_reader_read_many (batched),
 * or one dvar_reader_read at a time. */
static double restore(const char *dir, const layout *l, void *dst, int batched)
{
	double t0 = bench_now();
	dvar_reader *r = open_reader(dir);
	dvar_read_request *req = calloc(l->n ? l->n : 1, sizeof *req);

	if (!req)
		bench_fatal("out of memory");
	for (size_t i = 0; i < l->n; i++) {
		req[i] = (dvar_read_request){ 0, NULL, (char *)dst + l->t[i].offset, l->t[i].bytes };
		bench_check(dvar_reader_find(r, l->t[i].name, &req[i].var), "dvar_reader_find");
		if (!batched)
			bench_check(dvar_reader_read(r, req[i].var, NULL, req[i].dst, req[i].dst_bytes),
			            l->t[i].name);
	}
	if (batched)
		bench_check(dvar_reader_read_many(r, req, l->n), "dvar_reader_read_many");
	t0 = bench_now() - t0;
	dvar_reader_free(r);
	free(req);
	return t0;
}

static double stored_over_raw(const char *dir)
{
	dvar_reader *r = open_reader(dir);
	uint64_t raw = 0, stored = 0;

	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		dvar_var_info info;
		bench_check(dvar_reader_var(r, i, &info), "dvar_reader_var");
		raw += info.raw_bytes;
		stored += info.stored_bytes;
	}
	dvar_reader_free(r);
	return raw ? (double)stored / raw : 0;
}

/* The data file's bytes over the tensors' bytes (one writer: one data file). */
static double data_over_raw(const char *dir, uint64_t raw)
{
	char path[4200];
	struct stat st;

	snprintf(path, sizeof(path), "%s/data-00000-of-00001", dir);
	if (stat(path, &st) != 0)
		bench_fatal("stat %s: %s", path, strerror(errno));
	return (double)st.st_size / (double)raw;
}

/* Untimed: a checkpoint must give back exactly what was saved. */
static void check_roundtrip(const char *dir, const layout *l, const void *src, void *dst)
{
	restore(dir, l, dst, 1);
	if (memcmp(src, dst, g.size) != 0)
		bench_fatal("%s: restored bytes differ from the saved ones", dir);
}

/* Where the page of bytes want (4096 of them) lies in path, a multiple of
 * 4096 from its start; bench_fatal when nowhere. */
static uint64_t find_page(const char *path, const void *want)
{
	static unsigned char buf[BENCH_IO_BLOCK];
	uint64_t at = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		bench_fatal("open %s: %s", path, strerror(errno));
	while ((n = pread(fd, buf, sizeof(buf), (off_t)at)) >= 4096) {
		for (ssize_t k = 0; k + 4096 <= n; k += 4096)
			if (!memcmp(buf + k, want, 4096)) {
				close(fd);
				return at + (uint64_t)k;
			}
		at += (uint64_t)n / 4096 * 4096;
	}
	bench_fatal("%s does not hold the rows of (e)", path);
	return 0;
}

/* Pairs of (e) reads per call: one pair's ratio moves by 20 % with the
 * host, the median of several much less. */
#define PARTIAL_PAIRS 5

/* (e), cold: dvar_reader_open and the read, and the same bytes read raw
 * from where they lie in the checkpoint's data file (the tensor's chunks
 * lie there in order: it was saved with NONE), open included, both ways of
 * bench_raw_read_range; the three take turns to go first, PARTIAL_PAIRS
 * times. dvar's median time is recorded, and the raw side's as the way
 * with the lower median: taking the faster of two reads in each pair
 * would set a best of two against dvar's one try. */
static void bench_partial(const char *dir, const tensor *t, const void *src, void *dst)
{
	uint64_t row_bytes = t->bytes / (uint64_t)t->shape.dims[0], got;
	const unsigned char *want;
	char data[4200];
	dvar_slice sl;
	dvar_reader *r;
	size_t v;
	double t0;

	want = (const unsigned char *)src + t->offset + partial_slice(t, &sl);
	uint64_t need = (uint64_t)sl.length[0] * row_bytes;
	snprintf(data, sizeof(data), "%s/data-00000-of-00001", dir);
	uint64_t at = find_page(data, want);

	double raw[2][PARTIAL_PAIRS], whole[PARTIAL_PAIRS], alone[PARTIAL_PAIRS];
	for (int p = 0; p < PARTIAL_PAIRS; p++)
		for (int k = 0; k < 3; k++) {
			int side = (k + p) % 3;
			memset(dst, 0, need);
			if (side < 2) {
				raw[side][p] = bench_raw_read_range(data, dst, at, need, 4, g.cold, side);
				if (memcmp(dst, want, need))
					bench_fatal("%s: the bytes of (e) are not one run at %llu", data,
					            (unsigned long long)at);
				continue;
			}
			bench_drop_caches();
			t0 = bench_now();
			r = open_reader(dir);
			double t1 = bench_now();
			bench_check(dvar_reader_find(r, t->name, &v), "dvar_reader_find");
			bench_check(dvar_reader_read(r, v, &sl, dst, need), "partial dvar_reader_read");
			alone[p] = bench_now() - t1;
			whole[p] = bench_now() - t0;
			got = dvar_reader_bytes_read(r);
			dvar_reader_free(r);
			if (memcmp(dst, want, need))
				bench_fatal("partial read returned wrong bytes");
			if ((double)got / need > g.s[S_PARTIAL].bytes_ratio)
				g.s[S_PARTIAL].bytes_ratio = (double)got / need;
		}
	double buffered = bench_median(raw[0], PARTIAL_PAIRS),
	       direct = bench_median(raw[1], PARTIAL_PAIRS);
	record(S_RAW_RANGE, need, buffered < direct ? buffered : direct);
	record(S_PARTIAL_READ, need, bench_median(alone, PARTIAL_PAIRS));
	record(S_PARTIAL, need, bench_median(whole, PARTIAL_PAIRS));
}

/* Where NumPy's large arrays start in a page (malloc's header). */
#define SKEW 16

/* (d) on the dense checkpoint saved with AUTO, (e) on the one saved with
 * NONE. dst has room for SKEW bytes more. */
static void bench_reads(const char *dir, dvar_compress mode, const layout *l, const void *src,
                        void *dst)
{
	if (mode == DVAR_COMPRESS_NONE) {
		bench_partial(dir, &l->t[0], src, dst);
		return;
	}
	/* Batched, one at a time, and batched into skewed buffers, each run
	 * starting one further along. */
	static const int ways[] = { S_RESTORE, S_RESTORE_ONE, S_RESTORE_SKEWED };
	int first = g.s[S_RESTORE].n;
	for (int k = 0; k < 3; k++) {
		int way = ways[(first + k) % 3];
		unsigned char *d = (unsigned char *)dst + (way == S_RESTORE_SKEWED ? SKEW : 0);
		memset(dst, 0, g.size + SKEW);
		bench_drop_caches();
		record(way, g.size, restore(dir, l, d, way != S_RESTORE_ONE));
		if (memcmp(src, d, g.size) != 0)
			bench_fatal("cold restore returned wrong bytes");
	}
}

typedef void (*read_back_fn)(const char *dir, dvar_compress mode, const layout *l, const void *src,
                             void *dst);

/* A way of bench_saves that is no save: a raw O_DIRECT write + fsync of the
 * same bytes, into one file where the checkpoint goes. */
#define RAW_WRITE (-1)
#define MAX_WAYS 4

/* One timed write of src by way (a dvar_compress or RAW_WRITE) into dir. */
static double save_way(const char *dir, const layout *l, const void *src, int way)
{
	if (way != RAW_WRITE)
		return save(dir, l, src, (dvar_compress)way);
	char path[4200];
	if (mkdir(dir, 0755) != 0)
		bench_fatal("mkdir %s: %s", dir, strerror(errno));
	snprintf(path, sizeof(path), "%s/raw.bin", dir);
	bench_drop_caches();
	return bench_raw_write(path, src, g.size, 1, 1);
}

/*
 * Save src twice per way, in an order that reads the same both ways
 * (A B C C B A; the next way first in the next run), and record each way's
 * two saves as one figure: whichever save comes first after some other
 * work runs up to 15 % slower or faster on this VM, whatever its mode, and
 * a mirrored order gives every way each place once. A mode may come twice
 * (a control: its two figures differ by the machine's noise alone), and
 * RAW_WRITE times the disk in the same order. Each checkpoint is deleted
 * before the next save (on a disk mounted with `discard` a save right after
 * a big delete runs slower, so every save follows one). Nothing else runs
 * between the timed saves, so that each follows the same work: a write and
 * a delete (a raw write right after the partial reads of (e) ran 2-10 %
 * slower than one after a write, 5 runs of 5). check_modes reads back after.
 */
static void bench_saves(int run, const layout *l, const void *src, const int *ways,
                        const int *which, int n)
{
	double secs[MAX_WAYS] = { 0 };
	char dir[4096];

	if (n > MAX_WAYS)
		bench_fatal("bench_saves: %d ways, at most %d", n, MAX_WAYS);

	snprintf(dir, sizeof(dir), "%s/ckpt", bench_scratch());
	for (int k = 0; k < 2 * n; k++) {
		int i = (run + (k < n ? k : 2 * n - 1 - k)) % n;
		double t = save_way(dir, l, src, ways[i]);
		/* O_DIRECT refused (tmpfs): no raw write to record */
		secs[i] = secs[i] < 0 || t < 0 ? -1 : secs[i] + t;
		if (ways[i] != RAW_WRITE)
			g.s[which[i]].bytes_ratio = stored_over_raw(dir);
		bench_remove_tree(dir);
	}
	for (int i = 0; i < n; i++)
		if (secs[i] > 0)
			record(which[i], 2 * g.size, secs[i]);
}

/*
 * Untimed, after bench_saves: a save in each mode of ways[0, n), checked
 * against src in the first run, read back by read_back when given (every
 * run), and deleted.
 */
static void check_modes(int run, const layout *l, const void *src, void *dst, const int *ways,
                        int n, read_back_fn read_back)
{
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s/ckpt", bench_scratch());
	for (int i = 0; i < n; i++) {
		int first = ways[i] != RAW_WRITE;
		for (int j = 0; j < i; j++)
			first &= ways[j] != ways[i];
		if (!first || (run > 0 && !read_back))
			continue;
		save(dir, l, src, (dvar_compress)ways[i]);
		if (run == 0)
			check_roundtrip(dir, l, src, dst);
		if (read_back)
			read_back(dir, (dvar_compress)ways[i], l, src, dst);
		bench_remove_tree(dir);
	}
}

/*
 * An untimed save, deleted: the first save after the raw I/O ran 15-20 %
 * slower than the one after it, whatever its mode (AUTO 0.86-0.92 GB/s
 * first, 1.11-1.19 second, over 4 runs), so no timed save comes first.
 */
static void settle(const layout *l, const void *src)
{
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s/ckpt", bench_scratch());
	save(dir, l, src, DVAR_COMPRESS_NONE);
	bench_remove_tree(dir);
}

/* (f): SMALL_N float32 tensors of SMALL_ELEMS elements, AUTO, save + fsync. */
static void bench_small(int run, const layout *l, const void *src, void *dst)
{
	uint64_t raw = (uint64_t)l->n * SMALL_ELEMS * 4;
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s/ckpt", bench_scratch());
	record(S_SMALL, raw, save(dir, l, src, DVAR_COMPRESS_AUTO));
	g.s[S_SMALL].bytes_ratio = data_over_raw(dir, raw);
	if (run == 0) {
		restore(dir, l, dst, 1);
		if (memcmp(src, dst, raw) != 0)
			bench_fatal("round trip of %s: the small tensors read back differ", dir);
	}
	bench_remove_tree(dir);
}

static double last(int which)
{
	return bench_last(g.s[which].gbps, g.s[which].n);
}

static void one_run(int run, const layout *mixed, const layout *table, const layout *small,
                    uint32_t *src, void *dst)
{
	/* NONE twice: the second is the control of the AUTO / NONE goals. */
	static const int dense_ways[] = { DVAR_COMPRESS_AUTO, DVAR_COMPRESS_NONE, DVAR_COMPRESS_NONE,
		                              RAW_WRITE };
	static const int auto_none[] = { DVAR_COMPRESS_AUTO, DVAR_COMPRESS_NONE, DVAR_COMPRESS_NONE };
	static const int all[] = { DVAR_COMPRESS_AUTO, DVAR_COMPRESS_LZ4, DVAR_COMPRESS_NONE,
		                       DVAR_COMPRESS_NONE };
	static const int dense[] = { S_DENSE_AUTO, S_DENSE_NONE, S_DENSE_AGAIN, S_RAW_WRITE_TURN };
	static const int rows[] = { S_ROWS_AUTO, S_ROWS_LZ4, S_ROWS_NONE, S_ROWS_AGAIN };
	static const int elems[] = { S_ELEM_AUTO, S_ELEM_NONE, S_ELEM_AGAIN };

	fprintf(stderr, "run %d/%d:", run + 1, g.runs);
	fill_dense(src, g.size / 4);
	bench_raw(src, dst);
	settle(mixed, src);
	bench_saves(run, mixed, src, dense_ways, dense, 4);
	check_modes(run, mixed, src, dst, dense_ways, 4, bench_reads);
	bench_small(run, small, src, dst);

	fill_row_sparse(src, g.size / 512, 128);
	bench_saves(run, table, src, all, rows, 4);
	check_modes(run, table, src, dst, all, 4, NULL);

	fill_element_sparse(src, g.size / 4);
	bench_saves(run, mixed, src, auto_none, elems, 3);
	check_modes(run, mixed, src, dst, auto_none, 3, NULL);

	fprintf(stderr,
	        " O_DIRECT write %.2f (in turn %.2f), cold read %.2f | dense AUTO %.2f NONE %.2f "
	        "%.2f | restore %.2f | rows AUTO %.2f LZ4 %.2f NONE %.2f %.2f | elems AUTO %.2f "
	        "NONE %.2f %.2f | small %.3f GB/s\n",
	        last(S_RAW_WRITE_DIRECT), last(S_RAW_WRITE_TURN), last(S_RAW_READ_COLD),
	        last(S_DENSE_AUTO), last(S_DENSE_NONE), last(S_DENSE_AGAIN), last(S_RESTORE),
	        last(S_ROWS_AUTO), last(S_ROWS_LZ4), last(S_ROWS_NONE), last(S_ROWS_AGAIN),
	        last(S_ELEM_AUTO), last(S_ELEM_NONE), last(S_ELEM_AGAIN), last(S_SMALL));
}

/* ------------------------------------------------------------------ report */

static double median(int which)
{
	return bench_median(g.s[which].gbps, g.s[which].n);
}

/*
 * The median over runs of a's figure over b's from the same run: each pair
 * was measured a minute apart, so the host's drift between runs cancels.
 */
static double ratio(int a, int b)
{
	return bench_median_ratio(g.s[a].gbps, g.s[a].n, g.s[b].gbps, g.s[b].n);
}

static void row(const char *label, int which, int base, const char *base_name, const char *extra)
{
	series *s = &g.s[which];
	char vs[48] = "", bytes[32] = "";
	double lo, hi;

	if (s->n == 0) {
		printf("  %-38s %6s\n", label, "n/a");
		return;
	}
	bench_min_max(s->gbps, s->n, &lo, &hi);
	if (base >= 0 && ratio(which, base) > 0)
		snprintf(vs, sizeof(vs), "%.2fx %s", ratio(which, base), base_name);
	if (s->bytes_ratio > 0 && *extra)
		snprintf(bytes, sizeof(bytes), "%s %.3f", extra, s->bytes_ratio);
	bench_print_row("  %-38s %6.2f  [%5.2f-%5.2f]  %-24s %s", label, median(which), lo, hi, vs,
	                bytes);
}

/* A goal on the median over runs of a's figure over b's, its text saying
 * the run count and the spread of the per-run ratios. */
static bench_goal ratio_goal(char *text, size_t cap, const char *what, int a, int b, double bound)
{
	double lo, hi;
	bench_goal gl = { text, ratio(a, b), bound, 0, "x" };

	bench_ratio_min_max(g.s[a].gbps, g.s[a].n, g.s[b].gbps, g.s[b].n, &lo, &hi);
	snprintf(text, cap, "%s >= %.2fx (%d run%s, %.2f-%.2f)", what, bound, g.s[a].n,
	         g.s[a].n == 1 ? "" : "s", lo, hi);
	return gl;
}

static void report(const layout *mixed)
{
	const char *rd = g.cold ? "cold" : "warm (could not drop caches)";
	const char *rdb = g.cold ? "cold read" : "warm read";
	const tensor *t0 = &mixed->t[0];
	static const bench_goal_style style = { 76, 6, 4, 0, 1 };
	char label[96], threads[64];

	bench_threads_text(threads, sizeof(threads), g.threads);
	printf("\ndvar_bench_io: %llu MiB per case, %d run%s, threads %s, scratch in %s\n",
	       (unsigned long long)(g.size / BENCH_MIB), g.runs, g.runs > 1 ? "s" : "", threads, g.dir);
	printf("GB/s = 1e9 bytes of tensor data per second, median [min-max] over the runs;\n"
	       "vs raw = median of the per-run ratios; reads are %s\n\n", rd);
	printf("  %-38s %6s  %-13s  %-24s %s\n", "case", "GB/s", "[min-max]", "vs raw",
	       "bytes");
	printf("machine, same bytes\n");
	row("memcpy, 1 thread", S_MEMCPY, -1, "", "");
	row("CRC-32C from memory, 1 thread", S_CRC, -1, "", "");
	row("raw write, page cache + fsync", S_RAW_WRITE_BUF, -1, "", "");
	row("raw write, O_DIRECT 4 MiB + fsync", S_RAW_WRITE_DIRECT, -1, "", "");
	snprintf(label, sizeof(label), "raw read, %s", g.cold ? "cold" : "warm");
	row(label, S_RAW_READ_COLD, -1, "", "");
	row("raw read, O_DIRECT 4 MiB", S_RAW_READ_DIRECT, -1, "", "");
	row("raw write as above, in turn with (a)", S_RAW_WRITE_TURN, -1, "", "");
	printf("(a) dense float32, %zu tensors of 4 KiB to %llu MiB, save + fsync\n", mixed->n,
	       (unsigned long long)(t0->bytes / BENCH_MIB));
	row("AUTO (default)", S_DENSE_AUTO, S_RAW_WRITE_TURN, "raw in turn", "stored/raw");
	row("NONE", S_DENSE_NONE, S_RAW_WRITE_TURN, "raw in turn", "stored/raw");
	row("NONE again (control)", S_DENSE_AGAIN, S_DENSE_NONE, "NONE", "");
	printf("(b) embedding [%llu,128] float32, 50%% zero rows, save + fsync\n",
	       (unsigned long long)(g.size / 512));
	row("AUTO", S_ROWS_AUTO, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("LZ4", S_ROWS_LZ4, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE", S_ROWS_NONE, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE again (control)", S_ROWS_AGAIN, S_ROWS_NONE, "NONE", "");
	printf("(c) float32, 50%% zero elements, tensors as in (a), save + fsync\n");
	row("AUTO", S_ELEM_AUTO, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE", S_ELEM_NONE, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE again (control)", S_ELEM_AGAIN, S_ELEM_NONE, "NONE", "");
	printf("(d) restore of (a) AUTO, %s, into reused buffers\n", rd);
	row("dvar_reader_read_many, all tensors", S_RESTORE, S_RAW_READ_COLD, rdb, "");
	row("dvar_reader_read, one at a time", S_RESTORE_ONE, S_RAW_READ_COLD, rdb, "");
	row("read_many, buffers 16 B past a page", S_RESTORE_SKEWED, S_RAW_READ_COLD, rdb, "");
	printf("(e) partial read of %s [%lld,1024] of (a) NONE: 1/8 of its rows from row %lld, %s\n",
	       t0->name, (long long)t0->shape.dims[0], (long long)(t0->shape.dims[0] / 2 + 3), rd);
	row("raw, the same bytes, its open included", S_RAW_RANGE, -1, "", "");
	row("GB/s of the bytes needed", S_PARTIAL, S_RAW_RANGE, "raw, same bytes", "read/needed");
	row("the same", S_PARTIAL, S_RAW_READ_COLD, rdb, "");
	row("the read alone, after dvar_reader_open", S_PARTIAL_READ, S_RAW_RANGE, "raw, same bytes", "");

	printf("(f) %d float32 tensors of %d elements, AUTO, save + fsync\n", SMALL_N, SMALL_ELEMS);
	row("GB/s of the tensors' bytes", S_SMALL, -1, "", "data file/raw");

	char t[6][128], what[96];
	snprintf(what, sizeof(what), "(d) restore / raw %s", rdb);
	bench_goal d = ratio_goal(t[4], sizeof(t[4]), what, S_RESTORE, S_RAW_READ_COLD, 0.95);
	snprintf(what, sizeof(what), "(e) partial read / raw %s of the same bytes", rd);
	bench_goal e = ratio_goal(t[5], sizeof(t[5]), what, S_PARTIAL, S_RAW_RANGE, 0.9);
	bench_goal gl[] = {
		ratio_goal(t[0], sizeof(t[0]), "(a) dense save / raw O_DIRECT write", S_DENSE_AUTO,
		           S_RAW_WRITE_TURN, 0.95),
		ratio_goal(t[1], sizeof(t[1]), "(a) dense: AUTO / NONE", S_DENSE_AUTO, S_DENSE_NONE, 0.95),
		ratio_goal(t[2], sizeof(t[2]), "(b) row-sparse: AUTO / NONE", S_ROWS_AUTO, S_ROWS_NONE, 0.95),
		ratio_goal(t[3], sizeof(t[3]), "(c) element-sparse: AUTO / NONE", S_ELEM_AUTO, S_ELEM_NONE, 0.95),
		d,
		e,
		{ "(e) partial read: bytes read / bytes needed <= 1.05", g.s[S_PARTIAL].bytes_ratio, 1.05,
		  1, "x" },
		{ "(f) small tensors: data file bytes / raw bytes <= 1.1", g.s[S_SMALL].bytes_ratio, 1.1, 1,
		  "x" },
	};
	bench_print_goals(gl, (int)(sizeof(gl) / sizeof(gl[0])), &style);

	/* What one run's AUTO / NONE can resolve: the same save, in turn with
	 * AUTO and NONE, over NONE's, in the same runs. */
	static const struct {
		const char *what;
		int again, none;
	} ctl[] = {
		{ "(a)", S_DENSE_AGAIN, S_DENSE_NONE },
		{ "(b)", S_ROWS_AGAIN, S_ROWS_NONE },
		{ "(c)", S_ELEM_AGAIN, S_ELEM_NONE },
	};
	printf("controls, NONE again / NONE, lowest-highest run:");
	for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
		double lo, hi;
		bench_ratio_min_max(g.s[ctl[i].again].gbps, g.s[ctl[i].again].n, g.s[ctl[i].none].gbps,
		                    g.s[ctl[i].none].n, &lo, &hi);
		printf(" %s %.2f-%.2f", ctl[i].what, lo, hi);
	}
	printf("\n");
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: dvar_bench_io [--size-mb N] [--dir DIR] [--runs N] [--threads N]\n"
	        "  --size-mb N   MiB of tensor data per case (default 1024, at least 8)\n"
	        "  --dir DIR     where scratch checkpoints go (default $TMPDIR or /tmp)\n"
	        "  --runs N      runs; medians are reported (default 6, max %d)\n"
	        "  --threads N   dvar writer/reader threads (default 0: the library's)\n"
	        "Run as root so the page cache can be dropped before each read.\n",
	        BENCH_MAX_SAMPLES);
}

int main(int argc, char **argv)
{
	static const bench_program prog = { "dvar_bench_io", -1, usage, NULL, NULL };
	layout mixed, table = { NULL, 0, 0 }, small = { NULL, 0, 0 };
	void *src, *dst;

	g.size = 1024 * BENCH_MIB;
	g.runs = 6;
	g.dir = bench_default_dir();
	bench_init(&prog);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int took = bench_common_option(a, v, NULL, &g.dir, NULL);

		if (took) {
			i += took - 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--size-mb")) {
			g.size = (uint64_t)bench_parse_num(a, v, 8, 1 << 20) * BENCH_MIB;
		} else if (!strcmp(a, "--runs")) {
			g.runs = (int)bench_parse_num(a, v, 1, BENCH_MAX_SAMPLES);
		} else if (!strcmp(a, "--threads")) {
			g.threads = (int)bench_parse_num(a, v, 0, 1024);
		} else {
			bench_bad_option(a);
		}
		i++;
	}

	if (bench_scratch_create(g.dir, "dvar-bench", NULL) != 0)
		bench_fatal("cannot create a scratch directory in %s: %s", g.dir, strerror(errno));
	g.cold = bench_drop_caches() == 0;

	mixed = make_mixed_layout(g.size);
	add_tensor(&table, 0, g.size, 2, 128);
	for (uint64_t k = 0; k < SMALL_N; k++)
		add_tensor(&small, k * SMALL_ELEMS * 4, SMALL_ELEMS * 4, 1, 1);
	src = bench_alloc_prefaulted(g.size);
	dst = bench_alloc_prefaulted(g.size + SKEW);

	fprintf(stderr, "dvar %s, %llu MiB per case, %d run(s), scratch %s, reads %s\n",
	        dvar_version(), (unsigned long long)(g.size / BENCH_MIB), g.runs, bench_scratch(),
	        g.cold ? "cold" : "warm (could not drop caches)");
	for (int run = 0; run < g.runs; run++)
		one_run(run, &mixed, &table, &small, src, dst);
	report(&mixed);

	bench_scratch_remove();
	free(mixed.t);
	free(table.t);
	free(small.t);
	munmap(src, g.size);
	munmap(dst, g.size);
	return 0;
}
