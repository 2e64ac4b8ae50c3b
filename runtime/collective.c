/*
 * runtime/collective.c - the replica-context collectives: all_reduce,
 * all_reduce_n, broadcast and all_gather.
 *
 * Every collective has the same shape. Each replica checks its arguments
 * and "arrives" (under the strategy lock) with a signature; the last of the
 * R local replicas to arrive compares the signatures. With one worker it
 * decides at once; with several it hands over to the coordinator, which
 * agrees with the other workers in a control round (strategy.c) and then
 * calls dvar_coll_serve. After a "go" the replicas move the data - each
 * replica only its own segment, from every replica's source to every
 * replica's destination, so nothing is copied through a lock - and meet at
 * a barrier that ends the collective: no replica returns (and frees its
 * buffers) while another may still touch them.
 *
 * Failures. A refused argument fails the call on every replica (the others
 * get DVAR_ECOMM naming the culprit) and the run goes on. A mismatch of the
 * collectives themselves, or a replica that returns while the others wait,
 * aborts the run: the call fails everywhere and every later call in the run
 * fails at once.
 *
 * All-reduce. One worker: replica r reduces segment r of the sources in
 * replica order and writes it to every destination. Several workers: the
 * data goes in chunks of chunk_bytes; while the coordinator runs the ring
 * all-reduce (comm.c) over chunk k, the replicas reduce chunk k + 1 and copy
 * chunk k - 1 out. A chunk lives in local replica 0's destination when it
 * lies in one buffer and there is no timeout (with R = 1 in place nothing is
 * copied at all), else in one of two strategy-owned slots. The order of
 * every addition is fixed by the topology, so results are the same bytes on
 * every replica, worker and run.
 *
 * Device buffers (a CUDA strategy) move on the GPUs (cuda/coll.c), or,
 * where NCCL cannot connect them (dvar_cuda_via_host), through page-locked
 * host staging and the host collective above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dvar_features.h"
#include "runtime/device.h"
#include "runtime/engine.h"
#if DVAR_WITH_CUDA
#include "runtime/cuda/cuda.h"
#endif

/* ---------------------------------------------------------------- descriptions */

static const char *dtype_text(int dtype, char *tmp, size_t cap)
{
	const char *name = dvar_dtype_name(dtype);

	if (name)
		return name;
	snprintf(tmp, cap, "dtype %d", dtype);
	return tmp;
}

static void describe_call(const dvar_coll_sig *sig, char *buf, size_t cap);

void dvar_coll_describe(const dvar_coll_sig *sig, char *buf, size_t cap)
{
	size_t len;

	describe_call(sig, buf, cap);
	len = strlen(buf);
	if (sig->where && len + 1 < cap)
		snprintf(buf + len, cap - len, " on device buffers");
}

static void describe_call(const dvar_coll_sig *sig, char *buf, size_t cap)
{
	unsigned long long seq = (unsigned long long)sig->seq;
	unsigned long long count = (unsigned long long)sig->count;
	const char *elements = count == 1 ? "element" : "elements";
	char dt[32];

	switch (sig->kind) {
	case DVAR_COLL_ALL_REDUCE:
		if (sig->nbufs == 1)
			snprintf(buf, cap, "all_reduce #%llu (%s, %s, %llu %s)", seq, dvar_reduce_op_name(sig->op),
			         dtype_text(sig->dtype, dt, sizeof dt), count, elements);
		else
			snprintf(buf, cap, "all_reduce_n #%llu (%s, %s, %llu buffers, %llu %s)", seq,
			         dvar_reduce_op_name(sig->op), dtype_text(sig->dtype, dt, sizeof dt),
			         (unsigned long long)sig->nbufs, count, elements);
		return;
	case DVAR_COLL_BROADCAST:
		snprintf(buf, cap, "broadcast #%llu (root %d, %s, %llu %s)", seq, sig->root,
		         dtype_text(sig->dtype, dt, sizeof dt), count, elements);
		return;
	case DVAR_COLL_ALL_TO_ALL:
		snprintf(buf, cap, "a cross-worker %s (outside any run)",
		         sig->op ? "all_to_all" : "agreement");
		return;
	case DVAR_COLL_ALL_GATHER: {
		char dims[DVAR_MAX_RANK * 22 + 4];
		size_t len = 0;
		int rank = sig->rank >= 0 && sig->rank <= DVAR_MAX_RANK ? sig->rank : 0;

		dims[len++] = '[';
		for (int i = 0; i < rank; i++) {
			if (i == sig->axis)
				len += (size_t)snprintf(dims + len, sizeof dims - len, "%s?", i ? "," : "");
			else
				len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld", i ? "," : "",
				                        (long long)sig->dims[i]);
		}
		snprintf(dims + len, sizeof dims - len, "]");
		snprintf(buf, cap, "all_gather #%llu (%s, axis %d of %s)", seq,
		         dtype_text(sig->dtype, dt, sizeof dt), sig->axis, dims);
		return;
	}
	}
	snprintf(buf, cap, "collective #%llu", seq);
}

/* ---------------------------------------------------------------- local helpers */

static void copy_message(char *dst, const char *src)
{
	size_t n = strnlen(src, DVAR_ERROR_MESSAGE_MAX - 1);

	memmove(dst, src, n);
	dst[n] = '\0';
}

/* Elements [lo, hi) of n split into parts nearly equal parts: part i. */
static void split(uint64_t n, int parts, int i, uint64_t *lo, uint64_t *hi)
{
	uint64_t q = n / (uint64_t)parts, rem = n % (uint64_t)parts;

	*lo = (uint64_t)i * q + ((uint64_t)i < rem ? (uint64_t)i : rem);
	*hi = *lo + q + ((uint64_t)i < rem ? 1 : 0);
}

static uint64_t hash_counts(const size_t *counts, size_t n)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < n; i++) {
		uint64_t v = counts[i];

		for (int b = 0; b < 8; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 1099511628211ull;
		}
	}
	return h;
}

/* "replica 3" with one worker, "replica 3 (worker 1, local 1)" with several. */
static void name_replica(const dvar_strategy *s, int id, char *buf, size_t cap)
{
	if (s->W > 1)
		snprintf(buf, cap, "replica %d (worker %d, local %d)", id, id / s->R, id % s->R);
	else
		snprintf(buf, cap, "replica %d", id);
}

/* A barrier that ends every collective; nothing can abort it because every
 * local replica is inside the collective by then. */
static void barrier(dvar_strategy *s)
{
	uint64_t gen;

	if (s->R == 1)
		return;
	pthread_mutex_lock(&s->lock);
	gen = s->bar_gen;
	if (++s->bar_count == s->R) {
		s->bar_count = 0;
		s->bar_gen++;
		pthread_cond_broadcast(&s->coll_cv);
	} else {
		while (s->bar_gen == gen)
			pthread_cond_wait(&s->coll_cv, &s->lock);
	}
	pthread_mutex_unlock(&s->lock);
}

/* A lone replica whose all_reduce data the coordinator moves itself: with
 * the chunks in its buffers there is nothing to run in parallel with the
 * ring, and every hand-over between the threads costs a wake-up. With a
 * timeout the chunks go through the slots, and the replica's copies overlap
 * the ring. */
static int coordinator_moves(const dvar_strategy *s)
{
	return s->R == 1 && s->timeout_ms == 0;
}

/* ---------------------------------------------------------------- deciding */

void dvar_coll_fail_locked(dvar_strategy *s, int code, const char *message, int echo, int abort)
{
	s->coll_code = code;
	s->coll_echo = echo;
	s->coll_forced = abort;
	copy_message(s->coll_message, message);
	if (abort)
		s->gather_valid = 0; /* no all_gather result to describe */
	if (abort && !s->abort) {
		s->abort = 1;
		copy_message(s->abort_message, message);
	}
	s->coll_arrived = 0;
	s->coll_ready = 0;
	s->coll_gen++;
	pthread_cond_broadcast(&s->coll_cv);
}

/* wake = 0: the replicas have nothing to do before the coordinator's next
 * broadcast of coll_cv, which lets them go too. */
static void go_locked(dvar_strategy *s, int wake)
{
	s->coll_code = DVAR_OK;
	s->coll_echo = 0;
	s->coll_forced = 0;
	s->dp_reduced[0] = s->dp_reduced[1] = 0;
	s->dp_copied[0] = s->dp_copied[1] = 0;
	s->dp_done = 0;
	s->dp_code = DVAR_OK;
	s->coll_gen++;
	if (wake)
		pthread_cond_broadcast(&s->coll_cv);
}

static int same_sig(const dvar_coll_sig *a, const dvar_coll_sig *b)
{
	return a->kind == b->kind && a->op == b->op && a->dtype == b->dtype && a->root == b->root &&
	       a->where == b->where &&
	       a->axis == b->axis && a->rank == b->rank && a->count == b->count &&
	       a->nbufs == b->nbufs && a->counts_hash == b->counts_hash;
}

/* Under lock: the shape of an all_gather's result from the rows of every
 * worker; fails (DVAR_ESHAPE for every replica, the run goes on) when some
 * destination is too small. */
static int plan_gather_locked(dvar_strategy *s, const dvar_coll_sig *sig, const uint64_t *rows,
                              size_t step, size_t dst_min, int dst_min_replica)
{
	uint64_t bytes = 0;
	int64_t total = 0;

	/* rows of worker w: at rows + w * step bytes */
	for (int w = 0; w < s->W; w++) {
		s->gather_worker_off[w] = total;
		total += (int64_t) * (const uint64_t *)((const char *)rows + (size_t)w * step);
	}
	s->gather_worker_off[s->W] = total;
	s->gather_shape.rank = sig->rank;
	for (int i = 0; i < DVAR_MAX_RANK; i++)
		s->gather_shape.dims[i] = i < sig->rank ? sig->dims[i] : 0;
	s->gather_shape.dims[sig->axis] = total;
	s->gather_valid = 1;
	if (dvar_shape_num_bytes(&s->gather_shape, sig->dtype, &bytes) != DVAR_OK ||
	    bytes > dst_min) {
		char desc[256], shape[256], who[96];
		char text[DVAR_ERROR_MESSAGE_MAX];

		dvar_coll_describe(sig, desc, sizeof desc);
		dvar_shape_format(&s->gather_shape, shape, sizeof shape);
		name_replica(s, dst_min_replica, who, sizeof who);
		snprintf(text, sizeof text,
		         "%s: the result has shape %s (%llu bytes) but the destination of %s holds "
		         "%zu bytes",
		         desc, shape, (unsigned long long)bytes, who, dst_min);
		dvar_coll_fail_locked(s, DVAR_ESHAPE, text, 0, 0);
		return DVAR_ESHAPE;
	}
	return DVAR_OK;
}

/* Under lock, by the last local replica to arrive. */
static void decide_local_locked(dvar_strategy *s)
{
	const dvar_coll_args *a0 = s->args[0];
	char da[256], db[256];
	char text[DVAR_ERROR_MESSAGE_MAX];
	int bad = -1;

	s->coll_arrived = 0;
	s->gather_valid = 0;
	for (int j = 1; j < s->R; j++) {
		if (s->args[j]->sig.kind == a0->sig.kind)
			continue;
		dvar_coll_describe(&a0->sig, da, sizeof da);
		dvar_coll_describe(&s->args[j]->sig, db, sizeof db);
		snprintf(text, sizeof text,
		         "replica %d is in %s while replica %d is in %s: every replica must make the "
		         "same collective calls",
		         s->replicas[j].id, db, s->replicas[0].id, da);
		dvar_coll_fail_locked(s, DVAR_ECOMM, text, 0, 1);
		return;
	}
	for (int j = 0; j < s->R && bad < 0; j++)
		if (s->args[j]->bad)
			bad = j;
	if (bad >= 0) {
		if (s->W > 1) {
			s->coll_ready = 1;
			pthread_cond_signal(&s->coord_cv);
			return;
		}
		dvar_coll_describe(&a0->sig, da, sizeof da);
		dvar_engine_format(text, sizeof text, "%s: replica %d failed: %s", da, s->replicas[bad].id,
		         s->replicas[bad].bad_message);
		dvar_coll_fail_locked(s, DVAR_ECOMM, text, 1, 0);
		return;
	}
	for (int j = 1; j < s->R; j++) {
		const dvar_coll_args *aj = s->args[j];
		int differs = !same_sig(&a0->sig, &aj->sig);
		int dims_differ = 0;

		if (!differs && a0->sig.kind == DVAR_COLL_ALL_REDUCE && a0->n > 1)
			differs = memcmp(a0->offsets, aj->offsets, (a0->n + 1) * sizeof *a0->offsets) != 0;
		if (!differs && a0->sig.kind == DVAR_COLL_ALL_GATHER)
			dims_differ = memcmp(a0->sig.dims, aj->sig.dims, sizeof a0->sig.dims) != 0;
		if (!differs && !dims_differ)
			continue;
		dvar_coll_describe(&a0->sig, da, sizeof da);
		dvar_coll_describe(&aj->sig, db, sizeof db);
		if (differs && a0->sig.kind == DVAR_COLL_ALL_REDUCE && same_sig(&a0->sig, &aj->sig))
			snprintf(text, sizeof text,
			         "%s: replica %d passes other buffer sizes than replica %d: every replica "
			         "must pass the same counts",
			         da, s->replicas[j].id, s->replicas[0].id);
		else
			snprintf(text, sizeof text, "replica %d is in %s while replica %d is in %s: %s",
			         s->replicas[j].id, db, s->replicas[0].id, da,
			         dims_differ ? "the tensors must agree in every dimension but axis"
			                     : "every replica must make the same collective calls");
		dvar_coll_fail_locked(s, dims_differ ? DVAR_ESHAPE : DVAR_ECOMM, text, 0, 1);
		return;
	}
	if (a0->sig.kind == DVAR_COLL_ALL_GATHER) {
		int64_t off = 0;

		for (int j = 0; j < s->R; j++) {
			s->gather_local_off[j] = off;
			off += s->args[j]->rows;
		}
	}
	if (s->W > 1) {
		s->coll_ready = 1;
		pthread_cond_signal(&s->coord_cv);
		return;
	}
	if (a0->sig.kind == DVAR_COLL_ALL_GATHER) {
		uint64_t rows = (uint64_t)s->gather_local_off[s->R - 1] + (uint64_t)s->args[s->R - 1]->rows;
		size_t dst_min = SIZE_MAX;
		int who = 0;

		for (int j = 0; j < s->R; j++) {
			if (s->args[j]->dst_bytes < dst_min) {
				dst_min = s->args[j]->dst_bytes;
				who = s->replicas[j].id;
			}
		}
		if (plan_gather_locked(s, &a0->sig, &rows, 0, dst_min, who) != DVAR_OK)
			return;
	}
	go_locked(s, 1);
}

void dvar_coll_make_record(dvar_strategy *s, dvar_ctl_record *rec)
{
	const dvar_coll_args *a0 = s->args[0];

	rec->kind = DVAR_CTL_OP;
	rec->sig = a0->sig;
	for (int j = 0; j < s->R; j++) {
		if (!s->args[j]->bad)
			continue;
		rec->code = s->replicas[j].bad_code;
		rec->replica = s->replicas[j].id;
		copy_message(rec->message, s->replicas[j].bad_message);
		return;
	}
	if (a0->sig.kind == DVAR_COLL_ALL_GATHER) {
		size_t dst_min = SIZE_MAX;

		for (int j = 0; j < s->R; j++) {
			rec->rows += (uint64_t)s->args[j]->rows;
			if (s->args[j]->dst_bytes < dst_min) {
				dst_min = s->args[j]->dst_bytes;
				rec->dst_min_replica = s->replicas[j].id;
			}
		}
		rec->dst_min = dst_min;
	}
}

/* ---------------------------------------------------------------- arriving */

/* The replica's side of a failed collective: set its error, remember a
 * failure that must fail the run. Under lock. */
static int fail_replica_locked(dvar_replica *r, int code, const char *message, int echo, int forced)
{
	if (echo)
		r->echo = 1;
	if (forced && r->forced_code == DVAR_OK) {
		r->forced_code = code;
		r->forced_original = !echo;
		copy_message(r->forced_message, message);
	}
	return dvar_error_restore(code, message);
}

/*
 * Arrive at the next collective with a (sig.kind and, unless a->bad, the
 * rest of the signature set) and wait for the decision. DVAR_OK: go, move
 * the data, then call barrier(). Otherwise the error is set.
 */
static int enter(dvar_replica *r, dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	char desc[256];
	char text[DVAR_ERROR_MESSAGE_MAX + 320];
	uint64_t gen;
	int rc;

	a->sig.seq = ++r->seq;
	r->args = a;
	dvar_coll_describe(&a->sig, desc, sizeof desc);

	pthread_mutex_lock(&s->lock);
	if (s->broken) {
		pthread_mutex_unlock(&s->lock);
		dvar_engine_broken_error(s);
		return dvar_error_prefix("%s", desc);
	}
	if (s->abort) {
		dvar_engine_format(text, sizeof text, "%s: %s", desc, s->abort_message);
		rc = fail_replica_locked(r, DVAR_ECOMM, text, 1, 1);
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	if (s->nrunning < s->R) {
		/* A replica returned (successfully: a failure would have aborted the
		 * run) and will never come here. */
		int gone = -1;

		for (int j = 0; j < s->R && gone < 0; j++)
			if (s->replicas[j].returned)
				gone = j;
		snprintf(text, sizeof text,
		         "%s: replica %d returned from the replica function without calling it: every "
		         "replica must make the same collective calls",
		         desc, gone >= 0 ? s->replicas[gone].id : -1);
		dvar_coll_fail_locked(s, DVAR_ECOMM, text, 0, 1);
		rc = fail_replica_locked(r, DVAR_ECOMM, text, 0, 1);
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	s->args[r->local] = a;
	gen = s->coll_gen;
	if (s->coll_arrived++ == 0)
		s->coll_first = r->local;
	if (s->coll_arrived == s->R)
		decide_local_locked(s);
	while (s->coll_gen == gen && !s->abort)
		pthread_cond_wait(&s->coll_cv, &s->lock);
	if (s->coll_gen == gen) {
		/* Another replica failed before everyone arrived. */
		dvar_engine_format(text, sizeof text, "%s: %s", desc, s->abort_message);
		rc = fail_replica_locked(r, DVAR_ECOMM, text, 1, 1);
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	if (a->sig.kind == DVAR_COLL_ALL_GATHER && s->gather_valid && a->out_shape)
		*a->out_shape = s->gather_shape;
	if (s->coll_code == DVAR_OK) {
		r->echo = 0; /* a later failure of this replica is its own */
		pthread_mutex_unlock(&s->lock);
		return DVAR_OK;
	}
	if (a->bad && !s->coll_forced)
		rc = dvar_error_restore(r->bad_code, r->bad_message);
	else
		rc = fail_replica_locked(r, s->coll_code, s->coll_message, s->coll_echo, s->coll_forced);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Refuse this replica's arguments: keep the message for the others, and
 * still arrive so that nobody waits for this replica in vain. */
static void refuse(dvar_replica *r, dvar_coll_args *a, int code)
{
	a->bad = 1;
	r->bad_code = code;
	copy_message(r->bad_message, dvar_error_last()->message);
}

/*
 * On a CUDA strategy: note in *where whether p (NULL: no say) is device
 * memory, refusing a call whose buffers are of both kinds. *where starts
 * at -1.
 */
static int buffer_kind(dvar_strategy *s, const void *p, int *where, const char *what)
{
	int d;

	if (!p || !dvar_mem_on_device(s))
		return DVAR_OK;
	d = dvar_mem_is_device(s, p);
	if (*where >= 0 && d != *where)
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: some buffers are in device memory and some in host memory: "
		                      "pass buffers of one kind",
		                      what);
	*where = d;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- through the host */

/*
 * Where a strategy's GPUs have no NCCL between them (dvar_cuda_via_host), a
 * collective over device buffers is a host collective over each replica's
 * page-locked staging. The sources are copied in before the replica
 * arrives, so a failure refuses the call everywhere, as a bad argument
 * does; the results are copied out after the data phase, where a failure
 * breaks the strategy, as one in a data phase on the GPUs does. The order
 * of additions is the host's, a CPU strategy's.
 */
static int via_host(const dvar_strategy *s)
{
#if DVAR_WITH_CUDA
	return s->cuda && dvar_cuda_via_host(s->cuda);
#else
	(void)s;
	return 0;
#endif
}

/* r's staging, at least bytes; NULL with the error set. */
static char *stage_alloc(dvar_replica *r, size_t bytes, const char *what)
{
	char *h = NULL;

#if DVAR_WITH_CUDA
	h = dvar_cuda_host_stage(r->s->cuda, r->local, bytes ? bytes : 1);
#endif
	if (!h)
		dvar_error_prefix("%s: staging %zu bytes in host memory", what, bytes);
	return h;
}

static int stage_out(dvar_replica *r, void *dst, const void *host, size_t bytes)
{
	int rc = dvar_mem_copy(r->s, r->local, dst, host, bytes);

	if (rc != DVAR_OK) {
		pthread_mutex_lock(&r->s->lock);
		dvar_engine_break_locked(r->s, dvar_error_last()->message);
		pthread_mutex_unlock(&r->s->lock);
	}
	return rc;
}

/* Set a->sig.where from the buffers' kind (host when no data moves; staged
 * when device buffers go through the host) and, on a CUDA strategy,
 * wait for the replica's stream: the caller's work on it writes what the
 * collective reads, host buffers included (a copy to pinned memory, a
 * kernel writing mapped memory). */
static int settle_where(dvar_replica *r, dvar_coll_args *a, int where, int moves)
{
	a->sig.where = where <= 0 || !moves ? DVAR_WHERE_HOST
	               : via_host(r->s)     ? DVAR_WHERE_STAGED
	                                    : DVAR_WHERE_DEVICE;
#if DVAR_WITH_CUDA
	if (a->sig.where == DVAR_WHERE_DEVICE)
		return dvar_cuda_coll_prepare(r, a);
	if (r->s->cuda && moves)
		return dvar_cuda_status(cudaStreamSynchronize(dvar_cuda_stream(r->s->cuda, r->local)),
		                        "waiting for the replica's stream");
#endif
	(void)r;
	return DVAR_OK;
}

/* After the data phase: the coordinator's failure, if any (W > 1). */
static int finish(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	char desc[256];
	char text[DVAR_ERROR_MESSAGE_MAX + 320];
	int rc = DVAR_OK;

	barrier(s);
	if (s->W == 1 && a->sig.where != DVAR_WHERE_DEVICE)
		return DVAR_OK;
	pthread_mutex_lock(&s->lock);
	if (s->dp_code != DVAR_OK) {
		dvar_coll_describe(&a->sig, desc, sizeof desc);
		dvar_engine_format(text, sizeof text, "%s: %s", desc, s->dp_message);
		rc = fail_replica_locked(r, s->dp_code, text, 0, 1);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Wait (under lock) until *counter >= target or the coordinator failed. */
static int wait_for(dvar_strategy *s, const uint64_t *counter, uint64_t target)
{
	int code;

	pthread_mutex_lock(&s->lock);
	while (*counter < target && s->dp_code == DVAR_OK)
		pthread_cond_wait(&s->coll_cv, &s->lock);
	code = s->dp_code;
	pthread_mutex_unlock(&s->lock);
	return code;
}

/* ---------------------------------------------------------------- all_reduce */

/* Reduce elements [lo, hi) of the concatenated sources of every local
 * replica, in replica order, into out (contiguous). */
static void reduce_into(dvar_strategy *s, const dvar_coll_args *a, uint64_t lo, uint64_t hi,
                        char *out)
{
	const void *srcs[DVAR_MAX_REPLICAS];
	size_t es = dvar_dtype_size(a->sig.dtype);
	dvar_kernel_op kop = dvar_kernel_op_of(a->sig.op);
	size_t i = lo < hi ? dvar_segment_of(a->offsets, a->n, lo) : 0;

	for (uint64_t pos = lo; pos < hi;) {
		uint64_t end, len;
		size_t at;

		while (a->offsets[i + 1] <= pos)
			i++;
		end = a->offsets[i + 1] < hi ? a->offsets[i + 1] : hi;
		len = end - pos;
		at = (size_t)(pos - a->offsets[i]) * es;
		for (int j = 0; j < s->R; j++)
			srcs[j] = (const char *)s->args[j]->src[i] + at;
		dvar_kernel_reduce(a->sig.dtype, kop, out, srcs, s->R, (size_t)len);
		out += len * es;
		pos = end;
	}
}

/* Copy in (elements [lo, hi) of the result) to every local replica's
 * destination. */
static void copy_out(dvar_strategy *s, const dvar_coll_args *a, uint64_t lo, uint64_t hi,
                     const char *in)
{
	size_t es = dvar_dtype_size(a->sig.dtype);
	size_t i = lo < hi ? dvar_segment_of(a->offsets, a->n, lo) : 0;

	for (uint64_t pos = lo; pos < hi;) {
		uint64_t end, len;
		size_t at;

		while (a->offsets[i + 1] <= pos)
			i++;
		end = a->offsets[i + 1] < hi ? a->offsets[i + 1] : hi;
		len = end - pos;
		at = (size_t)(pos - a->offsets[i]) * es;
		for (int j = 0; j < s->R; j++) {
			char *d = (char *)s->args[j]->dst[i] + at;

			if (d != in)
				memcpy(d, in, len * es);
		}
		in += len * es;
		pos = end;
	}
}

/* One worker: segment r, reduced straight into this replica's destination,
 * then copied to the others'. */
static void all_reduce_local(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	const void *srcs[DVAR_MAX_REPLICAS];
	size_t es = dvar_dtype_size(a->sig.dtype);
	dvar_kernel_op kop = dvar_kernel_op_of(a->sig.op);
	uint64_t lo, hi;
	size_t i;

	split(a->sig.count, s->R, r->local, &lo, &hi);
	i = lo < hi ? dvar_segment_of(a->offsets, a->n, lo) : 0;
	for (uint64_t pos = lo; pos < hi;) {
		uint64_t end, len;
		size_t at;
		char *mine;

		while (a->offsets[i + 1] <= pos)
			i++;
		end = a->offsets[i + 1] < hi ? a->offsets[i + 1] : hi;
		len = end - pos;
		at = (size_t)(pos - a->offsets[i]) * es;
		for (int j = 0; j < s->R; j++)
			srcs[j] = (const char *)s->args[j]->src[i] + at;
		mine = (char *)s->args[r->local]->dst[i] + at;
		dvar_kernel_reduce(a->sig.dtype, kop, mine, srcs, s->R, (size_t)len);
		if (a->sig.op == DVAR_REDUCE_MEAN)
			dvar_kernel_divide(a->sig.dtype, mine, (size_t)len, s->N);
		for (int j = 0; j < s->R; j++) {
			char *d = (char *)s->args[j]->dst[i] + at;

			if (d != mine)
				memcpy(d, mine, len * es);
		}
		pos = end;
	}
}

/* Where chunk k (elements [lo, hi)) is reduced and exchanged: in local
 * replica 0's destination when the chunk lies in one buffer, so that no
 * copy goes through a slot (none at all for R = 1 in place), else in slot
 * k % 2. Only slots with a timeout: the requests a timeout abandons may
 * still use their buffers, which would be the application's by then. */
static char *chunk_home(dvar_strategy *s, const dvar_coll_args *a, uint64_t k, uint64_t lo,
                        uint64_t hi)
{
	size_t es = dvar_dtype_size(a->sig.dtype);
	size_t i = dvar_segment_of(a->offsets, a->n, lo);

	if (s->timeout_ms > 0 || a->offsets[i + 1] < hi)
		return s->slot[k % 2];
	return (char *)s->args[0]->dst[i] + (size_t)(lo - a->offsets[i]) * es;
}

/* Several workers: the replicas' side of the chunk pipeline. */
static void all_reduce_pipelined(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	size_t es = dvar_dtype_size(a->sig.dtype);
	uint64_t ce = s->chunk_bytes / es, total = a->sig.count, R = (uint64_t)s->R;
	uint64_t nchunks = (total + ce - 1) / ce;

	if (coordinator_moves(s)) {
		wait_for(s, &s->dp_done, nchunks);
		return;
	}
	for (uint64_t k = 0; k <= nchunks; k++) {
		if (k < nchunks) {
			uint64_t clo = k * ce, chi = clo + ce < total ? clo + ce : total, lo, hi;
			char *home = chunk_home(s, a, k, clo, chi);

			/* The slot's previous chunk (k - 2) must be out first. */
			if (k >= 2 && wait_for(s, &s->dp_copied[k % 2], R * (k / 2)) != DVAR_OK)
				return;
			split(chi - clo, s->R, r->local, &lo, &hi);
			reduce_into(s, a, clo + lo, clo + hi, home + lo * es);
			/* Counted per slot: a replica may reduce chunk 1 before another
			 * has reduced chunk 0. */
			pthread_mutex_lock(&s->lock);
			if (++s->dp_reduced[k % 2] % R == 0)
				pthread_cond_signal(&s->coord_cv);
			pthread_mutex_unlock(&s->lock);
		}
		if (k >= 1) {
			uint64_t c = k - 1, clo = c * ce, chi = clo + ce < total ? clo + ce : total, lo, hi;
			char *part;

			if (wait_for(s, &s->dp_done, k) != DVAR_OK)
				return;
			split(chi - clo, s->R, r->local, &lo, &hi);
			part = chunk_home(s, a, c, clo, chi) + lo * es;
			if (a->sig.op == DVAR_REDUCE_MEAN && hi > lo)
				dvar_kernel_divide(a->sig.dtype, part, (size_t)(hi - lo), s->N);
			copy_out(s, a, clo + lo, clo + hi, part);
			pthread_mutex_lock(&s->lock);
			if (++s->dp_copied[c % 2] % R == 0)
				pthread_cond_broadcast(&s->coll_cv);
			pthread_mutex_unlock(&s->lock);
		}
	}
}

/* The coordinator's side: the ring over each chunk once the replicas have
 * reduced it locally, or all of the data phase (coordinator_moves). */
static void serve_all_reduce(dvar_strategy *s, const dvar_coll_sig *sig, const char *what)
{
	const dvar_coll_args *a = s->args[0];
	size_t es = dvar_dtype_size(sig->dtype);
	uint64_t ce = s->chunk_bytes / es, total = sig->count, R = (uint64_t)s->R;
	uint64_t nchunks = (total + ce - 1) / ce;
	int alone = coordinator_moves(s);

	for (uint64_t k = 0; k < nchunks; k++) {
		uint64_t clo = k * ce, chi = clo + ce < total ? clo + ce : total;
		char *home = chunk_home(s, a, k, clo, chi);
		int rc;

		if (alone) {
			reduce_into(s, a, clo, chi, home);
		} else {
			pthread_mutex_lock(&s->lock);
			while (s->dp_reduced[k % 2] < R * (k / 2 + 1))
				pthread_cond_wait(&s->coord_cv, &s->lock);
			pthread_mutex_unlock(&s->lock);
		}
		rc = dvar_comm_ring_allreduce(s->comm, sig->dtype, dvar_kernel_op_of(sig->op), home,
		                              s->ring_tmp, (size_t)(chi - clo), what);
		if (rc == DVAR_OK && alone) {
			if (sig->op == DVAR_REDUCE_MEAN)
				dvar_kernel_divide(sig->dtype, home, (size_t)(chi - clo), s->N);
			copy_out(s, a, clo, chi, home);
		}
		pthread_mutex_lock(&s->lock);
		if (rc != DVAR_OK) {
			s->dp_code = rc;
			copy_message(s->dp_message, dvar_error_last()->message);
			dvar_engine_break_locked(s, s->dp_message);
		} else {
			s->dp_done = k + 1;
		}
		pthread_cond_broadcast(&s->coll_cv);
		pthread_mutex_unlock(&s->lock);
		if (rc != DVAR_OK)
			return;
	}
}

/* a's sources copied into r's staging, a's buffers pointed there (in
 * place); *hp (the caller frees it) holds the new pointers. */
static int stage_all_reduce(dvar_replica *r, dvar_coll_args *a, size_t es, void ***hp)
{
	char *h = stage_alloc(r, (size_t)a->sig.count * es, "all_reduce");
	int rc = DVAR_OK;

	if (!h)
		return dvar_error_last()->code;
	if (!(*hp = malloc((a->n ? a->n : 1) * sizeof **hp)))
		return dvar_error_set(DVAR_ENOMEM, "all_reduce: out of memory for %zu buffers", a->n);
	for (size_t i = 0; i < a->n && rc == DVAR_OK; i++) {
		(*hp)[i] = h + a->offsets[i] * es;
		rc = dvar_mem_copy(r->s, r->local, (*hp)[i], a->src[i], a->counts[i] * es);
	}
	a->src = (const void *const *)*hp;
	a->dst = *hp;
	return rc;
}

int dvar_replica_all_reduce_n(dvar_replica *ctx, dvar_reduce_op op, int dtype, size_t n,
                              const void *const *src, void *const *dst, const size_t *counts)
{
	dvar_coll_args a;
	uint64_t stack_off[9];
	uint64_t *off = stack_off;
	void **staged = NULL; /* a.dst when staged */
	uint64_t total = 0;
	size_t es;
	int rc;

	if (!ctx)
		return dvar_error_set(DVAR_EINVAL, "all_reduce: the replica context is NULL");
	memset(&a, 0, sizeof a);
	a.sig.kind = DVAR_COLL_ALL_REDUCE;
	a.sig.op = (int32_t)op;
	a.sig.dtype = dtype;
	a.sig.nbufs = n;
	a.n = n;
	a.src = src;
	a.dst = dst;
	a.counts = counts;

	es = dvar_dtype_size(dtype);
	if ((int)op < DVAR_REDUCE_SUM || (int)op > DVAR_REDUCE_MAX) {
		rc = dvar_error_set(DVAR_EINVAL, "all_reduce: op %d is not a dvar_reduce_op", (int)op);
	} else if ((rc = dvar_kernel_check(dtype, dvar_kernel_op_of(op), "all_reduce")) != DVAR_OK) {
		/* the kernels' message */
	} else if (n > 0 && (!src || !dst || !counts)) {
		rc = dvar_error_set(DVAR_EINVAL, "all_reduce: %s is NULL",
		                    !src ? "src" : !dst ? "dst" : "counts");
	} else if (n + 1 > sizeof stack_off / sizeof *stack_off &&
	           !(off = malloc((n + 1) * sizeof *off))) {
		off = stack_off;
		rc = dvar_error_set(DVAR_ENOMEM, "all_reduce: out of memory for %zu buffers", n);
	}
	if (rc == DVAR_OK) {
		off[0] = 0;
		for (size_t i = 0; i < n && rc == DVAR_OK; i++) {
			if (counts[i] > 0 && (!src[i] || !dst[i]))
				rc = dvar_error_set(DVAR_EINVAL, "all_reduce: buffer %zu of %zu is NULL", i, n);
			else if (counts[i] > (SIZE_MAX / es - total))
				rc = dvar_error_set(DVAR_EINVAL, "all_reduce: %zu buffers are too large", n);
			total += counts[i];
			off[i + 1] = total;
		}
	}
	a.offsets = off;
	a.sig.count = total;
	if (rc == DVAR_OK) {
		int where = -1;

		for (size_t i = 0; i < n && rc == DVAR_OK; i++)
			if (counts[i] > 0 && (rc = buffer_kind(ctx->s, src[i], &where, "all_reduce")) ==
			                             DVAR_OK)
				rc = buffer_kind(ctx->s, dst[i], &where, "all_reduce");
		if (rc == DVAR_OK)
			rc = settle_where(ctx, &a, where, total > 0);
		if (rc == DVAR_OK && a.sig.where == DVAR_WHERE_STAGED)
			rc = stage_all_reduce(ctx, &a, es, &staged);
	}
	if (rc == DVAR_OK)
		a.sig.counts_hash = n > 1 ? hash_counts(counts, n) : 0;
	else
		refuse(ctx, &a, rc);

	rc = enter(ctx, &a);
	if (rc == DVAR_OK) {
#if DVAR_WITH_CUDA
		if (a.sig.where == DVAR_WHERE_DEVICE)
			dvar_cuda_coll_all_reduce(ctx, &a);
		else
#endif
		if (ctx->s->W == 1)
			all_reduce_local(ctx, &a);
		else
			all_reduce_pipelined(ctx, &a);
		rc = finish(ctx, &a);
		for (size_t i = 0; i < n && rc == DVAR_OK && a.sig.where == DVAR_WHERE_STAGED; i++)
			rc = stage_out(ctx, dst[i], staged[i], counts[i] * es);
	}
	free(staged);
	if (off != stack_off)
		free(off);
	return rc;
}

int dvar_replica_all_reduce(dvar_replica *ctx, dvar_reduce_op op, int dtype, const void *src,
                            void *dst, size_t count)
{
	const void *srcs[1] = { src };
	void *dsts[1] = { dst };

	return dvar_replica_all_reduce_n(ctx, op, dtype, 1, srcs, dsts, &count);
}

/* ---------------------------------------------------------------- broadcast */

/* The coordinator's side: root's bytes travel through slot 0 in chunks and
 * are copied to every local replica. */
/* The coordinator's data phase is over: let the replicas copy out, or fail
 * them (an MPI error breaks the strategy). */
static void finish_data_phase(dvar_strategy *s, int rc)
{
	pthread_mutex_lock(&s->lock);
	if (rc != DVAR_OK) {
		s->dp_code = rc;
		copy_message(s->dp_message, dvar_error_last()->message);
		dvar_engine_break_locked(s, s->dp_message);
	} else {
		s->dp_done = 1;
	}
	pthread_cond_broadcast(&s->coll_cv);
	pthread_mutex_unlock(&s->lock);
}

static void serve_broadcast(dvar_strategy *s, const dvar_coll_sig *sig, const char *what)
{
	size_t bytes = (size_t)sig->count * dvar_dtype_size(sig->dtype);
	int root_worker = sig->root / s->R, root_local = sig->root % s->R;
	const char *rootbuf = root_worker == s->worker ? s->args[root_local]->buf : NULL;
	int rc = DVAR_OK;

	for (size_t off = 0; off < bytes && rc == DVAR_OK; off += s->chunk_bytes) {
		size_t len = bytes - off < s->chunk_bytes ? bytes - off : s->chunk_bytes;

		if (rootbuf)
			memcpy(s->slot[0], rootbuf + off, len);
		rc = dvar_comm_bcast(s->comm, s->slot[0], len, root_worker, what);
		if (rc != DVAR_OK)
			break;
		for (int j = 0; j < s->R; j++) {
			char *d = (char *)s->args[j]->buf + off;

			if (!rootbuf || d != rootbuf + off)
				memcpy(d, s->slot[0], len);
		}
	}
	finish_data_phase(s, rc);
}

int dvar_replica_broadcast(dvar_replica *ctx, int root, int dtype, void *buf, size_t count)
{
	dvar_coll_args a;
	void *user = buf; /* buf is the staging when staged */
	size_t es;
	int rc = DVAR_OK;

	if (!ctx)
		return dvar_error_set(DVAR_EINVAL, "broadcast: the replica context is NULL");
	memset(&a, 0, sizeof a);
	a.sig.kind = DVAR_COLL_BROADCAST;
	a.sig.root = root;
	a.sig.dtype = dtype;
	a.sig.count = count;
	a.buf = buf;
	es = dvar_dtype_size(dtype);
	if (es == 0)
		rc = dvar_error_set(DVAR_EINVAL, "broadcast: %d is not a dvar_dtype", dtype);
	else if (root < 0 || root >= ctx->s->N)
		rc = dvar_error_set(DVAR_EINVAL,
		                    "broadcast: root %d is not a replica id (the sync group has %d "
		                    "replicas)",
		                    root, ctx->s->N);
	else if (count > SIZE_MAX / es)
		rc = dvar_error_set(DVAR_EINVAL, "broadcast: %zu elements are too many", count);
	else if (count > 0 && !buf)
		rc = dvar_error_set(DVAR_EINVAL, "broadcast: buf is NULL");
	if (rc == DVAR_OK) {
		int where = -1;

		if ((rc = buffer_kind(ctx->s, buf, &where, "broadcast")) == DVAR_OK)
			rc = settle_where(ctx, &a, where, count > 0);
		if (rc == DVAR_OK && a.sig.where == DVAR_WHERE_STAGED) {
			if (!(buf = stage_alloc(ctx, count * es, "broadcast")))
				rc = dvar_error_last()->code;
			else if (dvar_replica_id(ctx) == root)
				rc = dvar_mem_copy(ctx->s, ctx->local, buf, user, count * es);
			a.buf = buf;
		}
	}
	if (rc != DVAR_OK)
		refuse(ctx, &a, rc);

	rc = enter(ctx, &a);
	if (rc != DVAR_OK)
		return rc;
#if DVAR_WITH_CUDA
	if (a.sig.where == DVAR_WHERE_DEVICE)
		dvar_cuda_coll_broadcast(ctx, &a);
	else
#endif
	if (ctx->s->W == 1) {
		const void *from = ctx->s->args[root]->buf;

		if (ctx->local != root && buf != from && count > 0)
			memcpy(buf, from, count * es);
	} else {
		wait_for(ctx->s, &ctx->s->dp_done, 1);
	}
	rc = finish(ctx, &a);
	if (rc == DVAR_OK && a.sig.where == DVAR_WHERE_STAGED && dvar_replica_id(ctx) != root)
		rc = stage_out(ctx, user, buf, count * es);
	return rc;
}

/* ---------------------------------------------------------------- all_gather */

/* Copy one tensor (outer x rows x inner elements) into a result with total
 * rows, starting at row `at`. */
static void place_rows(char *dst, const char *src, uint64_t outer, uint64_t rows, uint64_t inner,
                       uint64_t total, uint64_t at, size_t es)
{
	size_t block = (size_t)(rows * inner) * es;

	if (block == 0 || outer == 0)
		return;
	for (uint64_t o = 0; o < outer; o++)
		memcpy(dst + (size_t)((o * total + at) * inner) * es, src + (size_t)o * block, block);
}

static void gather_geometry(const dvar_shape *shape, int axis, uint64_t *outer, uint64_t *inner)
{
	*outer = 1;
	*inner = 1;
	for (int i = 0; i < axis; i++)
		*outer *= (uint64_t)shape->dims[i];
	for (int i = axis + 1; i < shape->rank; i++)
		*inner *= (uint64_t)shape->dims[i];
}

/* The coordinator's side: every worker's rows, staged in local replica 0's
 * destination, go to every worker, in pieces through slot 0. */
static void serve_all_gather(dvar_strategy *s, const dvar_coll_sig *sig, const char *what)
{
	size_t es = dvar_dtype_size(sig->dtype);
	uint64_t outer, inner, total = (uint64_t)s->gather_shape.dims[sig->axis];
	char *stage = s->args[0]->gdst;
	size_t stride;
	int rc = DVAR_OK;

	gather_geometry(&s->gather_shape, sig->axis, &outer, &inner);
	stride = (size_t)(total * inner) * es;
	pthread_mutex_lock(&s->lock);
	while (s->dp_reduced[0] < (uint64_t)s->R)
		pthread_cond_wait(&s->coord_cv, &s->lock);
	pthread_mutex_unlock(&s->lock);

	for (int w = 0; w < s->W && rc == DVAR_OK; w++) {
		uint64_t rows = (uint64_t)(s->gather_worker_off[w + 1] - s->gather_worker_off[w]);
		size_t row_bytes = (size_t)(rows * inner) * es;
		int mine = w == s->worker;
		char *base;

		if (row_bytes == 0 || outer == 0)
			continue;
		base = stage + (size_t)((uint64_t)s->gather_worker_off[w] * inner) * es;
		if (row_bytes <= s->chunk_bytes) {
			/* Whole rows, as many as fit in the slot. */
			uint64_t per = s->chunk_bytes / row_bytes;

			for (uint64_t o = 0; o < outer && rc == DVAR_OK; o += per) {
				uint64_t n = outer - o < per ? outer - o : per;
				char *slot = s->slot[0];

				if (mine)
					for (uint64_t i = 0; i < n; i++)
						memcpy(slot + i * row_bytes, base + (o + i) * stride, row_bytes);
				rc = dvar_comm_bcast(s->comm, slot, (size_t)n * row_bytes, w, what);
				if (rc == DVAR_OK && !mine)
					for (uint64_t i = 0; i < n; i++)
						memcpy(base + (o + i) * stride, slot + i * row_bytes, row_bytes);
			}
		} else {
			/* Rows larger than a slot, piece by piece. */
			for (uint64_t o = 0; o < outer && rc == DVAR_OK; o++) {
				for (size_t off = 0; off < row_bytes && rc == DVAR_OK; off += s->chunk_bytes) {
					size_t len = row_bytes - off < s->chunk_bytes ? row_bytes - off
					                                              : s->chunk_bytes;
					char *at = base + o * stride + off;

					if (mine)
						memcpy(s->slot[0], at, len);
					rc = dvar_comm_bcast(s->comm, s->slot[0], len, w, what);
					if (rc == DVAR_OK && !mine)
						memcpy(at, s->slot[0], len);
				}
			}
		}
	}
	finish_data_phase(s, rc);
}

int dvar_replica_all_gather(dvar_replica *ctx, int dtype, const dvar_shape *shape, const void *src,
                            int axis, void *dst, size_t dst_bytes, dvar_shape *out_shape)
{
	dvar_strategy *s;
	dvar_coll_args a;
	uint64_t outer, inner, total, bytes = 0;
	void *user = dst; /* dst is the staging's when staged */
	size_t es;
	int rc = DVAR_OK;

	if (!ctx)
		return dvar_error_set(DVAR_EINVAL, "all_gather: the replica context is NULL");
	s = ctx->s;
	memset(&a, 0, sizeof a);
	a.sig.kind = DVAR_COLL_ALL_GATHER;
	a.sig.dtype = dtype;
	a.sig.axis = axis;
	a.gsrc = src;
	a.gdst = dst;
	a.dst_bytes = dst ? dst_bytes : 0;
	a.out_shape = out_shape;
	es = dvar_dtype_size(dtype);
	if (es == 0) {
		rc = dvar_error_set(DVAR_EINVAL, "all_gather: %d is not a dvar_dtype", dtype);
	} else if (!shape) {
		rc = dvar_error_set(DVAR_EINVAL, "all_gather: shape is NULL");
	} else if (shape->rank < 1 || shape->rank > DVAR_MAX_RANK) {
		rc = dvar_error_set(DVAR_EINVAL, "all_gather: rank %d (a tensor of rank 1..%d is needed)",
		                    (int)shape->rank, DVAR_MAX_RANK);
	} else if (axis < 0 || axis >= shape->rank) {
		rc = dvar_error_set(DVAR_EINVAL, "all_gather: axis %d is out of range for rank %d", axis,
		                    (int)shape->rank);
	} else if ((rc = dvar_shape_num_bytes(shape, dtype, &bytes)) != DVAR_OK) {
		dvar_error_prefix("all_gather");
	} else if (bytes > 0 && !src) {
		rc = dvar_error_set(DVAR_EINVAL, "all_gather: src is NULL");
	}
	if (rc == DVAR_OK) {
		int where = -1;

		a.sig.rank = shape->rank;
		for (int i = 0; i < shape->rank; i++)
			a.sig.dims[i] = i == axis ? 0 : shape->dims[i];
		a.rows = shape->dims[axis];
		/* Whether data moves depends on the result, which only the decision
		 * knows; dst is there whenever it is not empty. */
		if ((rc = buffer_kind(s, dst, &where, "all_gather")) == DVAR_OK &&
		    (rc = buffer_kind(s, bytes ? src : NULL, &where, "all_gather")) == DVAR_OK)
			rc = settle_where(ctx, &a, where, dst != NULL);
		if (rc == DVAR_OK && a.sig.where == DVAR_WHERE_STAGED) {
			/* This replica's tensor, then the result. */
			char *h = stage_alloc(ctx, (size_t)bytes + a.dst_bytes, "all_gather");

			if (!h)
				rc = dvar_error_last()->code;
			else
				rc = dvar_mem_copy(s, ctx->local, h, src, (size_t)bytes);
			a.gsrc = src = h;
			a.gdst = dst = h ? h + bytes : NULL;
		}
	}
	if (rc != DVAR_OK) {
		a.sig.rank = shape && shape->rank >= 0 && shape->rank <= DVAR_MAX_RANK ? shape->rank : 0;
		refuse(ctx, &a, rc);
	}

	rc = enter(ctx, &a);
	if (rc != DVAR_OK)
		return rc;
	total = (uint64_t)s->gather_shape.dims[axis];
	gather_geometry(&s->gather_shape, axis, &outer, &inner);
#if DVAR_WITH_CUDA
	if (a.sig.where == DVAR_WHERE_DEVICE)
		dvar_cuda_coll_all_gather(ctx, &a);
	else
#endif
	if (s->W == 1) {
		for (int j = 0; j < s->R; j++)
			place_rows(dst, s->args[j]->gsrc, outer, (uint64_t)s->args[j]->rows, inner, total,
			           (uint64_t)s->gather_local_off[j], es);
	} else {
		char *stage = s->args[0]->gdst;
		uint64_t at = (uint64_t)(s->gather_worker_off[s->worker] + s->gather_local_off[ctx->local]);

		place_rows(stage, src, outer, (uint64_t)a.rows, inner, total, at, es);
		pthread_mutex_lock(&s->lock);
		if (++s->dp_reduced[0] == (uint64_t)s->R)
			pthread_cond_signal(&s->coord_cv);
		pthread_mutex_unlock(&s->lock);
		if (wait_for(s, &s->dp_done, 1) == DVAR_OK && ctx->local != 0 && dst != stage &&
		    outer * total * inner > 0)
			memcpy(dst, stage, (size_t)(outer * total * inner) * es);
	}
	rc = finish(ctx, &a);
	if (rc == DVAR_OK && a.sig.where == DVAR_WHERE_STAGED)
		rc = stage_out(ctx, user, dst, (size_t)(outer * total * inner) * es);
	return rc;
}

/* ---------------------------------------------------------------- the coordinator */

void dvar_coll_serve(dvar_strategy *s, const dvar_ctl_record *recs)
{
	dvar_coll_sig sig = s->args[0]->sig;
	char desc[256], who[96];
	char text[DVAR_ERROR_MESSAGE_MAX + 320];

	dvar_coll_describe(&sig, desc, sizeof desc);
	pthread_mutex_lock(&s->lock);
	/* Refused arguments anywhere: the call fails everywhere, the run goes on. */
	for (int w = 0; w < s->W; w++) {
		if (recs[w].code == DVAR_OK)
			continue;
		name_replica(s, recs[w].replica, who, sizeof who);
		dvar_engine_format(text, sizeof text, "%s: %s failed: %s", desc, who, recs[w].message);
		dvar_coll_fail_locked(s, DVAR_ECOMM, text, 1, 0);
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (sig.kind == DVAR_COLL_ALL_GATHER) {
		size_t dst_min = SIZE_MAX;
		int who_min = 0;

		for (int w = 0; w < s->W; w++) {
			if (recs[w].dst_min < dst_min) {
				dst_min = (size_t)recs[w].dst_min;
				who_min = recs[w].dst_min_replica;
			}
		}
		if (plan_gather_locked(s, &sig, &recs[0].rows, sizeof *recs, dst_min, who_min) !=
		    DVAR_OK) {
			pthread_mutex_unlock(&s->lock);
			return;
		}
	}
	if (sig.where == DVAR_WHERE_DEVICE) {
		/* The GPUs move the data themselves, over NCCL. */
		go_locked(s, 1);
		pthread_mutex_unlock(&s->lock);
		return;
	}
	/* A replica whose all_reduce data the coordinator moves waits for the
	 * first chunk: a wake-up now would only take a core from the coordinator. */
	go_locked(s, !(sig.kind == DVAR_COLL_ALL_REDUCE && coordinator_moves(s) && sig.count > 0));
	pthread_mutex_unlock(&s->lock);

	switch (sig.kind) {
	case DVAR_COLL_ALL_REDUCE: serve_all_reduce(s, &sig, desc); break;
	case DVAR_COLL_BROADCAST: serve_broadcast(s, &sig, desc); break;
	case DVAR_COLL_ALL_GATHER: serve_all_gather(s, &sig, desc); break;
	}
}
