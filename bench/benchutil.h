/*
 * benchutil.h - what the benchmark programs in bench/ share: timing, medians
 * and ratios over repeats, raw sequential I/O baselines, the page cache,
 * free disk space and memory, the scratch folder (removed on a fatal error
 * and on Ctrl-C), options, the load average and the goals table.
 *
 * Ownership: bench/ owns this pair; it serves dvar_bench_io,
 * dvar_bench_read, dvar_bench_save, dvar_bench_delta, dvar_bench_reshard,
 * dvar_bench_allreduce and dvar_bench_cuda only. It is
 * not part of libdvar, never installed and carries no API promise: change it
 * together with its callers, and keep here only what they truly share (a
 * program's own cases, series and report stay in its file).
 *
 * Not thread-safe; call it from the program's main thread. A program calls
 * bench_init first when it uses bench_fatal, bench_check or the options.
 */
#ifndef DVAR_BENCH_BENCHUTIL_H
#define DVAR_BENCH_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>

#include "dvar/dvar.h"

#define BENCH_MIB (1024ull * 1024ull)
#define BENCH_GIB(bytes) ((double)(bytes) / (1024.0 * BENCH_MIB))
/* The block of every raw read and write: dvar's writer writes 4 MiB chunks. */
#define BENCH_IO_BLOCK (4 * BENCH_MIB)
/* The most samples a series holds (--repeat, --runs, --trials at most). */
#define BENCH_MAX_SAMPLES 99

/* ------------------------------------------------------------------ program */

typedef struct {
	const char *name;    /* the first word of every message: "dvar_bench_io" */
	int rank;            /* MPI rank, shown in fatal messages; -1 without MPI */
	void (*usage)(FILE *f);
	void (*on_fatal)(void);   /* last step of bench_fatal before exit(1), or NULL */
	void (*on_bad_args)(void); /* before exit(2) on a bad option, or NULL */
} bench_program;

/* Remembers p (which must outlive the program's run). */
void bench_init(const bench_program *p);

/* "NAME: [worker RANK: ]message" on stderr, the scratch folder removed,
 * on_fatal, exit(1). */
void bench_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* bench_fatal("what: message (error)") unless rc is DVAR_OK. */
void bench_check(int rc, const char *what);

/* ------------------------------------------------------------------ options */

/* The number in s (the value of option opt) within [lo, hi]; otherwise says
 * so (rank 0), prints the usage and exits with 2. */
long bench_parse_num(const char *opt, const char *s, long lo, long hi);

/* Says the option is unknown or lacks its value (rank 0), prints the usage
 * and exits with 2. */
void bench_bad_option(const char *opt) __attribute__((noreturn));

/*
 * The options the programs share: --progress and --no-progress (into
 * *progress), --dir DIR (into *dir) and --compress none|auto|lz4 (into
 * *compress); NULL for one a program does not take. a is the option, v the
 * argument after it (NULL at the end). Returns how many arguments it used
 * (1 or 2), or 0 when a is none of these; bench_bad_option when the value
 * is missing or not one of the choices.
 */
int bench_common_option(const char *a, const char *v, int *progress, const char **dir,
                        dvar_compress *compress);

/* "off", "AUTO" or "LZ4". */
const char *bench_compress_name(dvar_compress c);

/* $TMPDIR when set and not empty, else /tmp. */
const char *bench_default_dir(void);

/* "N" for threads > 0, else the library's default for the online CPUs,
 * which include/dvar/format.h states (the count is the library's rule, not
 * restated here). */
void bench_threads_text(char *out, size_t cap, int threads);

/* ------------------------------------------------------------------ timing */

/* CLOCK_MONOTONIC, seconds. */
double bench_now(void);

/* User + system seconds in ru. */
double bench_cpu_of(const struct rusage *ru);

/* CPU seconds of every thread of this process so far. */
double bench_cpu_self(void);

/* The 1-minute load average, or -1 when /proc/loadavg cannot be read. */
double bench_load_average(void);

/* ------------------------------------------------------------------ statistics */

/* The median of v[0..n) (n <= BENCH_MAX_SAMPLES; v is not reordered); 0 for n = 0. */
double bench_median(const double *v, int n);

/* The median over i of a[i] / b[i], for series measured side by side (the
 * host's drift between repeats cancels); 0 when na is 0 or nb differs. */
double bench_median_ratio(const double *a, int na, const double *b, int nb);

/* The smallest and largest of v[0..n); both 0 for n = 0. */
void bench_min_max(const double *v, int n, double *lo, double *hi);

/* The smallest and largest over i of a[i] / b[i] (the spread of the ratios
 * bench_median_ratio takes the median of); both 0 when na is 0 or nb differs. */
void bench_ratio_min_max(const double *a, int na, const double *b, int nb, double *lo,
                         double *hi);

/* The last of v[0..n), 0 for n = 0: the figure a progress line shows. */
double bench_last(const double *v, int n);

/* printf into a line of at most 255 characters, trailing blanks cut, then
 * a newline: a table row whose last columns may be empty. */
void bench_print_row(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------------ goals */

typedef struct {
	const char *text;
	double value;
	double bound;
	int at_most; /* met when value <= bound, else when value >= bound */
	const char *unit;
} bench_goal;

/* How a program's goals table looks: column widths, whether the bound is
 * shown ("(goal <= 1.05)"), and whether a value of 0 means "not measured"
 * (shown as n/a and missed). */
typedef struct {
	int text_width, value_width, unit_width;
	int show_bound;
	int zero_is_missing;
} bench_goal_style;

/* "\ngoals", a line per goal with met or MISSED, "M of N goals met";
 * returns M. */
int bench_print_goals(const bench_goal *gl, int n, const bench_goal_style *style);

/* ------------------------------------------------------------------ memory and data */

/* bytes of anonymous memory, huge-page-advised and touched now, so that no
 * timed section faults; bench_fatal when it cannot be mapped. munmap it. */
void *bench_alloc_prefaulted(uint64_t bytes);

/* xorshift64: the next pseudo-random number from *x. */
uint64_t bench_xorshift(uint64_t *x);

/* ------------------------------------------------------------------ raw I/O */

/*
 * Seconds to write bytes sequentially to a new file in BENCH_IO_BLOCK
 * blocks, then fsync (when do_fsync): the machine's limit next to which a
 * dvar save is measured. With direct, O_DIRECT (as dvar's writer); -1 when
 * the file system refuses it (tmpfs), the file then left empty or absent.
 * bench_fatal on any other error.
 */
double bench_raw_write(const char *path, const void *buf, uint64_t bytes, int direct,
                       int do_fsync);

/* Seconds to read bytes of path sequentially in BENCH_IO_BLOCK blocks
 * (O_DIRECT with direct); bench_fatal on an error or a short file. */
double bench_raw_read(const char *path, void *buf, uint64_t bytes, int direct);

/* Seconds to open path and read the len bytes at off into buf (after a
 * cache drop when cold; the open timed too, as a reader's open is): one
 * buffered read() after another (the kernel's readahead), or with direct
 * the page-aligned cover of the range with O_DIRECT, 4 MiB reads in
 * `threads` threads at once (buffered where O_DIRECT is refused).
 * bench_fatal on an error. */
double bench_raw_read_range(const char *path, void *buf, uint64_t off, uint64_t len, int threads,
                            int cold, int direct);

/* Drop the page cache (root only), dirty pages flushed first: 0 when it
 * worked, else -1. */
int bench_drop_caches(void);

/* syncfs on the file system holding dir: deletes (and the discards a
 * `discard` mount issues at the journal commit) done before the next case. */
void bench_syncfs(const char *dir);

/* ------------------------------------------------------------------ disk and memory */

/* Free bytes for an unprivileged user on the file system of dir into
 * *avail: 0, or -1 with errno. */
int bench_free_space(const char *dir, uint64_t *avail);

/* Disk space for copies of bytes at once: plus 5% and 512 MiB of headroom. */
uint64_t bench_space_needed(uint64_t copies, uint64_t bytes);

/* MemAvailable of /proc/meminfo in bytes; 0 when unknown. */
uint64_t bench_mem_available(void);

/* The size of the file at path; bench_fatal when it cannot be had. */
uint64_t bench_file_bytes(const char *path);

/* root/ckpt-<step> into out (cap bytes): a checkpoint of a root. */
void bench_ckpt_path(char *out, size_t cap, const char *root, int64_t step);

/* ------------------------------------------------------------------ scratch folder */

/* Remove path and all below it, errors ignored. */
void bench_remove_tree(const char *path);

/*
 * Make the scratch folder DIR/STEM-XXXXXX (0, or -1 with errno) and arm its
 * removal: by bench_fatal, by bench_scratch_remove, and on SIGINT, SIGTERM
 * and SIGHUP (mpirun's answer to Ctrl-C and to a peer's abort) with
 * async-signal-safe calls only, after on_signal (NULL, or itself
 * async-signal-safe: stopping a child, say).
 */
int bench_scratch_create(const char *dir, const char *stem, void (*on_signal)(void));

/* The scratch folder's path ("" before bench_scratch_create). */
const char *bench_scratch(void);

/* Remove the scratch folder when armed, and disarm; else nothing. */
void bench_scratch_remove(void);

#endif
