/*
 * tests/unit/store/test_store_kill_random.c - one worker of three SIGKILLed
 * at a random moment of a save, a restore or a collective: the job ends,
 * and the root holds its last committed checkpoint, whole, and nothing of
 * the interrupted save. Driven by kill_random.sh.
 *
 * `--run WORK OP SEED`, under `mpirun -np 3`: every worker saves step 1,
 * then runs OP (save: dvar_save of the next step; restore: dvar_restore of
 * the root's latest over other values, checked; collective: all-reduces
 * through dvar_replica_all_reduce, checked) once to time it, then over and
 * over. From SEED alone come the victim (any worker, the chief too) and a
 * fraction f in [0, 2): when the loop starts, a thread of the victim sleeps
 * f times the slowest worker's timed iteration, writes WORK/killed (what it
 * interrupted) and SIGKILLs its process. The chief records each step it
 * saved in WORK/committed. A survivor that gets SIGTERM (OpenMPI's abort)
 * notes it in WORK/term-W and dies of it; one whose call returns an error
 * writes WORK/returned-W. Wrong numbers are written to WORK/bad-W. Each
 * worker writes its process id to WORK/pid-W, for the script to wait on.
 *
 * `--check WORK OP`, alone, in a fresh process: the kill came; no worker
 * saw wrong numbers; the root's latest is the last step the chief recorded,
 * or, for a save killed after its commit, the one after; the root lists
 * exactly steps 1..latest (or latest + 1, renamed into place whole before
 * the pointer file named it); each verifies (every checksum) and a restore
 * of it into W = 1 x R = 3 reads back the values of its step; the next step
 * is not visible to dvar_reader_open; any leftover is the interrupted
 * save's (a restore or a collective leaves none); and the next save into
 * the root sweeps every leftover and commits.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "store_tu.h"

#define NUM_BIG 6
#define NUM_VARS (NUM_BIG + 1)
#define BIG_ELEMS ((size_t)1 << 20) /* 4 MiB of float32 each */
#define COLL_ELEMS ((size_t)1 << 21) /* 8 MiB of float32 per all-reduce */
#define GARBAGE_STEP 999

typedef enum { OP_SAVE, OP_RESTORE, OP_COLLECTIVE } op_kind;
static const char *const op_names[] = { "save", "restore", "collective" };

static int op_of(const char *name)
{
	for (int k = 0; k < 3; k++)
		if (strcmp(name, op_names[k]) == 0)
			return k;
	return -1;
}

static int64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------ the values */

/* Big variable k at element i after a save of `step` (exact in float32). */
static float big_at(int k, int64_t step, size_t i)
{
	return (float)(i % 4099) * 0.25f + (float)(step * 16 + k);
}

/* "count", ON_READ SUM int32: replica r holds step + r; saved: the sum. */
static int32_t count_saved(int64_t step, int N)
{
	return (int32_t)(N * step + N * (N - 1) / 2);
}

typedef struct {
	stu_topo topo;
	dvar_variable *v[NUM_VARS];
} run;

static int run_open(run *t, int replicas)
{
	int rc;

	memset(t, 0, sizeof *t);
	if ((rc = stu_topo_open(&t->topo, replicas)) != DVAR_OK)
		return rc;
	for (int k = 0; k < NUM_VARS; k++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		char name[16];

		if (k < NUM_BIG) {
			snprintf(name, sizeof name, "big_%d", k);
			spec.dtype = DVAR_FLOAT32;
			spec.shape.rank = 1;
			spec.shape.dims[0] = (int64_t)BIG_ELEMS;
			spec.synchronization = DVAR_SYNC_ON_WRITE;
			spec.aggregation = DVAR_AGG_MEAN;
		} else {
			snprintf(name, sizeof name, "count");
			spec.dtype = DVAR_INT32;
			spec.synchronization = DVAR_SYNC_ON_READ;
			spec.aggregation = DVAR_AGG_SUM;
		}
		spec.name = name;
		if ((rc = dvar_variable_create(&t->v[k], t->topo.s, &spec)) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

static void run_close(run *t)
{
	for (int k = 0; k < NUM_VARS; k++)
		dvar_variable_free(t->v[k]);
	dvar_strategy_free(t->topo.s);
}

static float *big_buffer(int k, int64_t step)
{
	float *buf = malloc(BIG_ELEMS * sizeof *buf);

	if (buf)
		for (size_t i = 0; i < BIG_ELEMS; i++)
			buf[i] = big_at(k, step, i);
	return buf;
}

struct count_job {
	run *t;
	int64_t step;
};

static int fill_count(dvar_replica *ctx, void *arg)
{
	struct count_job *j = arg;
	int32_t c = (int32_t)(j->step + dvar_replica_id(ctx));

	return dvar_variable_assign(j->t->v[NUM_BIG], ctx, &c);
}

/* The values a save of `step` records (count: N * step + 0 + 1 + ...). */
static int fill(run *t, int64_t step)
{
	struct count_job j = { t, step };
	int rc = DVAR_OK;

	for (int k = 0; k < NUM_BIG && rc == DVAR_OK; k++) {
		float *buf = big_buffer(k, step);

		rc = buf ? dvar_variable_assign(t->v[k], NULL, buf) : DVAR_ENOMEM;
		free(buf);
	}
	return rc == DVAR_OK ? dvar_strategy_run(t->topo.s, fill_count, &j) : rc;
}

/* 0 when every variable reads cross-replica as a save of `step` by N. */
static int check_vars(run *t, int64_t step, int N, char *why, size_t cap)
{
	float *got = malloc(BIG_ELEMS * sizeof *got);
	int32_t count = 0;
	int bad = 0;

	if (!got)
		return snprintf(why, cap, "out of memory"), 1;
	for (int k = 0; k < NUM_BIG && !bad; k++) {
		if (dvar_variable_read(t->v[k], NULL, got, BIG_ELEMS * sizeof *got) != DVAR_OK) {
			snprintf(why, cap, "reading big_%d: %s", k, dvar_error_last()->message);
			bad = 1;
		}
		for (size_t i = 0; i < BIG_ELEMS && !bad; i++)
			if (got[i] != big_at(k, step, i)) {
				snprintf(why, cap, "big_%d[%zu] is %g, not step %" PRId64 "'s %g", k, i,
				         (double)got[i], step, (double)big_at(k, step, i));
				bad = 1;
			}
	}
	if (!bad && (dvar_variable_read(t->v[NUM_BIG], NULL, &count, sizeof count) != DVAR_OK ||
	             count != count_saved(step, N))) {
		snprintf(why, cap, "count is %d, not step %" PRId64 "'s %d", count, step,
		         count_saved(step, N));
		bad = 1;
	}
	free(got);
	return bad;
}

static int save_step(run *t, const char *root, int64_t step)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;

	wo.compress = DVAR_COMPRESS_NONE;
	wo.chunk_size = 1u << 20;
	so.write = &wo;
	return dvar_save(t->topo.s, root, step, t->v, NUM_VARS, &so);
}

/* Write text to path whole or not at all (a kill may come at any time). */
static void write_file(const char *work, const char *name, const char *text)
{
	char *path = tu_path(work, name);
	char *tmp = malloc(strlen(path) + 8);
	FILE *f;

	if (tmp) {
		sprintf(tmp, "%s.tmp", path);
		if ((f = fopen(tmp, "w")) != NULL) {
			fputs(text, f);
			if (fclose(f) == 0)
				rename(tmp, path);
		}
	}
	free(tmp);
	free(path);
}

/* ------------------------------------------------------------ the run */

typedef struct {
	run *t;
	const char *work, *root;
	int op;
	int64_t next_step; /* the save's next step */
	float *coll;       /* the collective's buffer, one per local replica (R = 1) */
	char why[256];     /* what was wrong, for WORK/bad-W */
} job;

static int all_reduce_replica(dvar_replica *ctx, void *arg)
{
	job *j = arg;
	int w = j->t->topo.worker;
	int rc;

	for (size_t i = 0; i < COLL_ELEMS; i++)
		j->coll[i] = (float)(i % 7 + (size_t)w);
	rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, j->coll, j->coll,
	                             COLL_ELEMS);
	for (size_t i = 0; rc == DVAR_OK && i < COLL_ELEMS; i++)
		if (j->coll[i] != (float)(3 * (i % 7) + 3)) {
			snprintf(j->why, sizeof j->why, "all-reduce element %zu is %g, not %g", i,
			         (double)j->coll[i], (double)(3 * (i % 7) + 3));
			return DVAR_EINVAL;
		}
	return rc;
}

/* One iteration of the operation; DVAR_EINVAL with j->why on wrong numbers. */
static int op_once(job *j)
{
	char text[64];
	int rc;

	switch (j->op) {
	case OP_SAVE:
		if ((rc = fill(j->t, j->next_step)) != DVAR_OK ||
		    (rc = save_step(j->t, j->root, j->next_step)) != DVAR_OK)
			return rc;
		if (j->t->topo.worker == 0) {
			snprintf(text, sizeof text, "%" PRId64 "\n", j->next_step);
			write_file(j->work, "committed", text);
		}
		j->next_step++;
		return DVAR_OK;
	case OP_RESTORE:
		/* Other values first, so that a restore that did nothing fails. */
		if ((rc = fill(j->t, GARBAGE_STEP)) != DVAR_OK ||
		    (rc = dvar_restore(j->t->topo.s, j->root, j->t->v, NUM_VARS, NULL)) != DVAR_OK)
			return rc;
		return check_vars(j->t, 1, j->t->topo.N, j->why, sizeof j->why) ? DVAR_EINVAL : DVAR_OK;
	default:
		j->why[0] = '\0';
		rc = dvar_strategy_run(j->t->topo.s, all_reduce_replica, j);
		return j->why[0] ? DVAR_EINVAL : rc;
	}
}

/* What the killer thread reads of the main thread's progress. */
static _Atomic int64_t iter_started_ns;
static _Atomic int iter_index;
static _Atomic int64_t last_iter_us; /* the previous iteration's time */

typedef struct {
	const char *work;
	int worker, op;
	int64_t delay_us, ref_us;
} killer;

static void *killer_main(void *arg)
{
	killer *k = arg;
	char text[512];
	int64_t into;

	tu_sleep_ms((int)(k->delay_us / 1000));
	into = now_ns(CLOCK_MONOTONIC);
	snprintf(text, sizeof text,
	         "worker=%d op=%s iteration=%d delay_us=%" PRId64 " into_us=%" PRId64
	         " last_us=%" PRId64 " ref_us=%" PRId64 " realtime_ns=%" PRId64 "\n",
	         k->worker, op_names[k->op], atomic_load(&iter_index), k->delay_us,
	         (into - atomic_load(&iter_started_ns)) / 1000, atomic_load(&last_iter_us), k->ref_us,
	         now_ns(CLOCK_REALTIME));
	write_file(k->work, "killed", text);
	kill(getpid(), SIGKILL);
	return NULL;
}

/* A survivor's SIGTERM (mpirun ending the job): note it, then die of it. */
static int term_fd = -1;
static char term_text[64];

static void on_sigterm(int sig)
{
	if (term_fd >= 0 && write(term_fd, term_text, strlen(term_text)) < 0)
		term_fd = -1;
	signal(sig, SIG_DFL);
	raise(sig);
}

static int max_replica(dvar_replica *ctx, void *arg)
{
	return dvar_replica_all_reduce(ctx, DVAR_REDUCE_MAX, DVAR_INT64, arg, arg, 1);
}

static void fail_run(job *j, const char *what, int rc)
{
	char name[32], text[512];

	snprintf(name, sizeof name, rc == DVAR_EINVAL && j->why[0] ? "bad-%d" : "returned-%d",
	         j->t->topo.worker);
	snprintf(text, sizeof text, "worker %d: %s: rc %d (%s): %s\n", j->t->topo.worker, what, rc,
	         dvar_strerror(rc), rc == DVAR_EINVAL && j->why[0] ? j->why
	                                                            : dvar_error_last()->message);
	fputs(text, stderr);
	write_file(j->work, name, text);
	fflush(NULL);
	/* The strategy is broken and a peer is gone: leave at once. */
	_exit(4);
}

static int main_run(const char *work, int op, uint64_t seed)
{
	char *root = tu_path(work, "root");
	uint64_t rs = seed;
	int victim = (int)(tu_rand(&rs) % 3);
	double f = (double)(tu_rand(&rs) % 20000) / 10000.0;
	job j;
	run t;
	int64_t t0, ref_us;
	killer k;
	pthread_t th;
	int rc;

	memset(&j, 0, sizeof j);
	if (run_open(&t, 1) != DVAR_OK) {
		fprintf(stderr, "setup: %s\n", dvar_error_last()->message);
		return 1;
	}
	if (t.topo.W != 3) {
		fprintf(stderr, "run this under mpirun -np 3 (W is %d)\n", t.topo.W);
		return 1;
	}
	{
		char name[32], text[32];

		snprintf(name, sizeof name, "pid-%d", t.topo.worker);
		snprintf(text, sizeof text, "%ld\n", (long)getpid());
		write_file(work, name, text);
	}
	j.t = &t;
	j.work = work;
	j.root = root;
	j.op = op;
	j.next_step = 2;
	if (op == OP_COLLECTIVE && !(j.coll = malloc(COLL_ELEMS * sizeof *j.coll)))
		return 1;
	if ((rc = fill(&t, 1)) != DVAR_OK || (rc = save_step(&t, root, 1)) != DVAR_OK)
		fail_run(&j, "step 1", rc);
	if (t.topo.worker == 0)
		write_file(work, "committed", "1\n");

	/* The reference: one timed iteration, the slowest worker's time. */
	t0 = now_ns(CLOCK_MONOTONIC);
	if ((rc = op_once(&j)) != DVAR_OK)
		fail_run(&j, "the timed iteration", rc);
	ref_us = (now_ns(CLOCK_MONOTONIC) - t0) / 1000;
	if ((rc = dvar_strategy_run(t.topo.s, max_replica, &ref_us)) != DVAR_OK)
		fail_run(&j, "agreeing on the time", rc);

	snprintf(term_text, sizeof term_text, "worker %d: SIGTERM during %s\n", t.topo.worker,
	         op_names[op]);
	{
		char name[32], *p;

		snprintf(name, sizeof name, "term-%d", t.topo.worker);
		p = tu_path(work, name);
		term_fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		free(p);
		signal(SIGTERM, on_sigterm);
	}
	if (t.topo.worker == 0)
		printf("seed %" PRIu64 ": %s, worker %d killed %.0f ms into the loop (%.2f of an "
		       "iteration of %.0f ms)\n", seed, op_names[op], victim, f * (double)ref_us / 1000,
		       f, (double)ref_us / 1000);
	fflush(stdout);

	atomic_store(&iter_started_ns, now_ns(CLOCK_MONOTONIC));
	atomic_store(&last_iter_us, ref_us);
	if (t.topo.worker == victim) {
		k.work = work;
		k.worker = victim;
		k.op = op;
		k.ref_us = ref_us;
		k.delay_us = (int64_t)(f * (double)ref_us);
		if (pthread_create(&th, NULL, killer_main, &k) != 0)
			return 1;
	}
	/* Until the kill: many times the reference, then a failure. */
	for (int i = 0; i < 1000; i++) {
		int64_t start = now_ns(CLOCK_MONOTONIC);

		atomic_store(&iter_index, i);
		atomic_store(&iter_started_ns, start);
		if ((rc = op_once(&j)) != DVAR_OK)
			fail_run(&j, op_names[op], rc);
		atomic_store(&last_iter_us, (now_ns(CLOCK_MONOTONIC) - start) / 1000);
	}
	fprintf(stderr, "worker %d: no worker was killed\n", t.topo.worker);
	_exit(5);
}

/* ---------------------------------------------------------------- checking */

static char *read_text(const char *work, const char *name)
{
	char *path = tu_path(work, name);
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 4096);

	assert_non_null(buf);
	if (f) {
		buf[fread(buf, 1, 4095, f)] = '\0';
		fclose(f);
	}
	free(path);
	return buf;
}

static void on_bad_chunk(void *userdata, const dvar_bad_chunk *b)
{
	(void)userdata;
	fprintf(stderr, "FAIL: bad chunk of %s in %s at %" PRIu64 ": %s\n", b->var, b->file,
	        b->offset, b->message);
}

/* path (a root: its latest) is ckpt-<step>, verifies and holds the values
 * of `step` saved by N = 3. */
static int check_ckpt(const char *path, int64_t step)
{
	char want[32], why[256];
	dvar_reader *r = NULL;
	uint64_t nbad = 0;
	int bad = 0;
	run t;

	snprintf(want, sizeof want, "/ckpt-%" PRId64, step);
	if (dvar_reader_open(&r, path, NULL) != DVAR_OK) {
		fprintf(stderr, "FAIL: opening %s: %s\n", path, dvar_error_last()->message);
		return 1;
	}
	if (strlen(dvar_reader_path(r)) < strlen(want) ||
	    strcmp(dvar_reader_path(r) + strlen(dvar_reader_path(r)) - strlen(want), want) != 0) {
		fprintf(stderr, "FAIL: the reader opened %s, not ckpt-%" PRId64 "\n",
		        dvar_reader_path(r), step);
		bad++;
	}
	if (dvar_reader_verify(r, on_bad_chunk, NULL, &nbad) != DVAR_OK || nbad) {
		fprintf(stderr, "FAIL: ckpt-%" PRId64 " does not verify (%" PRIu64 " bad chunks)\n",
		        step, nbad);
		bad++;
	}
	dvar_reader_free(r);

	/* Restored into W = 1 x R = 3: the cross-replica reads give it back. */
	assert_int_equal(run_open(&t, 3), DVAR_OK);
	if (dvar_restore(t.topo.s, path, t.v, NUM_VARS, NULL) != DVAR_OK) {
		fprintf(stderr, "FAIL: restoring %s: %s\n", path, dvar_error_last()->message);
		bad++;
	} else if (check_vars(&t, step, 3, why, sizeof why)) {
		fprintf(stderr, "FAIL: after the restore of ckpt-%" PRId64 ": %s\n", step, why);
		bad++;
	}
	run_close(&t);
	return bad;
}

static int main_check(const char *work, int op)
{
	char *root = tu_path(work, "root");
	char *killed = read_text(work, "killed");
	char *text;
	int64_t committed = 0, latest = -1, listed = 0;
	dvar_root_list *l = NULL;
	int bad = 0, victim = -1;
	size_t nleft = 0;

	if (sscanf(killed, "worker=%d", &victim) != 1) {
		fprintf(stderr, "FAIL: no worker killed itself (WORK/killed is missing)\n");
		return 1;
	}
	printf("killed: %s", killed);
	for (int w = 0; w < 3; w++) {
		char name[32];

		snprintf(name, sizeof name, "bad-%d", w);
		text = read_text(work, name);
		if (text[0]) {
			fprintf(stderr, "FAIL: wrong numbers: %s", text);
			bad++;
		}
		free(text);
		snprintf(name, sizeof name, "returned-%d", w);
		text = read_text(work, name);
		if (text[0])
			printf("survivor's call returned: %s", text);
		free(text);
		snprintf(name, sizeof name, "term-%d", w);
		text = read_text(work, name);
		if (text[0])
			printf("%s", text);
		free(text);
	}
	text = read_text(work, "committed");
	if (sscanf(text, "%" SCNd64, &committed) != 1 || committed < 1) {
		fprintf(stderr, "FAIL: step 1 was never committed\n");
		return 1;
	}
	free(text);

	/* What the root holds: steps 1..M, and leftovers. M is the latest, or,
	 * for a save killed between the rename of its checkpoint and that of
	 * the pointer file (docs/FORMAT.md, commit steps 5 and 6), the one
	 * after it: whole, not yet the latest. */
	if (dvar_root_list_open(&l, root) != DVAR_OK) {
		fprintf(stderr, "FAIL: listing %s: %s\n", root, dvar_error_last()->message);
		return 1;
	}
	listed = (int64_t)dvar_root_list_count(l);
	for (size_t i = 0; i < dvar_root_list_count(l); i++) {
		dvar_root_entry e;

		assert_int_equal(dvar_root_list_get(l, i, &e), DVAR_OK);
		if (e.step != (int64_t)i + 1) {
			fprintf(stderr, "FAIL: the root lists %s where ckpt-%zu was expected\n", e.name,
			        i + 1);
			bad++;
		}
		if (e.is_latest)
			latest = e.step;
	}
	if (latest != listed && !(op == OP_SAVE && latest + 1 == listed)) {
		fprintf(stderr, "FAIL: the latest is step %" PRId64 " of %" PRId64 " listed\n",
		        latest, listed);
		bad++;
	}
	/* A save killed after its commit but before the chief noted it. */
	if (!(latest == committed || (op == OP_SAVE && latest == committed + 1)) ||
	    listed > committed + 1) {
		fprintf(stderr, "FAIL: the latest is step %" PRId64 " of %" PRId64 " listed, the "
		                "chief committed %" PRId64 "\n", latest, listed, committed);
		bad++;
	}
	nleft = dvar_root_list_num_leftovers(l);
	for (size_t i = 0; i < nleft; i++) {
		dvar_root_leftover o;
		char target[32];

		assert_int_equal(dvar_root_list_leftover(l, i, &o), DVAR_OK);
		snprintf(target, sizeof target, "ckpt-%" PRId64, listed + 1);
		printf("leftover: %s (%" PRIu64 " bytes, writer %s)\n", o.name, o.bytes,
		       o.writer_alive == 1 ? "running" : o.writer_alive == 0 ? "gone" : "unknown");
		if (op != OP_SAVE || (strcmp(o.target, target) != 0 && strcmp(o.target, "checkpoint"))) {
			fprintf(stderr, "FAIL: leftover %s is not of the interrupted save\n", o.name);
			bad++;
		}
	}
	dvar_root_list_free(l);

	/* The interrupted step is not visible. */
	{
		char name[32], *p;
		dvar_reader *r = NULL;

		snprintf(name, sizeof name, "ckpt-%" PRId64, listed + 1);
		p = tu_path(root, name);
		if (dvar_reader_open(&r, p, NULL) != DVAR_ENOTFOUND) {
			fprintf(stderr, "FAIL: %s opens, or fails otherwise than not found\n", p);
			bad++;
		}
		dvar_reader_free(r);
		free(p);
	}
	if (listed > latest) {
		char name[32], *p;

		snprintf(name, sizeof name, "ckpt-%" PRId64, listed);
		p = tu_path(root, name);
		printf("ckpt-%" PRId64 " was renamed into place, the pointer file not yet\n", listed);
		bad += check_ckpt(p, listed);
		free(p);
	}
	bad += check_ckpt(root, latest);

	/* The next save sweeps the leftovers and commits. */
	{
		run t;
		int64_t next = listed + 100;

		assert_int_equal(run_open(&t, 3), DVAR_OK);
		if (fill(&t, next) != DVAR_OK || save_step(&t, root, next) != DVAR_OK) {
			fprintf(stderr, "FAIL: the next save: %s\n", dvar_error_last()->message);
			bad++;
		}
		run_close(&t);
		assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
		if (dvar_root_list_num_leftovers(l) != 0) {
			fprintf(stderr, "FAIL: the next save left %zu leftovers\n",
			        dvar_root_list_num_leftovers(l));
			bad++;
		}
		dvar_root_list_free(l);
		bad += check_ckpt(root, next);
	}
	printf("RESULT op=%s victim=%d committed=%" PRId64 " latest=%" PRId64 " leftovers=%zu "
	       "listed=%" PRId64 " %s\n", op_names[op], victim, committed, latest, nleft, listed,
	       bad ? "FAIL" : "ok");
	free(killed);
	free(root);
	return bad != 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--run") == 0 && op_of(argv[3]) >= 0)
		return main_run(argv[2], op_of(argv[3]), strtoull(argv[4], NULL, 10));
	if (argc == 4 && strcmp(argv[1], "--check") == 0 && op_of(argv[3]) >= 0)
		return main_check(argv[2], op_of(argv[3]));
	fprintf(stderr, "usage: %s --run WORK save|restore|collective SEED | "
	                "--check WORK save|restore|collective\n", argv[0]);
	return 2;
}
