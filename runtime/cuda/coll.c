/*
 * runtime/cuda/coll.c - the replica-context collectives over device
 * buffers (cuda.h, "collectives"). collective.c has already agreed on the
 * call with every replica and worker; here each group's leader moves the
 * data on its stream: kernels combine the replicas that share its GPU,
 * NCCL combines the groups of every worker (one NCCL rank each), then the
 * leader copies the result to its group's other replicas. An all-reduce
 * on one GPU in all is one kernel: it reads every replica's source once
 * and writes every replica's result (divided for a MEAN).
 *
 * All-reduce. By default in a fixed order, the same bytes in every run: a
 * reduce-scatter made of NCCL sends and receives, each rank then adding
 * the G contributions to its segment with dvar's own kernel in rank order,
 * and an all-gather of the segments. Within a group the replicas add in
 * local order first, so the order of every addition depends only on the
 * topology, and the arithmetic is dvar's (NaN, float16 and bfloat16 rules
 * of runtime/kernels.c). With DVAR_STRATEGY_NCCL_ALL_REDUCE it is
 * ncclAllReduce instead: NCCL's order and arithmetic, its speed.
 *
 * Everything a data phase allocates is reserved in dvar_cuda_coll_prepare,
 * before the replica arrives: once the peers are inside NCCL a failure
 * cannot be unwound, so any failure after that breaks the strategy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/kernels.h"

/* The deterministic all-reduce works on pieces of at most this many bytes,
 * which bounds its scratch at twice this (plus a row per rank). */
#define PIECE_BYTES ((size_t)64 << 20)

static dvar_cuda *cuda_of(const dvar_strategy *s)
{
	return s->cuda;
}

/* The failure of a data phase, for every local replica's finish(). */
static void fail_data(dvar_strategy *s)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];

	snprintf(msg, sizeof msg, "%s", dvar_error_last()->message);
	pthread_mutex_lock(&s->lock);
	if (s->dp_code == DVAR_OK) {
		s->dp_code = dvar_error_last()->code != DVAR_OK ? dvar_error_last()->code : DVAR_EDEVICE;
		snprintf(s->dp_message, sizeof s->dp_message, "%s", msg);
		dvar_engine_break_locked(s, msg);
	}
	pthread_mutex_unlock(&s->lock);
}

static int check(cudaError_t err, const char *what)
{
	return dvar_cuda_status(err, what);
}

#if DVAR_WITH_NCCL
static int ncheck(ncclResult_t res, const char *what)
{
	return dvar_nccl_status(res, what);
}

/* NCCL's type for a dvar dtype; 0 when NCCL has none (16-bit integers, bool). */
static int nccl_type(int dtype, ncclDataType_t *t)
{
	switch (dtype) {
	case DVAR_INT8: *t = ncclInt8; return 1;
	case DVAR_UINT8: *t = ncclUint8; return 1;
	case DVAR_INT32: *t = ncclInt32; return 1;
	case DVAR_UINT32: *t = ncclUint32; return 1;
	case DVAR_INT64: *t = ncclInt64; return 1;
	case DVAR_UINT64: *t = ncclUint64; return 1;
	case DVAR_FLOAT16: *t = ncclFloat16; return 1;
	case DVAR_BFLOAT16: *t = ncclBfloat16; return 1;
	case DVAR_FLOAT32: *t = ncclFloat32; return 1;
	case DVAR_FLOAT64: *t = ncclFloat64; return 1;
	default: return 0;
	}
}

static ncclRedOp_t nccl_op(int reduce_op)
{
	return reduce_op == DVAR_REDUCE_MIN ? ncclMin : reduce_op == DVAR_REDUCE_MAX ? ncclMax
	                                                                            : ncclSum;
}
#endif

/* ncclAllReduce applies, by request, to this call. */
static int native(const dvar_strategy *s, int dtype)
{
#if DVAR_WITH_NCCL
	ncclDataType_t t;

	return (s->flags & DVAR_STRATEGY_NCCL_ALL_REDUCE) && nccl_type(dtype, &t);
#else
	(void)s, (void)dtype;
	return 0;
#endif
}

/* Elements per piece of the deterministic all-reduce: a multiple of G. */
static size_t piece_elems(size_t es, int G)
{
	size_t p = PIECE_BYTES / es;

	p -= p % (size_t)G;
	return p ? p : (size_t)G;
}

/* ---------------------------------------------------------------- prepare */

/*
 * What is reserved here stays valid until the data phase: only calls for
 * this local touch its scratch (cuda.c's staging in slot 1 included), and
 * between here and the data phase its thread only waits in enter(). The
 * data phase fetches the slots with bytes = 0, which returns a reserved
 * buffer unchanged.
 */
int dvar_cuda_coll_prepare(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	dvar_cuda *c = cuda_of(s);
	int g = dvar_cuda_group_of(c, r->local);
	int G = dvar_cuda_num_ranks(c);
	size_t es = dvar_dtype_size(a->sig.dtype);
	int rc;

	if ((rc = check(cudaStreamSynchronize(dvar_cuda_stream(c, r->local)),
	                "waiting for the replica's stream")) != DVAR_OK)
		return rc;
	if (dvar_cuda_leader(c, g) != r->local)
		return DVAR_OK;
	if (a->sig.kind == DVAR_COLL_ALL_REDUCE && G > 1 && !native(s, a->sig.dtype)) {
		size_t most = 0, piece = piece_elems(es, G), bytes;

		for (size_t i = 0; i < a->n; i++)
			if (a->counts[i] > most)
				most = a->counts[i];
		bytes = ((most < piece ? most : piece) + (size_t)G) * es;
		if (!dvar_cuda_scratch(c, r->local, 0, bytes) || !dvar_cuda_scratch(c, r->local, 1, bytes))
			return dvar_error_prefix("all_reduce");
	} else if (a->sig.kind == DVAR_COLL_ALL_GATHER) {
		/* Every replica's (local, rows) per rank (NCCL only), and a staging
		 * buffer as large as the destination when rows must be interleaved:
		 * one GPU in all stages too (dvar_cuda_coll_all_gather). */
		size_t table = 2 * (size_t)s->R * sizeof(int64_t) * ((size_t)G + 1);
		int interleaved = 0;

		for (int d = 0; d < a->sig.axis; d++)
			interleaved |= a->sig.dims[d] > 1;
		if ((G > 1 && !dvar_cuda_scratch(c, r->local, 1, table)) ||
		    (interleaved && !dvar_cuda_scratch(c, r->local, 0, a->dst_bytes ? a->dst_bytes : 1)))
			return dvar_error_prefix("all_gather");
	}
	return DVAR_OK;
}

/* ---------------------------------------------------------------- all_reduce */

#if DVAR_WITH_NCCL
/*
 * buf (count elements on every rank) becomes the rank-order reduction of
 * every rank's buf: reduce-scatter by sends and receives into T, dvar's
 * kernel over T's G rows, all-gather through P. Byte transfers, so every
 * dtype goes.
 */
static int allreduce_fixed_order(dvar_cuda *c, int g, cudaStream_t st, int dtype,
                                 dvar_kernel_op kop, char *buf, size_t count, char *T, char *P)
{
	ncclComm_t comm = dvar_cuda_comm(c, g);
	int G = dvar_cuda_num_ranks(c), me = dvar_cuda_rank(c, g);
	size_t es = dvar_dtype_size(dtype), piece = piece_elems(es, G);
	int rc = DVAR_OK;

	for (size_t lo = 0; lo < count && rc == DVAR_OK; lo += piece) {
		size_t n = count - lo < piece ? count - lo : piece;
		size_t seg = (n + (size_t)G - 1) / (size_t)G;
		size_t mine = (size_t)me * seg >= n ? 0 : (n - (size_t)me * seg < seg ? n - (size_t)me * seg : seg);
		char *x = buf + lo * es;

		if ((rc = ncheck(ncclGroupStart(), "all_reduce: ncclGroupStart")) != DVAR_OK)
			break;
		for (int h = 0; h < G && rc == DVAR_OK; h++) {
			size_t theirs = (size_t)h * seg >= n ? 0
			                : (n - (size_t)h * seg < seg ? n - (size_t)h * seg : seg);

			if (h == me)
				continue;
			if (theirs)
				rc = ncheck(ncclSend(x + (size_t)h * seg * es, theirs * es, ncclUint8, h, comm, st),
				            "all_reduce: ncclSend");
			if (rc == DVAR_OK && mine)
				rc = ncheck(ncclRecv(T + (size_t)h * seg * es, mine * es, ncclUint8, h, comm, st),
				            "all_reduce: ncclRecv");
		}
		if (rc == DVAR_OK)
			rc = ncheck(ncclGroupEnd(), "all_reduce: ncclGroupEnd");
		else
			ncclGroupEnd();
		if (rc == DVAR_OK && mine)
			rc = check(cudaMemcpyAsync(T + (size_t)me * seg * es, x + (size_t)me * seg * es,
			                           mine * es, cudaMemcpyDeviceToDevice, st),
			           "all_reduce: copying the own segment");
		if (rc == DVAR_OK && mine)
			rc = check(dvar_cuda_k_reduce_strided(st, dtype, kop, P + (size_t)me * seg * es, T, G,
			                                      seg, mine),
			           "all_reduce: reducing the segment");
		if (rc == DVAR_OK)
			rc = ncheck(ncclAllGather(P + (size_t)me * seg * es, P, seg * es, ncclUint8, comm, st),
			            "all_reduce: ncclAllGather");
		if (rc == DVAR_OK)
			rc = check(cudaMemcpyAsync(x, P, n * es, cudaMemcpyDeviceToDevice, st),
			           "all_reduce: copying the result");
	}
	return rc;
}
#endif

/* Buffer i of the call: the group's replicas combined into the leader's
 * dst, then across the ranks, then the result (divided for a MEAN) into
 * every replica's dst. With one GPU in all, one pass does everything. */
static int all_reduce_buffer(dvar_strategy *s, int g, const dvar_coll_args *a, size_t i,
                             cudaStream_t st)
{
	dvar_cuda *c = cuda_of(s);
	const int *members;
	int nm = dvar_cuda_members(c, g, &members);
	int leader = dvar_cuda_leader(c, g);
	int dtype = a->sig.dtype;
	size_t count = a->counts[i];
	char *dst = (char *)s->args[leader]->dst[i];
	dvar_kernel_op kop = dvar_kernel_op_of(a->sig.op);
	int64_t divisor = a->sig.op == DVAR_REDUCE_MEAN ? s->N : 0;
	const void *srcs[DVAR_MAX_REPLICAS];
	void *dsts[DVAR_MAX_REPLICAS];
	const void *result[1] = { dst };
	int rc;

	if (count == 0)
		return DVAR_OK;
	for (int k = 0; k < nm; k++) {
		srcs[k] = s->args[members[k]]->src[i];
		dsts[k] = s->args[members[k]]->dst[i];
	}
	if (dvar_cuda_num_ranks(c) == 1)
		return check(dvar_cuda_k_reduce_to(st, dtype, kop, dsts, nm, srcs, nm, count, divisor),
		             "all_reduce: reducing the replicas of the GPU");
	rc = check(dvar_cuda_k_reduce(st, dtype, kop, dst, srcs, nm, count),
	           "all_reduce: reducing the replicas of a GPU");
#if DVAR_WITH_NCCL
	if (rc == DVAR_OK) {
		ncclDataType_t t;

		if (native(s, dtype) && nccl_type(dtype, &t))
			rc = ncheck(ncclAllReduce(dst, dst, count, t, nccl_op(a->sig.op),
			                          dvar_cuda_comm(c, g), st),
			            "all_reduce: ncclAllReduce");
		else
			rc = allreduce_fixed_order(c, g, st, dtype, kop, dst, count,
			                           dvar_cuda_scratch(c, leader, 0, 0),
			                           dvar_cuda_scratch(c, leader, 1, 0));
	}
#else
	if (rc == DVAR_OK)
		rc = dvar_error_set(DVAR_ENOTSUPP, "all_reduce across GPUs needs NCCL");
#endif
	if (rc == DVAR_OK)
		rc = check(dvar_cuda_k_reduce_to(st, dtype, kop, dsts, nm, result, 1, count, divisor),
		           "all_reduce: the result to the replicas");
	return rc;
}

void dvar_cuda_coll_all_reduce(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	dvar_cuda *c = cuda_of(s);
	int g = dvar_cuda_group_of(c, r->local);
	cudaStream_t st = dvar_cuda_stream(c, r->local);
	int rc = DVAR_OK;

	if (dvar_cuda_leader(c, g) != r->local)
		return;
	/* The replica function may have made another GPU current; kernels
	 * launch only on a stream of the current device. */
	rc = dvar_cuda_bind(c, r->local);
	for (size_t i = 0; i < a->n && rc == DVAR_OK; i++)
		rc = all_reduce_buffer(s, g, a, i, st);
	if (rc == DVAR_OK)
		rc = check(cudaStreamSynchronize(st), "all_reduce");
	if (rc != DVAR_OK)
		fail_data(s);
}

/* ---------------------------------------------------------------- broadcast */

void dvar_cuda_coll_broadcast(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	dvar_cuda *c = cuda_of(s);
	int g = dvar_cuda_group_of(c, r->local);
	int leader = dvar_cuda_leader(c, g);
	int root = a->sig.root, root_worker = root / s->R, root_local = root % s->R;
	int root_group = dvar_cuda_group_of(c, root_local);
	size_t bytes = (size_t)a->sig.count * dvar_dtype_size(a->sig.dtype);
	cudaStream_t st = dvar_cuda_stream(c, r->local);
	const int *members;
	int nm = dvar_cuda_members(c, g, &members);
	const char *from = s->args[leader]->buf;
	int rc = DVAR_OK;

	if (leader != r->local)
		return;
	if ((rc = dvar_cuda_bind(c, r->local)) != DVAR_OK) {
		fail_data(s);
		return;
	}
	if (dvar_cuda_num_ranks(c) == 1) {
		/* One GPU in all: the root is one of this group's replicas. */
		from = s->args[root_local]->buf;
	} else {
#if DVAR_WITH_NCCL
		/* Ranks number the groups worker by worker; every worker has as
		 * many groups, and the same replicas share one. */
		int root_rank = root_worker * dvar_cuda_num_groups(c) + root_group;
		int is_root = root_worker == s->worker && root_group == g;
		const void *send = is_root ? s->args[root_local]->buf : s->args[leader]->buf;

		rc = ncheck(ncclBroadcast(send, s->args[leader]->buf, bytes, ncclUint8, root_rank,
		                          dvar_cuda_comm(c, g), st),
		            "broadcast: ncclBroadcast");
#else
		rc = dvar_error_set(DVAR_ENOTSUPP, "broadcast across GPUs needs NCCL");
#endif
	}
	for (int k = 0; k < nm && rc == DVAR_OK; k++) {
		void *d = s->args[members[k]]->buf;

		if (d != from)
			rc = check(cudaMemcpyAsync(d, from, bytes, cudaMemcpyDeviceToDevice, st),
			           "broadcast: copying to a replica");
	}
	if (rc == DVAR_OK)
		rc = check(cudaStreamSynchronize(st), "broadcast");
	if (rc != DVAR_OK)
		fail_data(s);
}

/* ---------------------------------------------------------------- all_gather */

/*
 * Where each replica's rows go: rows[id] and the first row off[id] along
 * the axis, by sync-group id. One worker with one GPU knows them all;
 * otherwise the ranks all-gather a table of (local, rows) per member.
 */
static int gather_plan(dvar_strategy *s, int g, cudaStream_t st, int64_t *rows, int64_t *off)
{
	dvar_cuda *c = cuda_of(s);
	int G = dvar_cuda_num_ranks(c), R = s->R;
	int rc = DVAR_OK;

	for (int id = 0; id < s->N; id++)
		rows[id] = 0;
	if (G == 1) {
		for (int j = 0; j < R; j++)
			rows[j] = s->args[j]->rows;
	} else {
#if DVAR_WITH_NCCL
		size_t per = 2 * (size_t)R;
		int64_t *table = malloc(per * ((size_t)G + 1) * sizeof *table);
		char *dev = dvar_cuda_scratch(c, dvar_cuda_leader(c, g), 1, 0);
		const int *members;
		int nm = dvar_cuda_members(c, g, &members);
		int me = dvar_cuda_rank(c, g);

		if (!table)
			return dvar_error_set(DVAR_ENOMEM, "all_gather: out of memory");
		for (size_t k = 0; k < per; k++)
			table[k] = -1;
		for (int k = 0; k < nm; k++) {
			table[2 * k] = members[k];
			table[2 * k + 1] = s->args[members[k]]->rows;
		}
		rc = check(cudaMemcpyAsync(dev + (size_t)me * per * sizeof *table, table,
		                           per * sizeof *table, cudaMemcpyHostToDevice, st),
		           "all_gather: the row table");
		if (rc == DVAR_OK)
			rc = ncheck(ncclAllGather(dev + (size_t)me * per * sizeof *table, dev,
			                          per * sizeof *table, ncclUint8, dvar_cuda_comm(c, g), st),
			            "all_gather: ncclAllGather of the row table");
		if (rc == DVAR_OK)
			rc = check(cudaMemcpyAsync(table, dev, per * (size_t)G * sizeof *table,
			                           cudaMemcpyDeviceToHost, st),
			           "all_gather: the row table");
		if (rc == DVAR_OK)
			rc = check(cudaStreamSynchronize(st), "all_gather: the row table");
		for (int q = 0; q < G && rc == DVAR_OK; q++) {
			int w = q / dvar_cuda_num_groups(c);

			for (int k = 0; k < R; k++) {
				int64_t local = table[(size_t)q * per + 2 * (size_t)k];

				if (local >= 0 && local < R)
					rows[w * R + local] = table[(size_t)q * per + 2 * (size_t)k + 1];
			}
		}
		free(table);
#else
		rc = dvar_error_set(DVAR_ENOTSUPP, "all_gather across GPUs needs NCCL");
#endif
	}
	off[0] = 0;
	for (int id = 0; id < s->N; id++)
		off[id + 1] = off[id] + rows[id];
	return rc;
}

void dvar_cuda_coll_all_gather(dvar_replica *r, const dvar_coll_args *a)
{
	dvar_strategy *s = r->s;
	dvar_cuda *c = cuda_of(s);
	int g = dvar_cuda_group_of(c, r->local);
	int leader = dvar_cuda_leader(c, g);
	cudaStream_t st = dvar_cuda_stream(c, r->local);
	size_t es = dvar_dtype_size(a->sig.dtype);
	uint64_t outer = 1, inner = 1, total = (uint64_t)s->gather_shape.dims[a->sig.axis];
	const int *members;
	int nm = dvar_cuda_members(c, g, &members);
	int64_t *rows = NULL, *off = NULL;
	char *dst, *stage;
	size_t result;
	int rc = DVAR_OK;

	if (leader != r->local)
		return;
	rc = dvar_cuda_bind(c, r->local);
	for (int d = 0; d < a->sig.axis; d++)
		outer *= (uint64_t)s->gather_shape.dims[d];
	for (int d = a->sig.axis + 1; d < s->gather_shape.rank; d++)
		inner *= (uint64_t)s->gather_shape.dims[d];
	result = (size_t)(outer * total * inner) * es;
	dst = s->args[leader]->gdst;
	/* Staged replica by replica (each one's tensor whole), then
	 * interleaved along the axis when rows are not outermost. */
	stage = outer > 1 ? dvar_cuda_scratch(c, leader, 0, 0) : dst;
	rows = malloc(((size_t)s->N + 1) * sizeof *rows);
	off = malloc(((size_t)s->N + 1) * sizeof *off);
	if (rc == DVAR_OK && (!rows || !off))
		rc = dvar_error_set(DVAR_ENOMEM, "all_gather: out of memory");
	if (rc == DVAR_OK && !stage) /* reserved by dvar_cuda_coll_prepare: not expected */
		rc = dvar_error_prefix("all_gather: staging");
	if (rc == DVAR_OK && result > 0)
		rc = gather_plan(s, g, st, rows, off);
	for (int k = 0; k < nm && rc == DVAR_OK && result > 0; k++) {
		int id = s->worker * s->R + members[k];
		size_t bytes = (size_t)(outer * (uint64_t)rows[id] * inner) * es;

		if (bytes)
			rc = check(cudaMemcpyAsync(stage + (size_t)(outer * (uint64_t)off[id] * inner) * es,
			                           s->args[members[k]]->gsrc, bytes,
			                           cudaMemcpyDeviceToDevice, st),
			           "all_gather: staging a replica's rows");
	}
#if DVAR_WITH_NCCL
	if (rc == DVAR_OK && result > 0 && dvar_cuda_num_ranks(c) > 1) {
		/* Every replica's tensor from its rank to all: one broadcast each,
		 * in sync-group order, in one NCCL group. */
		int groups = dvar_cuda_num_groups(c);

		rc = ncheck(ncclGroupStart(), "all_gather: ncclGroupStart");
		for (int id = 0; id < s->N && rc == DVAR_OK; id++) {
			size_t bytes = (size_t)(outer * (uint64_t)rows[id] * inner) * es;
			char *at = stage + (size_t)(outer * (uint64_t)off[id] * inner) * es;
			int root = (id / s->R) * groups + dvar_cuda_group_of(c, id % s->R);

			if (bytes)
				rc = ncheck(ncclBroadcast(at, at, bytes, ncclUint8, root, dvar_cuda_comm(c, g),
				                          st),
				            "all_gather: ncclBroadcast");
		}
		if (rc == DVAR_OK)
			rc = ncheck(ncclGroupEnd(), "all_gather: ncclGroupEnd");
		else
			ncclGroupEnd();
	}
#endif
	for (int id = 0; id < s->N && rc == DVAR_OK && stage != dst && result > 0; id++) {
		size_t width = (size_t)((uint64_t)rows[id] * inner) * es;

		if (width)
			rc = check(cudaMemcpy2DAsync(dst + (size_t)((uint64_t)off[id] * inner) * es,
			                             (size_t)(total * inner) * es,
			                             stage + (size_t)(outer * (uint64_t)off[id] * inner) * es,
			                             width, width, (size_t)outer, cudaMemcpyDeviceToDevice,
			                             st),
			           "all_gather: placing a replica's rows");
	}
	for (int k = 0; k < nm && rc == DVAR_OK && result > 0; k++) {
		char *d = s->args[members[k]]->gdst;

		if (d != dst)
			rc = check(cudaMemcpyAsync(d, dst, result, cudaMemcpyDeviceToDevice, st),
			           "all_gather: copying the result to a replica");
	}
	if (rc == DVAR_OK)
		rc = check(cudaStreamSynchronize(st), "all_gather");
	free(rows);
	free(off);
	if (rc != DVAR_OK)
		fail_data(s);
}
