/*
 * runtime/strategy.c - the strategy: R replica threads per worker that live
 * as long as the strategy, dvar_strategy_run, the bookkeeping of failures,
 * the control protocol between workers, and function scopes (saveability).
 *
 * A run. The calling thread hands fn to the replica threads (a generation
 * counter and a condition variable) and becomes the worker's coordinator:
 * the only thread that talks to MPI. With one worker it just waits. With
 * several it serves its replicas' collectives and ends the run, in lockstep
 * with the other workers' coordinators through control rounds: every
 * cross-worker step starts with an allgather of one dvar_ctl_record per
 * worker. OP (the local replicas are all in a collective, here is its
 * signature) continues the run when every worker sent the same OP; END
 * (every local replica returned DVAR_OK), FAIL (some did not) or a
 * disagreement terminates it, on every worker in the same round. So each
 * run ends with exactly one terminating round and a failed run leaves the
 * workers in step for the next one.
 *
 * Cross-worker steps. Outside runs, the coordinator (the thread that owns
 * the strategy) makes its own steps across workers for sharded variables:
 * an all-to-all or an agreement on a status. Each starts with a control
 * round like a collective's, whose OP record names the step (its kind and a
 * hash of its text), so a worker at another step, or one inside a run,
 * makes both sides fail instead of hang.
 *
 * Failures. A replica's failure is "original" unless it came out of a
 * collective that failed because another replica or worker had failed (an
 * echo). The run reports the original failure of the lowest replica id; its
 * message is copied out of that replica thread's error record.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dvar_features.h"
#include "runtime/engine.h"
#if DVAR_WITH_CUDA
#include "runtime/cuda/cuda.h"
#endif

const char dvar_unsaveable_reason[] =
	"\n"
	"ConcreteFunction that uses distributed variables in certain way cannot be saved.\n"
	"If you're saving with\n"
	"\n"
	"tf.saved_model.save(..., signatures=f.get_concrete_function())\n"
	"\n"
	"do\n"
	"\n"
	"@tf.function(input_signature=...)\n"
	"def f_with_input_signature():\n"
	"  ...\n"
	"\n"
	"tf.saved_model.save(..., signatures=f_with_input_signature)`\n"
	"\n"
	"instead.";

#define DEFAULT_CHUNK_BYTES ((size_t)4 << 20)
#define MAX_CHUNK_BYTES ((size_t)1 << 30) /* one MPI message must count in an int */
#define MIN_CHUNK_BYTES ((size_t)64)

/* ---------------------------------------------------------------- accessors */

int dvar_strategy_num_replicas_in_sync(const dvar_strategy *s)
{
	return s ? s->N : 0;
}

int dvar_strategy_local_replicas(const dvar_strategy *s)
{
	return s ? s->R : 0;
}

int dvar_strategy_num_workers(const dvar_strategy *s)
{
	return s ? s->W : 0;
}

int dvar_strategy_worker_id(const dvar_strategy *s)
{
	return s ? s->worker : 0;
}

int dvar_strategy_is_chief(const dvar_strategy *s)
{
	return s && s->worker == 0;
}

int dvar_replica_id(const dvar_replica *ctx)
{
	return ctx ? ctx->id : -1;
}

int dvar_replica_local_id(const dvar_replica *ctx)
{
	return ctx ? ctx->local : -1;
}

int dvar_replica_num_replicas(const dvar_replica *ctx)
{
	return ctx ? ctx->s->N : 0;
}

dvar_strategy *dvar_replica_strategy(const dvar_replica *ctx)
{
	return ctx ? ctx->s : NULL;
}

int dvar_replica_cuda_device(const dvar_replica *ctx)
{
#if DVAR_WITH_CUDA
	if (ctx && ctx->s->cuda)
		return dvar_cuda_device(ctx->s->cuda, ctx->local);
#endif
	(void)ctx;
	return -1;
}

void *dvar_replica_cuda_stream(const dvar_replica *ctx)
{
#if DVAR_WITH_CUDA
	if (ctx && ctx->s->cuda)
		return (void *)dvar_cuda_stream(ctx->s->cuda, ctx->local);
#endif
	(void)ctx;
	return NULL;
}

int dvar_cuda_device_count(int *count)
{
	int n = 0, rc;

	if (!count)
		return dvar_error_set(DVAR_EINVAL, "dvar_cuda_device_count: count is NULL");
#if DVAR_WITH_CUDA
	rc = dvar_cuda_visible(&n);
#else
	rc = dvar_error_set(DVAR_ENOTSUPP, "this dvar was built without CUDA (configure with "
	                                   "-DDVAR_WITH_CUDA=ON)");
#endif
	*count = n;
	return rc;
}

/* ---------------------------------------------------------------- helpers */

static void copy_message(char *dst, const char *src)
{
	size_t n = strnlen(src, DVAR_ERROR_MESSAGE_MAX - 1);

	memmove(dst, src, n);
	dst[n] = '\0';
}

/* "replica 3 (worker 1, local 1)" */
static void name_replica(const dvar_strategy *s, int id, char *buf, size_t cap)
{
	snprintf(buf, cap, "replica %d (worker %d, local %d)", id, id / s->R, id % s->R);
}

void dvar_engine_format(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

void dvar_engine_break_locked(dvar_strategy *s, const char *message)
{
	if (s->broken)
		return;
	s->broken = dvar_comm_broken(s->comm) ? dvar_comm_broken(s->comm) : 2;
	copy_message(s->broken_message, message);
}

int dvar_engine_broken_error(const dvar_strategy *s)
{
	return dvar_error_set(DVAR_ECOMM, "strategy is broken after an earlier %s: %s",
	                      s->broken == 1 ? "timeout" : "communication failure", s->broken_message);
}

/* ---------------------------------------------------------------- replica threads */

/* Record how replica r's run ended (on its own thread: the message is in
 * this thread's error record) and wake whoever waits for it. */
static void finish_replica(dvar_replica *r, int rc)
{
	dvar_strategy *s = r->s;

	r->fail_code = DVAR_OK;
	if (rc != DVAR_OK) {
		const char *msg = dvar_error_last()->message;

		r->fail_code = rc;
		r->fail_original = !r->echo;
		if (msg[0] != '\0')
			copy_message(r->fail_message, msg);
		else
			snprintf(r->fail_message, sizeof r->fail_message, "returned %d (%s)", rc,
			         dvar_strerror(rc));
	} else if (r->forced_code != DVAR_OK) {
		/* fn ignored a collective failure that fails the run. */
		r->fail_code = r->forced_code;
		r->fail_original = r->forced_original;
		copy_message(r->fail_message, r->forced_message);
	}

	pthread_mutex_lock(&s->lock);
	s->nrunning--;
	r->returned = 1;
	if (r->fail_code != DVAR_OK && !s->abort) {
		char who[96];
		char text[DVAR_ERROR_MESSAGE_MAX];

		if (s->W > 1)
			name_replica(s, r->id, who, sizeof who);
		else
			snprintf(who, sizeof who, "replica %d", r->id);
		dvar_engine_format(text, sizeof text, "%s failed: %s", who, r->fail_message);
		s->abort = 1;
		copy_message(s->abort_message, text);
		/* Replicas waiting for it in a collective must not wait forever. */
		pthread_cond_broadcast(&s->coll_cv);
	} else if (rc == DVAR_OK && !s->abort && s->coll_arrived > 0) {
		/* Others wait in a collective this replica never called. */
		char desc[256];
		char text[DVAR_ERROR_MESSAGE_MAX];
		const dvar_replica *w = &s->replicas[s->coll_first];

		dvar_coll_describe(&s->args[s->coll_first]->sig, desc, sizeof desc);
		snprintf(text, sizeof text,
		         "replica %d returned from the replica function while replica %d is in %s: "
		         "every replica must make the same collective calls",
		         r->id, w->id, desc);
		dvar_coll_fail_locked(s, DVAR_ECOMM, text, 0, 1);
	}
	r->args = NULL;
	if (s->nrunning == 0)
		pthread_cond_signal(&s->coord_cv);
	pthread_mutex_unlock(&s->lock);
}

static void *replica_main(void *arg)
{
	dvar_replica *r = arg;
	dvar_strategy *s = r->s;
	uint64_t seen = 0;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		dvar_replica_fn fn;
		void *fn_arg;
		int rc;

		while (!s->stop && s->generation == seen)
			pthread_cond_wait(&s->work_cv, &s->lock);
		if (s->stop)
			break;
		seen = s->generation;
		fn = s->fn;
		fn_arg = s->arg;
		pthread_mutex_unlock(&s->lock);

		dvar_error_clear();
#if DVAR_WITH_CUDA
		/* The replica's GPU is current for everything fn calls. */
		if (s->cuda && (rc = dvar_cuda_bind(s->cuda, r->local)) != DVAR_OK) {
			finish_replica(r, rc);
			pthread_mutex_lock(&s->lock);
			continue;
		}
#endif
		rc = fn(r, fn_arg);
		finish_replica(r, rc);

		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---------------------------------------------------------------- create / free */

static void free_scratch(dvar_strategy *s, void *p)
{
	/* An abandoned MPI request may still write into it. */
	if (s->comm && dvar_comm_broken(s->comm))
		dvar_comm_abandon(p);
	else
		free(p);
}

static void destroy(dvar_strategy *s)
{
	if (s->store_fini)
		s->store_fini(s->store_slot);
	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	pthread_cond_broadcast(&s->work_cv);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < s->nthreads; i++)
		pthread_join(s->replicas[i].thread, NULL);

	free_scratch(s, s->ctl_mine);
	free_scratch(s, s->ctl_all);
	free_scratch(s, s->slot[0]);
	free_scratch(s, s->slot[1]);
	free_scratch(s, s->ring_tmp);
#if DVAR_WITH_CUDA
	dvar_cuda_close(s->cuda);
#endif
	dvar_comm_close(s->comm);
	free(s->gather_worker_off);
	free(s->replicas);
	for (size_t i = 0; i < s->nreasons; i++)
		free(s->reasons[i]);
	free(s->reasons);
	free(s->scope_name);
	pthread_cond_destroy(&s->coord_cv);
	pthread_cond_destroy(&s->coll_cv);
	pthread_cond_destroy(&s->work_cv);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->scope_lock);
	free(s);
}

/* What each worker tells the others when a strategy is created. */
typedef struct {
	int32_t replicas;
	int32_t code;
	int32_t device;
	int32_t groups; /* CUDA: GPUs of the worker's replicas */
	uint32_t flags; /* DVAR_STRATEGY_*: they choose the NCCL calls a collective makes */
	char message[512];
} create_record;

/* Local setup: memory and threads. */
static int setup(dvar_strategy *s)
{
	s->replicas = calloc((size_t)s->R, sizeof *s->replicas);
	s->gather_worker_off = calloc((size_t)s->W + 1, sizeof *s->gather_worker_off);
	if (!s->replicas || !s->gather_worker_off)
		return dvar_error_set(DVAR_ENOMEM, "strategy: out of memory");
	if (s->W > 1) {
		s->ctl_mine = calloc(1, sizeof *s->ctl_mine);
		s->ctl_all = calloc((size_t)s->W, sizeof *s->ctl_all);
		s->slot[0] = malloc(s->chunk_bytes);
		s->slot[1] = malloc(s->chunk_bytes);
		s->ring_tmp = malloc(s->chunk_bytes);
		if (!s->ctl_mine || !s->ctl_all || !s->slot[0] || !s->slot[1] || !s->ring_tmp)
			return dvar_error_set(DVAR_ENOMEM, "strategy: out of memory for %zu-byte chunks",
			                      s->chunk_bytes);
	}
	for (int i = 0; i < s->R; i++) {
		dvar_replica *r = &s->replicas[i];

		r->s = s;
		r->local = i;
		r->id = s->worker * s->R + i;
	}
	for (; s->nthreads < s->R; s->nthreads++) {
		int err = pthread_create(&s->replicas[s->nthreads].thread, NULL, replica_main,
		                         &s->replicas[s->nthreads]);
		if (err)
			return dvar_error_set_errno(err == EAGAIN ? DVAR_ENOMEM : DVAR_ERROR, err,
			                            "strategy: starting replica thread %d of %d",
			                            s->nthreads + 1, s->R);
	}
	return DVAR_OK;
}

/* Every worker learns whether the others could set up, and with how many
 * replicas: a failure or a different R anywhere fails creation everywhere. */
static int agree(dvar_strategy *s, int local_rc, int device, int groups)
{
	create_record *recs, *mine;
	int rc;

	/* Both buffers on the heap: after a timeout the request may still use them. */
	recs = calloc((size_t)s->W + 1, sizeof *recs);
	if (!recs)
		return dvar_error_set(DVAR_ENOMEM, "strategy: out of memory");
	mine = &recs[s->W];
	mine->replicas = s->R;
	mine->code = local_rc;
	mine->device = device;
	mine->groups = groups;
	mine->flags = s->flags;
	if (local_rc != DVAR_OK)
		snprintf(mine->message, sizeof mine->message, "%s", dvar_error_last()->message);
	rc = dvar_comm_allgather(s->comm, mine, recs, sizeof *mine,
	                         "the other workers to create the strategy");
	if (rc != DVAR_OK) {
		if (dvar_comm_broken(s->comm))
			dvar_comm_abandon(recs);
		else
			free(recs);
		return rc;
	}
	if (local_rc != DVAR_OK) {
		rc = dvar_error_set(local_rc, "%s", mine->message);
	} else {
		for (int w = 0; w < s->W && rc == DVAR_OK; w++) {
			if (recs[w].code != DVAR_OK)
				rc = dvar_error_set(recs[w].code == DVAR_ENOMEM ? DVAR_ENOMEM : DVAR_ECOMM,
				                    "worker %d could not create the strategy: %s", w,
				                    recs[w].message);
		}
		for (int w = 1; w < s->W && rc == DVAR_OK; w++) {
			if (recs[w].replicas != recs[0].replicas)
				rc = dvar_error_set(DVAR_EINVAL,
				                    "worker %d has %d replicas but worker 0 has %d: every "
				                    "worker must have the same number of replicas",
				                    w, recs[w].replicas, recs[0].replicas);
			else if (recs[w].device != recs[0].device)
				rc = dvar_error_set(DVAR_EINVAL,
				                    "worker %d keeps its replicas on %s but worker 0 on %s: "
				                    "every worker must ask for the same device",
				                    w, recs[w].device ? "GPUs" : "the CPU",
				                    recs[0].device ? "GPUs" : "the CPU");
			else if (recs[w].groups != recs[0].groups)
				rc = dvar_error_set(DVAR_EINVAL,
				                    "worker %d spreads its replicas over %d GPUs but worker 0 "
				                    "over %d: every worker must use as many",
				                    w, recs[w].groups, recs[0].groups);
			/* A worker with DVAR_STRATEGY_NCCL_ALL_REDUCE calls ncclAllReduce
			 * where one without sends and receives: NCCL would wait forever. */
			else if (device == DVAR_DEVICE_CUDA && recs[w].flags != recs[0].flags)
				rc = dvar_error_set(DVAR_EINVAL,
				                    "worker %d creates the strategy with flags 0x%x but worker "
				                    "0 with 0x%x: every worker must pass the same flags",
				                    w, (unsigned)recs[w].flags, (unsigned)recs[0].flags);
		}
	}
	free(recs);
	return rc;
}

int dvar_strategy_options_init(dvar_strategy_options *opts, unsigned int version)
{
	static const dvar_strategy_options init = DVAR_STRATEGY_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_strategy_options", version,
	                         DVAR_STRATEGY_OPTIONS_VERSION);
}

int dvar_strategy_create(dvar_strategy **out, const dvar_strategy_options *opts)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s;
	int rc;

	if (!out)
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_create: out is NULL");
	*out = NULL;
	if (opts) {
		if (dvar_check_version("dvar_strategy_options", opts->version,
		                       DVAR_STRATEGY_OPTIONS_VERSION))
			return DVAR_EINVAL;
		o = *opts;
	}
	if (o.device != DVAR_DEVICE_CPU && o.device != DVAR_DEVICE_CUDA)
		return dvar_error_set(DVAR_EINVAL,
		                      "strategy options: device = %d (use DVAR_DEVICE_CPU or "
		                      "DVAR_DEVICE_CUDA)",
		                      o.device);
	if (o.flags & ~DVAR_STRATEGY_NCCL_ALL_REDUCE)
		return dvar_error_set(DVAR_EINVAL, "strategy options: unknown flags 0x%x",
		                      o.flags & ~DVAR_STRATEGY_NCCL_ALL_REDUCE);
	if (o.num_cuda_devices < 0 || (o.num_cuda_devices > 0) != (o.cuda_devices != NULL))
		return dvar_error_set(DVAR_EINVAL,
		                      "strategy options: %d CUDA devices listed at %p (give both, or "
		                      "neither for every visible GPU)",
		                      o.num_cuda_devices, (const void *)o.cuda_devices);
	if (o.device == DVAR_DEVICE_CPU && o.cuda_devices)
		return dvar_error_set(DVAR_EINVAL, "strategy options: cuda_devices is set but device is "
		                                   "DVAR_DEVICE_CPU");
#if !DVAR_WITH_CUDA
	if (o.device == DVAR_DEVICE_CUDA)
		return dvar_error_set(DVAR_ENOTSUPP, "strategy options: DVAR_DEVICE_CUDA, but this dvar "
		                                     "was built without CUDA (-DDVAR_WITH_CUDA=ON)");
#endif
	if (o.replicas == 0 && o.device == DVAR_DEVICE_CUDA && o.cuda_devices)
		o.replicas = o.num_cuda_devices;
#if DVAR_WITH_CUDA
	if (o.replicas == 0 && o.device == DVAR_DEVICE_CUDA) {
		int visible = 0;

		/* No GPU: one replica, and dvar_cuda_open says why below. */
		dvar_cuda_visible(&visible);
		o.replicas = visible;
	}
#endif
	if (o.replicas == 0)
		o.replicas = 1;
	if (o.workers < 0)
		return dvar_error_set(DVAR_EINVAL,
		                      "strategy options: workers = %d (use DVAR_WORKERS_AUTO, 1, or the "
		                      "number of MPI processes)",
		                      o.workers);
	if (o.timeout_ms < 0)
		return dvar_error_set(DVAR_EINVAL,
		                      "strategy options: timeout_ms = %d (use 0 to wait without limit)",
		                      o.timeout_ms);

	s = calloc(1, sizeof *s);
	if (!s)
		return dvar_error_set(DVAR_ENOMEM, "strategy: out of memory");
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->scope_lock, NULL);
	pthread_cond_init(&s->work_cv, NULL);
	pthread_cond_init(&s->coll_cv, NULL);
	pthread_cond_init(&s->coord_cv, NULL);
	s->timeout_ms = o.timeout_ms;
	s->flags = o.flags;
	s->chunk_bytes = o.chunk_bytes ? o.chunk_bytes : DEFAULT_CHUNK_BYTES;
	if (s->chunk_bytes > MAX_CHUNK_BYTES)
		s->chunk_bytes = MAX_CHUNK_BYTES;
	if (s->chunk_bytes < MIN_CHUNK_BYTES)
		s->chunk_bytes = MIN_CHUNK_BYTES;
	s->W = 1;

	rc = dvar_comm_open(&s->comm, o.workers, o.timeout_ms, &s->worker, &s->W);
	if (rc != DVAR_OK) {
		s->comm = NULL;
		destroy(s);
		return rc;
	}
	/* A bad replica count is reported by every worker, not just this one. */
	if (o.replicas < 1 || o.replicas > DVAR_MAX_REPLICAS) {
		rc = dvar_error_set(DVAR_EINVAL, "strategy options: replicas = %d is out of range (1..%d)",
		                    o.replicas, DVAR_MAX_REPLICAS);
		s->R = o.replicas;
	} else {
		s->R = o.replicas;
		s->N = s->R * s->W;
		rc = setup(s);
	}
	if (s->W > 1)
		rc = agree(s, rc, o.device, 0);
#if DVAR_WITH_CUDA
	/* Every worker asked for GPUs and has its threads: open the CUDA side
	 * (collective: the NCCL id goes from worker 0 to all), then agree on
	 * how that went. */
	if (rc == DVAR_OK && o.device == DVAR_DEVICE_CUDA) {
		dvar_cuda *c = NULL;

		rc = dvar_cuda_open(&c, s->R, o.cuda_devices, o.num_cuda_devices, s->comm, s->W,
		                    s->worker);
		s->cuda = c;
		if (s->W > 1)
			rc = agree(s, rc, o.device, c ? dvar_cuda_num_groups(c) : 0);
	}
#endif
	if (rc != DVAR_OK) {
		char msg[DVAR_ERROR_MESSAGE_MAX];

		copy_message(msg, dvar_error_last()->message);
		destroy(s);
		return dvar_error_restore(rc, msg);
	}
	*out = s;
	return DVAR_OK;
}

void dvar_strategy_free(dvar_strategy *s)
{
	if (s)
		destroy(s);
}

/* ---------------------------------------------------------------- run */

/* The local replica whose failure the run reports: the lowest original
 * failure, else the lowest echo; -1 when every replica succeeded. */
static int first_failure(const dvar_strategy *s)
{
	for (int i = 0; i < s->R; i++)
		if (s->replicas[i].fail_code != DVAR_OK && s->replicas[i].fail_original)
			return i;
	for (int i = 0; i < s->R; i++)
		if (s->replicas[i].fail_code != DVAR_OK)
			return i;
	return -1;
}

static int local_result(dvar_strategy *s)
{
	int i = first_failure(s);
	const dvar_replica *r;

	if (i < 0)
		return DVAR_OK;
	r = &s->replicas[i];
	return dvar_error_set(r->fail_code, "replica %d (worker %d, local %d): %s", r->id, s->worker,
	                      r->local, r->fail_message);
}

static void wait_replicas_locked(dvar_strategy *s)
{
	while (s->nrunning > 0)
		pthread_cond_wait(&s->coord_cv, &s->lock);
}

/* The coordinator gave up on the other workers: fail whatever collective the
 * replicas wait in, let them finish, report the breakage. */
static int end_broken(dvar_strategy *s, int decision_pending)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];

	copy_message(msg, dvar_error_last()->message);
	pthread_mutex_lock(&s->lock);
	dvar_engine_break_locked(s, msg);
	/* Replicas still waiting for the decision of their collective get this
	 * failure; those already moving data learn it from dp_code. */
	if (decision_pending)
		dvar_coll_fail_locked(s, DVAR_ECOMM, msg, 0, 1);
	s->abort = 1;
	copy_message(s->abort_message, msg);
	pthread_cond_broadcast(&s->coll_cv);
	wait_replicas_locked(s);
	copy_message(msg, s->broken_message);
	pthread_mutex_unlock(&s->lock);
	return dvar_error_set(DVAR_ECOMM, "%s", msg);
}

/* A control round: every worker's record reaches every worker. */
static int ctl_round(dvar_strategy *s, const char *what)
{
	char text[320];

	snprintf(text, sizeof text, "the other workers at %s", what);
	return dvar_comm_allgather(s->comm, s->ctl_mine, s->ctl_all, sizeof *s->ctl_mine, text);
}

/* An OP round every worker agrees on: the same collective everywhere. */
static int round_agreed(const dvar_strategy *s)
{
	const dvar_ctl_record *recs = s->ctl_all;
	int refused = 0;

	for (int w = 0; w < s->W; w++) {
		if (recs[w].kind != DVAR_CTL_OP || recs[w].sig.kind != recs[0].sig.kind ||
		    recs[w].sig.seq != recs[0].sig.seq)
			return 0;
		refused |= recs[w].code != DVAR_OK;
	}
	if (refused)
		return 1; /* the call fails everywhere; the arguments need not match */
	for (int w = 1; w < s->W; w++)
		if (memcmp(&recs[w].sig, &recs[0].sig, sizeof recs[0].sig) != 0)
			return 0;
	return 1;
}

/* The result of a terminating round, the same on every worker: the lowest
 * worker's failure, else a description of the disagreement. */
static int round_result(const dvar_strategy *s, char *msg, size_t cap)
{
	const dvar_ctl_record *recs = s->ctl_all;
	char da[256], db[256];
	int end = -1, op = -1;

	for (int w = 0; w < s->W; w++) {
		if (recs[w].kind == DVAR_CTL_FAIL) {
			char who[96];

			name_replica(s, recs[w].replica, who, sizeof who);
			dvar_engine_format(msg, cap, "%s: %s", who, recs[w].message);
			return recs[w].code;
		}
		if (recs[w].kind == DVAR_CTL_END && end < 0)
			end = w;
		if (recs[w].kind == DVAR_CTL_OP && op < 0)
			op = w;
	}
	if (op < 0) {
		msg[0] = '\0';
		return DVAR_OK;
	}
	if (end >= 0) {
		dvar_coll_describe(&recs[op].sig, da, sizeof da);
		snprintf(msg, cap,
		         "worker %d finished the replica function while worker %d is in %s: every "
		         "worker must make the same collective calls",
		         end, op, da);
		return DVAR_ECOMM;
	}
	for (int w = 1; w < s->W; w++) {
		const dvar_coll_sig *a = &recs[0].sig, *b = &recs[w].sig;

		if (memcmp(a, b, sizeof *a) == 0)
			continue;
		dvar_coll_describe(a, da, sizeof da);
		dvar_coll_describe(b, db, sizeof db);
		if (a->kind == DVAR_COLL_ALL_GATHER && b->kind == a->kind && a->dtype == b->dtype &&
		    a->rank == b->rank && a->axis == b->axis && a->seq == b->seq) {
			snprintf(msg, cap,
			         "worker %d is in %s while worker 0 is in %s: the tensors must agree in "
			         "every dimension but axis",
			         w, db, da);
			return DVAR_ESHAPE;
		}
		snprintf(msg, cap,
		         "worker %d is in %s while worker 0 is in %s: every worker must make the same "
		         "collective calls",
		         w, db, da);
		return DVAR_ECOMM;
	}
	snprintf(msg, cap, "the workers disagree at the end of the run");
	return DVAR_ECOMM;
}

/* W > 1: serve the local replicas' collectives until the run ends. */
static int coordinate(dvar_strategy *s)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];
	char what[256];
	int rc;

	for (;;) {
		pthread_mutex_lock(&s->lock);
		while (!s->coll_ready && s->nrunning > 0)
			pthread_cond_wait(&s->coord_cv, &s->lock);
		if (!s->coll_ready)
			break; /* every local replica returned; the lock is held */
		memset(s->ctl_mine, 0, sizeof *s->ctl_mine);
		dvar_coll_make_record(s, s->ctl_mine);
		s->coll_ready = 0;
		pthread_mutex_unlock(&s->lock);

		dvar_coll_describe(&s->ctl_mine->sig, what, sizeof what);
		if (ctl_round(s, what) != DVAR_OK)
			return end_broken(s, 1);
		if (round_agreed(s)) {
			dvar_coll_serve(s, s->ctl_all);
			pthread_mutex_lock(&s->lock);
			rc = s->broken;
			pthread_mutex_unlock(&s->lock);
			if (rc) {
				dvar_error_set(DVAR_ECOMM, "%s", s->broken_message);
				return end_broken(s, 0);
			}
			continue;
		}
		/* This round terminates the run. */
		rc = round_result(s, msg, sizeof msg);
		pthread_mutex_lock(&s->lock);
		{
			char echo[DVAR_ERROR_MESSAGE_MAX + 320];
			int failed = -1;

			for (int w = 0; w < s->W && failed < 0; w++)
				if (s->ctl_all[w].kind == DVAR_CTL_FAIL)
					failed = w;
			if (failed >= 0) {
				/* A remote failure is an echo here. */
				char who[96];

				name_replica(s, s->ctl_all[failed].replica, who, sizeof who);
				dvar_engine_format(echo, sizeof echo, "%s: %s failed: %s", what, who,
				                    s->ctl_all[failed].message);
				dvar_coll_fail_locked(s, DVAR_ECOMM, echo, 1, 1);
			} else {
				/* A disagreement is everyone's own failure. */
				dvar_coll_fail_locked(s, rc, msg, 0, 1);
			}
		}
		wait_replicas_locked(s);
		pthread_mutex_unlock(&s->lock);
		return dvar_error_restore(rc, msg);
	}

	/* The lock is held and every local replica has returned: END or FAIL. */
	{
		int i = first_failure(s);
		dvar_ctl_record *rec = s->ctl_mine;

		memset(rec, 0, sizeof *rec);
		if (i < 0) {
			rec->kind = DVAR_CTL_END;
		} else {
			rec->kind = DVAR_CTL_FAIL;
			rec->code = s->replicas[i].fail_code;
			rec->replica = s->replicas[i].id;
			copy_message(rec->message, s->replicas[i].fail_message);
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (ctl_round(s, "the end of the run") != DVAR_OK)
		return end_broken(s, 0);
	rc = round_result(s, msg, sizeof msg);
	if (rc == DVAR_OK)
		return DVAR_OK;
	return dvar_error_restore(rc, msg);
}

int dvar_strategy_run(dvar_strategy *s, dvar_replica_fn fn, void *arg)
{
	int rc;

	if (!s || !fn)
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_run: %s is NULL", s ? "fn" : "strategy");
	for (int i = 0; i < s->R; i++)
		if (pthread_equal(pthread_self(), s->replicas[i].thread))
			return dvar_error_set(DVAR_EINVAL,
			                      "dvar_strategy_run called from replica %d's function: run is "
			                      "not reentrant",
			                      s->replicas[i].id);

	pthread_mutex_lock(&s->lock);
	if (s->in_run) {
		pthread_mutex_unlock(&s->lock);
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_run: the strategy is already running");
	}
	if (s->broken) {
		pthread_mutex_unlock(&s->lock);
		return dvar_engine_broken_error(s);
	}
	s->in_run = 1;
	s->fn = fn;
	s->arg = arg;
	s->nrunning = s->R;
	s->abort = 0;
	s->abort_message[0] = '\0';
	s->coll_arrived = 0;
	s->coll_ready = 0;
	s->bar_count = 0;
	for (int i = 0; i < s->R; i++) {
		dvar_replica *r = &s->replicas[i];

		r->seq = 0;
		r->args = NULL;
		r->echo = 0;
		r->returned = 0;
		r->forced_code = DVAR_OK;
		r->fail_code = DVAR_OK;
		s->args[i] = NULL;
	}
	s->generation++;
	pthread_cond_broadcast(&s->work_cv);

	if (s->W == 1) {
		wait_replicas_locked(s);
		rc = local_result(s);
		s->in_run = 0;
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	pthread_mutex_unlock(&s->lock);
	rc = coordinate(s);
	pthread_mutex_lock(&s->lock);
	s->in_run = 0;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* ---------------------------------------------------------------- cross-worker steps */

/* A cross-worker step's OP record carries the step's text at the end of its
 * message field, and a failure before the step at its start. */
#define STEP_TEXT_MAX 200
#define STEP_TEXT(rec) ((rec)->message + DVAR_ERROR_MESSAGE_MAX - STEP_TEXT_MAX)

/* FNV-1a of a step's text: workers at different steps differ here. */
static uint64_t hash_text(const char *text)
{
	uint64_t h = 14695981039346656037ull;

	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		h ^= *p;
		h *= 1099511628211ull;
	}
	return h;
}

/* Where worker w is, for a message: "in all_reduce #2 (...)", ... */
static void describe_record(const dvar_strategy *s, const dvar_ctl_record *rec, char *buf,
                            size_t cap)
{
	char desc[256], who[96];

	switch (rec->kind) {
	case DVAR_CTL_OP:
		dvar_coll_describe(&rec->sig, desc, sizeof desc);
		snprintf(buf, cap, "in dvar_strategy_run at %s", desc);
		return;
	case DVAR_CTL_END:
		snprintf(buf, cap, "at the end of dvar_strategy_run");
		return;
	case DVAR_CTL_FAIL:
		name_replica(s, rec->replica, who, sizeof who);
		dvar_engine_format(buf, cap, "at the end of a failed dvar_strategy_run (%s: %s)", who,
		                    rec->message);
		return;
	}
	snprintf(buf, cap, "at an unknown step");
}

/* The outcome of a cross-worker step's control round, the same on every
 * worker: DVAR_OK to go on, or a code with msg set. */
static int cross_result(const dvar_strategy *s, char *msg, size_t cap)
{
	const dvar_ctl_record *recs = s->ctl_all;
	char where[DVAR_ERROR_MESSAGE_MAX];

	/* A worker inside a run: both sides fail (the run sees the mismatch too). */
	for (int w = 0; w < s->W; w++) {
		int c = -1;

		if (recs[w].kind == DVAR_CTL_OP && recs[w].sig.kind == DVAR_COLL_ALL_TO_ALL)
			continue;
		for (int x = 0; x < s->W && c < 0; x++)
			if (recs[x].kind == DVAR_CTL_OP && recs[x].sig.kind == DVAR_COLL_ALL_TO_ALL)
				c = x;
		describe_record(s, &recs[w], where, sizeof where);
		dvar_engine_format(msg, cap,
		                    "worker %d is %s while worker %d is at the cross-worker %s (%s): every "
		                    "worker must make the same cross-worker calls in the same order",
		                    w, where, c, recs[c].sig.op ? "all_to_all" : "agreement",
		                    STEP_TEXT(&recs[c]));
		return DVAR_ECOMM;
	}
	/* A failure before the step, the lowest worker's, even where the steps
	 * differ: a worker that failed may have taken another path to this round
	 * (say, one that could not allocate its buffers), and the failure is what
	 * the user must hear of. */
	for (int w = 0; w < s->W; w++) {
		if (recs[w].code == DVAR_OK)
			continue;
		dvar_engine_format(msg, cap, "worker %d: %.*s", w,
		                   DVAR_ERROR_MESSAGE_MAX - STEP_TEXT_MAX - 1, recs[w].message);
		/* A positive code would read as success: keep it an error. */
		return recs[w].code < 0 ? recs[w].code : DVAR_ERROR;
	}
	/* The same step everywhere. */
	for (int w = 1; w < s->W; w++) {
		const dvar_coll_sig *a = &recs[0].sig, *b = &recs[w].sig;

		if (a->op == b->op && a->counts_hash == b->counts_hash)
			continue;
		dvar_engine_format(msg, cap,
		                    "worker %d is at the cross-worker %s (%s) while worker 0 is at the "
		                    "cross-worker %s (%s): every worker must make the same cross-worker "
		                    "calls in the same order",
		                    w, b->op ? "all_to_all" : "agreement", STEP_TEXT(&recs[w]),
		                    a->op ? "all_to_all" : "agreement", STEP_TEXT(&recs[0]));
		return DVAR_ECOMM;
	}
	msg[0] = '\0';
	return DVAR_OK;
}

/* A timeout or an MPI error in a cross-worker step: the strategy is broken. */
static int cross_broken(dvar_strategy *s)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];

	copy_message(msg, dvar_error_last()->message);
	pthread_mutex_lock(&s->lock);
	dvar_engine_break_locked(s, msg);
	pthread_mutex_unlock(&s->lock);
	return dvar_error_set(DVAR_ECOMM, "%s", msg);
}

/* all_to_all: 1 for an all-to-all, 0 for an agreement (send etc. unused). */
static int cross_step(dvar_strategy *s, int local_rc, int all_to_all, const void *send,
                      const uint64_t *send_bytes, void **recv, uint64_t *recv_bytes,
                      const char *what)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];
	uint64_t *sizes = NULL; /* send sizes, receive sizes, status (W + 1) */
	uint64_t total = 0;
	int W, in_run, rc;

	if (recv)
		*recv = NULL;
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "%s: strategy is NULL",
		                      what ? what : "a cross-worker step");
	if (!what)
		what = "a cross-worker step";
	W = s->W;
	pthread_mutex_lock(&s->lock);
	in_run = s->in_run;
	rc = s->broken;
	pthread_mutex_unlock(&s->lock);
	if (in_run)
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: called inside dvar_strategy_run; cross-worker steps belong to "
		                      "the thread that owns the strategy (cross-replica context)",
		                      what);
	if (rc) {
		dvar_engine_broken_error(s);
		return dvar_error_prefix("%s", what);
	}

	/* Arguments a worker gets wrong fail the step everywhere. */
	if (local_rc == DVAR_OK && all_to_all) {
		if (!send_bytes || !recv || !recv_bytes)
			local_rc = dvar_error_set(DVAR_EINVAL, "%s: %s is NULL", what,
			                          !send_bytes ? "send_bytes" : !recv ? "recv" : "recv_bytes");
		for (int w = 0; local_rc == DVAR_OK && w < W; w++) {
			if (send_bytes[w] > UINT64_MAX - total)
				local_rc = dvar_error_set(DVAR_EINVAL, "%s: the sizes to send overflow", what);
			total += send_bytes[w];
		}
		if (local_rc == DVAR_OK && total > 0 && !send)
			local_rc = dvar_error_set(DVAR_EINVAL, "%s: send is NULL", what);
	}
	if (W == 1) {
		if (local_rc != DVAR_OK)
			return local_rc < 0 ? local_rc : DVAR_ERROR;
		if (!all_to_all)
			return DVAR_OK;
		if ((uint64_t)(size_t)total != total || !(*recv = malloc(total ? (size_t)total : 1)))
			return dvar_error_set(DVAR_ENOMEM, "%s: out of memory for %llu bytes", what,
			                      (unsigned long long)total);
		if (total)
			memcpy(*recv, send, (size_t)total);
		recv_bytes[0] = total;
		return DVAR_OK;
	}

	if (local_rc == DVAR_OK && all_to_all && !(sizes = calloc(3 * (size_t)W + 1, sizeof *sizes)))
		local_rc = dvar_error_set(DVAR_ENOMEM, "%s: out of memory", what);
	memset(s->ctl_mine, 0, sizeof *s->ctl_mine);
	s->ctl_mine->kind = DVAR_CTL_OP;
	s->ctl_mine->code = local_rc;
	s->ctl_mine->replica = s->worker * s->R;
	s->ctl_mine->sig.kind = DVAR_COLL_ALL_TO_ALL;
	s->ctl_mine->sig.op = all_to_all;
	s->ctl_mine->sig.counts_hash = hash_text(what);
	if (local_rc != DVAR_OK)
		snprintf(s->ctl_mine->message, DVAR_ERROR_MESSAGE_MAX - STEP_TEXT_MAX, "%s",
		         dvar_error_last()->message);
	snprintf(STEP_TEXT(s->ctl_mine), STEP_TEXT_MAX, "%s", what);
	if (ctl_round(s, what) != DVAR_OK) {
		free(sizes); /* the control round's buffers are the strategy's */
		return cross_broken(s);
	}
	rc = cross_result(s, msg, sizeof msg);
	if (rc != DVAR_OK || !all_to_all) {
		free(sizes);
		return rc == DVAR_OK ? DVAR_OK : dvar_error_restore(rc, msg);
	}

	memcpy(sizes, send_bytes, (size_t)W * sizeof *sizes);
	rc = dvar_comm_alltoallv(s->comm, send, sizes, sizes + W, sizes + 2 * W, s->timeout_ms > 0,
	                         recv, what);
	if (rc != DVAR_OK) {
		if (dvar_comm_broken(s->comm)) {
			dvar_comm_abandon(sizes);
			return cross_broken(s);
		}
		free(sizes);
		return rc;
	}
	memcpy(recv_bytes, sizes + W, (size_t)W * sizeof *recv_bytes);
	free(sizes);
	return DVAR_OK;
}

int dvar_strategy_all_to_all(dvar_strategy *s, int local_rc, const void *send,
                              const uint64_t *send_bytes, void **recv, uint64_t *recv_bytes,
                              const char *what)
{
	return cross_step(s, local_rc, 1, send, send_bytes, recv, recv_bytes, what);
}

int dvar_strategy_agree(dvar_strategy *s, int local_rc, const char *what)
{
	return cross_step(s, local_rc, 0, NULL, NULL, NULL, NULL, what);
}

/* ---------------------------------------------------------------- function scopes */

int dvar_strategy_function_begin(dvar_strategy *s, const char *name)
{
	char *copy;

	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_function_begin: strategy is NULL");
	if (!name || name[0] == '\0')
		return dvar_error_set(DVAR_EINVAL,
		                      "dvar_strategy_function_begin: the function needs a name");
	pthread_mutex_lock(&s->scope_lock);
	if (s->scope_open) {
		int rc = dvar_error_set(DVAR_EINVAL,
		                        "cannot begin function '%s': function '%s' is still open (scopes "
		                        "do not nest)",
		                        name, s->scope_name);
		pthread_mutex_unlock(&s->scope_lock);
		return rc;
	}
	copy = strdup(name);
	if (!copy) {
		pthread_mutex_unlock(&s->scope_lock);
		return dvar_error_set(DVAR_ENOMEM, "function scope: out of memory");
	}
	s->scope_name = copy;
	s->scope_open = 1;
	pthread_mutex_unlock(&s->scope_lock);
	return DVAR_OK;
}

int dvar_strategy_function_end(dvar_strategy *s)
{
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_function_end: strategy is NULL");
	pthread_mutex_lock(&s->scope_lock);
	if (!s->scope_open) {
		pthread_mutex_unlock(&s->scope_lock);
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_function_end: no function scope is open");
	}
	for (size_t i = 0; i < s->nreasons; i++)
		free(s->reasons[i]);
	free(s->reasons);
	s->reasons = NULL;
	s->nreasons = 0;
	free(s->scope_name);
	s->scope_name = NULL;
	s->scope_open = 0;
	pthread_mutex_unlock(&s->scope_lock);
	return DVAR_OK;
}

/* Kept when a reason cannot be copied: the mark itself must not be lost. */
static char out_of_memory_reason[] = "(out of memory while recording the reason)";

void dvar_strategy_mark_unsaveable(dvar_strategy *s, const char *reason)
{
	char **grown;
	char *copy;

	if (!s || !reason)
		return;
	pthread_mutex_lock(&s->scope_lock);
	if (!s->scope_open)
		goto done;
	/* A set, as TF's saving_errors. */
	for (size_t i = 0; i < s->nreasons; i++)
		if (strcmp(s->reasons[i], reason) == 0)
			goto done;
	grown = realloc(s->reasons, (s->nreasons + 1) * sizeof *grown);
	if (!grown)
		goto done;
	s->reasons = grown;
	copy = strdup(reason);
	if (!copy) {
		for (size_t i = 0; i < s->nreasons; i++)
			if (s->reasons[i] == out_of_memory_reason)
				goto done;
		copy = out_of_memory_reason;
	}
	s->reasons[s->nreasons++] = copy;
done:
	pthread_mutex_unlock(&s->scope_lock);
}

int dvar_strategy_check_saveable(const dvar_strategy *cs)
{
	dvar_strategy *s = (dvar_strategy *)cs; /* the scope lock is not part of the value */
	char msg[DVAR_ERROR_MESSAGE_MAX];
	size_t len;
	int rc = DVAR_OK;

	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_strategy_check_saveable: strategy is NULL");
	pthread_mutex_lock(&s->scope_lock);
	if (s->scope_open && s->nreasons > 0) {
		len = (size_t)snprintf(msg, sizeof msg,
		                       "Unable to save function %s for the following reason(s):\n",
		                       s->scope_name);
		for (size_t i = 0; i < s->nreasons && len < sizeof msg; i++)
			len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", i ? "\n" : "",
			                        s->reasons[i]);
		rc = dvar_error_set(DVAR_EINVAL, "%s", msg);
	}
	pthread_mutex_unlock(&s->scope_lock);
	return rc;
}

void *dvar_strategy_store_slot(const dvar_strategy *s)
{
	return s->store_slot;
}

void dvar_strategy_set_store_slot(dvar_strategy *s, void *p, void (*fini)(void *))
{
	s->store_slot = p;
	s->store_fini = p ? fini : NULL;
}
