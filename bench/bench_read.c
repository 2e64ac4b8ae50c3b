/*
 * bench/bench_read.c - dvar_bench_read: one whole float32 variable read
 * with dvar_reader_read next to raw sequential reads of the same bytes,
 * measured in the same run, cold (the files' pages dropped from the page
 * cache with posix_fadvise(POSIX_FADV_DONTNEED) before every timed read, as
 * bench_python_read.py does; no root needed) and warm (after an untimed
 * read).
 *
 * The raw reads take the checkpoint's own data file (which holds exactly
 * the variable's bytes) the two ways a program reads a file whole: one
 * read() of all of it (np.load's way) and 4 MiB reads in order (cat's). A
 * copy of the same bytes written with plain buffered writes (np.save's way)
 * is read once too, and a second checkpoint of the variable is written
 * with DVAR_WRITE_NO_DIRECT_IO: on some virtual disks a file written with
 * O_DIRECT reads back slower than the same bytes written through the page
 * cache, whoever reads it, and these two rows show whether this disk is one.
 *
 * The dvar reads are timed from dvar_reader_open to the end of
 * dvar_reader_read, every checksum verified. By default every read goes to
 * a fresh buffer allocated as NumPy allocates one (malloc, then huge pages
 * advised); --prefaulted reuses one buffer touched up front, which leaves
 * only the disk, the page cache and the checksums. Each figure is the
 * median over the runs with min and max; each ratio is the median of the
 * per-run ratios, so drift of the host between runs cancels. The cases take
 * turns going first.
 *
 * Last, the same bytes as a TensorFlow checkpoint holding a [N, 1024]
 * float32 tensor: one eighth of its rows, from a row in the middle, read
 * cold with dvar_reader_read; the row is printed with the bytes the reader
 * read over the bytes the rows hold (TF stores a tensor raw and row-major,
 * so a row range is one run of its data file and nothing else need be read).
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

enum { C_ONE_READ, C_BLOCKS, C_COPY, C_DVAR, C_DVAR_BUFFERED, NUM_CASES };

static const char *const case_names[NUM_CASES] = {
	"data file, one read() (np.load's way)",
	"data file, 4 MiB reads in order (cat's way)",
	"buffered-written copy, one read()",
	"dvar_reader_open + dvar_reader_read",
	"the same, checkpoint written without O_DIRECT",
};

static struct {
	uint64_t size;
	int runs, threads, prefaulted;
	const char *dir;
	char raw_path[4096], ck_path[4096], ck_buffered_path[4096], data_path[4200], data_buffered_path[4200];
	char tf_path[4096];
	double t[2][NUM_CASES][BENCH_MAX_SAMPLES]; /* [warm][case][run] */
} g = { 1024 * BENCH_MIB, 5, 0, 0, NULL, "", "", "", "", "", "", { { { 0 } } } };

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: dvar_bench_read [--size-mb N] [--runs N] [--dir DIR] [--threads N] [--prefaulted]\n"
	    "  --size-mb N    MiB of float32 in the variable (default 1024; at least 8)\n"
	    "  --runs N       runs; each figure is the median, with min and max (default 5)\n"
	    "  --dir DIR      where the scratch folder goes (default $TMPDIR or /tmp)\n"
	    "  --threads N    reader threads (default 0: the library's)\n"
	    "  --prefaulted   read into one buffer touched up front, not a fresh one each time\n");
}

static const bench_program program = { "dvar_bench_read", -1, usage, NULL, NULL };

/* Drop the cached pages of path (clean: the files were synced). */
static void drop(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		bench_fatal("open '%s': %s", path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

static void drop_all(void)
{
	drop(g.raw_path);
	drop(g.data_path);
	drop(g.data_buffered_path);
	char index[4200];
	snprintf(index, sizeof(index), "%s/index", g.ck_path);
	drop(index);
	snprintf(index, sizeof(index), "%s/index", g.ck_buffered_path);
	drop(index);
}

/* A destination as NumPy makes one: malloc (which glibc maps, 16 bytes
 * past a page boundary), huge pages advised from the next page on. */
static void *fresh(void)
{
	char *p = malloc((size_t)g.size);
	if (!p)
		bench_fatal("out of memory (%llu bytes)", (unsigned long long)g.size);
	uintptr_t skip = 4096 - (uintptr_t)p % 4096;
	madvise(p + skip, (size_t)(g.size - skip), MADV_HUGEPAGE);
	return p;
}

static double one_read(const char *path, void *dst)
{
	double t = bench_now();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint64_t done = 0;
	if (fd < 0)
		bench_fatal("open '%s': %s", path, strerror(errno));
	while (done < g.size) {
		ssize_t n = read(fd, (char *)dst + done, g.size - done);
		if (n <= 0)
			bench_fatal("read '%s': %s", path, n ? strerror(errno) : "short file");
		done += (uint64_t)n;
	}
	close(fd);
	return bench_now() - t;
}

static double dvar_read(const char *ck, void *dst)
{
	dvar_read_options opts = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL;
	size_t v;
	opts.threads = g.threads;
	double t = bench_now();
	bench_check(dvar_reader_open(&r, ck, &opts), "dvar_reader_open");
	bench_check(dvar_reader_find(r, "x", &v), "dvar_reader_find");
	bench_check(dvar_reader_read(r, v, NULL, dst, (size_t)g.size), "dvar_reader_read");
	t = bench_now() - t;
	dvar_reader_free(r);
	return t;
}

static double run_case(int c, int warm, void *reused, const void *src)
{
	void *dst = g.prefaulted ? reused : fresh();
	double t;
	const char *ck = c == C_DVAR_BUFFERED ? g.ck_buffered_path : g.ck_path;
	const char *file = c == C_COPY ? g.raw_path : g.data_path;
	if (warm) {
		/* The same read once, untimed, brings the pages in. */
		if (c >= C_DVAR)
			dvar_read(ck, dst);
		else
			one_read(file, dst);
	} else {
		drop_all();
	}
	if (c == C_ONE_READ || c == C_COPY)
		t = one_read(file, dst);
	else if (c == C_BLOCKS)
		t = bench_raw_read(file, dst, g.size, 0);
	else
		t = dvar_read(ck, dst);
	/* Every read is checked: a few probes and the last page. */
	for (uint64_t at = 0; at < g.size; at += g.size / 64)
		if (memcmp((const char *)dst + at, (const char *)src + at, 64))
			bench_fatal("%s returned wrong bytes at %llu", case_names[c], (unsigned long long)at);
	if (memcmp((const char *)dst + g.size - 4096, (const char *)src + g.size - 4096, 4096))
		bench_fatal("%s returned wrong bytes at the end", case_names[c]);
	if (!g.prefaulted)
		free(dst);
	return t;
}

/* Rows [N/2 + 3, +N/8) of the TF tensor "t" [N, 1024], cold: bytes read / bytes needed. */
static double tf_rows(const float *src, double *seconds)
{
	dvar_shape shape = { 2, { (int64_t)(g.size / 4096), 1024 } };
	dvar_tf_writer *w = NULL;
	bench_check(dvar_tf_writer_open(&w, g.tf_path, NULL), "dvar_tf_writer_open");
	bench_check(dvar_tf_writer_add(w, "t", DVAR_FLOAT32, &shape, NULL, src), "dvar_tf_writer_add");
	bench_check(dvar_tf_writer_commit(w), "dvar_tf_writer_commit");
	dvar_tf_writer_free(w);
	char data[4200];
	snprintf(data, sizeof(data), "%s.data-00000-of-00001", g.tf_path);
	bench_syncfs(g.dir);
	drop(data);
	dvar_slice sl;
	dvar_slice_full(&sl, &shape);
	sl.start[0] = shape.dims[0] / 2 + 3;
	sl.length[0] = shape.dims[0] / 8;
	uint64_t need = (uint64_t)sl.length[0] * 4096;
	char *dst = malloc((size_t)need);
	dvar_read_options opts = DVAR_READ_OPTIONS_INIT;
	dvar_reader *r = NULL;
	size_t v;
	if (!dst)
		bench_fatal("out of memory");
	opts.threads = g.threads;
	double t = bench_now();
	bench_check(dvar_reader_open(&r, g.tf_path, &opts), "dvar_reader_open (TF)");
	bench_check(dvar_reader_find(r, "t", &v), "dvar_reader_find");
	bench_check(dvar_reader_read(r, v, &sl, dst, (size_t)need), "dvar_reader_read (TF rows)");
	*seconds = bench_now() - t;
	double ratio = (double)dvar_reader_bytes_read(r) / (double)need;
	dvar_reader_free(r);
	if (memcmp(dst, (const char *)src + (uint64_t)sl.start[0] * 4096, (size_t)need))
		bench_fatal("TF row range returned wrong bytes");
	free(dst);
	unlink(data);
	snprintf(data, sizeof(data), "%s.index", g.tf_path);
	unlink(data);
	return ratio;
}

static void report(int warm)
{
	printf("%s\n", warm ? "warm (pages cached)" : "cold (pages dropped before each read)");
	for (int c = 0; c < NUM_CASES; c++) {
		const double *t = g.t[warm][c];
		double lo, hi, gbs[BENCH_MAX_SAMPLES];
		for (int i = 0; i < g.runs; i++)
			gbs[i] = (double)g.size / t[i] / 1e9;
		bench_min_max(gbs, g.runs, &lo, &hi);
		char vs[64] = "";
		if (c >= C_COPY)
			snprintf(vs, sizeof(vs), "%5.2fx  %5.2fx  %5.2fx",
			         bench_median_ratio(g.t[warm][C_ONE_READ], g.runs, t, g.runs),
			         bench_median_ratio(g.t[warm][C_BLOCKS], g.runs, t, g.runs),
			         bench_median_ratio(g.t[warm][C_COPY], g.runs, t, g.runs));
		bench_print_row("  %-46s %6.2f  [%5.2f-%5.2f]  %s", case_names[c], bench_median(gbs, g.runs),
		                lo, hi, vs);
	}
}

int main(int argc, char **argv)
{
	bench_init(&program);
	g.dir = bench_default_dir();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int used;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--size-mb") && v) {
			g.size = (uint64_t)bench_parse_num(a, v, 8, 1 << 20) * BENCH_MIB;
			i++;
		} else if (!strcmp(a, "--runs") && v) {
			g.runs = (int)bench_parse_num(a, v, 1, BENCH_MAX_SAMPLES);
			i++;
		} else if (!strcmp(a, "--threads") && v) {
			g.threads = (int)bench_parse_num(a, v, 0, 1024);
			i++;
		} else if (!strcmp(a, "--prefaulted")) {
			g.prefaulted = 1;
		} else if ((used = bench_common_option(a, v, NULL, &g.dir, NULL))) {
			i += used - 1;
		} else {
			bench_bad_option(a);
		}
	}
	uint64_t avail;
	if (bench_free_space(g.dir, &avail) == 0 && avail < bench_space_needed(4, g.size))
		bench_fatal("%s has %llu MiB free; this needs %llu", g.dir,
		            (unsigned long long)(avail / BENCH_MIB),
		            (unsigned long long)(bench_space_needed(4, g.size) / BENCH_MIB));
	if (bench_scratch_create(g.dir, "dvar-bench-read", NULL))
		bench_fatal("cannot make a scratch folder in %s: %s", g.dir, strerror(errno));
	snprintf(g.raw_path, sizeof(g.raw_path), "%s/x.raw", bench_scratch());
	snprintf(g.ck_path, sizeof(g.ck_path), "%s/ck", bench_scratch());
	snprintf(g.ck_buffered_path, sizeof(g.ck_buffered_path), "%s/ck-buffered", bench_scratch());
	snprintf(g.tf_path, sizeof(g.tf_path), "%s/model.ckpt", bench_scratch());
	snprintf(g.data_path, sizeof(g.data_path), "%s/data-00000-of-00001", g.ck_path);
	snprintf(g.data_buffered_path, sizeof(g.data_buffered_path), "%s/data-00000-of-00001",
	         g.ck_buffered_path);

	/* Pseudo-random float32 in [0, 1), 24 random bits each: nothing for the disk to skip. */
	float *src = bench_alloc_prefaulted(g.size);
	void *reused = g.prefaulted ? bench_alloc_prefaulted(g.size) : NULL;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = 0; i < g.size / 4; i++)
		src[i] = (float)(bench_xorshift(&x) >> 40) / (float)(1u << 24);
	for (int buffered = 0; buffered < 2; buffered++) {
		dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
		dvar_writer *w = NULL;
		dvar_shape shape = { 1, { (int64_t)(g.size / 4) } };
		wo.compress = DVAR_COMPRESS_NONE;
		wo.threads = g.threads;
		wo.flags = buffered ? DVAR_WRITE_NO_DIRECT_IO : 0;
		bench_check(dvar_writer_open(&w, buffered ? g.ck_buffered_path : g.ck_path, &wo),
		            "dvar_writer_open");
		bench_check(dvar_writer_add(w, "x", DVAR_FLOAT32, &shape, NULL, src), "dvar_writer_add");
		bench_check(dvar_writer_commit(w), "dvar_writer_commit");
		dvar_writer_free(w);
	}
	bench_raw_write(g.raw_path, src, g.size, 0, 1);
	bench_syncfs(g.dir);

	char th[64];
	bench_threads_text(th, sizeof(th), g.threads);
	printf("dvar_bench_read: dvar %s, a float32 variable of %llu MiB (raw chunks), %d runs, "
	       "reader threads %s, %s destination, scratch %s\n", dvar_version(),
	       (unsigned long long)(g.size / BENCH_MIB), g.runs, th,
	       g.prefaulted ? "pre-faulted" : "fresh huge-page-advised", bench_scratch());
	printf("load average (1 min) at start: %.2f\n\n", bench_load_average());
	printf("  %-46s %6s  %-13s  %s\n", "", "", "", "time ratios: raw / this (>= 1: this is faster)");
	printf("  %-46s %6s  %-13s  %s\n", "case", "GB/s", "[min-max]", "1 read   4 MiB   copy");
	for (int warm = 0; warm < 2; warm++) {
		for (int run = 0; run < g.runs; run++)
			/* The cases take turns going first. */
			for (int k = 0; k < NUM_CASES; k++) {
				int c = (k + run) % NUM_CASES;
				g.t[warm][c][run] = run_case(c, warm, reused, src);
			}
		report(warm);
	}
	double tf_seconds, tf_ratio = tf_rows(src, &tf_seconds);
	printf("TF checkpoint, rows %llu.. (1/8) of [%llu, 1024] float32, cold\n",
	       (unsigned long long)(g.size / 4096 / 2 + 3), (unsigned long long)(g.size / 4096));
	bench_print_row("  %-46s %6.2f  read/needed %.4f", "dvar_reader_open + dvar_reader_read",
	                (double)(g.size / 4096 / 8 * 4096) / tf_seconds / 1e9, tf_ratio);
	printf("load average (1 min) at end: %.2f\n", bench_load_average());
	double cold = bench_median_ratio(g.t[0][C_ONE_READ], g.runs, g.t[0][C_DVAR], g.runs);
	double warm = bench_median_ratio(g.t[1][C_ONE_READ], g.runs, g.t[1][C_DVAR], g.runs);
	printf("\n1 read, 4 MiB: one read() and 4 MiB reads of the checkpoint's data file; copy: one\n"
	       "read() of the same bytes written through the page cache. A cold dvar read near 1x\n"
	       "1 read but below 1x copy is held back by how its file reads, not by the reader.\n");
	bench_goal goals[] = {
		{ "cold read >= 0.9x one read() of its data file", cold, 0.9, 0, "x" },
		{ "warm read >= 0.9x one read() of its data file", warm, 0.9, 0, "x" },
		{ "TF row range: bytes read <= 1.05x needed", tf_ratio, 1.05, 1, "x" },
	};
	bench_goal_style style = { 48, 6, 2, 1, 1 };
	bench_print_goals(goals, 3, &style);
	munmap(src, g.size);
	if (reused)
		munmap(reused, g.size);
	bench_scratch_remove();
	return 0;
}
