/*
 * tests/fault/fault_driver.c - every write point of an operation, failed
 * one at a time. Run with the shim preloaded (LD_PRELOAD=libdvar_fault.so,
 * tests/fault/fault.c):
 *
 *   fault_driver OP WORK [--sample N] [--seed S] [--mpiexec MPIRUN] [--alloc 1]
 *
 * OP is save (a save with retention), delta (a delta save over the root's
 * latest), async (dvar_save_async, then dvar_save_wait), import (two .npy
 * files and a safetensors file), reshard, export-dvar, export-safetensors,
 * export-tf or export-npy; write (8 MiB
 * in 1 MiB chunks, which go to the disk with O_DIRECT); read (every
 * checkpoint of the work folder read every way: cold into aligned and
 * unaligned buffers, mapped and verified, a range of rows, read_many,
 * verify, digests), diff (dvar_diff of the source with its TensorFlow
 * export and with the root's latest), runtime (a strategy of two replicas,
 * a mirrored variable, a step of an all-reduce and an update: no file, for
 * --alloc) or
 * restore (the root's latest, a delta, onto two replicas); or a save of
 * two workers (W = 2, under MPIRUN -np 2) with the fault in one of them:
 * w2-rank1 (worker 1, every call), w2-rank0 (the chief, its calls before
 * the commit: writing its part), w2-commit (the chief's commit: index,
 * rename, pointer file, retention), w2-async-rank1 and w2-async-rank0 (an
 * asynchronous save, the fault in worker 1, or in any call of the chief).
 * The driver counts the file-system calls the operation makes (in a child
 * process, the shim counting), then repeats it in a child for every call k
 * and every fault kind (EIO, ENOSPC, EDQUOT, short, a crash, EINTR,
 * partial; a read operation: EIO, short, EINTR), or for N of those pairs
 * drawn at random with --sample. After each it checks, in the parent: an
 * interrupted read or write, a short read or a partial write was made again
 * (the rest of it) and the operation succeeded;
 * otherwise it failed (or, when the fault came after its commit point,
 * succeeded) and its message names the output or the file; a read
 * operation returned what it returns unarmed, to the byte; what it wrote
 * is absent or whole (a root's latest checkpoint is the one before or, past
 * the commit point, the new one, holding its values; every one the root
 * lists opens and the latest verifies; an offline output reads back the
 * source's digests); and the same operation, run again unarmed, succeeds
 * and leaves no temporary file of the dead child behind. Prints the calls,
 * trials and failures per kind.
 *
 * With --alloc 1 (a one-process OP) the allocations are counted and failed
 * in turn instead (out of memory): the process must live on, and the
 * operation succeed, or fail with DVAR_ENOMEM and a message (never another
 * code: not damage, not a bad shape); its output is then checked as
 * above, and every block it allocated must be freed (but for what the
 * unarmed run keeps, and what LevelDB, which is not exception-safe, had
 * allocated before its own allocation failed).
 *
 * With two workers the shim counts only calls under WORK/root (OpenMPI's
 * own files are left alone), and the trials run in one job
 * (`fault_driver OP WORK --job FIRST` on every worker, trials FIRST.. of
 * WORK/trials), each checked by the chief in the job: both workers return
 * (none hangs), both fail when one does, with the same message naming the
 * worker, the operation and a path; then the root as above; then the same
 * job saves the next step, which must commit and leave no temporary file.
 * A crash ends the job (OpenMPI aborts the other worker): the job must end
 * within a bound, then this process checks the root, a fresh job saves the
 * next step (sweeping what the dead one left) and the trials go on in
 * another job.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dvar/dvar.h"
#include "fault.h"

/* The shim's controls, found at run time (a run without it is refused). */
static void (*dvar_fault_arm)(int on, long at, int kind);
static long (*dvar_fault_calls)(void);
static int (*dvar_fault_hit)(const char **what);
static void (*dvar_fault_scope)(const char *prefix);
static const char *(*dvar_fault_log)(long n);
static void (*dvar_fault_pause)(int on);
static long (*dvar_fault_live)(void);
static void *(*dvar_fault_live_at)(long k);
static int (*dvar_fault_failed_frames)(void ***frames);

static const char *const kind_names[NKINDS] = { "EIO",   "ENOSPC", "EDQUOT",  "short",
	                                            "crash", "EINTR",  "partial", "ENOMEM" };
/* The kinds tried: every one for an operation that writes; a read can
 * only fail (EIO), come back short or be interrupted. */
static const int write_kinds[] = { FAULT_EIO,   FAULT_ENOSPC, FAULT_EDQUOT, FAULT_SHORT,
	                           FAULT_CRASH, FAULT_EINTR,  FAULT_PARTIAL };
static const int read_kinds[] = { FAULT_EIO, FAULT_SHORT, FAULT_EINTR };
/* --alloc: allocations fail instead, one at a time. */
static const int alloc_kinds[] = { FAULT_ENOMEM };
static int alloc_mode;
static long base_live; /* blocks the unarmed run keeps (a strategy's state) */
static const int *kinds = write_kinds;
static int nkinds = (int)(sizeof write_kinds / sizeof *write_kinds);

#define ROWS 512
#define COLS 32
#define MAX_VARS 2
#define CHANGED_ROW 5

static const char *op;
/* The operation's shape, from its name (parse_op). */
static int workers = 1;  /* 2: run under mpirun -np 2 */
static int async_save;   /* dvar_save_async, then dvar_save_wait */
static int target;       /* the worker whose calls fail */
enum { CALLS_ALL, CALLS_WRITING, CALLS_COMMIT };
static int phase = CALLS_ALL; /* which of the target's calls */
static int nvars = 1;    /* two workers save two variables: one each */
static int reads;        /* read or restore: writes nothing */
static const char *mpiexec = "mpirun";
/* Paths stay short (a temporary directory's): messages quote them whole. */
static char work[1024], src[1100], root[1100], out[1100], npy1[1100], npy2[1100], st[1100];
/* The write and read operations' own: big (BIG_ROWS x BIG_COLS float32 in
 * 1 MiB chunks, written and, cold, read around the page cache) and src
 * exported as a TensorFlow checkpoint. */
static char big[1100], tf[1100];
#define BIG_ROWS 2048
#define BIG_COLS 1024
static int64_t next_step = 3;

static void die(const char *what)
{
	fprintf(stderr, "fault_driver: %s: %s\n", what, dvar_error_last()->message);
	exit(2);
}

static void join(char *dst, const char *a, const char *b)
{
	snprintf(dst, 1100, "%s/%s", a, b);
}

static const char *const var_names[MAX_VARS] = { "w", "u" };

/* The values every checkpoint of this driver holds at step s in variable k. */
static void values(float *v, int64_t s, int k)
{
	for (int i = 0; i < ROWS * COLS; i++)
		v[i] = (float)(s * 1000 + i % 997 + k * 500000);
}

static int is_save(void)
{
	return strcmp(op, "save") == 0 || strcmp(op, "delta") == 0 || strcmp(op, "async") == 0 ||
	       workers > 1;
}

/* The operation's shape from its name; 0 for an unknown one. */
static int parse_op(void)
{
	static const char *const known[] = { "save", "delta", "async", "import", "reshard",
		                             "export-dvar", "export-safetensors", "export-tf",
		                             "export-npy", "write", "read", "restore", "diff",
		                             "runtime" };
	static const struct {
		const char *name;
		int async, target, phase;
	} two[] = { { "w2-rank1", 0, 1, CALLS_ALL },         { "w2-rank0", 0, 0, CALLS_WRITING },
		    { "w2-commit", 0, 0, CALLS_COMMIT },     { "w2-async-rank1", 1, 1, CALLS_ALL },
		    { "w2-async-rank0", 1, 0, CALLS_ALL } };

	async_save = strcmp(op, "async") == 0;
	if ((reads = strcmp(op, "read") == 0 || strcmp(op, "restore") == 0 ||
	             strcmp(op, "diff") == 0 || strcmp(op, "runtime") == 0)) {
		kinds = read_kinds;
		nkinds = (int)(sizeof read_kinds / sizeof *read_kinds);
	}
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (strcmp(op, known[i]) == 0)
			return 1;
	for (size_t i = 0; i < sizeof two / sizeof *two; i++)
		if (strcmp(op, two[i].name) == 0) {
			workers = nvars = 2;
			async_save = two[i].async;
			target = two[i].target;
			phase = two[i].phase;
			return 1;
		}
	return 0;
}

/* A strategy (every worker of the job) with the model's variables holding
 * step s's values. */
static void model(dvar_strategy **s, dvar_variable **v, int64_t step, int replicas)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	float *x = malloc(ROWS * COLS * sizeof *x);

	so.replicas = replicas;
	if (!x || dvar_strategy_create(s, &so) != DVAR_OK)
		die("strategy");
	for (int k = 0; k < nvars; k++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		spec.name = var_names[k];
		spec.dtype = DVAR_FLOAT32;
		spec.shape.rank = 2;
		spec.shape.dims[0] = ROWS;
		spec.shape.dims[1] = COLS;
		if (dvar_variable_create(&v[k], *s, &spec) != DVAR_OK)
			die("variable");
		values(x, step, k);
		if (dvar_variable_assign(v[k], NULL, x) != DVAR_OK)
			die("assign");
	}
	free(x);
}

static void free_model(dvar_strategy *s, dvar_variable **v)
{
	for (int k = 0; k < nvars; k++)
		dvar_variable_free(v[k]);
	dvar_strategy_free(s);
}

static int save(dvar_strategy *s, dvar_variable **v, int64_t step, unsigned flags, int async)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options o = DVAR_SAVE_OPTIONS_INIT;
	int rc;

	wo.threads = 1; /* one order of calls from run to run */
	wo.keep_last = 2;
	o.write = &wo;
	o.flags = flags;
	if (!async)
		return dvar_save(s, root, step, v, (size_t)nvars, &o);
	/* The failure may come from either call. */
	rc = dvar_save_async(s, root, step, v, (size_t)nvars, &o);
	return rc == DVAR_OK ? dvar_save_wait(s) : rc;
}

/* big's variables written to path, one thread (one order of calls): their
 * 1 MiB chunks go to the disk with O_DIRECT. */
static int write_big(const char *path)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_shape sh = { .rank = 2, .dims = { BIG_ROWS, BIG_COLS } };
	static float x[BIG_ROWS * BIG_COLS];
	dvar_writer *w;
	int rc;

	for (size_t i = 0; i < (size_t)BIG_ROWS * BIG_COLS; i++)
		x[i] = (float)(i % 65521) * 0.5f;
	wo.chunk_size = (uint64_t)1 << 20;
	wo.compress = DVAR_COMPRESS_NONE;
	wo.threads = 1;
	if ((rc = dvar_writer_open(&w, path, &wo)) != DVAR_OK)
		return rc;
	if ((rc = dvar_writer_add(w, "e", DVAR_FLOAT32, &sh, NULL, x)) == DVAR_OK &&
	    (rc = dvar_writer_add(w, "n", DVAR_FLOAT32, &(dvar_shape){ .rank = 1, .dims = { 5 } },
	                          NULL, x)) == DVAR_OK)
		rc = dvar_writer_commit(w);
	dvar_writer_free(w);
	return rc;
}

/* The checkpoints beside the others of write (big) and of the read
 * operations (big, and tf). */
static void setup_big(void)
{
	dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;

	if (write_big(big) != DVAR_OK)
		die("big");
	eo.format = DVAR_EXPORT_TF;
	if (reads && dvar_export(src, tf, &eo) != DVAR_OK)
		die("tf");
}

/* What the runs share: a source checkpoint, .npy files, a root with two
 * checkpoints (the second a delta over the first); for the read
 * and write operations, setup_big's too. */
static void setup(void)
{
	dvar_strategy *s;
	dvar_variable *v[MAX_VARS];
	float *x = malloc(ROWS * COLS * sizeof *x);
	unsigned char head[256];
	size_t hl;
	dvar_shape sh = { .rank = 2, .dims = { ROWS, COLS } };

	values(x, 7, 0);
	dvar_writer *w;
	dvar_slice top = { .rank = 2, .start = { 0, 0 }, .length = { ROWS / 2, COLS } };
	dvar_slice bottom = { .rank = 2, .start = { ROWS / 2, 0 }, .length = { ROWS / 2, COLS } };
	if (dvar_writer_open(&w, src, NULL) != DVAR_OK ||
	    dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, &top, x) != DVAR_OK ||
	    dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, &bottom, x + ROWS / 2 * COLS) != DVAR_OK ||
	    dvar_writer_set_attr(w, "w", "kind", "sharded") != DVAR_OK ||
	    dvar_writer_add(w, "b", DVAR_FLOAT32, &(dvar_shape){ .rank = 1, .dims = { 9 } }, NULL, x) !=
	            DVAR_OK ||
	    dvar_writer_commit(w) != DVAR_OK)
		die("source");
	dvar_writer_free(w);
	for (int f = 0; f < 2; f++) {
		FILE *fp = fopen(f ? npy2 : npy1, "wb");
		if (!fp || dvar_npy_header(head, sizeof head, &hl, DVAR_FLOAT32, &sh) != DVAR_OK)
			die("npy");
		fwrite(head, 1, hl, fp);
		fwrite(x, sizeof *x, ROWS * COLS, fp);
		fclose(fp);
	}
	model(&s, v, 1, 1);
	if (save(s, v, 1, DVAR_SAVE_DELTA, 0) != DVAR_OK)
		die("ckpt-1");
	for (int k = 0; k < nvars; k++) {
		values(x, 2, k);
		if (dvar_variable_assign(v[k], NULL, x) != DVAR_OK)
			die("assign");
	}
	if (save(s, v, 2, DVAR_SAVE_DELTA, 0) != DVAR_OK)
		die("ckpt-2");
	free_model(s, v);
	free(x);
	if (reads || strcmp(op, "write") == 0)
		setup_big();
	if (strcmp(op, "import") == 0) {
		dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
		eo.format = DVAR_EXPORT_SAFETENSORS;
		if (dvar_export(src, st, &eo) != DVAR_OK)
			die("safetensors");
	}
}

/* ---------------------------------------------------------------- the root's state */

/* The root's latest checkpoint: its step and its variables' values. */
typedef struct {
	int64_t step;
	float v[MAX_VARS][ROWS * COLS];
} state;

/* The root's latest into *st; 0 with a message when it does not read. */
static int read_latest(state *st, char *why, size_t cap)
{
	dvar_reader *rd;
	const char *slash;
	int ok = 1;

	if (dvar_reader_open(&rd, root, NULL) != DVAR_OK) {
		snprintf(why, cap, "the root's latest does not open: %s", dvar_error_last()->message);
		return 0;
	}
	slash = strrchr(dvar_reader_path(rd), '/');
	if (!slash || sscanf(slash + 1, "ckpt-%" SCNd64, &st->step) != 1) {
		snprintf(why, cap, "the root's latest is %s", dvar_reader_path(rd));
		ok = 0;
	}
	for (int k = 0; k < nvars && ok; k++) {
		size_t i;
		if (dvar_reader_find(rd, var_names[k], &i) != DVAR_OK ||
		    dvar_reader_read(rd, i, NULL, st->v[k], sizeof st->v[k]) != DVAR_OK) {
			snprintf(why, cap, "'%s' of the root's latest does not read: %s", var_names[k],
			         dvar_error_last()->message);
			ok = 0;
		}
	}
	dvar_reader_free(rd);
	return ok;
}

/* What a save of step makes of the state before it: the job restores it
 * and changes one row (prepare). */
static void advance(state *st, int64_t step)
{
	float row[ROWS * COLS];

	values(row, step, 0);
	memcpy(&st->v[0][CHANGED_ROW * COLS], &row[CHANGED_ROW * COLS], COLS * sizeof(float));
	st->step = step;
}

/* The state before the trial, for the check after it: kept in a file,
 * since the process that checks after a crash is another one. */
static void keep_before(const state *st)
{
	char path[1100];
	FILE *f;

	join(path, work, "before");
	if (!(f = fopen(path, "wb")) || fwrite(st, sizeof *st, 1, f) != 1 || fclose(f) != 0)
		die("keep the state before the trial");
}

static void load_before(state *st)
{
	char path[1100];
	FILE *f;

	join(path, work, "before");
	if (!(f = fopen(path, "rb")) || fread(st, sizeof *st, 1, f) != 1)
		die("read the state before the trial");
	fclose(f);
}

/* ---------------------------------------------------------------- one run */

/* The state of a save operation's job, made before the shim is armed. */
typedef struct {
	dvar_strategy *s;
	dvar_variable *v[MAX_VARS];
} job;

/* ---------------------------------------------------------------- reading */

/* A read operation's results: recorded unarmed (prepare), then matched by
 * the armed run; wrong says what came back different (WRONG), or, for
 * UNREADABLE, what verify could not read. */
#define WRONG 1
#define UNREADABLE 2
static struct {
	void *p;
	size_t n;
} rec[64];
static size_t nrec, cur;
static int recording;
static char wrong[600];
/* big's data file, opened before the shim is armed (not counted). */
static int big_fd = -1;

static int match(const void *p, size_t n, const char *what, const char *name, const char *path)
{
	if (recording) {
		if (nrec == sizeof rec / sizeof *rec || !(rec[nrec].p = malloc(n)))
			die("out of memory");
		memcpy(rec[nrec].p, p, n);
		rec[nrec++].n = n;
		return DVAR_OK;
	}
	if (cur < nrec && rec[cur].n == n && memcmp(rec[cur].p, p, n) == 0) {
		cur++;
		return DVAR_OK;
	}
	snprintf(wrong, sizeof wrong, "%s of '%s' in %.400s", what, name, path);
	return WRONG;
}

/* verify's first bad chunk, or its first not unreadable (DVAR_EIO): only
 * the injected fault may make one, and only unreadable. */
static int bad_code;
static char bad_message[300];

static void on_bad(void *userdata, const dvar_bad_chunk *b)
{
	(void)userdata;
	if (!bad_code || (bad_code == DVAR_EIO && b->code != DVAR_EIO)) {
		bad_code = b->code;
		snprintf(bad_message, sizeof bad_message, "%s: %s", b->file, b->message);
	}
}

/* Out of the page cache, so that the next read of big is cold. */
static void cool(void)
{
	if (big_fd >= 0)
		posix_fadvise(big_fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* Every variable of path read whole (cold, into a page-aligned buffer and
 * into one 16 bytes past a page), mapped with its checksums checked (where
 * it can be), a range of its rows, all of them in one read_many; then
 * verified and digested. */
static int read_path(const char *path)
{
	dvar_read_options o = DVAR_READ_OPTIONS_INIT;
	dvar_read_request req[4];
	unsigned char *bufs[4] = { NULL };
	dvar_reader *r;
	size_t n = 0;
	uint64_t nbad = 0;
	int rc;

	o.threads = 4; /* reads in flight together: O_DIRECT where cold */
	if ((rc = dvar_reader_open(&r, path, &o)) != DVAR_OK)
		return rc;
	n = dvar_reader_num_vars(r);
	if (n > 4)
		die("a read checkpoint holds more than 4 variables");
	for (size_t i = 0; i < n && rc == DVAR_OK; i++) {
		dvar_var_info info;
		uint64_t elems = 0;
		dvar_reader_var(r, i, &info);
		dvar_shape_num_elements(&info.shape, &elems);
		size_t bytes = (size_t)elems * dvar_dtype_size(info.dtype);
		dvar_fault_pause(1);
		bufs[i] = aligned_alloc(4096, (bytes + 16 + 4095) / 4096 * 4096);
		dvar_fault_pause(0);
		if (!bufs[i])
			die("out of memory");
		req[i] = (dvar_read_request){ i, NULL, bufs[i], bytes };
		cool();
		rc = dvar_reader_read(r, i, NULL, bufs[i], bytes);
		if (rc == DVAR_OK)
			rc = match(bufs[i], bytes, "a whole read", info.name, path);
		cool();
		if (rc == DVAR_OK)
			rc = dvar_reader_read(r, i, NULL, bufs[i] + 16, bytes);
		if (rc == DVAR_OK)
			rc = match(bufs[i] + 16, bytes, "a read 16 bytes past a page", info.name, path);
		cool();
		if (rc == DVAR_OK) {
			/* Mapped with its checksums checked, where it can be. */
			dvar_mapping m;
			int mr = dvar_reader_map(r, i, DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m);
			if (mr == DVAR_OK)
				rc = match(m.data, m.size, "a verified mapping", info.name, path);
			else if (mr != DVAR_ENOTSUPP)
				rc = mr;
			dvar_reader_unmap(&m);
		}
		if (rc == DVAR_OK && info.shape.rank >= 1 && info.shape.dims[0] >= 8) {
			dvar_slice sl;
			dvar_slice_full(&sl, &info.shape);
			sl.start[0] = info.shape.dims[0] / 2 + 3;
			sl.length[0] = info.shape.dims[0] / 4;
			size_t part = bytes / (size_t)info.shape.dims[0] * (size_t)sl.length[0];
			rc = dvar_reader_read(r, i, &sl, bufs[i], part);
			if (rc == DVAR_OK)
				rc = match(bufs[i], part, "a range of rows", info.name, path);
		}
	}
	cool();
	if (rc == DVAR_OK)
		rc = dvar_reader_read_many(r, req, n);
	for (size_t i = 0; i < n && rc == DVAR_OK; i++)
		rc = match(bufs[i], req[i].dst_bytes, "read_many", "every variable", path);
	cool();
	bad_code = 0;
	if (rc == DVAR_OK && (rc = dvar_reader_verify(r, on_bad, NULL, &nbad)) == DVAR_OK && nbad) {
		/* A chunk it could not read is reported, as unreadable, not corrupt. */
		snprintf(wrong, sizeof wrong, "%s%s", bad_code == DVAR_EIO ? "" : "verify: ",
		         bad_message);
		rc = bad_code == DVAR_EIO ? UNREADABLE : WRONG;
	}
	for (size_t i = 0; i < n && rc == DVAR_OK; i++) {
		uint32_t crc;
		if ((rc = dvar_reader_digest(r, i, &crc)) == DVAR_OK)
			rc = match(&crc, sizeof crc, "the digest", "every variable", path);
	}
	for (size_t i = 0; i < n; i++)
		free(bufs[i]);
	dvar_reader_free(r);
	return rc;
}

/* The read operation: every checkpoint of the work folder, read. */
static int read_all(void)
{
	const char *paths[] = { big, root, src, tf };
	int rc = DVAR_OK;
	cur = 0;
	for (size_t k = 0; k < sizeof paths / sizeof *paths && rc == DVAR_OK; k++)
		rc = read_path(paths[k]);
	return rc;
}

/* What dvar_diff reports of a against b, the same as unarmed. */
static int diff_pair(const char *a, const char *b)
{
	dvar_diff_report *rep = NULL;
	int rc = dvar_diff(&rep, a, b, NULL);
	if (rc == DVAR_OK) {
		size_t head[4] = { (size_t)dvar_diff_report_identical(rep),
			           dvar_diff_report_num_vars(rep),
			           dvar_diff_report_num_only_in(rep, DVAR_DIFF_A),
			           dvar_diff_report_num_only_in(rep, DVAR_DIFF_B) };
		rc = match(head, sizeof head, "what differs", "every variable", a);
	}
	for (size_t i = 0; rc == DVAR_OK && i < dvar_diff_report_num_vars(rep); i++) {
		dvar_var_diff d;
		double got[5];
		dvar_diff_report_var(rep, i, &d);
		got[0] = d.status;
		got[1] = (double)d.num_elements;
		got[2] = (double)d.num_different;
		got[3] = d.max_abs_diff;
		got[4] = d.has_first ? (double)d.first_index : -1;
		rc = match(got, sizeof got, "a comparison", d.name, a);
	}
	dvar_diff_report_free(rep);
	return rc;
}

/* The diff operation: the source against its TensorFlow export (the same
 * values) and against the root's latest (other variables). */
static int diff_all(void)
{
	int rc;
	cur = 0;
	if ((rc = diff_pair(src, tf)) == DVAR_OK)
		rc = diff_pair(src, root);
	return rc;
}

/* A step of the runtime op's replicas: their gradients all-reduced, and
 * the sum added to the mirrored variable (aggregation SUM: summed again). */
static int runtime_step(dvar_replica *ctx, void *arg)
{
	static float grad[2][COLS], sum[2][COLS];
	int local = dvar_replica_local_id(ctx), rc;
	for (int c = 0; c < COLS; c++)
		grad[local][c] = (float)(local + 1) * (float)c;
	if ((rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, grad[local], sum[local],
	                                  COLS)) != DVAR_OK)
		return rc;
	static float delta[2][ROWS * COLS];
	for (int i = 0; i < ROWS * COLS; i++)
		delta[local][i] = sum[local][i % COLS];
	return dvar_variable_assign_add(arg, ctx, delta[local]);
}

/* The runtime operation, all of it under the fault: a strategy of two
 * replicas, a mirrored variable, a step, both replicas' values read. */
static int runtime_all(void)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	static float init[ROWS * COLS], got[ROWS * COLS];
	dvar_strategy *s = NULL;
	dvar_variable *v = NULL;
	int rc;
	cur = 0;
	values(init, 3, 0);
	so.replicas = 2;
	spec.name = "runtime/w";
	spec.dtype = DVAR_FLOAT32;
	spec.shape = (dvar_shape){ .rank = 2, .dims = { ROWS, COLS } };
	spec.initial_value = init;
	spec.synchronization = DVAR_SYNC_ON_WRITE;
	spec.aggregation = DVAR_AGG_SUM;
	if ((rc = dvar_strategy_create(&s, &so)) == DVAR_OK &&
	    (rc = dvar_variable_create(&v, s, &spec)) == DVAR_OK)
		rc = dvar_strategy_run(s, runtime_step, v);
	for (int local = 0; local < 2 && rc == DVAR_OK; local++)
		if ((rc = dvar_variable_read_local(v, local, got, sizeof got)) == DVAR_OK)
			rc = match(got, sizeof got, "a replica after a step", "runtime/w", "memory");
	dvar_variable_free(v);
	dvar_strategy_free(s);
	return rc;
}

/* The restore operation: the root's latest onto the job's variables, whose
 * replicas must then hold what it holds. */
static int restore_all(job *j)
{
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	static float got[ROWS * COLS];
	int rc = dvar_restore(j->s, root, j->v, (size_t)nvars, &ro);
	cur = 0;
	for (int k = 0; k < nvars && rc == DVAR_OK; k++)
		for (int local = 0; local < 2 && rc == DVAR_OK; local++)
			if ((rc = dvar_variable_read_local(j->v[k], local, got, sizeof got)) == DVAR_OK)
				rc = match(got, sizeof got, "a restored replica", var_names[k], root);
	return rc;
}

/* A read operation's set-up, unarmed: its results recorded, big cold. */
static void prepare_reads(job *j)
{
	char data[1200];
	recording = 1;
	if (strcmp(op, "restore") == 0) {
		model(&j->s, j->v, 0, 2);
		/* What it must come to: the root's latest, read. */
		dvar_reader *r;
		size_t i;
		static float want[ROWS * COLS];
		if (dvar_reader_open(&r, root, NULL) != DVAR_OK)
			die("root");
		for (int k = 0; k < nvars; k++)
			for (int local = 0; local < 2; local++)
				if (dvar_reader_find(r, var_names[k], &i) != DVAR_OK ||
				    dvar_reader_read(r, i, NULL, want, sizeof want) != DVAR_OK ||
				    match(want, sizeof want, "", "", "") != DVAR_OK)
					die("root");
		dvar_reader_free(r);
	} else if ((strcmp(op, "diff") == 0      ? diff_all()
	            : strcmp(op, "runtime") == 0 ? runtime_all()
	                                         : read_all()) != DVAR_OK) {
		die("read unarmed");
	}
	recording = 0;
	snprintf(data, sizeof data, "%s/data-00000-of-00001", big);
	if ((big_fd = open(data, O_RDONLY)) < 0)
		die(data);
}

/* A job resumed from the root's latest (the base of its delta), with one
 * row changed: the values of step next_step. */
static void prepare(job *j)
{
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	int64_t row = CHANGED_ROW;
	float r[COLS];

	if (reads) {
		prepare_reads(j);
		return;
	}
	if (!is_save())
		return;
	model(&j->s, j->v, 0, 1);
	if (dvar_restore(j->s, root, j->v, (size_t)nvars, &ro) != DVAR_OK)
		die("restore");
	for (int c = 0; c < COLS; c++)
		r[c] = (float)(next_step * 1000 + (row * COLS + c) % 997);
	if (dvar_variable_scatter(j->v[0], NULL, DVAR_SCATTER_UPDATE, &row, 1, r) != DVAR_OK)
		die("scatter");
}

/* The operation: into root at next_step, or into out. A delta trial's
 * unarmed run after it (at < 0) saves in full: every trial's delta then
 * has a short chain under it, not one as long as the sweep so far. */
static int act(job *j, long at)
{
	if (strcmp(op, "read") == 0)
		return read_all();
	if (strcmp(op, "diff") == 0)
		return diff_all();
	if (strcmp(op, "runtime") == 0)
		return runtime_all();
	if (strcmp(op, "write") == 0)
		return write_big(out);
	if (strcmp(op, "restore") == 0)
		return restore_all(j);
	if (is_save())
		return save(j->s, j->v, next_step,
		            strcmp(op, "delta") == 0 && at >= 0 ? DVAR_SAVE_DELTA : 0, async_save);
	if (strcmp(op, "import") == 0) {
		dvar_import_source in[3] = { { npy1, "a" }, { npy2, "b" }, { st, "s" } };
		dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
		o.threads = 1;
		return dvar_import(out, in, 3, &o);
	}
	if (strcmp(op, "reshard") == 0) {
		dvar_reshard_options o = DVAR_RESHARD_OPTIONS_INIT;
		o.shards = 3;
		o.threads = 1;
		return dvar_reshard(src, out, &o);
	}
	dvar_export_options o = DVAR_EXPORT_OPTIONS_INIT;
	o.threads = 1;
	o.flags = DVAR_EXPORT_KEEP_SHARDS * 0;
	o.format = strcmp(op, "export-safetensors") == 0 ? DVAR_EXPORT_SAFETENSORS :
	           strcmp(op, "export-tf") == 0 ? DVAR_EXPORT_TF :
	           strcmp(op, "export-npy") == 0 ? DVAR_EXPORT_NPY : DVAR_EXPORT_DVAR;
	return dvar_export(src, out, &o);
}

/* What a run reports: the call count, or the status and message. */
#define LEAK_SITES 16
typedef struct {
	long calls;
	int rc, hit;
	char message[700];
	char what[64];
	char where[200]; /* the failed call and its path */
	long live;       /* blocks allocated while armed and still live (--alloc) */
	void *live_at[LEAK_SITES];
	int died; /* --alloc: the child died, of signal or status */
} report;

/* The operation with the shim armed at call `at` (0: counting; -1: never)
 * for kind, in this process. */
static report run_armed(job *j, long at, int kind)
{
	report r = { 0 };
	const char *what = "", *where;

	dvar_fault_arm(1, at, kind);
	r.rc = act(j, at);
	r.calls = dvar_fault_calls();
	r.hit = dvar_fault_hit(&what);
	dvar_fault_arm(0, 0, 0);
	r.live = dvar_fault_live();
	for (long k = 0; k < LEAK_SITES && k < r.live; k++)
		r.live_at[k] = dvar_fault_live_at(k);
	where = r.hit ? dvar_fault_log(at) : NULL;
	snprintf(r.what, sizeof r.what, "%s", what);
	snprintf(r.where, sizeof r.where, "%s", where ? where : what);
	if (r.rc == WRONG || r.rc == UNREADABLE)
		snprintf(r.message, sizeof r.message, "%s%s", r.rc == WRONG ? "other values than unarmed: " : "", wrong);
	else
		snprintf(r.message, sizeof r.message, "%s", r.rc ? dvar_error_last()->message : "");
	return r;
}

/* Run the operation in a child with the shim armed at call `at` (0:
 * counting) for kind; *crashed when it ended in the injected crash. */
static report trial(long at, int kind, int *crashed)
{
	report r = { 0 };
	int fds[2], status;
	pid_t pid;

	if (pipe(fds) != 0)
		die("pipe");
	if ((pid = fork()) == 0) {
		job j = { 0 };
		close(fds[0]);
		alarm(120); /* a hang (replicas waiting on one that failed) ends, reported */
		prepare(&j);
		r = run_armed(&j, at, kind);
		if (write(fds[1], &r, sizeof r) != (ssize_t)sizeof r)
			_exit(3);
		_exit(0); /* no cleanup: a test of what is left behind */
	}
	close(fds[1]);
	*crashed = 0;
	if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r)
		*crashed = 1;
	close(fds[0]);
	waitpid(pid, &status, 0);
	if (*crashed && alloc_mode && kind == FAULT_ENOMEM) {
		/* Its report: it died (the files it left are checked as a crash's). */
		r.died = status ? status : -1;
		r.hit = 1;
		return r;
	}
	if (*crashed && !(WIFEXITED(status) && WEXITSTATUS(status) == 77)) {
		fprintf(stderr, "fault_driver: the child died unexpectedly (status %d)\n", status);
		exit(2);
	}
	return r;
}

/* Each variable of path holds the values the operation put there: the
 * source's variable of the same name (import: a and b hold w's, s/X the
 * source's X, through safetensors; write: big's). */
static int same_as_source(const char *path)
{
	dvar_reader *a, *b;
	int same = 1;
	if (dvar_reader_open(&a, strcmp(op, "write") == 0 ? big : src, NULL) != DVAR_OK)
		die("source");
	if (dvar_reader_open(&b, path, NULL) != DVAR_OK) {
		dvar_reader_free(a);
		return 0;
	}
	int import = strcmp(op, "import") == 0;
	for (size_t i = 0; i < dvar_reader_num_vars(import ? b : a) && same; i++) {
		dvar_var_info info;
		size_t k;
		uint32_t ca, cb;
		dvar_reader_var(import ? b : a, i, &info);
		if (import)
			same = dvar_reader_find(a, strncmp(info.name, "s/", 2) == 0 ? info.name + 2 : "w",
			                        &k) == DVAR_OK &&
			       dvar_reader_digest(a, k, &ca) == DVAR_OK &&
			       dvar_reader_digest(b, i, &cb) == DVAR_OK && ca == cb;
		else
			same = dvar_reader_find(b, info.name, &k) == DVAR_OK &&
			       dvar_reader_digest(a, i, &ca) == DVAR_OK &&
			       dvar_reader_digest(b, k, &cb) == DVAR_OK && ca == cb;
	}
	same = same && (!import || dvar_reader_num_vars(b) == 4);
	dvar_reader_free(a);
	dvar_reader_free(b);
	return same;
}

/* Names in dir that hold marker; 0 when none. */
static int count_named(const char *dir, const char *marker)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += strstr(e->d_name, marker) != NULL;
	closedir(d);
	return n;
}

/* The root holds `before` as its latest or, when the save may have come
 * past its commit point (must: it returned success), `after`; the latest
 * verifies and every listed checkpoint opens. */
static int check_root(const char *what, const state *before, const state *after,
                      int must_be_new)
{
	static state now;
	char why[700];
	int bad = 0;
	dvar_reader *rd;
	uint64_t nbad = 0;

	if (!read_latest(&now, why, sizeof why)) {
		printf("  %s: %s\n", what, why);
		return 1;
	}
	if (now.step != after->step && (must_be_new || now.step != before->step)) {
		printf("  %s: the root's latest is step %lld, not %s%lld\n", what, (long long)now.step,
		       must_be_new ? "" : "the one before or ", (long long)after->step);
		bad++;
	} else if (memcmp(now.v, (now.step == after->step ? after : before)->v, sizeof now.v) != 0) {
		printf("  %s: the root's latest (step %lld) holds other values\n", what,
		       (long long)now.step);
		bad++;
	}
	if (dvar_reader_open(&rd, root, NULL) != DVAR_OK)
		return bad + 1;
	if (dvar_reader_verify(rd, NULL, NULL, &nbad) != DVAR_OK || nbad) {
		printf("  %s: the root's latest does not verify\n", what);
		bad++;
	}
	dvar_reader_free(rd);
	/* Every checkpoint the root lists opens: none is half written. */
	dvar_root_list *l;
	if (dvar_root_list_open(&l, root) != DVAR_OK)
		return bad + 1;
	for (size_t i = 0; i < dvar_root_list_count(l); i++) {
		dvar_root_entry e;
		char ck[1200];
		dvar_root_list_get(l, i, &e);
		snprintf(ck, sizeof ck, "%s/%s", root, e.name);
		if (dvar_reader_open(&rd, ck, NULL) != DVAR_OK) {
			printf("  %s: %s is listed but does not open: %s\n", what, e.name,
			       dvar_error_last()->message);
			bad++;
		} else {
			dvar_reader_free(rd);
		}
	}
	dvar_root_list_free(l);
	return bad;
}

/* "what path" with the path relative to the work folder. */
static const char *shown(const char *where)
{
	const char *at = strstr(where, work);
	static char buf[256];

	if (!at)
		return where;
	snprintf(buf, sizeof buf, "%.*s%s", (int)(at - where), where, at + strlen(work) + 1);
	return buf;
}

/* A fault the operation must ride out: a read or write interrupted before
 * any byte moved, a read that came back short, or a write that moved part
 * of its bytes (the disk not full), is made again. */
static int rides_out(int kind, const char *call)
{
	return kind == FAULT_EINTR || kind == FAULT_PARTIAL ||
	       (kind == FAULT_SHORT && (strcmp(call, "read") == 0 || strcmp(call, "pread") == 0));
}

/* "function+offset (library)" of a code address. */
static const char *symbol(const void *at)
{
	static char buf[4][300];
	static int k;
	Dl_info info;
	char *b = buf[k++ % 4];
	if (!at || !dladdr(at, &info) || !info.dli_fname)
		snprintf(b, sizeof buf[0], "%p", at);
	else if (info.dli_sname)
		snprintf(b, sizeof buf[0], "%s+0x%lx (%s)", info.dli_sname,
		         (unsigned long)((const char *)at - (const char *)info.dli_saddr),
		         strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname);
	else
		snprintf(b, sizeof buf[0], "%s+0x%lx", info.dli_fname,
		         (unsigned long)((const char *)at - (const char *)info.dli_fbase));
	return b;
}

/* Where the failed allocation was made: the frames below the shim's. */
static void show_failed_frames(void)
{
	void **frames;
	int depth = dvar_fault_failed_frames(&frames), shown = 0;
	for (int i = 0; i < depth && shown < 6; i++) {
		const char *s = symbol(frames[i]);
		if (strstr(s, "libdvar_fault"))
			continue;
		printf("      %s\n", s);
		shown++;
	}
}

/* Whether the blocks r leaked are LevelDB's own: its allocation failed
 * (made inside it, below libdvar's call) and every block beyond those the
 * unarmed run keeps was allocated by it or by C++'s new. LevelDB is not exception-safe: what it
 * allocated before a throw stays allocated. */
static int leveldb_leak(const report *r)
{
	void **frames;
	int depth = dvar_fault_failed_frames(&frames), inside = 0;
	for (int i = 0; i < depth && !inside; i++) {
		const char *s = symbol(frames[i]);
		if (strstr(s, "libdvar.so"))
			break;
		inside = strstr(s, "libleveldb") != NULL;
	}
	if (!inside || r->live < 0 || r->live > LEAK_SITES)
		return 0;
	long others = 0; /* what the unarmed run keeps too */
	for (long k = 0; k < r->live; k++) {
		const char *s = symbol(r->live_at[k]);
		others += !strstr(s, "libleveldb") && !strstr(s, "libstdc++");
	}
	return others <= base_live;
}

/* An allocation that failed: the process lives on, a failure says it ran
 * out of memory (DVAR_ENOMEM, with a message), and nothing
 * allocated while armed stays allocated beyond what the unarmed run keeps
 * (but for LevelDB's own). */
static int check_alloc(const char *what, const report *r)
{
	int bad = 0;
	if (r->died) {
		printf("  %s: the process died (%s %d), the allocation failing in:\n", what,
		       WIFSIGNALED(r->died) ? "signal" : "status",
		       WIFSIGNALED(r->died) ? WTERMSIG(r->died) : WEXITSTATUS(r->died));
		show_failed_frames();
		return 1;
	}
	if (r->hit && r->rc != DVAR_OK && r->rc != WRONG && r->rc != UNREADABLE && !r->message[0]) {
		printf("  %s: failed (status %d) without a message\n", what, r->rc);
		bad++;
	}
	/* Out of memory is said as such, never as damage or a bad shape. */
	if (r->hit && r->rc != DVAR_OK && r->rc != DVAR_ENOMEM && r->rc != WRONG) {
		printf("  %s: failed with status %d, not DVAR_ENOMEM: %s\n", what, r->rc, r->message);
		bad++;
	}
	if ((r->live < 0 || r->live > base_live) && leveldb_leak(r)) {
		printf("  (%s: %ld blocks allocated in LevelDB before its allocation failed stay "
		       "allocated)\n",
		       what, r->live - base_live);
	} else if (r->live < 0 || r->live > base_live) {
		printf("  %s: %ld blocks allocated during the operation are still allocated (%ld "
		       "without the fault), from:\n",
		       what, r->live, base_live);
		for (int k = 0; k < LEAK_SITES && k < r->live; k++)
			printf("      %s\n", symbol(r->live_at[k]));
		printf("    the allocation failing in:\n");
		show_failed_frames();
		bad++;
	}
	return bad;
}

/* What a trial left: nothing, or the output whole; a read operation's
 * results, the same as unarmed or a failure naming a path. 0 when fine. */
static int check_output(const report *r, int crashed, long at, int kind, const state *before)
{
	char what[512];
	int bad = 0;
	snprintf(what, sizeof what, "%s, %s at call %ld (%s)", op, kind_names[kind], at,
	         crashed ? "crash" : shown(r->where));
	if (kind == FAULT_ENOMEM) {
		snprintf(what, sizeof what, "%s, ENOMEM at allocation %ld", op, at);
		bad += check_alloc(what, r);
		crashed = r->died != 0;
	}
	if (!crashed && r->rc == WRONG) {
		printf("  %s: %s\n", what, r->message);
		return 1;
	}
	if (!crashed && r->hit && r->rc != DVAR_OK && rides_out(kind, r->what)) {
		printf("  %s: failed instead of making the call again: %s\n", what, r->message);
		bad++;
	}
	/* A failure names where: the output, or the file the failing call was on. */
	if (!crashed && r->hit && r->rc != DVAR_OK && kind != FAULT_ENOMEM &&
	    !strchr(r->message, '/')) {
		printf("  %s: the message names no path: %s\n", what, r->message);
		bad++;
	}
	if (!crashed && r->hit && r->rc == DVAR_OK && !rides_out(kind, r->what))
		printf("  (%s: succeeded: a call it can do without, or one after its commit point)\n", what);
	if (reads)
		return bad;
	if (is_save()) {
		static state after;
		after = *before;
		advance(&after, next_step);
		return bad + check_root(what, before, &after, !crashed && r->rc == DVAR_OK);
	}
	struct stat st;
	if (stat(out, &st) != 0)
		return bad; /* nothing: fine */
	int whole;
	if (strcmp(op, "export-safetensors") == 0 || strcmp(op, "export-npy") == 0) {
		/* Read back through import into a scratch checkpoint. */
		char back[1100];
		join(back, work, "back");
		dvar_import_source in = { out, NULL };
		dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
		whole = 1;
		if (strcmp(op, "export-npy") == 0) {
			char a[1200];
			snprintf(a, sizeof a, "%s/w.npy", out);
			in.path = a;
			in.name = "w";
			whole = dvar_import(back, &in, 1, &o) == DVAR_OK;
		} else {
			whole = dvar_import(back, &in, 1, &o) == DVAR_OK;
		}
		char cmd[4096];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", back);
		if (system(cmd) != 0)
			die("rm");
	} else {
		whole = same_as_source(out);
	}
	if (!whole) {
		printf("  %s: the output is there but not whole (rc %d: %s)\n", what, r->rc, r->message);
		bad++;
	}
	return bad;
}

/* After a trial and the unarmed run that follows it: no temporary file. */
static int check_swept(long at, int kind)
{
	char parent[1100];

	snprintf(parent, sizeof parent, "%s", is_save() ? root : work);
	if (!count_named(parent, ".dvartmp-"))
		return 0;
	printf("  %s after %s at call %ld: temporary files left in %s\n", op, kind_names[kind], at,
	       parent);
	return 1;
}

/* Clear the output for the next trial, after checking that an unarmed run
 * succeeds and sweeps what the dead child left. */
static int rerun_and_sweep(long at, int kind)
{
	int crashed, bad = 0;
	char cmd[4096];
	report r;

	if (!is_save()) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.index '%s'.data-*", out, out, out);
		if (system(cmd) != 0)
			die("rm");
	} else {
		next_step++; /* the trial's step may have been committed */
	}
	r = trial(-1, 0, &crashed); /* -1: never fails */
	if (crashed || r.rc != DVAR_OK) {
		printf("  %s after %s at call %ld: the next run fails: %s\n", op, kind_names[kind], at,
		       r.message);
		bad++;
	}
	bad += check_swept(at, kind);
	if (is_save())
		next_step++;
	else {
		snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.index '%s'.data-*", out, out, out);
		if (system(cmd) != 0)
			die("rm");
	}
	return bad;
}

/* ---------------------------------------------------------------- two workers */

/* The trials of a two-worker operation: WORK/trials holds the count, the
 * step of trial 0 (trial i saves step + 2 i, then step + 2 i + 1), and the
 * call and kind of each. */
typedef struct {
	long n;
	int64_t step;
	long *at;
	int *kind;
} trial_list;

static void write_trials(const trial_list *t)
{
	char p[1100];
	FILE *f;

	join(p, work, "trials");
	if (!(f = fopen(p, "w")))
		die("write the trials");
	fprintf(f, "%ld %" PRId64 "\n", t->n, t->step);
	for (long i = 0; i < t->n; i++)
		fprintf(f, "%ld %d\n", t->at[i], t->kind[i]);
	if (fclose(f) != 0)
		die("write the trials");
}

static void read_trials(trial_list *t)
{
	char p[1100];
	FILE *f;

	join(p, work, "trials");
	if (!(f = fopen(p, "r")) || fscanf(f, "%ld %" SCNd64, &t->n, &t->step) != 2)
		die("read the trials");
	t->at = malloc((size_t)(t->n + 1) * sizeof *t->at);
	t->kind = malloc((size_t)(t->n + 1) * sizeof *t->kind);
	if (!t->at || !t->kind)
		die("out of memory");
	for (long i = 0; i < t->n; i++)
		if (fscanf(f, "%ld %d", &t->at[i], &t->kind[i]) != 2)
			die("read the trials");
	fclose(f);
}

/* A line of the job's progress (WORK/progress), for this process to read. */
static void progress(const char *fmt, long a, long b)
{
	char p[1100];
	FILE *f;

	join(p, work, "progress");
	if (!(f = fopen(p, "a")))
		die("progress");
	fprintf(f, fmt, a, b);
	fclose(f);
}

/* Every worker's report, in worker order (a collective: also a barrier). */
static void exchange(dvar_strategy *s, const report *mine, report *all)
{
	dvar_values *v;
	dvar_shape sh = { .rank = 1, .dims = { sizeof *mine } };

	if (dvar_values_new(&v, s, DVAR_UINT8) != DVAR_OK ||
	    dvar_values_set(v, 0, &sh, mine) != DVAR_OK ||
	    dvar_strategy_gather(s, v, 0, all, (size_t)workers * sizeof *all, NULL) != DVAR_OK)
		die("exchange the reports");
	dvar_values_free(v);
}

/* The workers' verdicts on one save: both return, the same status; when
 * it failed, the same message, naming the worker, the save and a path. */
static int check_workers(const report *all, long at, int kind)
{
	const report *r = &all[target];
	char what[512], saving[64];
	int bad = 0;

	snprintf(what, sizeof what, "%s, %s at call %ld of worker %d (%s)", op, kind_names[kind], at,
	         target, r->hit ? shown(r->where) : "not reached");
	snprintf(saving, sizeof saving, "saving step %lld", (long long)next_step);
	for (int w = 0; w < workers; w++) {
		if (all[w].rc != r->rc || strcmp(all[w].message, r->message) != 0) {
			printf("  %s: worker %d returned %d (%s), worker %d %d (%s)\n", what, target, r->rc,
			       r->message, w, all[w].rc, all[w].message);
			bad++;
		}
	}
	if (r->hit && r->rc != DVAR_OK && rides_out(kind, r->what)) {
		printf("  %s: failed instead of making the call again: %s\n", what, r->message);
		bad++;
	}
	if (r->rc != DVAR_OK && (!strstr(r->message, saving) || !strstr(r->message, "worker ") ||
	                         !strchr(r->message, '/'))) {
		printf("  %s: the message names not the save, the worker and a path: %s\n", what,
		       r->message);
		bad++;
	}
	return bad;
}

/* In the job: the next step saved, unarmed, by the same workers, whose
 * variables hold `restored` with the row of step `row_step`: it must commit
 * on every worker (the latest: that step, those values) and leave no
 * temporary file. */
static int rerun_in_job(job *j, const state *restored, int64_t row_step, long at, int kind)
{
	static state expected;
	report mine = { 0 }, all[2];
	char what[256];
	int bad = 0, me = dvar_strategy_worker_id(j->s);

	mine.rc = save(j->s, j->v, next_step, 0, async_save);
	snprintf(mine.message, sizeof mine.message, "%s", mine.rc ? dvar_error_last()->message : "");
	exchange(j->s, &mine, all);
	if (me != 0)
		return 0;
	snprintf(what, sizeof what, "%s after %s at call %ld: the next save", op, kind_names[kind],
	         at);
	for (int w = 0; w < workers; w++)
		if (all[w].rc != DVAR_OK) {
			printf("  %s fails on worker %d: %s\n", what, w, all[w].message);
			bad++;
		}
	expected = *restored;
	advance(&expected, row_step);
	expected.step = next_step;
	if (!bad)
		bad += check_root(what, restored, &expected, 1);
	return bad + check_swept(at, kind);
}

/* `--job FIRST` on every worker: trials FIRST.. of WORK/trials, each
 * checked by the chief; WORK/progress says how far it came. With `--step
 * S`, first the save of step S after a job that died. */
static int job_main(long first, int64_t rerun_step)
{
	trial_list t;
	int failures = 0;

	read_trials(&t);
	for (long i = rerun_step ? first - 1 : first; i < t.n; i++) {
		int rerun = i < first; /* the save after a job that died */
		job j = { 0 };
		report mine, all[2];
		static state before;
		char why[700], pid[1100], name[32];
		int me, bad = 0;
		FILE *f;

		next_step = rerun ? rerun_step : t.step + 2 * i;
		prepare(&j);
		me = dvar_strategy_worker_id(j.s);
		snprintf(name, sizeof name, "pid-%d", me);
		join(pid, work, name);
		if ((f = fopen(pid, "w"))) {
			fprintf(f, "%ld\n", (long)getpid());
			fclose(f);
		}
		if (me == 0 && !read_latest(&before, why, sizeof why))
			die(why);
		if (rerun) {
			/* It commits and sweeps what the dead job left. */
			bad = rerun_in_job(&j, &before, next_step, -1, 0);
			if (me == 0)
				progress("rerun %ld %ld\n", i, bad);
			free_model(j.s, j.v);
			failures += bad;
			continue;
		}
		if (me == 0) {
			keep_before(&before);
			progress("start %ld %ld\n", i, 0);
		}
		dvar_fault_scope(root);
		mine = run_armed(&j, me == target ? t.at[i] : -1, t.kind[i]);
		if (t.at[i] == 0 && me == target) {
			/* The count, and what each call was. */
			char p[1100];
			FILE *c;
			join(p, work, "count");
			if (!(c = fopen(p, "w")))
				die("count");
			fprintf(c, "%ld\n", mine.calls);
			for (long k = 1; k <= mine.calls && dvar_fault_log(k); k++)
				fprintf(c, "%s\n", dvar_fault_log(k));
			fclose(c);
		}
		exchange(j.s, &mine, all);
		if (me == 0) {
			bad += check_workers(all, t.at[i], t.kind[i]);
			bad += check_output(&all[target], 0, t.at[i], t.kind[i], &before);
		}
		next_step++;
		bad += rerun_in_job(&j, &before, next_step - 1, t.at[i], t.kind[i]);
		free_model(j.s, j.v);
		if (me == 0) {
			failures += bad;
			progress("done %ld %ld\n", i, bad);
			fflush(stdout);
		}
	}
	return failures != 0;
}

/* ---------------------------------------------------------------- the parent of the jobs */

static char self[PATH_MAX];

/* Run `--job FIRST` (with `--step STEP` unless 0) under mpirun within
 * bound seconds; its output goes to WORK/job.log, whose lines
 * that report (two spaces first) are shown. mpirun's status; 124: the
 * bound was reached. */
static int run_job(long first, int64_t step, int bound)
{
	char cmd[8192], log[1100], line[1024];
	FILE *f;
	int st;

	join(log, work, "progress");
	unlink(log);
	join(log, work, "job.log");
	snprintf(cmd, sizeof cmd,
	         "timeout -k 5 %d '%s' -np %d --oversubscribe --bind-to none -x LD_PRELOAD "
	         "'%s' '%s' '%s' --job %ld --step %" PRId64 " >'%s' 2>&1",
	         bound, mpiexec, workers, self, op, work, first, step, log);
	st = system(cmd);
	st = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if ((f = fopen(log, "r"))) {
		while (fgets(line, sizeof line, f))
			if (strncmp(line, "  ", 2) == 0 &&
			    (strncmp(line + 2, op, strlen(op)) == 0 ||
			     (line[2] == '(' && strncmp(line + 3, op, strlen(op)) == 0)))
				fputs(line, stdout);
		fclose(f);
	}
	return st;
}

/* The tail of the last job's output, after a job that ended wrongly. */
static void show_log(void)
{
	char cmd[2200], log[1100];

	join(log, work, "job.log");
	snprintf(cmd, sizeof cmd, "tail -n 15 '%s' | sed 's/^/  | /'", log);
	fflush(stdout);
	if (system(cmd) != 0)
		printf("  | (no output)\n");
}

/* How far the last job came: the last trial started and done (-1: none),
 * the failures it found, and whether its save after a dead job ran. */
static void read_progress(long *started, long *done, long *bad, int *reran)
{
	char p[1100], word[16];
	long i, b;
	FILE *f;

	*started = *done = -1;
	*bad = 0;
	*reran = 0;
	join(p, work, "progress");
	if (!(f = fopen(p, "r")))
		return;
	while (fscanf(f, "%15s %ld %ld", word, &i, &b) == 3) {
		if (strcmp(word, "start") == 0) {
			*started = i;
		} else if (strcmp(word, "rerun") == 0) {
			*reran = 1;
			*bad += b;
		} else {
			*done = i;
			*bad += b;
		}
	}
	fclose(f);
}

/* A dead job's workers, gone: only then does the next save sweep what
 * they left (their process ids are in its names). */
static int wait_gone(void)
{
	for (int w = 0; w < workers; w++) {
		char p[1100], name[16];
		long pid = 0;
		FILE *f;

		snprintf(name, sizeof name, "pid-%d", w);
		join(p, work, name);
		if (!(f = fopen(p, "r")))
			continue;
		if (fscanf(f, "%ld", &pid) != 1)
			pid = 0;
		fclose(f);
		for (int t = 0; pid > 0 && kill((pid_t)pid, 0) == 0; t++) {
			if (t == 300)
				return 0;
			usleep(100000);
		}
	}
	return 1;
}

/* The calls of the target worker the trials go into, lo..hi, from the
 * counting job's log: the chief's commit starts at its first call on the
 * index it writes. */
static void call_range(long calls, long *lo, long *hi)
{
	char p[1100], line[512];
	long n = 0, commit = 0;
	FILE *f;

	join(p, work, "count");
	if (!(f = fopen(p, "r")) || !fgets(line, sizeof line, f))
		die("read the count");
	while (fgets(line, sizeof line, f)) {
		n++;
		line[strcspn(line, "\n")] = '\0';
		printf("  (call %ld of worker %d: %s)\n", n, target, shown(line));
		if (!commit && strlen(line) > 6 && strcmp(line + strlen(line) - 6, "/index") == 0)
			commit = n;
	}
	fclose(f);
	/* The calls vary a little with the step names: a few more are tried. */
	*lo = 1;
	*hi = calls + 2;
	if (phase != CALLS_ALL && !commit) {
		fprintf(stderr, "fault_driver: %s: the chief's commit writes no index\n", op);
		exit(2);
	}
	if (phase == CALLS_WRITING)
		*hi = commit - 1;
	else if (phase == CALLS_COMMIT)
		*lo = commit;
}

/* Trials into one worker of a two-worker job (see the top). */
static int two_workers(long sample, unsigned long seed)
{
	trial_list t = { 1, next_step, NULL, NULL };
	long zero_at = 0, count, lo, hi, started, done, bad;
	int64_t rerun = 0;
	int zero_kind = 0, failures = 0, tried[NKINDS] = { 0 }, bound = 120, reran;
	char p[1100];
	FILE *f;

	/* The count: one save, the shim counting. */
	t.at = &zero_at;
	t.kind = &zero_kind;
	write_trials(&t);
	if (run_job(0, 0, bound) != 0 ||
	    (read_progress(&started, &done, &bad, &reran), done != 0 || bad)) {
		fprintf(stderr, "fault_driver: %s fails without a fault\n", op);
		show_log();
		return 2;
	}
	join(p, work, "count");
	if (!(f = fopen(p, "r")) || fscanf(f, "%ld", &count) != 1)
		die("read the count");
	fclose(f);
	call_range(count, &lo, &hi);
	next_step += 2;

	long total = (hi - lo + 1) * nkinds;
	t.n = sample ? sample : total;
	t.step = next_step;
	t.at = malloc((size_t)t.n * sizeof *t.at);
	t.kind = malloc((size_t)t.n * sizeof *t.kind);
	if (!t.at || !t.kind)
		die("out of memory");
	for (long i = 0; i < t.n; i++) {
		long pick = sample ? (long)((seed = seed * 6364136223846793005ul + 1442695040888963407ul) >> 33) % total : i;
		t.at[i] = lo + pick / nkinds;
		t.kind[i] = kinds[pick % nkinds];
	}
	write_trials(&t);
	/* After a job that died in trial k, the next one first saves the
	 * step after k's (rerun), then goes on from trial k + 1. */
	for (long first = 0, k = -1; first < t.n || rerun;) {
		int st = run_job(first, rerun, bound + 2 * (int)(t.n - first));
		read_progress(&started, &done, &bad, &reran);
		failures += (int)bad;
		if (rerun && !reran) {
			printf("  %s after %s at call %ld of worker %d: the next job's save did not "
			       "return (status %d)\n", op, kind_names[t.kind[k]], t.at[k], target, st);
			show_log();
			failures++;
			break;
		}
		rerun = 0;
		if (first >= t.n)
			break;
		for (long i = first; i <= done; i++)
			tried[t.kind[i]]++;
		if (st == 0 && done == t.n - 1)
			break;
		k = started > done ? started : done >= first ? done + 1 : first;
		if (k >= t.n) {
			printf("  %s: the job ended with status %d after its last trial\n", op, st);
			show_log();
			failures++;
			break;
		}
		/* The job died in trial k: by the crash, or wrongly. */
		tried[t.kind[k]]++;
		next_step = t.step + 2 * k;
		if (st == 124 || st == 137) {
			printf("  %s, %s at call %ld of worker %d: the job did not end within %d s\n", op,
			       kind_names[t.kind[k]], t.at[k], target, bound);
			show_log();
			failures++;
		} else if (t.kind[k] != FAULT_CRASH || st == 0 || started != k) {
			printf("  %s, %s at call %ld of worker %d: the job ended with status %d\n", op,
			       kind_names[t.kind[k]], t.at[k], target, st);
			show_log();
			failures++;
		}
		if (!wait_gone()) {
			printf("  %s: a worker of the dead job still runs 30 s after its end\n", op);
			failures++;
		}
		if (started == k) {
			/* What the dead job left, seen by a fresh process. */
			static state before;
			report r = { 0 };
			load_before(&before);
			failures += check_output(&r, 1, t.at[k], t.kind[k], &before);
		}
		rerun = next_step + 1;
		first = k + 1;
	}
	printf("%s: %ld file-system calls of worker %d, trials at calls %ld..%ld:", op, count, target,
	       lo, hi);
	for (int k = 0; k < nkinds; k++)
		printf(" %d %s", tried[kinds[k]], kind_names[kinds[k]]);
	printf("; %d failures\n", failures);
	return failures != 0;
}

int main(int argc, char **argv)
{
	long sample = 0, job = -2;
	int64_t step = 0;
	unsigned long seed = 1;
	int crashed, failures = 0, tried[NKINDS] = { 0 };
	report count;

	if (argc < 3) {
		fprintf(stderr, "usage: fault_driver OP WORK [--sample N] [--seed S] [--mpiexec MPIRUN] "
		                "[--alloc 1]\n");
		return 2;
	}
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--sample"))
			sample = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--mpiexec"))
			mpiexec = argv[i + 1];
		else if (!strcmp(argv[i], "--alloc"))
			alloc_mode = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--job"))
			job = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--step"))
			step = strtoll(argv[i + 1], NULL, 10);
	}
	dvar_fault_arm = (void (*)(int, long, int))dlsym(RTLD_DEFAULT, "dvar_fault_arm");
	dvar_fault_calls = (long (*)(void))dlsym(RTLD_DEFAULT, "dvar_fault_calls");
	dvar_fault_hit = (int (*)(const char **))dlsym(RTLD_DEFAULT, "dvar_fault_hit");
	dvar_fault_scope = (void (*)(const char *))dlsym(RTLD_DEFAULT, "dvar_fault_scope");
	dvar_fault_log = (const char *(*)(long))dlsym(RTLD_DEFAULT, "dvar_fault_log");
	dvar_fault_pause = (void (*)(int))dlsym(RTLD_DEFAULT, "dvar_fault_pause");
	dvar_fault_live = (long (*)(void))dlsym(RTLD_DEFAULT, "dvar_fault_live");
	dvar_fault_live_at = (void *(*)(long))dlsym(RTLD_DEFAULT, "dvar_fault_live_at");
	dvar_fault_failed_frames = (int (*)(void ***))dlsym(RTLD_DEFAULT, "dvar_fault_failed_frames");
	if (!dvar_fault_arm || !dvar_fault_calls || !dvar_fault_hit || !dvar_fault_scope ||
	    !dvar_fault_log || !dvar_fault_pause || !dvar_fault_live || !dvar_fault_live_at ||
	    !dvar_fault_failed_frames) {
		fprintf(stderr, "fault_driver: run it with LD_PRELOAD=libdvar_fault.so\n");
		return 2;
	}
	op = argv[1];
	if (!parse_op()) {
		fprintf(stderr, "fault_driver: unknown operation '%s'\n", op);
		return 2;
	}
	if (alloc_mode && workers > 1) {
		fprintf(stderr, "fault_driver: --alloc 1 takes a one-process operation\n");
		return 2;
	}
	if (alloc_mode) {
		kinds = alloc_kinds;
		nkinds = 1;
	}
	if (job == -2) {
		/* A fresh work folder: an earlier run's is removed first. */
		char cmd[1100];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", argv[2]);
		if (system(cmd) != 0)
			die("rm");
		mkdir(argv[2], 0777);
	}
	/* Absolute: the shim's scope and the jobs' folder. */
	if (!realpath(argv[2], work) || strlen(work) > 900) {
		fprintf(stderr, "fault_driver: %s: no such folder, or its path is too long\n", argv[2]);
		return 2;
	}
	join(src, work, "src");
	join(root, work, "root");
	join(npy1, work, "a.npy");
	join(npy2, work, "b.npy");
	join(st, work, "src.safetensors");
	join(out, work, strcmp(op, "export-safetensors") == 0 ? "out.safetensors" : "out");
	join(big, work, "big");
	join(tf, work, "tf");
	if (job != -2)
		return job_main(job, step);
	setup();
	if (workers > 1) {
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n <= 0)
			die("readlink /proc/self/exe");
		self[n] = '\0';
		return two_workers(sample, seed);
	}
	count = trial(0, alloc_mode ? FAULT_ENOMEM : 0, &crashed);
	if (crashed || count.died || count.rc != DVAR_OK) {
		fprintf(stderr, "fault_driver: %s fails without a fault: %s\n", op, count.message);
		return 2;
	}
	base_live = count.live;
	/* The calls vary a little with the step names: a few more are tried. */
	long n = count.calls + 2;
	long total = n * nkinds;
	failures += rerun_and_sweep(0, 0);
	for (long t = 0; t < (sample ? sample : total); t++) {
		long pick = sample ? (long)((seed = seed * 6364136223846793005ul + 1442695040888963407ul) >> 33) % total : t;
		long at = pick / nkinds + 1;
		int kind = kinds[pick % nkinds];
		static state before;
		char why[700];
		if (is_save() && !read_latest(&before, why, sizeof why))
			die(why);
		report r = trial(at, kind, &crashed);
		tried[kind]++;
		failures += check_output(&r, crashed, at, kind, &before);
		failures += rerun_and_sweep(at, kind);
	}
	printf("%s: %ld %s; trials:", op, count.calls,
	       alloc_mode ? "allocations" : "file-system calls");
	for (int k = 0; k < nkinds; k++)
		printf(" %d %s", tried[kinds[k]], kind_names[kinds[k]]);
	printf("; %d failures\n", failures);
	return failures != 0;
}
