/*
 * bench_io.c - save and restore throughput of dvar checkpoints next to the
 * same machine's raw sequential I/O, measured in the same run.
 *
 * Each run writes and reads --size-mb of float32 tensors in several shapes
 * (dense, row-sparse, element-sparse) and times raw file I/O of the same
 * bytes, so every ratio compares figures taken minutes apart on the same
 * disk. A save is timed from dvar_writer_open to the end of
 * dvar_writer_commit (fsyncs included); a restore from dvar_reader_open to
 * the last dvar_reader_read. Reads are cold when the page cache can be
 * dropped (root). Buffers are allocated and pre-faulted once: first-touch
 * page faults would otherwise cost as much as the disk. See bench/README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dvar/dvar.h"

#define MIB (1024ull * 1024ull)
#define IO_BLOCK (4 * MIB)
#define MAX_RUNS 99
/* "AUTO not slower than NONE" allows this much run-to-run noise. */
#define NOISE_MARGIN 0.95

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
	S_RAW_WRITE_BUF,
	S_RAW_WRITE_DIRECT,
	S_RAW_READ_COLD,
	S_RAW_READ_DIRECT,
	S_DENSE_AUTO,
	S_DENSE_NONE,
	S_ROWS_AUTO,
	S_ROWS_LZ4,
	S_ROWS_NONE,
	S_ELEM_AUTO,
	S_ELEM_NONE,
	S_RESTORE,
	S_PARTIAL,
	S_COUNT
};

typedef struct {
	double gbps[MAX_RUNS];
	int n;
	double bytes_ratio; /* stored/raw for saves, read/needed for partial; 0 = none */
} series;

static struct {
	uint64_t size;
	const char *dir;
	int runs;
	int threads;
	int cold; /* the page cache can be dropped */
	char *scratch;
	series s[S_COUNT];
} g;

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fatal(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "dvar_bench_io: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (g.scratch)
		remove_tree(g.scratch);
	exit(1);
}

static void check(int rc, const char *what)
{
	if (rc != DVAR_OK)
		fatal("%s: %s (%s)", what, dvar_error_last()->message, dvar_strerror(rc));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void record(int which, uint64_t bytes, double seconds)
{
	series *s = &g.s[which];

	s->gbps[s->n++] = bytes / seconds / 1e9;
}

/* Anonymous, huge-page-advised and touched now, so no timed section faults. */
static void *alloc_prefaulted(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		fatal("cannot map %llu bytes: %s", (unsigned long long)bytes, strerror(errno));
	madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes);
	return p;
}

/* Drop the page cache (root only); always flush dirty pages first. */
static int drop_caches(void)
{
	int fd, ok;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return -1;
	ok = write(fd, "3\n", 2) == 2;
	close(fd);
	return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ data */

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

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
		dst[i] = rnd_float_bits(rnd(&x));
}

static void fill_element_sparse(uint32_t *dst, uint64_t n)
{
	uint64_t x = 0x2545f4914f6cdd1dull;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = rnd(&x);
		dst[i] = (r >> 31) & 1 ? rnd_float_bits(r) : 0;
	}
}

static void fill_row_sparse(uint32_t *dst, uint64_t rows, uint64_t cols)
{
	uint64_t x = 0x5851f42d4c957f2dull;

	for (uint64_t i = 0; i < rows; i++) {
		uint32_t *row = dst + i * cols;
		if (rnd(&x) >> 63) {
			memset(row, 0, cols * 4);
			continue;
		}
		for (uint64_t j = 0; j < cols; j++)
			row[j] = rnd_float_bits(rnd(&x));
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
			fatal("out of memory");
	}
	t = &l->t[l->n];
	snprintf(t->name, sizeof(t->name), "t%04zu", l->n);
	t->offset = offset;
	t->bytes = bytes;
	check(dvar_shape_init(&t->shape, rank, dims), "shape");
	l->n++;
}

/*
 * A model-like mix: three quarters of the bytes in 64-256 MiB matrices of
 * 4 KiB rows, the rest in vectors of 4 KiB to 4 MiB.
 */
static layout make_mixed_layout(uint64_t size)
{
	static const uint64_t big[] = { 256 * MIB, 128 * MIB, 64 * MIB };
	static const uint64_t small[] = { 4096, 16384, 65536, 262144, MIB, 4 * MIB };
	uint64_t large = size / 4 * 3 & ~(4 * MIB - 1), off = 0;
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

/* Seconds to write bytes sequentially in 4 MiB blocks and fsync; < 0 when the
 * filesystem refuses O_DIRECT. */
static double raw_write(const char *path, const void *buf, uint64_t bytes, int direct)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
	double t0 = now();

	if (fd < 0 && direct && errno == EINVAL)
		return -1;
	if (fd < 0)
		fatal("open %s: %s", path, strerror(errno));
	for (uint64_t done = 0; done < bytes;) {
		uint64_t n = bytes - done < IO_BLOCK ? bytes - done : IO_BLOCK;
		ssize_t w = write(fd, (const char *)buf + done, n);
		if (w < 0 && direct && errno == EINVAL && done == 0) {
			close(fd);
			return -1;
		}
		if (w <= 0)
			fatal("write %s: %s", path, strerror(errno));
		done += (uint64_t)w;
	}
	if (fsync(fd) != 0)
		fatal("fsync %s: %s", path, strerror(errno));
	close(fd);
	return now() - t0;
}

static double raw_read(const char *path, void *buf, uint64_t bytes, int direct)
{
	int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	double t0 = now();

	if (fd < 0)
		fatal("open %s: %s", path, strerror(errno));
	for (uint64_t done = 0; done < bytes;) {
		uint64_t n = bytes - done < IO_BLOCK ? bytes - done : IO_BLOCK;
		ssize_t r = read(fd, (char *)buf + done, n);
		if (r <= 0)
			fatal("read %s: %s", path, r < 0 ? strerror(errno) : "short file");
		done += (uint64_t)r;
	}
	close(fd);
	return now() - t0;
}

static void bench_raw(void *src, void *dst)
{
	char path[4096];
	double t;

	snprintf(path, sizeof(path), "%s/raw.bin", g.scratch);

	drop_caches();
	record(S_RAW_WRITE_BUF, g.size, raw_write(path, src, g.size, 0));
	unlink(path);

	drop_caches();
	t = raw_write(path, src, g.size, 1);
	if (t < 0) {
		/* O_DIRECT unsupported (tmpfs): keep a buffered file for the reads */
		raw_write(path, src, g.size, 0);
	} else {
		record(S_RAW_WRITE_DIRECT, g.size, t);
	}
	/* without a cache drop, compare warm with warm: the dvar reads hit the cache */
	if (!g.cold)
		raw_read(path, dst, g.size, 0);
	drop_caches();
	record(S_RAW_READ_COLD, g.size, raw_read(path, dst, g.size, 0));
	if (t >= 0) {
		drop_caches();
		record(S_RAW_READ_DIRECT, g.size, raw_read(path, dst, g.size, 1));
	}
	unlink(path);

	t = now();
	memcpy(dst, src, g.size);
	record(S_MEMCPY, g.size, now() - t);
}

/* ------------------------------------------------------------------ dvar */

static double save(const char *dir, const layout *l, const void *src, dvar_compress compress)
{
	dvar_write_options opts = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	double t0;

	opts.compress = compress;
	opts.threads = g.threads;
	drop_caches();
	t0 = now();
	check(dvar_writer_open(&w, dir, &opts), "dvar_writer_open");
	for (size_t i = 0; i < l->n; i++)
		check(dvar_writer_add(w, l->t[i].name, DVAR_FLOAT32, &l->t[i].shape, NULL,
		                      (const char *)src + l->t[i].offset),
		      l->t[i].name);
	check(dvar_writer_commit(w), "dvar_writer_commit");
	t0 = now() - t0;
	dvar_writer_free(w);
	return t0;
}

static dvar_reader *open_reader(const char *dir)
{
	dvar_read_options opts = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL;

	opts.threads = g.threads;
	check(dvar_reader_open(&r, dir, &opts), "dvar_reader_open");
	return r;
}

static double restore(const char *dir, const layout *l, void *dst)
{
	double t0 = now();
	dvar_reader *r = open_reader(dir);

	for (size_t i = 0; i < l->n; i++) {
		size_t v;
		check(dvar_reader_find(r, l->t[i].name, &v), "dvar_reader_find");
		check(dvar_reader_read(r, v, NULL, (char *)dst + l->t[i].offset, l->t[i].bytes),
		      l->t[i].name);
	}
	t0 = now() - t0;
	dvar_reader_free(r);
	return t0;
}

static double stored_over_raw(const char *dir)
{
	dvar_reader *r = open_reader(dir);
	uint64_t raw = 0, stored = 0;

	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		dvar_var_info info;
		check(dvar_reader_var(r, i, &info), "dvar_reader_var");
		raw += info.raw_bytes;
		stored += info.stored_bytes;
	}
	dvar_reader_free(r);
	return raw ? (double)stored / raw : 0;
}

/* Untimed: a checkpoint must give back exactly what was saved. */
static void check_roundtrip(const char *dir, const layout *l, const void *src, void *dst)
{
	restore(dir, l, dst);
	if (memcmp(src, dst, g.size) != 0)
		fatal("%s: restored bytes differ from the saved ones", dir);
}

/* Rows [rows/2 + 3, +rows/8) of the first (largest) tensor: starts inside a chunk. */
static void bench_partial(const char *dir, const tensor *t, const void *src, void *dst)
{
	uint64_t row_bytes = t->bytes / (uint64_t)t->shape.dims[0], got;
	dvar_slice sl;
	dvar_reader *r;
	size_t v;
	double t0;

	dvar_slice_full(&sl, &t->shape);
	sl.length[0] = t->shape.dims[0] / 8;
	sl.start[0] = t->shape.dims[0] / 2 + 3;
	uint64_t need = (uint64_t)sl.length[0] * row_bytes;

	drop_caches();
	t0 = now();
	r = open_reader(dir);
	check(dvar_reader_find(r, t->name, &v), "dvar_reader_find");
	check(dvar_reader_read(r, v, &sl, dst, need), "partial dvar_reader_read");
	t0 = now() - t0;
	got = dvar_reader_bytes_read(r);
	dvar_reader_free(r);
	if (memcmp(dst, (const char *)src + t->offset + (uint64_t)sl.start[0] * row_bytes, need))
		fatal("partial read returned wrong bytes");
	record(S_PARTIAL, need, t0);
	if ((double)got / need > g.s[S_PARTIAL].bytes_ratio)
		g.s[S_PARTIAL].bytes_ratio = (double)got / need;
}

/* (d) and (e) on the dense checkpoint. */
static void bench_reads(const char *dir, const layout *l, const void *src, void *dst)
{
	drop_caches();
	record(S_RESTORE, g.size, restore(dir, l, dst));
	if (memcmp(src, dst, g.size) != 0)
		fatal("cold restore returned wrong bytes");
	bench_partial(dir, &l->t[0], src, dst);
}

/*
 * Save src once per mode, starting with another mode each run, and delete
 * each checkpoint before the next save: on a disk mounted with `discard` a
 * save right after a big delete runs slower, so every save follows one.
 * read_back, when given, runs on the AUTO checkpoint before it is deleted.
 */
static void bench_saves(int run, const layout *l, const void *src, void *dst,
                        const dvar_compress *modes, const int *which, int n,
                        void (*read_back)(const char *dir, const layout *l, const void *src,
                                          void *dst))
{
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s/ckpt", g.scratch);
	for (int k = 0; k < n; k++) {
		int i = (run + k) % n;
		record(which[i], g.size, save(dir, l, src, modes[i]));
		g.s[which[i]].bytes_ratio = stored_over_raw(dir);
		if (run == 0)
			check_roundtrip(dir, l, src, dst);
		if (read_back && modes[i] == DVAR_COMPRESS_AUTO)
			read_back(dir, l, src, dst);
		remove_tree(dir);
	}
}

static double last(int which)
{
	return g.s[which].n ? g.s[which].gbps[g.s[which].n - 1] : 0;
}

static void one_run(int run, const layout *mixed, const layout *table, uint32_t *src, void *dst)
{
	static const dvar_compress auto_none[] = { DVAR_COMPRESS_AUTO, DVAR_COMPRESS_NONE };
	static const dvar_compress all[] = { DVAR_COMPRESS_AUTO, DVAR_COMPRESS_LZ4,
		                             DVAR_COMPRESS_NONE };
	static const int dense[] = { S_DENSE_AUTO, S_DENSE_NONE };
	static const int rows[] = { S_ROWS_AUTO, S_ROWS_LZ4, S_ROWS_NONE };
	static const int elems[] = { S_ELEM_AUTO, S_ELEM_NONE };

	fprintf(stderr, "run %d/%d:", run + 1, g.runs);
	fill_dense(src, g.size / 4);
	bench_raw(src, dst);
	bench_saves(run, mixed, src, dst, auto_none, dense, 2, bench_reads);

	fill_row_sparse(src, g.size / 512, 128);
	bench_saves(run, table, src, dst, all, rows, 3, NULL);

	fill_element_sparse(src, g.size / 4);
	bench_saves(run, mixed, src, dst, auto_none, elems, 2, NULL);

	fprintf(stderr, " O_DIRECT write %.2f, cold read %.2f | dense AUTO %.2f NONE %.2f | "
	                "restore %.2f | rows AUTO %.2f LZ4 %.2f NONE %.2f | elems AUTO %.2f "
	                "NONE %.2f GB/s\n",
	        last(S_RAW_WRITE_DIRECT), last(S_RAW_READ_COLD), last(S_DENSE_AUTO),
	        last(S_DENSE_NONE), last(S_RESTORE), last(S_ROWS_AUTO), last(S_ROWS_LZ4),
	        last(S_ROWS_NONE), last(S_ELEM_AUTO), last(S_ELEM_NONE));
}

/* ------------------------------------------------------------------ report */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(int which)
{
	series *s = &g.s[which];
	double v[MAX_RUNS];

	if (s->n == 0)
		return 0;
	memcpy(v, s->gbps, s->n * sizeof(double));
	qsort(v, s->n, sizeof(double), cmp_double);
	return s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
}

/*
 * The median over runs of a's figure over b's from the same run: each pair
 * was measured a minute apart, so the host's drift between runs cancels.
 */
static double ratio(int a, int b)
{
	const series *x = &g.s[a], *y = &g.s[b];
	double v[MAX_RUNS];
	int n = x->n;

	if (n == 0 || y->n != n)
		return 0;
	for (int i = 0; i < n; i++)
		v[i] = x->gbps[i] / y->gbps[i];
	qsort(v, n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void row(const char *label, int which, int base, const char *base_name, const char *extra)
{
	series *s = &g.s[which];
	double lo = s->gbps[0], hi = s->gbps[0];
	char vs[48] = "", bytes[32] = "", line[160];
	int n;

	if (s->n == 0) {
		printf("  %-38s %6s\n", label, "n/a");
		return;
	}
	for (int i = 1; i < s->n; i++) {
		lo = s->gbps[i] < lo ? s->gbps[i] : lo;
		hi = s->gbps[i] > hi ? s->gbps[i] : hi;
	}
	if (base >= 0 && ratio(which, base) > 0)
		snprintf(vs, sizeof(vs), "%.2fx %s", ratio(which, base), base_name);
	if (s->bytes_ratio > 0)
		snprintf(bytes, sizeof(bytes), "%s %.3f", extra, s->bytes_ratio);
	n = snprintf(line, sizeof(line), "  %-38s %6.2f  [%5.2f-%5.2f]  %-24s %s", label,
	             median(which), lo, hi, vs, bytes);
	while (n > 0 && line[n - 1] == ' ')
		n--;
	printf("%.*s\n", n, line);
}


typedef struct {
	const char *text;
	double value; /* 0 when it could not be measured */
	double bound;
	int at_most;  /* met when value <= bound, else when value >= bound */
	const char *unit;
} goal;

static void print_goals(const goal *gl, int n)
{
	int met = 0;

	printf("\ngoals\n");
	for (int i = 0; i < n; i++) {
		int ok = gl[i].value > 0 &&
		         (gl[i].at_most ? gl[i].value <= gl[i].bound : gl[i].value >= gl[i].bound);
		met += ok;
		if (gl[i].value > 0)
			printf("  %-60s %6.3f %-4s  %s\n", gl[i].text, gl[i].value, gl[i].unit,
			       ok ? "met" : "MISSED");
		else
			printf("  %-60s %6s %-4s  MISSED\n", gl[i].text, "n/a", "");
	}
	printf("%d of %d goals met\n", met, n);
}

static void report(const layout *mixed)
{
	const char *rd = g.cold ? "cold" : "warm (could not drop caches)";
	const char *rdb = g.cold ? "cold read" : "warm read";
	const tensor *t0 = &mixed->t[0];
	char label[96], threads[32];

	if (g.threads > 0)
		snprintf(threads, sizeof(threads), "%d", g.threads);
	else
		snprintf(threads, sizeof(threads), "all %ld", sysconf(_SC_NPROCESSORS_ONLN));
	printf("\ndvar_bench_io: %llu MiB per case, %d run%s, %s CPU threads, scratch in %s\n",
	       (unsigned long long)(g.size / MIB), g.runs, g.runs > 1 ? "s" : "", threads, g.dir);
	printf("GB/s = 1e9 bytes of tensor data per second, median [min-max] over the runs;\n"
	       "vs raw = median of the per-run ratios; reads are %s\n\n", rd);
	printf("  %-38s %6s  %-13s  %-24s %s\n", "case", "GB/s", "[min-max]", "vs raw",
	       "bytes");
	printf("machine, same bytes\n");
	row("memcpy, 1 thread", S_MEMCPY, -1, "", "");
	row("raw write, page cache + fsync", S_RAW_WRITE_BUF, -1, "", "");
	row("raw write, O_DIRECT 4 MiB + fsync", S_RAW_WRITE_DIRECT, -1, "", "");
	snprintf(label, sizeof(label), "raw read, %s", g.cold ? "cold" : "warm");
	row(label, S_RAW_READ_COLD, -1, "", "");
	row("raw read, O_DIRECT 4 MiB", S_RAW_READ_DIRECT, -1, "", "");
	printf("(a) dense float32, %zu tensors of 4 KiB to %llu MiB, save + fsync\n", mixed->n,
	       (unsigned long long)(t0->bytes / MIB));
	row("AUTO (default)", S_DENSE_AUTO, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE", S_DENSE_NONE, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	printf("(b) embedding [%llu,128] float32, 50%% zero rows, save + fsync\n",
	       (unsigned long long)(g.size / 512));
	row("AUTO", S_ROWS_AUTO, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("LZ4", S_ROWS_LZ4, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE", S_ROWS_NONE, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	printf("(c) float32, 50%% zero elements, tensors as in (a), save + fsync\n");
	row("AUTO", S_ELEM_AUTO, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	row("NONE", S_ELEM_NONE, S_RAW_WRITE_DIRECT, "O_DIRECT write", "stored/raw");
	printf("(d) restore of (a) AUTO, %s, into reused buffers\n", rd);
	row("dvar_reader_read, every tensor", S_RESTORE, S_RAW_READ_COLD, rdb, "");
	printf("(e) partial read of %s [%lld,1024]: 1/8 of its rows from row %lld, %s\n",
	       t0->name, (long long)t0->shape.dims[0], (long long)(t0->shape.dims[0] / 2 + 3), rd);
	row("GB/s of the bytes needed", S_PARTIAL, S_RAW_READ_COLD, rdb, "read/needed");

	snprintf(label, sizeof(label), "restore >= 0.9x raw %s", rdb);
	goal gl[] = {
		{ "dense save+fsync >= 0.85x raw O_DIRECT write+fsync",
		  ratio(S_DENSE_AUTO, S_RAW_WRITE_DIRECT), 0.85, 0, "x" },
		{ "dense save+fsync >= 1.3 GB/s", median(S_DENSE_AUTO), 1.3, 0, "GB/s" },
		{ label, ratio(S_RESTORE, S_RAW_READ_COLD), 0.9, 0, "x" },
		{ "dense: AUTO not slower than NONE (5% noise margin)",
		  ratio(S_DENSE_AUTO, S_DENSE_NONE), NOISE_MARGIN, 0, "x" },
		{ "row-sparse: AUTO not slower than NONE (5% noise margin)",
		  ratio(S_ROWS_AUTO, S_ROWS_NONE), NOISE_MARGIN, 0, "x" },
		{ "element-sparse: AUTO not slower than NONE (5% noise margin)",
		  ratio(S_ELEM_AUTO, S_ELEM_NONE), NOISE_MARGIN, 0, "x" },
		/* "faster" must beat the noise margin too */
		{ "row-sparse: AUTO faster than NONE (by more than 5%)",
		  ratio(S_ROWS_AUTO, S_ROWS_NONE), 2 - NOISE_MARGIN, 0, "x" },
		{ "partial read: bytes read <= 1.05x bytes needed", g.s[S_PARTIAL].bytes_ratio, 1.05,
		  1, "x" },
	};
	print_goals(gl, (int)(sizeof(gl) / sizeof(gl[0])));
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f, "usage: dvar_bench_io [--size-mb N] [--dir DIR] [--runs N] [--threads N]\n"
	           "  --size-mb N   MiB of tensor data per case (default 1024, at least 8)\n"
	           "  --dir DIR     where scratch checkpoints go (default $TMPDIR or /tmp)\n"
	           "  --runs N      runs; medians are reported (default 6, max %d)\n"
	           "  --threads N   dvar writer/reader threads (default 0 = all CPUs)\n"
	           "Run as root so the page cache can be dropped before each read.\n",
	        MAX_RUNS);
}

static long parse_num(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = s ? strtol(s, &end, 10) : 0;
	if (!s || errno || *end || v < lo || v > hi) {
		fprintf(stderr, "dvar_bench_io: %s needs a number from %ld to %ld\n", opt, lo, hi);
		usage(stderr);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	char tmpl[4096];
	layout mixed, table = { NULL, 0, 0 };
	void *src, *dst;

	g.size = 1024 * MIB;
	g.runs = 6;
	g.dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--size-mb")) {
			g.size = (uint64_t)parse_num(a, v, 8, 1 << 20) * MIB;
		} else if (!strcmp(a, "--runs")) {
			g.runs = (int)parse_num(a, v, 1, MAX_RUNS);
		} else if (!strcmp(a, "--threads")) {
			g.threads = (int)parse_num(a, v, 0, 1024);
		} else if (!strcmp(a, "--dir") && v) {
			g.dir = v;
		} else {
			fprintf(stderr, "dvar_bench_io: unknown or incomplete option '%s'\n", a);
			usage(stderr);
			return 2;
		}
		i++;
	}

	snprintf(tmpl, sizeof(tmpl), "%s/dvar-bench-XXXXXX", g.dir);
	if (!mkdtemp(tmpl))
		fatal("cannot create a scratch directory in %s: %s", g.dir, strerror(errno));
	g.scratch = tmpl;
	g.cold = drop_caches() == 0;

	mixed = make_mixed_layout(g.size);
	add_tensor(&table, 0, g.size, 2, 128);
	src = alloc_prefaulted(g.size);
	dst = alloc_prefaulted(g.size);

	fprintf(stderr, "dvar %s, %llu MiB per case, %d run(s), scratch %s, reads %s\n",
	        dvar_version(), (unsigned long long)(g.size / MIB), g.runs, g.scratch,
	        g.cold ? "cold" : "warm (could not drop caches)");
	for (int run = 0; run < g.runs; run++)
		one_run(run, &mixed, &table, src, dst);
	report(&mixed);

	remove_tree(g.scratch);
	free(mixed.t);
	free(table.t);
	munmap(src, g.size);
	munmap(dst, g.size);
	return 0;
}
