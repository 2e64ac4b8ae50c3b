/*
 * examples/minimal.c - the smallest complete dvar program: a strategy of two
 * replicas per worker, a mirrored weight and a sync-on-read counter, one
 * training step, a checkpoint, then the weight overwritten, the checkpoint
 * restored and the values checked against what was saved.
 *
 *     dvar-minimal [ROOT]                     one worker; ROOT defaults to a new
 *                                             folder under $TMPDIR (or /tmp)
 *     mpirun -np 2 dvar-minimal ROOT          two workers sharing ROOT
 *
 * Exits 1, printing dvar's message, when a call fails or a restored value
 * differs from the saved one.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dvar/dvar.h>

#define DIM 4
#define BATCH 8 /* examples per replica per step */

struct model {
	dvar_variable *w;    /* ON_WRITE + SUM: the same value on every replica */
	dvar_variable *seen; /* ON_READ + SUM: a count per replica, summed on read */
};

static void check(int rc, const char *what)
{
	if (rc == DVAR_OK)
		return;
	fprintf(stderr, "dvar-minimal: %s: %s\n", what, dvar_error_last()->message);
	exit(1);
}

/* One step on one replica thread; dvar_strategy_run calls it R times per worker. */
static int train_step(dvar_replica *ctx, void *arg)
{
	struct model *m = arg;
	int id = dvar_replica_id(ctx);
	float grad[DIM];
	int64_t batch = BATCH;
	int rc;

	/* A stand-in for the backward pass: each replica its own gradient. */
	for (int i = 0; i < DIM; i++)
		grad[i] = 0.01f * (float)((id + 1) * (i + 1));
	/* Collective: the R x W gradients are summed, every replica applies the sum. */
	rc = dvar_variable_assign_sub(m->w, ctx, grad);
	if (rc != DVAR_OK)
		return rc;
	/* Local: this replica's own copy of the counter. */
	return dvar_variable_assign_add(m->seen, ctx, &batch);
}

/* Cross-replica reads: w's primary, and seen summed over every replica
 * (collective: every worker calls it). The chief prints them. */
static void read_model(struct model *m, int chief, const char *when, float *w, int64_t *seen)
{
	check(dvar_variable_read(m->w, NULL, w, DIM * sizeof *w), "read dense/kernel");
	check(dvar_variable_read(m->seen, NULL, seen, sizeof *seen), "read metrics/examples");
	if (chief)
		printf("%-9s dense/kernel = [%.2f %.2f %.2f %.2f]  metrics/examples = %lld\n", when,
		       w[0], w[1], w[2], w[3], (long long)*seen);
}

int main(int argc, char **argv)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s;
	so.replicas = 2;
	check(dvar_strategy_create(&s, &so), "create the strategy"); /* every worker */
	int chief = dvar_strategy_is_chief(s);
	int n = dvar_strategy_num_replicas_in_sync(s);

	/* Every worker must name the same root; only one worker can make it up. */
	char tmp[4096];
	const char *root = argc > 1 ? argv[1] : NULL;
	if (!root && dvar_strategy_num_workers(s) > 1) {
		fprintf(stderr, "dvar-minimal: with several workers, name the shared ROOT\n");
		return 2;
	}
	if (!root) {
		const char *dir = getenv("TMPDIR");
		snprintf(tmp, sizeof tmp, "%s/dvar-minimal-XXXXXX", dir && *dir ? dir : "/tmp");
		if (!(root = mkdtemp(tmp))) {
			perror("dvar-minimal: mkdtemp");
			return 1;
		}
	}

	float w0[DIM] = { 1, 2, 3, 4 };
	dvar_variable_spec ws = DVAR_VARIABLE_SPEC_INIT;
	ws.name = "dense/kernel";
	ws.dtype = DVAR_FLOAT32;
	check(dvar_shape_init(&ws.shape, 1, (int64_t[]){ DIM }), "shape");
	ws.initial_value = w0;
	ws.synchronization = DVAR_SYNC_ON_WRITE;
	ws.aggregation = DVAR_AGG_SUM;

	dvar_variable_spec ms = DVAR_VARIABLE_SPEC_INIT; /* starts at 0 */
	ms.name = "metrics/examples";
	ms.dtype = DVAR_INT64;
	check(dvar_shape_init(&ms.shape, 0, NULL), "shape"); /* a scalar */
	ms.synchronization = DVAR_SYNC_ON_READ;
	ms.aggregation = DVAR_AGG_SUM;

	struct model m;
	check(dvar_variable_create(&m.w, s, &ws), "create dense/kernel");
	check(dvar_variable_create(&m.seen, s, &ms), "create metrics/examples");
	dvar_variable *vars[] = { m.w, m.seen };
	if (chief)
		printf("%d worker(s) x %d replicas = %d in sync; root %s\n",
		       dvar_strategy_num_workers(s), dvar_strategy_local_replicas(s), n, root);

	check(dvar_strategy_run(s, train_step, &m), "train step");
	float w[DIM], back[DIM];
	int64_t seen, seen_back;
	read_model(&m, chief, "step 1", w, &seen);
	if (seen != (int64_t)BATCH * n) {
		fprintf(stderr, "dvar-minimal: metrics/examples is %lld, expected %lld\n",
		        (long long)seen, (long long)BATCH * n);
		return 1;
	}

	/* Collective: each value written once, by one worker; the chief commits. */
	check(dvar_save(s, root, 1, vars, 2, NULL), "save");
	if (chief)
		printf("saved     %s/ckpt-1\n", root);

	/* Overwrite both in cross-replica context, then bring step 1 back. */
	float zeros[DIM] = { 0 };
	int64_t zero = 0;
	check(dvar_variable_assign(m.w, NULL, zeros), "assign dense/kernel");
	check(dvar_variable_assign(m.seen, NULL, &zero), "assign metrics/examples");
	read_model(&m, chief, "changed", back, &seen_back);

	check(dvar_restore(s, root, vars, 2, NULL), "restore"); /* the root's latest */
	read_model(&m, chief, "restored", back, &seen_back);
	if (memcmp(back, w, sizeof w) != 0 || seen_back != seen) {
		fprintf(stderr, "dvar-minimal: the restored values differ from the saved ones\n");
		return 1;
	}
	if (chief)
		printf("restored values equal the saved ones\n");

	dvar_variable_free(m.seen);
	dvar_variable_free(m.w);
	dvar_strategy_free(s);
	return 0;
}
