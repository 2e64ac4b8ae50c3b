/*
 * tests/gpu/test_gpu.c - a CUDA strategy (DVAR_DEVICE_CUDA) against a CPU
 * strategy of the same topology, value by value (docs/RUNTIME.md, "Replicas
 * on GPUs"):
 *
 *  - placement: each replica's device and stream, and the stream contract
 *    (work the caller queued on the replica's stream is finished before a
 *    collective reads it);
 *  - collectives over device buffers: all_reduce for every numeric dtype
 *    and operator, sizes 1 to 2^20 + 3, in place and not, with NaNs,
 *    infinities, signed zeros, subnormals, overflow and integer extremes;
 *    all_reduce_n, broadcast from every root, all_gather along axes 0 and 1
 *    with uneven and empty parts. The CPU strategy runs the same calls on
 *    host buffers; dvar adds in the same order on both, so the results must
 *    be the same bytes. With DVAR_STRATEGY_NCCL_ALL_REDUCE floats are
 *    compared within a tolerance (NCCL's order), integers exactly;
 *  - refused calls (host and device buffers mixed, replicas passing
 *    different kinds) and the strategy staying usable after them;
 *  - distributed values: where components live, strategy reduce and gather,
 *    a component set again in place (from host, device and its own memory);
 *  - distributed variables of every synchronization: updates with device
 *    and host values, scatters, reads into host and device memory in both
 *    contexts, then dvar_save / dvar_save_async from the GPUs, checkpoints
 *    compared byte for byte with the CPU strategy's, and restores across
 *    devices and replica counts.
 *
 * Topologies: alone, one replica per visible GPU and three replicas sharing
 * GPU 0; under `mpirun -np W`, each worker on the GPU of its node-local rank
 * (modulo the node's GPUs), with one and with three replicas. Both keep
 * dvar's order of additions the same as the CPU strategy's (several GPUs
 * each shared by several replicas would not: their groups add first).
 * Workers that share a GPU, which NCCL cannot connect, exchange through
 * the host: on a machine with one GPU, `mpirun -np 2` tests that path.
 *
 * Without a GPU (or without a driver) the program prints one line saying
 * why and exits with 77, which CMake registers as "skipped".
 *
 * Replica functions must not call cmocka's asserts (they run on replica
 * threads): they note mismatches in a per-replica report, and the test
 * thread collects every mismatch of a test before it fails it, so that
 * workers under mpirun keep making the same collective calls.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda_runtime_api.h>

#include "testutil.h"
#include "unit/runtime/elements.h"
#include "dvar/dvar.h"
#include "dvar_features.h"

#define MAX_LOCAL 16
#define BIG ((size_t)(1u << 20) + 3) /* the largest count, elements */
#define PATH_BYTES 512

/* ---------------------------------------------------------------- the machine */

typedef struct {
	const char *name;
	int replicas; /* 0: one per GPU */
	int devs[1];
	int ndev;     /* 0: every visible GPU */
} topo;

static struct {
	int G;                      /* visible GPUs */
	int W, worker;              /* workers (MPI processes), this one */
	int local_rank, local_size; /* this worker among the workers of its node */
	dvar_strategy *host;        /* a CPU strategy, R = 1: shared folders, agreements */
	topo topos[2];
	int ntopos;
	char names[2][96];
} env;

/* ---------------------------------------------------------------- reports */

/* What one replica saw. */
typedef struct {
	int bad;
	char first[512];
} report;

static void note(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(report *r, const char *fmt, ...)
{
	va_list ap;

	if (r->bad++ == 0) {
		va_start(ap, fmt);
		vsnprintf(r->first, sizeof r->first, fmt, ap);
		va_end(ap);
	}
}

/* The test thread's mismatches for the running test: the first few are
 * printed, all are counted, and check_done fails the test. */
static struct {
	int bad;
} chk;

static void mismatch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void mismatch(const char *fmt, ...)
{
	va_list ap;

	if (chk.bad++ < 12) {
		fprintf(stderr, "[worker %d] mismatch: ", env.worker);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fprintf(stderr, "\n");
	}
}

static void take_reports(const report *reps, int R, const char *what)
{
	for (int l = 0; l < R; l++)
		if (reps[l].bad)
			mismatch("%s, local replica %d: %d problem(s), first: %s", what, l, reps[l].bad,
			         reps[l].first);
}

static void check_begin(const topo *t, const char *what)
{
	chk.bad = 0;
	print_message("%s, %s\n", what, t->name);
}

static void check_done(void)
{
	if (chk.bad)
		fail_msg("%d mismatch(es) between the GPU and the CPU strategy (first ones above)",
		         chk.bad);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "test_gpu: out of memory (%zu bytes)\n", n);
		abort();
	}
	return p;
}

#define CU(call, rep, what)                                                                      \
	do {                                                                                         \
		cudaError_t e_ = (call);                                                                 \
		if (e_ != cudaSuccess)                                                                   \
			note((rep), "%s: %s: %s", (what), cudaGetErrorName(e_), cudaGetErrorString(e_));     \
	} while (0)

/* On the test thread. */
#define CU_MAIN(call)                                                                            \
	do {                                                                                         \
		cudaError_t e_ = (call);                                                                 \
		if (e_ != cudaSuccess)                                                                   \
			fail_msg("%s: %s: %s", #call, cudaGetErrorName(e_), cudaGetErrorString(e_));        \
	} while (0)

/* ---------------------------------------------------------------- strategies */

static dvar_strategy *make_strategy(const topo *t, int cuda, int replicas, unsigned flags)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;
	int rc;

	o.replicas = replicas;
	if (cuda) {
		o.device = DVAR_DEVICE_CUDA;
		o.cuda_devices = t->ndev ? t->devs : NULL;
		o.num_cuda_devices = t->ndev;
		o.flags = flags;
	}
	rc = dvar_strategy_create(&s, &o);
	if (rc != DVAR_OK)
		fail_msg("%s strategy for %s, replicas %d: %s (%s)", cuda ? "CUDA" : "CPU", t->name,
		         replicas, dvar_error_last()->message, dvar_strerror(rc));
	if (dvar_strategy_local_replicas(s) > MAX_LOCAL)
		fail_msg("%d local replicas: the test handles at most %d", dvar_strategy_local_replicas(s),
		         MAX_LOCAL);
	return s;
}

/* The device the test thread uses for its own device buffers: the first of
 * the topology (cross-replica calls take device memory of any GPU). */
static int main_device(const topo *t)
{
	return t->ndev ? t->devs[0] : 0;
}

static int run_int_min(dvar_replica *ctx, void *arg)
{
	int64_t *v = arg;
	int64_t x = *v;
	int rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_MIN, DVAR_INT64, &x, &x, 1);

	if (rc == DVAR_OK)
		*v = x;
	return rc;
}

/* Collective over env.host: the smallest value of every worker's. */
static int64_t min_over_workers(int64_t v)
{
	if (dvar_strategy_run(env.host, run_int_min, &v) != DVAR_OK)
		return INT64_MIN;
	return v;
}

static int run_path(dvar_replica *ctx, void *arg)
{
	return dvar_replica_broadcast(ctx, 0, DVAR_UINT8, arg, PATH_BYTES);
}

/* Collective: a fresh folder that worker 0 makes (with gpu/ and cpu/ in it)
 * and every worker is told. */
static char *shared_dir(void)
{
	char *path = calloc(1, PATH_BYTES);

	assert_non_null(path);
	if (env.worker == 0) {
		char *d = tu_mkdtemp();
		char sub[PATH_BYTES + 8];

		snprintf(path, PATH_BYTES, "%s", d);
		free(d);
		snprintf(sub, sizeof sub, "%s/gpu", path);
		mkdir(sub, 0777);
		snprintf(sub, sizeof sub, "%s/cpu", path);
		mkdir(sub, 0777);
	}
	assert_int_equal(dvar_strategy_run(env.host, run_path, path), DVAR_OK);
	return path;
}

static void drop_shared_dir(char *dir)
{
	min_over_workers(0); /* everyone is done with it */
	if (env.worker == 0)
		tu_rmtree(dir);
	free(dir);
}

/* ---------------------------------------------------------------- element bits */

static double get_f64(int dt, const void *buf, size_t i)
{
	double d = 0;

	dvar_dtype_to_f64(&d, dt, (const unsigned char *)buf + i * dvar_dtype_size(dt), 1);
	return d;
}

/* The bits of x in a float dtype (narrow ones rounded to nearest even). */
static uint64_t float_bits(int dt, double x)
{
	switch (dt) {
	case DVAR_FLOAT16: return tu_f32_to_f16((float)x);
	case DVAR_BFLOAT16: return tu_f32_to_bf16((float)x);
	case DVAR_FLOAT32: {
		float f = (float)x;
		uint32_t u;

		memcpy(&u, &f, sizeof u);
		return u;
	}
	default: {
		uint64_t u;

		memcpy(&u, &x, sizeof u);
		return u;
	}
	}
}

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t s = a * 0x9e3779b97f4a7c15ull ^ (b + 1) * 0xc2b2ae3d27d4eb4full ^
	             (c + 7) * 0x165667b19e3779f9ull;

	return tu_rand(&s);
}

/* Special values of a float dtype, as bits. */
enum { SP_QNAN, SP_SNAN, SP_INF, SP_SUB, SP_BIG };

static uint64_t special_bits(int dt, int what, uint64_t payload, int negative)
{
	uint64_t v = 0, sign = 0;

	switch (dt) {
	case DVAR_FLOAT16:
		sign = 0x8000;
		v = what == SP_QNAN ? 0x7e00 | (payload & 0x1ff)
		  : what == SP_SNAN ? 0x7c01 | ((payload & 0xf) << 4)
		  : what == SP_INF ? 0x7c00
		  : what == SP_SUB ? 0x0001 + (payload & 0x3f)
		  : 0x7b53; /* 60000 */
		break;
	case DVAR_BFLOAT16:
		sign = 0x8000;
		v = what == SP_QNAN ? 0x7fc0 | (payload & 0x3f)
		  : what == SP_SNAN ? 0x7f81 | ((payload & 0x7) << 1)
		  : what == SP_INF ? 0x7f80
		  : what == SP_SUB ? 0x0001 + (payload & 0x3f)
		  : 0x7f7f;
		break;
	case DVAR_FLOAT32:
		sign = 0x80000000u;
		v = what == SP_QNAN ? 0x7fc00000u | (payload & 0xffff)
		  : what == SP_SNAN ? 0x7f800001u | ((payload & 0xff) << 8)
		  : what == SP_INF ? 0x7f800000u
		  : what == SP_SUB ? 0x00000001u + (payload & 0xfff)
		  : 0x7f7fffffu;
		break;
	case DVAR_FLOAT64:
		sign = 0x8000000000000000ull;
		v = what == SP_QNAN ? 0x7ff8000000000000ull | (payload & 0xffffff)
		  : what == SP_SNAN ? 0x7ff0000000000001ull | ((payload & 0xff) << 8)
		  : what == SP_INF ? 0x7ff0000000000000ull
		  : what == SP_SUB ? 0x0000000000000001ull + (payload & 0xfff)
		  : 0x7fefffffffffffffull;
		break;
	}
	return negative ? v | sign : v;
}

/*
 * Element i of global replica g's input (N replicas) for a case with salt,
 * as bits of dtype dt.
 *
 * Integers: the extremes (all ones, the signed maximum and minimum, zero)
 * at places that differ from replica to replica, random bits elsewhere, so
 * that sums wrap. Floats: random values with exponents over 2^-20..2^20
 * (wide) or 2^-4..2^6, so that sums round. With special, in every block of
 * 101 elements: a quiet NaN with a payload and a signalling NaN on one
 * replica each, +inf and -inf on one replica each, +inf on replica 0 and
 * -inf on replica N-1 (inf - inf), zeros of both signs, subnormals, and
 * values whose sum overflows. Two NaNs never meet in one element: which of
 * them a sum keeps is not specified (tests/unit/runtime/test_cuda_kernels.c).
 * Zeros of both signs only with one worker: MIN and MAX of -0 and +0 keep
 * the later operand, and across workers the CPU's ring adds half of the
 * segments in another order than the GPUs' rank order (runtime/comm.c).
 */
static uint64_t input_bits(int dt, uint64_t salt, int g, int N, size_t i, int special, int wide)
{
	uint64_t h = hash3(salt, (uint64_t)g, i);

	if (!elem_is_float(dt)) {
		int bits = (int)dvar_dtype_size(dt) * 8;
		uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;

		switch ((i + 3 * (size_t)g) % 8) {
		case 0: return mask;                          /* -1, or the unsigned maximum */
		case 1: return mask >> 1;                     /* the signed maximum */
		case 2: return (mask >> 1) + 1;               /* the signed minimum */
		case 3: return 0;
		default: return h & mask;
		}
	}
	if (special) {
		size_t m = i % 101, blk = i / 101;
		int neg = (int)(blk & 1);

		if (m == 7 && g == (int)(blk % (size_t)N))
			return special_bits(dt, SP_QNAN, i, neg);
		if (m == 19 && g == (int)((blk + 1) % (size_t)N))
			return special_bits(dt, SP_SNAN, i, neg);
		if (m == 31 && g == (int)(blk % (size_t)N))
			return special_bits(dt, SP_INF, 0, 0);
		if (m == 43 && g == (int)((blk + 1) % (size_t)N))
			return special_bits(dt, SP_INF, 0, 1);
		if (m == 59 && N > 1 && (g == 0 || g == N - 1))
			return special_bits(dt, SP_INF, 0, g != 0);
		if (m == 71 && env.W == 1)
			return float_bits(dt, (g & 1) ? 0.0 : -0.0);
		if (m == 83)
			return special_bits(dt, SP_SUB, (uint64_t)g + blk, g & 1);
		if (m == 97)
			return special_bits(dt, SP_BIG, 0, 0);
	}
	{
		double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
		int e = wide ? (int)((h & 63) % 41) - 20 : (int)((h & 15) % 11) - 4;

		return float_bits(dt, ldexp(u, e));
	}
}

static void fill(int dt, void *buf, size_t n, uint64_t salt, int g, int N, int special, int wide)
{
	for (size_t i = 0; i < n; i++)
		elem_put_bits(dt, buf, i, input_bits(dt, salt, g, N, i, special, wide));
}

/* The unit roundoff of a float dtype. */
static double eps_of(int dt)
{
	return dt == DVAR_FLOAT16 ? 0x1p-11 : dt == DVAR_BFLOAT16 ? 0x1p-8
	     : dt == DVAR_FLOAT32 ? 0x1p-24 : 0x1p-53;
}

static const char *op_name(int op)
{
	static const char *const names[] = { "SUM", "MEAN", "MIN", "MAX" };

	return op >= 0 && op < 4 ? names[op] : "?";
}

/* ---------------------------------------------------------------- the two sides */

enum { K_ALL_REDUCE, K_ALL_REDUCE_N, K_BROADCAST, K_GATHER };

typedef struct {
	int kind, dtype, op, in_place, special, wide, root, axis;
	size_t count;     /* elements; for K_GATHER the row unit */
	size_t counts[3]; /* K_ALL_REDUCE_N */
	int short_dst;    /* K_GATHER: the last replica's dst is one byte short */
	uint64_t salt;
} gcase;

/* A strategy, CPU or CUDA, with its buffers for the collective cases. */
typedef struct {
	dvar_strategy *s;
	int gpu, R, N;
	size_t cap;                      /* bytes of each buffer */
	unsigned char *hsrc[MAX_LOCAL];  /* host: the input pattern (and the CPU side's src) */
	unsigned char *hdst[MAX_LOCAL];  /* host: the CPU side's dst */
	void *dsrc[MAX_LOCAL], *ddst[MAX_LOCAL]; /* the GPU side's device buffers */
	unsigned char *out[MAX_LOCAL];   /* each replica's result, on the host */
	size_t out_bytes[MAX_LOCAL];
	int rc[MAX_LOCAL];
	char msg[MAX_LOCAL][256];
	dvar_shape shape[MAX_LOCAL];
	const gcase *c;
	report rep[MAX_LOCAL];
} side;

static int gpu_alloc_fn(dvar_replica *ctx, void *arg)
{
	side *sd = arg;
	int l = dvar_replica_local_id(ctx);

	CU(cudaSetDevice(dvar_replica_cuda_device(ctx)), &sd->rep[l], "cudaSetDevice");
	CU(cudaMalloc(&sd->dsrc[l], sd->cap), &sd->rep[l], "cudaMalloc");
	CU(cudaMalloc(&sd->ddst[l], sd->cap), &sd->rep[l], "cudaMalloc");
	return DVAR_OK;
}

static int gpu_free_fn(dvar_replica *ctx, void *arg)
{
	side *sd = arg;
	int l = dvar_replica_local_id(ctx);

	cudaFree(sd->dsrc[l]);
	cudaFree(sd->ddst[l]);
	return DVAR_OK;
}

static void side_open(side *sd, dvar_strategy *s, int gpu, size_t cap)
{
	memset(sd, 0, sizeof *sd);
	sd->s = s;
	sd->gpu = gpu;
	sd->R = dvar_strategy_local_replicas(s);
	sd->N = dvar_strategy_num_replicas_in_sync(s);
	sd->cap = cap;
	for (int l = 0; l < sd->R; l++) {
		sd->hsrc[l] = xmalloc(cap);
		sd->hdst[l] = xmalloc(cap);
		sd->out[l] = xmalloc(cap);
	}
	if (gpu) {
		assert_int_equal(dvar_strategy_run(s, gpu_alloc_fn, sd), DVAR_OK);
		take_reports(sd->rep, sd->R, "device buffers");
		check_done();
	}
}

static void side_close(side *sd)
{
	if (sd->gpu)
		dvar_strategy_run(sd->s, gpu_free_fn, sd);
	for (int l = 0; l < sd->R; l++) {
		free(sd->hsrc[l]);
		free(sd->hdst[l]);
		free(sd->out[l]);
	}
}

/* Rows of global replica g in a gather case: 2u, 0, u, 2u, 0, ... */
static size_t gather_rows(int g, size_t unit)
{
	return (size_t)((g + 2) % 3) * unit;
}

static size_t gather_inner(int axis)
{
	return axis == 0 ? 3 : 5;
}

/* ... and its source tensor's shape. */
static dvar_shape gather_shape(int axis, size_t rows)
{
	dvar_shape sh;

	memset(&sh, 0, sizeof sh);
	if (axis == 0) {
		sh.rank = 2;
		sh.dims[0] = (int64_t)rows;
		sh.dims[1] = 3;
	} else {
		sh.rank = 3;
		sh.dims[0] = 2;
		sh.dims[1] = (int64_t)rows;
		sh.dims[2] = 5;
	}
	return sh;
}

static size_t gather_total(int N, size_t unit)
{
	size_t t = 0;

	for (int h = 0; h < N; h++)
		t += gather_rows(h, unit);
	return t;
}

/* Where the case's buffers start in the replica's big buffer: all_reduce_n
 * gets three buffers with gaps between them. */
static size_t n_offset(const gcase *c, int b)
{
	size_t off = 0;

	for (int k = 0; k < b; k++)
		off += c->counts[k] + 17;
	return off;
}

/* Upload bytes of host memory to the replica's device buffer on its stream. */
static void upload(dvar_replica *ctx, report *rep, void *d, const void *h, size_t bytes)
{
	cudaStream_t st = (cudaStream_t)dvar_replica_cuda_stream(ctx);

	if (!bytes)
		return;
	CU(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, st), rep, "upload");
	CU(cudaStreamSynchronize(st), rep, "upload: cudaStreamSynchronize");
}

static void download(report *rep, void *h, const void *d, size_t bytes)
{
	if (bytes)
		CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), rep, "download");
}

/* Poison a destination, so that elements a collective leaves alone show. */
static void poison(dvar_replica *ctx, side *sd, int l, void *dst, size_t bytes)
{
	if (!bytes)
		return;
	if (sd->gpu) {
		cudaStream_t st = (cudaStream_t)dvar_replica_cuda_stream(ctx);

		CU(cudaMemsetAsync(dst, 0xee, bytes, st), &sd->rep[l], "poison");
		CU(cudaStreamSynchronize(st), &sd->rep[l], "poison: cudaStreamSynchronize");
	} else {
		memset(dst, 0xee, bytes);
	}
}

/* One collective case on every replica of sd: inputs from the pattern, the
 * call on host (CPU side) or device (GPU side) buffers, the result copied
 * into out[local]. */
static int case_fn(dvar_replica *ctx, void *arg)
{
	side *sd = arg;
	const gcase *c = sd->c;
	int l = dvar_replica_local_id(ctx), g = dvar_replica_id(ctx), N = sd->N;
	report *rep = &sd->rep[l];
	size_t es = dvar_dtype_size(c->dtype), in_n = 0, out_n = 0;
	unsigned char *hs = sd->hsrc[l];
	void *src = sd->gpu ? sd->dsrc[l] : (void *)sd->hsrc[l];
	void *dst = sd->gpu ? sd->ddst[l] : (void *)sd->hdst[l];
	int rc = DVAR_OK;

	memset(&sd->shape[l], 0, sizeof sd->shape[l]);
	switch (c->kind) {
	case K_ALL_REDUCE:
	case K_BROADCAST:
		in_n = out_n = c->count;
		break;
	case K_ALL_REDUCE_N:
		in_n = out_n = n_offset(c, 3);
		break;
	case K_GATHER:
		in_n = gather_rows(g, c->count) * gather_inner(c->axis) * (c->axis ? 2 : 1);
		out_n = gather_total(N, c->count) * gather_inner(c->axis) * (c->axis ? 2 : 1);
		break;
	}
	if ((in_n > out_n ? in_n : out_n) * es > sd->cap) {
		note(rep, "case too large for the buffers");
		sd->rc[l] = DVAR_ENOMEM;
		return DVAR_OK;
	}
	fill(c->dtype, hs, in_n, c->salt, g, N, c->special, c->wide);
	if (c->kind == K_ALL_REDUCE_N)
		/* the gaps between the buffers: the same on every replica, and
		 * nothing may write there */
		for (int b = 0; b < 3; b++)
			memset(hs + (n_offset(c, b) + c->counts[b]) * es, 0xab, 17 * es);
	if (c->in_place && c->kind != K_GATHER) {
		/* The input goes straight into dst, which is also the source. */
		if (sd->gpu)
			upload(ctx, rep, dst, hs, in_n * es);
		else
			memcpy(dst, hs, in_n * es);
		src = dst;
	} else {
		if (sd->gpu)
			upload(ctx, rep, src, hs, in_n * es);
		poison(ctx, sd, l, dst, out_n * es);
	}

	switch (c->kind) {
	case K_ALL_REDUCE:
		rc = dvar_replica_all_reduce(ctx, (dvar_reduce_op)c->op, c->dtype, src, dst, c->count);
		break;
	case K_ALL_REDUCE_N: {
		const void *srcs[3];
		void *dsts[3];

		for (int b = 0; b < 3; b++) {
			srcs[b] = (const char *)src + n_offset(c, b) * es;
			dsts[b] = (char *)dst + n_offset(c, b) * es;
		}
		rc = dvar_replica_all_reduce_n(ctx, (dvar_reduce_op)c->op, c->dtype, 3, srcs, dsts,
		                               c->counts);
		break;
	}
	case K_BROADCAST:
		/* in place by definition: the source is dst */
		if (!c->in_place) {
			if (sd->gpu)
				upload(ctx, rep, dst, hs, in_n * es);
			else
				memcpy(dst, hs, in_n * es);
		}
		rc = dvar_replica_broadcast(ctx, c->root, c->dtype, dst, c->count);
		break;
	case K_GATHER: {
		dvar_shape sh = gather_shape(c->axis, gather_rows(g, c->count));
		size_t cap = out_n * es;

		if (c->short_dst && g == N - 1 && cap > 0)
			cap--;
		rc = dvar_replica_all_gather(ctx, c->dtype, &sh, src, c->axis, dst, cap, &sd->shape[l]);
		break;
	}
	}
	sd->rc[l] = rc;
	snprintf(sd->msg[l], sizeof sd->msg[l], "%s", rc ? dvar_error_last()->message : "");
	sd->out_bytes[l] = rc == DVAR_OK ? out_n * es : 0;
	if (rc == DVAR_OK) {
		if (sd->gpu)
			download(rep, sd->out[l], dst, out_n * es);
		else
			memcpy(sd->out[l], dst, out_n * es);
	}
	return DVAR_OK;
}

static void run_case(side *sd, const gcase *c)
{
	int rc;

	sd->c = c;
	memset(sd->rep, 0, sizeof sd->rep);
	rc = dvar_strategy_run(sd->s, case_fn, sd);
	if (rc != DVAR_OK)
		mismatch("%s run: %s", sd->gpu ? "GPU" : "CPU", dvar_error_last()->message);
	take_reports(sd->rep, sd->R, sd->gpu ? "GPU side" : "CPU side");
}

static void describe(const gcase *c, char *buf, size_t cap)
{
	switch (c->kind) {
	case K_ALL_REDUCE:
		snprintf(buf, cap, "all_reduce %s %s count %zu %s%s", op_name(c->op),
		         dvar_dtype_name(c->dtype), c->count, c->in_place ? "in place" : "out of place",
		         c->special ? " (specials)" : "");
		break;
	case K_ALL_REDUCE_N:
		snprintf(buf, cap, "all_reduce_n %s %s counts {%zu, %zu, %zu} %s", op_name(c->op),
		         dvar_dtype_name(c->dtype), c->counts[0], c->counts[1], c->counts[2],
		         c->in_place ? "in place" : "out of place");
		break;
	case K_BROADCAST:
		snprintf(buf, cap, "broadcast %s count %zu root %d", dvar_dtype_name(c->dtype), c->count,
		         c->root);
		break;
	case K_GATHER:
		snprintf(buf, cap, "all_gather %s axis %d rows 2u,0,u,... u = %zu%s",
		         dvar_dtype_name(c->dtype), c->axis, c->count,
		         c->short_dst ? " (last dst one byte short)" : "");
		break;
	}
}

/* The element index of the first difference of two results, or -1. */
static long first_diff(int dt, const void *a, const void *b, size_t n)
{
	size_t es = dvar_dtype_size(dt);

	if (memcmp(a, b, n * es) == 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0)
			return (long)i;
	return -1;
}

/*
 * With NCCL's own all-reduce: is the GPU's element i within NCCL's rounding
 * of the CPU's? Sums may differ by the roundings of N additions in another
 * order: N * eps * sum |x| (a MEAN divides that by N); MIN and MAX are
 * exact. Zeros of both signs are equal here.
 */
static int within_tolerance(const gcase *c, int N, size_t i, double got, double want)
{
	double sumabs = 0, tol;

	if (got == want)
		return 1;
	if (c->op == DVAR_REDUCE_MIN || c->op == DVAR_REDUCE_MAX)
		return 0;
	for (int g = 0; g < N; g++) {
		unsigned char b[8];

		elem_put_bits(c->dtype, b, 0, input_bits(c->dtype, c->salt, g, N, i, 0, c->wide));
		sumabs += fabs(get_f64(c->dtype, b, 0));
	}
	tol = 2.0 * (N + 1) * eps_of(c->dtype) * sumabs;
	if (c->op == DVAR_REDUCE_MEAN)
		tol /= N;
	return fabs(got - want) <= tol;
}

/* The expected result of a broadcast or gather, computed here. */
static void expected_move(const gcase *c, int N, unsigned char *want, unsigned char *tmp)
{
	size_t es = dvar_dtype_size(c->dtype);

	if (c->kind == K_BROADCAST) {
		fill(c->dtype, want, c->count, c->salt, c->root, N, c->special, c->wide);
		return;
	}
	{
		size_t T = gather_total(N, c->count), inner = gather_inner(c->axis), off = 0;

		for (int h = 0; h < N; h++) {
			size_t rows = gather_rows(h, c->count);

			fill(c->dtype, tmp, rows * inner * (c->axis ? 2 : 1), c->salt, h, N, c->special,
			     c->wide);
			if (c->axis == 0) {
				memcpy(want + off * inner * es, tmp, rows * inner * es);
			} else {
				for (int a = 0; a < 2; a++)
					memcpy(want + ((size_t)a * T + off) * inner * es,
					       tmp + (size_t)a * rows * inner * es, rows * inner * es);
			}
			off += rows;
		}
	}
}

/* Compare the GPU side's results with the CPU side's (and, for moves,
 * with what they must be). nccl: floats within a tolerance. */
static void compare_case(const side *gs, const side *cs, const gcase *c, int nccl,
                         unsigned char *want, unsigned char *tmp)
{
	char what[160];
	int dt = c->dtype;
	size_t es = dvar_dtype_size(dt);

	describe(c, what, sizeof what);
	if (want && c->kind != K_ALL_REDUCE && c->kind != K_ALL_REDUCE_N && !c->short_dst)
		expected_move(c, cs->N, want, tmp);
	for (int l = 0; l < gs->R; l++) {
		size_t n = gs->out_bytes[l] / es;
		long d;

		if (gs->rc[l] != cs->rc[l]) {
			mismatch("%s, local %d: GPU returns %d (%s), CPU %d (%s)", what, l, gs->rc[l],
			         gs->msg[l], cs->rc[l], cs->msg[l]);
			continue;
		}
		if (c->kind == K_GATHER && !dvar_shape_equal(&gs->shape[l], &cs->shape[l])) {
			char a[96], b[96];

			dvar_shape_format(&gs->shape[l], a, sizeof a);
			dvar_shape_format(&cs->shape[l], b, sizeof b);
			mismatch("%s, local %d: out_shape %s on the GPU, %s on the CPU", what, l, a, b);
		}
		if (gs->rc[l] != DVAR_OK)
			continue;
		if (gs->out_bytes[l] != cs->out_bytes[l]) {
			mismatch("%s, local %d: %zu result bytes on the GPU, %zu on the CPU", what, l,
			         gs->out_bytes[l], cs->out_bytes[l]);
			continue;
		}
		if (want && c->kind != K_ALL_REDUCE && c->kind != K_ALL_REDUCE_N &&
		    (d = first_diff(dt, cs->out[l], want, n)) >= 0)
			mismatch("%s, local %d: the CPU strategy's element %ld is 0x%llx, expected 0x%llx",
			         what, l, d,
			         (unsigned long long)elem_get_bits(dt, cs->out[l], (size_t)d),
			         (unsigned long long)elem_get_bits(dt, want, (size_t)d));
		d = first_diff(dt, gs->out[l], cs->out[l], n);
		if (d < 0)
			continue;
		if (nccl && elem_is_float(dt) &&
		    (c->kind == K_ALL_REDUCE || c->kind == K_ALL_REDUCE_N)) {
			/* NCCL's order: look at every element, within tolerance. */
			size_t bad = 0, first = 0;

			for (size_t i = (size_t)d; i < n; i++) {
				double a = get_f64(dt, gs->out[l], i), b = get_f64(dt, cs->out[l], i);

				if (!within_tolerance(c, gs->N, i, a, b) && bad++ == 0)
					first = i;
			}
			if (bad)
				mismatch("%s with ncclAllReduce, local %d: %zu element(s) beyond NCCL's "
				         "rounding, first %zu: GPU %.17g, CPU %.17g",
				         what, l, bad, first, get_f64(dt, gs->out[l], first),
				         get_f64(dt, cs->out[l], first));
			continue;
		}
		if (c->kind == K_ALL_REDUCE_N) {
			int b = 0;

			while (b < 2 && (size_t)d >= n_offset(c, b + 1))
				b++;
			mismatch("%s, local %d: buffer %d element %zu: GPU 0x%llx, CPU 0x%llx", what, l, b,
			         (size_t)d - n_offset(c, b),
			         (unsigned long long)elem_get_bits(dt, gs->out[l], (size_t)d),
			         (unsigned long long)elem_get_bits(dt, cs->out[l], (size_t)d));
		} else {
			mismatch("%s, local %d: element %ld: GPU 0x%llx (%.9g), CPU 0x%llx (%.9g)", what, l,
			         d, (unsigned long long)elem_get_bits(dt, gs->out[l], (size_t)d),
			         get_f64(dt, gs->out[l], (size_t)d),
			         (unsigned long long)elem_get_bits(dt, cs->out[l], (size_t)d),
			         get_f64(dt, cs->out[l], (size_t)d));
		}
	}
	/* Every replica of the GPU side holds the same bytes. */
	if (c->kind != K_GATHER || !c->short_dst)
		for (int l = 1; l < gs->R; l++)
			if (gs->rc[l] == DVAR_OK && gs->rc[0] == DVAR_OK &&
			    (gs->out_bytes[l] != gs->out_bytes[0] ||
			     memcmp(gs->out[l], gs->out[0], gs->out_bytes[0]) != 0))
				mismatch("%s: GPU replicas 0 and %d hold different results", what, l);
}

static void run_and_compare(side *gs, side *cs, const gcase *c, int nccl, unsigned char *want,
                            unsigned char *tmp)
{
	run_case(cs, c);
	run_case(gs, c);
	compare_case(gs, cs, c, nccl, want, tmp);
}

/* ---------------------------------------------------------------- placement and streams */

typedef struct {
	int R;
	int dev[MAX_LOCAL];
	void *stream[MAX_LOCAL];
	int cpu_dev[MAX_LOCAL];
	void *cpu_stream[MAX_LOCAL];
	void *buf[MAX_LOCAL];
	report rep[MAX_LOCAL];
} place;

static int where_fn(dvar_replica *ctx, void *arg)
{
	place *p = arg;
	int l = dvar_replica_local_id(ctx);
	int cur = -1;

	p->dev[l] = dvar_replica_cuda_device(ctx);
	p->stream[l] = dvar_replica_cuda_stream(ctx);
	/* The replica thread is bound to its GPU already (cuda.h says so;
	 * docs/RUNTIME.md does not promise it, so this is only reported). */
	if (cudaGetDevice(&cur) == cudaSuccess && cur != p->dev[l])
		fprintf(stderr, "note: replica %d's thread has device %d current, not its GPU %d\n",
		        dvar_replica_id(ctx), cur, p->dev[l]);
	return DVAR_OK;
}

static int where_cpu_fn(dvar_replica *ctx, void *arg)
{
	place *p = arg;
	int l = dvar_replica_local_id(ctx);

	p->cpu_dev[l] = dvar_replica_cuda_device(ctx);
	p->cpu_stream[l] = dvar_replica_cuda_stream(ctx);
	return DVAR_OK;
}

#define ORDER_COUNT ((size_t)64 << 20) /* uint8: 64 MiB, a memset that takes a while */

/* Queue a memset on the replica's stream and all_reduce at once, without
 * synchronizing: dvar must wait for the stream before it reads. */
static int order_fn(dvar_replica *ctx, void *arg)
{
	place *p = arg;
	int l = dvar_replica_local_id(ctx), g = dvar_replica_id(ctx), N = dvar_replica_num_replicas(ctx);
	cudaStream_t st = (cudaStream_t)dvar_replica_cuda_stream(ctx);
	unsigned char *host = xmalloc(ORDER_COUNT);
	int rc;

	for (int round = 0; round < 3; round++) {
		unsigned want = 0;

		for (int h = 0; h < N; h++)
			want += (unsigned)(h + 1 + round * 40) & 0xff;
		want &= 0xff;
		CU(cudaMemsetAsync(p->buf[l], (g + 1 + round * 40) & 0xff, ORDER_COUNT, st), &p->rep[l],
		   "cudaMemsetAsync");
		rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_UINT8, p->buf[l], p->buf[l],
		                             ORDER_COUNT);
		if (rc != DVAR_OK) {
			note(&p->rep[l], "all_reduce after a queued memset: %s", dvar_error_last()->message);
			break;
		}
		CU(cudaMemcpy(host, p->buf[l], ORDER_COUNT, cudaMemcpyDeviceToHost), &p->rep[l],
		   "download");
		for (size_t i = 0; i < ORDER_COUNT; i += 4093)
			if (host[i] != want) {
				note(&p->rep[l], "round %d element %zu is %u, expected %u: the collective read "
				     "the buffer before the memset queued on the replica's stream finished",
				     round, i, host[i], want);
				break;
			}
		if (host[ORDER_COUNT - 1] != want)
			note(&p->rep[l], "round %d: the last element is %u, expected %u", round,
			     host[ORDER_COUNT - 1], want);
	}
	free(host);
	return DVAR_OK;
}

static int order_alloc_fn(dvar_replica *ctx, void *arg)
{
	place *p = arg;
	int l = dvar_replica_local_id(ctx);

	CU(cudaMalloc(&p->buf[l], ORDER_COUNT), &p->rep[l], "cudaMalloc");
	return DVAR_OK;
}

static int order_free_fn(dvar_replica *ctx, void *arg)
{
	place *p = arg;

	cudaFree(p->buf[dvar_replica_local_id(ctx)]);
	return DVAR_OK;
}

static void test_gpu__placement(void **state)
{
	const topo *t = *state;
	dvar_strategy *gpu, *cpu;
	place p;
	int R;

	check_begin(t, "placement and streams");
	gpu = make_strategy(t, 1, t->replicas, 0);
	R = dvar_strategy_local_replicas(gpu);
	cpu = make_strategy(t, 0, R, 0);
	memset(&p, 0, sizeof p);
	p.R = R;
	if (t->replicas == 0 && R != env.G)
		mismatch("replicas = 0 made %d replicas on %d GPUs, expected one per GPU", R, env.G);
	assert_int_equal(dvar_strategy_run(gpu, where_fn, &p), DVAR_OK);
	assert_int_equal(dvar_strategy_run(cpu, where_cpu_fn, &p), DVAR_OK);
	for (int l = 0; l < R; l++) {
		/* local i on cuda_devices[i % n], every visible GPU when NULL */
		int want = t->ndev ? t->devs[l % t->ndev] : l % env.G;

		if (p.dev[l] != want)
			mismatch("local replica %d runs on GPU %d, expected %d", l, p.dev[l], want);
		if (!p.stream[l])
			mismatch("local replica %d has no CUDA stream", l);
		for (int k = 0; k < l; k++)
			if (p.stream[k] == p.stream[l])
				mismatch("local replicas %d and %d share a stream", k, l);
		if (p.cpu_dev[l] != -1 || p.cpu_stream[l] != NULL)
			mismatch("a CPU strategy's replica %d reports device %d, stream %p", l,
			         p.cpu_dev[l], p.cpu_stream[l]);
	}
	take_reports(p.rep, R, "placement");
	memset(p.rep, 0, sizeof p.rep);
	assert_int_equal(dvar_strategy_run(gpu, order_alloc_fn, &p), DVAR_OK);
	assert_int_equal(dvar_strategy_run(gpu, order_fn, &p), DVAR_OK);
	dvar_strategy_run(gpu, order_free_fn, &p);
	take_reports(p.rep, R, "stream order");
	dvar_strategy_free(cpu);
	dvar_strategy_free(gpu);
	check_done();
}

/* ---------------------------------------------------------------- collectives */

static const int all_dtypes[] = { DVAR_FLOAT16, DVAR_BFLOAT16, DVAR_FLOAT32, DVAR_FLOAT64,
                                  DVAR_INT32,   DVAR_INT64,    DVAR_INT8,    DVAR_UINT8,
                                  DVAR_INT16,   DVAR_UINT16,   DVAR_UINT32,  DVAR_UINT64 };
#define NDTYPES (int)(sizeof all_dtypes / sizeof all_dtypes[0])
static const size_t sizes[] = { 1, 3, 1000, 4097, BIG };
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

/* Every collective on device buffers, next to the CPU strategy. */
static void collectives(const topo *t, unsigned flags)
{
	int nccl = (flags & DVAR_STRATEGY_NCCL_ALL_REDUCE) != 0;
	size_t cap = (BIG + 64) * 8;
	dvar_strategy *g = make_strategy(t, 1, t->replicas, flags);
	dvar_strategy *c = make_strategy(t, 0, dvar_strategy_local_replicas(g), 0);
	unsigned char *want = xmalloc(cap), *tmp = xmalloc(cap);
	side gs, cs;
	gcase k;
	uint64_t salt = 1;
	int N;

	side_open(&gs, g, 1, cap);
	side_open(&cs, c, 0, cap);
	N = gs.N;

	/* all_reduce: every dtype, operator and size, in place and not. */
	for (int d = 0; d < NDTYPES; d++)
		for (int op = DVAR_REDUCE_SUM; op <= DVAR_REDUCE_MAX; op++)
			for (int z = 0; z < NSIZES; z++)
				for (int ip = 0; ip < 2; ip++) {
					memset(&k, 0, sizeof k);
					k.kind = K_ALL_REDUCE;
					k.dtype = all_dtypes[d];
					k.op = op;
					k.count = sizes[z];
					k.in_place = ip;
					/* NCCL's NaN and overflow rules are its own: plain values there. */
					k.special = !nccl && sizes[z] >= 1000;
					k.wide = !nccl;
					k.salt = salt++;
					run_and_compare(&gs, &cs, &k, nccl, NULL, NULL);
				}

	/* all_reduce_n: three buffers of odd sizes in one call (one of them
	 * empty); uint16 is one NCCL lacks. */
	{
		static const int dts[] = { DVAR_FLOAT32, DVAR_FLOAT16, DVAR_INT64, DVAR_UINT16 };
		static const size_t sets[2][3] = { { 1, 4097, 1001 }, { 3, 0, BIG - 200 } };

		for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
			for (int op = DVAR_REDUCE_SUM; op <= DVAR_REDUCE_MAX; op++)
				for (int s = 0; s < 2; s++) {
					memset(&k, 0, sizeof k);
					k.kind = K_ALL_REDUCE_N;
					k.dtype = dts[d];
					k.op = op;
					k.in_place = s;
					memcpy(k.counts, sets[s], sizeof k.counts);
					k.wide = !nccl;
					k.salt = salt++;
					run_and_compare(&gs, &cs, &k, nccl, NULL, NULL);
				}
	}

	/* broadcast from every root */
	{
		static const int dts[] = { DVAR_UINT8, DVAR_BFLOAT16, DVAR_FLOAT32, DVAR_FLOAT64,
		                           DVAR_INT64 };
		static const size_t counts[] = { 1, 4097, BIG };

		for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
			for (size_t z = 0; z < sizeof counts / sizeof counts[0]; z++)
				for (int root = 0; root < N; root++) {
					memset(&k, 0, sizeof k);
					k.kind = K_BROADCAST;
					k.dtype = dts[d];
					k.count = counts[z];
					k.root = root;
					k.in_place = 1;
					k.special = elem_is_float(dts[d]);
					k.wide = 1;
					k.salt = salt++;
					run_and_compare(&gs, &cs, &k, nccl, want, tmp);
				}
	}

	/* all_gather along axes 0 and 1, rows 2u, 0, u, ... per replica; and
	 * once with the last replica's destination one byte short (DVAR_ESHAPE
	 * everywhere, out_shape set). */
	{
		static const int dts[] = { DVAR_FLOAT32, DVAR_FLOAT16, DVAR_INT64, DVAR_UINT8 };
		static const size_t units[] = { 1, 1000 };

		for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
			for (int axis = 0; axis < 2; axis++)
				for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
					for (int shrt = 0; shrt < 2; shrt++) {
						memset(&k, 0, sizeof k);
						k.kind = K_GATHER;
						k.dtype = dts[d];
						k.axis = axis;
						k.count = units[u];
						k.short_dst = shrt;
						k.special = elem_is_float(dts[d]);
						k.wide = 1;
						k.salt = salt++;
						run_and_compare(&gs, &cs, &k, nccl, want, tmp);
						if (shrt && gs.rc[0] != DVAR_ESHAPE)
							mismatch("all_gather into a short destination returned %d on the "
							         "GPU, expected DVAR_ESHAPE",
							         gs.rc[0]);
					}
	}

	side_close(&gs);
	side_close(&cs);
	free(want);
	free(tmp);
	dvar_strategy_free(g);
	dvar_strategy_free(c);
}

static void test_gpu__collectives(void **state)
{
	const topo *t = *state;

	check_begin(t, "collectives in dvar's fixed order");
	collectives(t, 0);
	check_done();
}

static void test_gpu__collectives_nccl(void **state)
{
	const topo *t = *state;

	check_begin(t, "collectives with DVAR_STRATEGY_NCCL_ALL_REDUCE");
	collectives(t, DVAR_STRATEGY_NCCL_ALL_REDUCE);
	check_done();
}

/* ---------------------------------------------------------------- refused calls */

typedef struct {
	void *d[MAX_LOCAL][2];
	float h[MAX_LOCAL][2][64];
	int rc[MAX_LOCAL][8];
	char msg[MAX_LOCAL][256];
	int stage;
	report rep[MAX_LOCAL];
} errs;

static int err_alloc_fn(dvar_replica *ctx, void *arg)
{
	errs *e = arg;
	int l = dvar_replica_local_id(ctx);

	CU(cudaMalloc(&e->d[l][0], 64 * sizeof(float)), &e->rep[l], "cudaMalloc");
	CU(cudaMalloc(&e->d[l][1], 64 * sizeof(float)), &e->rep[l], "cudaMalloc");
	return DVAR_OK;
}

static int err_free_fn(dvar_replica *ctx, void *arg)
{
	errs *e = arg;
	int l = dvar_replica_local_id(ctx);

	cudaFree(e->d[l][0]);
	cudaFree(e->d[l][1]);
	return DVAR_OK;
}

/* A device all_reduce of 64 floats, each replica's id + 1: does it give
 * N(N+1)/2 everywhere? */
static int check_sum(dvar_replica *ctx, errs *e, int l, int slot)
{
	int g = dvar_replica_id(ctx), N = dvar_replica_num_replicas(ctx);
	float host[64];
	int rc;

	for (int i = 0; i < 64; i++)
		host[i] = (float)(g + 1);
	upload(ctx, &e->rep[l], e->d[l][0], host, sizeof host);
	rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, e->d[l][0], e->d[l][1], 64);
	e->rc[l][slot] = rc;
	if (rc != DVAR_OK) {
		note(&e->rep[l], "the all_reduce after the refused call: %s", dvar_error_last()->message);
		return rc;
	}
	download(&e->rep[l], host, e->d[l][1], sizeof host);
	for (int i = 0; i < 64; i++)
		if (host[i] != (float)N * (float)(N + 1) / 2.0f) {
			note(&e->rep[l], "after the refused call the sum is %g, expected %g", host[i],
			     (double)N * (N + 1) / 2.0);
			break;
		}
	return DVAR_OK;
}

static int err_fn(dvar_replica *ctx, void *arg)
{
	errs *e = arg;
	int l = dvar_replica_local_id(ctx), g = dvar_replica_id(ctx);
	int rc;

	switch (e->stage) {
	case 0:
		/* Replica 0 mixes a host source with a device destination; the
		 * others pass device buffers. */
		rc = g == 0 ? dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, e->h[l][0],
		                                      e->d[l][1], 64)
		            : dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, e->d[l][0],
		                                      e->d[l][1], 64);
		e->rc[l][0] = rc;
		snprintf(e->msg[l], sizeof e->msg[l], "%s", dvar_error_last()->message);
		/* The run goes on. */
		check_sum(ctx, e, l, 1);
		/* all_reduce_n with one host and one device buffer, on every replica. */
		{
			const void *srcs[2] = { e->h[l][0], e->d[l][0] };
			void *dsts[2] = { e->h[l][1], e->d[l][1] };
			size_t counts[2] = { 64, 64 };

			e->rc[l][2] = dvar_replica_all_reduce_n(ctx, DVAR_REDUCE_MAX, DVAR_FLOAT32, 2, srcs,
			                                        dsts, counts);
		}
		/* broadcast and all_gather with mixed buffers on the last replica */
		{
			int last = g == dvar_replica_num_replicas(ctx) - 1;
			dvar_shape sh = { 1, { 4 } };

			e->rc[l][3] = dvar_replica_broadcast(ctx, 0, DVAR_FLOAT32, e->d[l][0], 64);
			e->rc[l][4] = dvar_replica_all_gather(ctx, DVAR_FLOAT32, &sh,
			                                      last ? (void *)e->h[l][0] : e->d[l][0], 0,
			                                      e->d[l][1], 64 * sizeof(float), NULL);
		}
		check_sum(ctx, e, l, 5);
		return DVAR_OK;
	case 1:
		/* Replica 0 passes host buffers, the others device buffers: each
		 * call is fine alone, but they are not the same call. */
		rc = g == 0 ? dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, e->h[l][0],
		                                      e->h[l][1], 64)
		            : dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, e->d[l][0],
		                                      e->d[l][1], 64);
		e->rc[l][0] = rc;
		snprintf(e->msg[l], sizeof e->msg[l], "%s", dvar_error_last()->message);
		return DVAR_OK;
	default:
		check_sum(ctx, e, l, 1);
		return DVAR_OK;
	}
}

static void test_gpu__errors(void **state)
{
	const topo *t = *state;
	dvar_strategy *s;
	errs e;
	int R, N, rc;

	check_begin(t, "refused calls");
	s = make_strategy(t, 1, t->replicas, 0);
	R = dvar_strategy_local_replicas(s);
	N = dvar_strategy_num_replicas_in_sync(s);
	memset(&e, 0, sizeof e);
	assert_int_equal(dvar_strategy_run(s, err_alloc_fn, &e), DVAR_OK);

	/* Mixed kinds on one replica: DVAR_EINVAL there, DVAR_ECOMM (or the
	 * same EINVAL) on the others, and the run goes on. */
	e.stage = 0;
	rc = dvar_strategy_run(s, err_fn, &e);
	if (rc != DVAR_OK)
		mismatch("a run whose replicas saw refused calls returned %d: %s", rc,
		         dvar_error_last()->message);
	for (int l = 0; l < R; l++) {
		int g = env.worker * R + l;

		if (g == 0 && e.rc[l][0] != DVAR_EINVAL)
			mismatch("host src + device dst on replica 0: %d (%s), expected DVAR_EINVAL",
			         e.rc[l][0], e.msg[l]);
		if (g == 0 && !strstr(e.msg[l], "device memory"))
			mismatch("the refusal does not say why: \"%s\"", e.msg[l]);
		if (g != 0 && e.rc[l][0] != DVAR_ECOMM && e.rc[l][0] != DVAR_EINVAL)
			mismatch("replica %d, whose buffers were fine: %d (%s), expected DVAR_ECOMM", g,
			         e.rc[l][0], e.msg[l]);
		if (e.rc[l][2] != DVAR_EINVAL)
			mismatch("all_reduce_n of a host and a device buffer: %d on replica %d, expected "
			         "DVAR_EINVAL",
			         e.rc[l][2], g);
		if (e.rc[l][3] != DVAR_OK)
			mismatch("a plain device broadcast between the refused calls: %d on replica %d",
			         e.rc[l][3], g);
		if (e.rc[l][4] == DVAR_OK)
			mismatch("all_gather with a host src and device dst on the last replica succeeded "
			         "on replica %d",
			         g);
		if (e.rc[l][1] != DVAR_OK || e.rc[l][5] != DVAR_OK)
			mismatch("replica %d: all_reduce after a refused call: %d, %d", g, e.rc[l][1],
			         e.rc[l][5]);
	}
	take_reports(e.rep, R, "mixed buffers");

	/* Replicas passing different kinds: the call fails everywhere. */
	if (N > 1) {
		memset(e.rc, 0, sizeof e.rc);
		e.stage = 1;
		rc = dvar_strategy_run(s, err_fn, &e);
		for (int l = 0; l < R; l++)
			if (e.rc[l][0] == DVAR_OK)
				mismatch("replica %d: an all_reduce where replica 0 passed host buffers and "
				         "the others device buffers succeeded",
				         env.worker * R + l);
		if (rc == DVAR_OK)
			print_message("  (the run itself returned DVAR_OK after the kind mismatch)\n");
	}
	/* And the strategy is still usable. */
	memset(e.rep, 0, sizeof e.rep);
	e.stage = 2;
	rc = dvar_strategy_run(s, err_fn, &e);
	if (rc != DVAR_OK)
		mismatch("the next run after the refused calls failed: %s", dvar_error_last()->message);
	take_reports(e.rep, R, "after the refused calls");
	dvar_strategy_run(s, err_free_fn, &e);
	dvar_strategy_free(s);
	check_done();
}

/* ---------------------------------------------------------------- distributed values */

#define VAL_COLS 7

typedef struct {
	int dtype, ragged;
	uint64_t salt;
} vspec;

static int64_t value_rows(int replica_id, int ragged)
{
	return ragged ? (int64_t)((replica_id + 2) % 3) : 5;
}

static int value_fn(dvar_values *v, int local, int replica_id, int num_replicas, void *arg)
{
	const vspec *sp = arg;
	dvar_shape sh = { 2, { value_rows(replica_id, sp->ragged), VAL_COLS } };
	size_t n = (size_t)sh.dims[0] * VAL_COLS;
	unsigned char *buf = xmalloc(n * 8 + 8);
	int rc;

	fill(sp->dtype, buf, n, sp->salt, replica_id, num_replicas, 0, 0);
	rc = dvar_values_set(v, local, &sh, buf);
	free(buf);
	return rc;
}

/* Reduce and gather one value on strategy s; every result appended to out
 * (the GPU side also reduces into device memory). Returns bytes written. */
static size_t values_results(dvar_strategy *s, int gpu, const topo *t, const vspec *sp,
                             unsigned char *out, void *dev)
{
	dvar_values *v = NULL;
	size_t n = 0, cap = 4096;
	int rc;

	rc = dvar_values_from_function(&v, s, sp->dtype, value_fn, (void *)sp);
	if (rc != DVAR_OK) {
		mismatch("dvar_values_from_function on the %s: %s", gpu ? "GPU" : "CPU",
		         dvar_error_last()->message);
		return 0;
	}
	for (int l = 0; l < dvar_strategy_local_replicas(s); l++) {
		dvar_shape sh;
		const void *data = NULL;
		struct cudaPointerAttributes at;

		if (dvar_values_get(v, l, &sh, &data) != DVAR_OK) {
			mismatch("dvar_values_get %d: %s", l, dvar_error_last()->message);
			continue;
		}
		memset(&at, 0, sizeof at);
		if (data && sh.dims[0] > 0) {
			cudaError_t e = cudaPointerGetAttributes(&at, data);
			int on_device = e == cudaSuccess && at.type == cudaMemoryTypeDevice;

			(void)cudaGetLastError();
			if (on_device != gpu)
				mismatch("the %s strategy's component %d lives in %s memory", gpu ? "GPU" : "CPU",
				         l, on_device ? "device" : "host");
		}
	}
	for (int op = DVAR_REDUCE_SUM; op <= DVAR_REDUCE_MAX; op++) {
		static const int axes[2] = { DVAR_AXIS_NONE, 0 };

		for (int a = sp->ragged ? 1 : 0; a < 2; a++) {
			int axis = axes[a];
			dvar_shape osh;
			int rr;

			memset(&osh, 0, sizeof osh);
			memset(out + n, 0xee, cap + 8);
			rr = dvar_strategy_reduce(s, (dvar_reduce_op)op, v, axis, out + n + 8, cap, &osh);
			memcpy(out + n, &rr, sizeof rr);
			n += cap + 8;
			if (gpu && dev) {
				/* into device memory: the same bytes */
				unsigned char *again = xmalloc(cap);

				CU_MAIN(cudaSetDevice(main_device(t)));
				CU_MAIN(cudaMemset(dev, 0xee, cap));
				/* Asynchronous on the default stream, which dvar's
				 * streams do not wait for. */
				CU_MAIN(cudaDeviceSynchronize());
				rr = dvar_strategy_reduce(s, (dvar_reduce_op)op, v, axis, dev, cap, NULL);
				CU_MAIN(cudaMemcpy(again, dev, cap, cudaMemcpyDeviceToHost));
				if (memcmp(again, out + n - cap, cap) != 0 || rr != *(int *)(out + n - cap - 8))
					mismatch("%s reduce %s axis %d into device memory differs from the same "
					         "into host memory (%d)",
					         dvar_dtype_name(sp->dtype), op_name(op), axis, rr);
				free(again);
			}
		}
	}
	{
		dvar_shape osh;
		int rr;

		memset(out + n, 0xee, cap * 4 + 8);
		rr = dvar_strategy_gather(s, v, 0, out + n + 8, cap * 4, &osh);
		memcpy(out + n, &rr, sizeof rr);
		n += cap * 4 + 8;
	}
	dvar_values_free(v);
	return n;
}

/* A component set again with the same size is overwritten in its device
 * buffer, from host memory, from device memory and from itself; another
 * size gets a new buffer. */
static void values_set_again(dvar_strategy *g, const topo *t)
{
	enum { N = 1000 };
	static float a[N], b[N], back[N];
	dvar_shape sh = { 1, { N } }, half = { 1, { N / 2 } }, got;
	dvar_values *v = NULL;
	void *d = NULL;

	if (dvar_values_new(&v, g, DVAR_FLOAT32) != DVAR_OK)
		fail_msg("dvar_values_new: %s", dvar_error_last()->message);
	CU_MAIN(cudaSetDevice(main_device(t)));
	CU_MAIN(cudaMalloc(&d, sizeof a));
	for (int l = 0; l < dvar_strategy_local_replicas(g); l++) {
		const void *p, *q;

		for (int i = 0; i < N; i++) {
			a[i] = (float)(l * N + i);
			b[i] = -a[i];
		}
		assert_int_equal(dvar_values_set(v, l, &sh, a), DVAR_OK);
		assert_int_equal(dvar_values_get(v, l, NULL, &p), DVAR_OK);
		assert_int_equal(dvar_values_set(v, l, &sh, b), DVAR_OK);
		assert_int_equal(dvar_values_get(v, l, NULL, &q), DVAR_OK);
		assert_ptr_equal(p, q);
		CU_MAIN(cudaMemcpy(back, q, sizeof back, cudaMemcpyDefault));
		assert_memory_equal(back, b, sizeof b);
		/* From device memory, then from its own buffer. */
		CU_MAIN(cudaMemcpy(d, a, sizeof a, cudaMemcpyHostToDevice));
		/* From pageable memory that copy may still be landing when it
		 * returns, and dvar's streams do not wait for the default one. */
		CU_MAIN(cudaDeviceSynchronize());
		assert_int_equal(dvar_values_set(v, l, &sh, d), DVAR_OK);
		assert_int_equal(dvar_values_set(v, l, &sh, q), DVAR_OK);
		assert_int_equal(dvar_values_get(v, l, NULL, &q), DVAR_OK);
		assert_ptr_equal(p, q);
		CU_MAIN(cudaMemcpy(back, q, sizeof back, cudaMemcpyDefault));
		assert_memory_equal(back, a, sizeof a);
		/* Another size: its own buffer, with the new bytes. */
		assert_int_equal(dvar_values_set(v, l, &half, b), DVAR_OK);
		assert_int_equal(dvar_values_get(v, l, &got, &q), DVAR_OK);
		assert_int_equal(got.dims[0], N / 2);
		CU_MAIN(cudaMemcpy(back, q, sizeof b / 2, cudaMemcpyDefault));
		assert_memory_equal(back, b, sizeof b / 2);
	}
	CU_MAIN(cudaSetDevice(main_device(t)));
	CU_MAIN(cudaFree(d));
	dvar_values_free(v);
}

static void test_gpu__values(void **state)
{
	const topo *t = *state;
	dvar_strategy *g, *c;
	size_t cap = 1 << 20;
	unsigned char *a = xmalloc(cap), *b = xmalloc(cap);
	void *dev = NULL;
	static const int dts[] = { DVAR_FLOAT32, DVAR_BFLOAT16, DVAR_INT64, DVAR_FLOAT64 };

	check_begin(t, "distributed values: reduce and gather");
	g = make_strategy(t, 1, t->replicas, 0);
	c = make_strategy(t, 0, dvar_strategy_local_replicas(g), 0);
	CU_MAIN(cudaSetDevice(main_device(t)));
	CU_MAIN(cudaMalloc(&dev, 4096));
	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
		for (int ragged = 0; ragged < 2; ragged++) {
			vspec sp = { dts[d], ragged, 900 + d * 2 + (uint64_t)ragged };
			size_t na, nb;

			memset(a, 0, cap);
			memset(b, 0, cap);
			na = values_results(g, 1, t, &sp, a, dev);
			nb = values_results(c, 0, t, &sp, b, NULL);
			if (na != nb || memcmp(a, b, na) != 0) {
				size_t i = 0;

				while (i < na && i < nb && a[i] == b[i])
					i++;
				mismatch("values %s%s: the GPU's reduce/gather results differ from the CPU's "
				         "at byte %zu of %zu",
				         dvar_dtype_name(dts[d]), ragged ? " (ragged rows)" : "", i, na);
			}
		}
	values_set_again(g, t);
	cudaSetDevice(main_device(t));
	cudaFree(dev);
	free(a);
	free(b);
	dvar_strategy_free(c);
	dvar_strategy_free(g);
	check_done();
}

/* ---------------------------------------------------------------- distributed variables */

typedef struct {
	const char *name;
	int dtype, sync, agg;
	dvar_shape shape;
} vdef;

static const vdef vdefs[] = {
	{ "dense/kernel", DVAR_FLOAT32, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, { 2, { 64, 33 } } },
	{ "dense/bias", DVAR_FLOAT64, DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE, { 1, { 1000 } } },
	{ "step", DVAR_INT64, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, { 1, { 257 } } },
	{ "embedding", DVAR_BFLOAT16, DVAR_SYNC_ON_WRITE, DVAR_AGG_SUM, { 2, { 100, 41 } } },
	{ "metric/total", DVAR_FLOAT32, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, { 2, { 3, 300 } } },
	{ "metric/mean", DVAR_FLOAT64, DVAR_SYNC_ON_READ, DVAR_AGG_MEAN, { 1, { 77 } } },
	{ "metric/first", DVAR_INT64, DVAR_SYNC_ON_READ, DVAR_AGG_ONLY_FIRST_REPLICA, { 1, { 99 } } },
	{ "metric/count", DVAR_INT64, DVAR_SYNC_ON_READ, DVAR_AGG_SUM, { 1, { 13 } } },
	{ "metric/bf16", DVAR_BFLOAT16, DVAR_SYNC_ON_READ, DVAR_AGG_MEAN, { 1, { 500 } } },
};
#define NV ((int)(sizeof vdefs / sizeof vdefs[0]))
enum { V_KERNEL, V_BIAS, V_STEP, V_EMB, V_TOTAL, V_MEAN, V_FIRST, V_COUNT, V_BF16 };
#define VCAP ((size_t)64 * 33 * 8) /* bytes of the largest variable, with room */

static size_t v_elems(int j)
{
	uint64_t n = 0;

	dvar_shape_num_elements(&vdefs[j].shape, &n);
	return (size_t)n;
}

/* Moderate values: floats in [-8, 8), integers in [-1000, 1000]. */
static void vfill(int dt, void *buf, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t h = hash3(seed, 77, i);
		double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;

		if (elem_is_float(dt))
			elem_put_bits(dt, buf, i, float_bits(dt, u * 8));
		else
			elem_put_bits(dt, buf, i, (uint64_t)((int64_t)(h % 2001) - 1000));
	}
}

/* A log of results, entry by entry, to compare the two strategies with. */
typedef struct {
	char label[96];
	size_t off, len;
} lentry;

typedef struct {
	unsigned char *buf;
	size_t len, cap;
	lentry *e;
	size_t n, ecap;
} vlog;

static void log_add(vlog *lg, const void *data, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void log_add(vlog *lg, const void *data, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (lg->len + len > lg->cap) {
		lg->cap = (lg->len + len) * 2 + 4096;
		lg->buf = realloc(lg->buf, lg->cap);
	}
	if (lg->n == lg->ecap) {
		lg->ecap = lg->ecap * 2 + 64;
		lg->e = realloc(lg->e, lg->ecap * sizeof *lg->e);
	}
	if (!lg->buf || !lg->e) {
		fprintf(stderr, "test_gpu: out of memory\n");
		abort();
	}
	va_start(ap, fmt);
	vsnprintf(lg->e[lg->n].label, sizeof lg->e[lg->n].label, fmt, ap);
	va_end(ap);
	lg->e[lg->n].off = lg->len;
	lg->e[lg->n].len = len;
	lg->n++;
	if (len)
		memcpy(lg->buf + lg->len, data, len);
	lg->len += len;
}

static void log_free(vlog *lg)
{
	free(lg->buf);
	free(lg->e);
	memset(lg, 0, sizeof *lg);
}

/* Compare two logs entry by entry; entries that carry a variable's value
 * name its index as "[j]" to decode the element. */
static void log_compare(const vlog *a, const vlog *b, const char *what)
{
	if (a->n != b->n) {
		mismatch("%s: %zu results on the GPU, %zu on the CPU", what, a->n, b->n);
		return;
	}
	for (size_t i = 0; i < a->n; i++) {
		const lentry *x = &a->e[i], *y = &b->e[i];
		const unsigned char *p = a->buf + x->off, *q = b->buf + y->off;
		size_t k = 0;
		int j = -1;

		if (x->len == y->len && memcmp(p, q, x->len) == 0)
			continue;
		while (k < x->len && k < y->len && p[k] == q[k])
			k++;
		if (!strstr(x->label, ": status") &&
		    sscanf(strchr(x->label, '[') ? strchr(x->label, '[') : "", "[%d]", &j) == 1 &&
		    j >= 0 && j < NV && x->len == y->len) {
			int dt = vdefs[j].dtype;
			size_t e = k / dvar_dtype_size(dt);

			mismatch("%s: %s: element %zu: GPU %.17g, CPU %.17g", what, x->label, e,
			         get_f64(dt, p, e), get_f64(dt, q, e));
		} else {
			mismatch("%s: %s: %zu bytes on the GPU, %zu on the CPU, first difference at byte "
			         "%zu",
			         what, x->label, x->len, y->len, k);
		}
	}
}

static void log_rc(vlog *lg, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void log_rc(vlog *lg, int rc, const char *fmt, ...)
{
	char label[96];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(label, sizeof label, fmt, ap);
	va_end(ap);
	log_add(lg, &rc, sizeof rc, "%s: status", label);
}

typedef struct {
	dvar_strategy *s;
	int gpu, R, N;
	int dev0; /* the test thread's GPU */
	dvar_variable *v[NV];
	vlog local[MAX_LOCAL];
	vlog main;
	void *dval[MAX_LOCAL], *dread[MAX_LOCAL]; /* device buffers of each replica */
	void *mval, *mread;                       /* the test thread's (GPU side) */
	report rep[MAX_LOCAL];
} scen;

static int scen_alloc_fn(dvar_replica *ctx, void *arg)
{
	scen *sc = arg;
	int l = dvar_replica_local_id(ctx);

	CU(cudaMalloc(&sc->dval[l], VCAP), &sc->rep[l], "cudaMalloc");
	CU(cudaMalloc(&sc->dread[l], VCAP), &sc->rep[l], "cudaMalloc");
	return DVAR_OK;
}

static int scen_free_fn(dvar_replica *ctx, void *arg)
{
	scen *sc = arg;
	int l = dvar_replica_local_id(ctx);

	cudaFree(sc->dval[l]);
	cudaFree(sc->dread[l]);
	return DVAR_OK;
}

static int create_vars(dvar_strategy *s, dvar_variable **v, int zeros)
{
	for (int j = 0; j < NV; j++) {
		dvar_variable_spec sp = DVAR_VARIABLE_SPEC_INIT;
		unsigned char init[VCAP];
		int rc;

		vfill(vdefs[j].dtype, init, v_elems(j), 5000 + (uint64_t)j);
		sp.name = vdefs[j].name;
		sp.dtype = vdefs[j].dtype;
		sp.shape = vdefs[j].shape;
		sp.initial_value = zeros ? NULL : init;
		sp.synchronization = vdefs[j].sync;
		sp.aggregation = vdefs[j].agg;
		if ((rc = dvar_variable_create(&v[j], s, &sp)) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

static void free_vars(dvar_variable **v)
{
	for (int j = 0; j < NV; j++) {
		dvar_variable_free(v[j]);
		v[j] = NULL;
	}
}

/* A value for replica context: on the GPU side, in the replica's device
 * memory (dev) or host memory; on the CPU side, host memory. */
static const void *stage(dvar_replica *ctx, scen *sc, int l, const void *host, size_t bytes,
                         int dev)
{
	if (!sc->gpu || !dev)
		return host;
	upload(ctx, &sc->rep[l], sc->dval[l], host, bytes);
	return sc->dval[l];
}

static int update(int j, int k, dvar_variable *v, dvar_replica *ctx, const void *val)
{
	switch (j) {
	case V_KERNEL: return dvar_variable_assign_add(v, ctx, val);
	case V_BIAS:
		return k == 0 ? dvar_variable_assign(v, ctx, val) : dvar_variable_assign_sub(v, ctx, val);
	case V_STEP: return dvar_variable_assign_add(v, ctx, val);
	case V_EMB:
		return k == 0 ? dvar_variable_assign(v, ctx, val) : dvar_variable_assign_add(v, ctx, val);
	case V_TOTAL: return dvar_variable_assign_add(v, ctx, val);
	case V_MEAN: return dvar_variable_assign(v, ctx, val);
	case V_FIRST: return dvar_variable_assign_add(v, ctx, val);
	case V_COUNT: return dvar_variable_assign_sub(v, ctx, val);
	default: return dvar_variable_assign_add(v, ctx, val);
	}
}

/* Read every variable in replica context, into host memory and (GPU side)
 * into device memory; both go to the log. */
static void replica_reads(dvar_replica *ctx, scen *sc, int l, unsigned char *h, const char *when)
{
	vlog *lg = &sc->local[l];

	for (int j = 0; j < NV; j++) {
		size_t nb = dvar_variable_nbytes(sc->v[j]);
		int rc;

		memset(h, 0xee, nb);
		rc = dvar_variable_read(sc->v[j], ctx, h, nb);
		log_rc(lg, rc, "%s: read [%d] %s into host memory", when, j, vdefs[j].name);
		log_add(lg, h, nb, "%s: read [%d] %s into host memory", when, j, vdefs[j].name);
		memset(h, 0xee, nb);
		if (sc->gpu) {
			rc = dvar_variable_read(sc->v[j], ctx, sc->dread[l], nb);
			download(&sc->rep[l], h, sc->dread[l], nb);
		} else {
			rc = dvar_variable_read(sc->v[j], ctx, h, nb);
		}
		log_rc(lg, rc, "%s: read [%d] %s into device memory", when, j, vdefs[j].name);
		log_add(lg, h, nb, "%s: read [%d] %s into device memory", when, j, vdefs[j].name);
	}
	/* A read into a buffer one byte short: DVAR_ESHAPE. */
	log_rc(lg, dvar_variable_read(sc->v[V_KERNEL], ctx, sc->gpu ? sc->dread[l] : (void *)h,
	                              dvar_variable_nbytes(sc->v[V_KERNEL]) - 1),
	       "%s: short read", when);
}

/* Three training steps in replica context: every variable updated with
 * device values (host values in step 1), scatters, reads. */
static int steps_fn(dvar_replica *ctx, void *arg)
{
	scen *sc = arg;
	int l = dvar_replica_local_id(ctx), g = dvar_replica_id(ctx);
	vlog *lg = &sc->local[l];
	unsigned char *h = xmalloc(VCAP), *r = xmalloc(VCAP);

	for (int k = 0; k < 3; k++) {
		int dev = k != 1;

		for (int j = 0; j < NV; j++) {
			size_t nb = dvar_variable_nbytes(sc->v[j]);
			const void *val;
			int rc;

			vfill(vdefs[j].dtype, h, v_elems(j), hash3((uint64_t)j, (uint64_t)k, (uint64_t)g));
			val = stage(ctx, sc, l, h, nb, dev);
			rc = update(j, k, sc->v[j], ctx, val);
			log_rc(lg, rc, "step %d: update [%d] %s with %s values", k, j, vdefs[j].name,
			       dev ? "device" : "host");
		}
		/* Scatters: SUM-aggregated rows of every replica (some with none,
		 * indices overlapping; update, min and max have no SUM), NONE
		 * applied locally, ON_READ refused. */
		{
			static const dvar_scatter_op ops[3] = { DVAR_SCATTER_ADD, DVAR_SCATTER_SUB,
			                                        DVAR_SCATTER_ADD };
			static const dvar_scatter_op local_ops[3] = { DVAR_SCATTER_MIN, DVAR_SCATTER_MAX,
			                                              DVAR_SCATTER_UPDATE };
			int64_t idx[4];
			size_t n = (size_t)((g + k) % 3);
			int rc;

			for (size_t r2 = 0; r2 < n; r2++)
				idx[r2] = (int64_t)((g * 7 + (int)r2 * 13 + k) % 64);
			vfill(DVAR_FLOAT32, h, n * 33, hash3(100, (uint64_t)k, (uint64_t)g));
			rc = dvar_variable_scatter(sc->v[V_KERNEL], ctx, ops[k], idx, n,
			                           stage(ctx, sc, l, h, n * 33 * 4, dev));
			log_rc(lg, rc, "step %d: scatter %d into [%d] dense/kernel", k, (int)ops[k], V_KERNEL);

			for (size_t r2 = 0; r2 < n; r2++)
				idx[r2] = (int64_t)((g * 11 + (int)r2 * 29 + k) % 100);
			vfill(DVAR_BFLOAT16, h, n * 41, hash3(101, (uint64_t)k, (uint64_t)g));
			rc = dvar_variable_scatter(sc->v[V_EMB], ctx, DVAR_SCATTER_SUB, idx, n,
			                           stage(ctx, sc, l, h, n * 41 * 2, dev));
			log_rc(lg, rc, "step %d: scatter SUB into [%d] embedding", k, V_EMB);

			idx[0] = (int64_t)(g * 3 + k);
			idx[1] = (int64_t)(999 - g);
			vfill(DVAR_FLOAT64, h, 2, hash3(102, (uint64_t)k, (uint64_t)g));
			rc = dvar_variable_scatter(sc->v[V_BIAS], ctx, local_ops[k], idx, 2,
			                           stage(ctx, sc, l, h, 2 * 8, dev));
			log_rc(lg, rc, "step %d: scatter %d into [%d] dense/bias (NONE)", k,
			       (int)local_ops[k], V_BIAS);

			idx[0] = 0;
			rc = dvar_variable_scatter(sc->v[V_TOTAL], ctx, DVAR_SCATTER_ADD, idx, 1,
			                           stage(ctx, sc, l, h, 300 * 4, dev));
			log_rc(lg, rc, "step %d: scatter into ON_READ [%d]", k, V_TOTAL);
		}
		{
			char when[32];

			snprintf(when, sizeof when, "step %d", k);
			replica_reads(ctx, sc, l, r, when);
		}
	}
	free(h);
	free(r);
	return DVAR_OK;
}

/* Cross-replica reads of every variable: the aggregate or primary into
 * host memory and (GPU side) device memory, and every local component. */
static void cross_reads(scen *sc, vlog *lg, const char *when)
{
	unsigned char *h = xmalloc(VCAP);

	for (int j = 0; j < NV; j++) {
		size_t nb = dvar_variable_nbytes(sc->v[j]);
		int rc;

		memset(h, 0xee, nb);
		rc = dvar_variable_read(sc->v[j], NULL, h, nb);
		log_rc(lg, rc, "%s: cross-replica read [%d] %s", when, j, vdefs[j].name);
		log_add(lg, h, nb, "%s: cross-replica read [%d] %s", when, j, vdefs[j].name);
		memset(h, 0xee, nb);
		if (sc->gpu) {
			/* dvar's cross-replica calls may leave another GPU current */
			CU_MAIN(cudaSetDevice(sc->dev0));
			CU_MAIN(cudaMemset(sc->mread, 0xee, nb));
			CU_MAIN(cudaDeviceSynchronize()); /* as above */
			rc = dvar_variable_read(sc->v[j], NULL, sc->mread, nb);
			CU_MAIN(cudaMemcpy(h, sc->mread, nb, cudaMemcpyDeviceToHost));
		} else {
			rc = dvar_variable_read(sc->v[j], NULL, h, nb);
		}
		log_rc(lg, rc, "%s: cross-replica read [%d] %s into device memory", when, j,
		       vdefs[j].name);
		log_add(lg, h, nb, "%s: cross-replica read [%d] %s into device memory", when, j,
		        vdefs[j].name);
		for (int l = 0; l < sc->R; l++) {
			memset(h, 0xee, nb);
			rc = dvar_variable_read_local(sc->v[j], l, h, nb);
			log_rc(lg, rc, "%s: read_local %d [%d] %s", when, l, j, vdefs[j].name);
			log_add(lg, h, nb, "%s: read_local %d [%d] %s", when, l, j, vdefs[j].name);
		}
	}
	free(h);
}

/* A value for cross-replica context: device memory of the test thread's
 * GPU on the GPU side when dev, else host memory. */
static const void *stage_main(scen *sc, const void *host, size_t bytes, int dev)
{
	if (!sc->gpu || !dev)
		return host;
	CU_MAIN(cudaSetDevice(sc->dev0));
	CU_MAIN(cudaMemcpy(sc->mval, host, bytes, cudaMemcpyHostToDevice));
	return sc->mval;
}

static void cross_updates(scen *sc, int round)
{
	unsigned char *h = xmalloc(VCAP);
	vlog *lg = &sc->main;
	uint64_t seed = 7000 + (uint64_t)round * 100;
	int rc;

#define CROSS(j, call, dev, text)                                                                \
	do {                                                                                         \
		vfill(vdefs[j].dtype, h, v_elems(j), seed + (j));                                        \
		const void *val_ = stage_main(sc, h, dvar_variable_nbytes(sc->v[j]), (dev));            \
		rc = call(sc->v[j], NULL, val_);                                                         \
		log_rc(lg, rc, "round %d: cross-replica %s [%d] %s", round, text, j, vdefs[j].name);   \
	} while (0)

	CROSS(V_KERNEL, dvar_variable_assign_add, 1, "assign_add (device value)");
	CROSS(V_STEP, dvar_variable_assign_sub, 0, "assign_sub (host value)");
	CROSS(V_EMB, dvar_variable_assign, 1, "assign (device value)");
	CROSS(V_TOTAL, dvar_variable_assign, 1, "assign, split over N (device value)");
	CROSS(V_COUNT, dvar_variable_assign, 0, "assign, split exactly (host value)");
	CROSS(V_TOTAL, dvar_variable_assign_add, 1, "assign_add on ON_READ SUM (refused)");
	CROSS(V_MEAN, dvar_variable_assign_add, 1, "assign_add on ON_READ MEAN (device value)");
	CROSS(V_FIRST, dvar_variable_assign, 0, "assign (host value)");
	CROSS(V_BF16, dvar_variable_assign_sub, 1, "assign_sub (device value)");
#undef CROSS
	{
		int64_t idx[3] = { 5, 99, 5 };

		vfill(DVAR_BFLOAT16, h, 3 * 41, seed + 50);
		rc = dvar_variable_scatter(sc->v[V_EMB], NULL, DVAR_SCATTER_ADD, idx, 3,
		                           stage_main(sc, h, 3 * 41 * 2, 1));
		log_rc(lg, rc, "round %d: cross-replica scatter ADD into [%d] embedding", round, V_EMB);
	}
	free(h);
}

static void scen_open(scen *sc, dvar_strategy *s, int gpu, const topo *t)
{
	memset(sc, 0, sizeof *sc);
	sc->s = s;
	sc->gpu = gpu;
	sc->R = dvar_strategy_local_replicas(s);
	sc->N = dvar_strategy_num_replicas_in_sync(s);
	sc->dev0 = main_device(t);
	if (gpu) {
		assert_int_equal(dvar_strategy_run(s, scen_alloc_fn, sc), DVAR_OK);
		CU_MAIN(cudaSetDevice(sc->dev0));
		CU_MAIN(cudaMalloc(&sc->mval, VCAP));
		CU_MAIN(cudaMalloc(&sc->mread, VCAP));
	}
}

static void scen_close(scen *sc)
{
	free_vars(sc->v);
	if (sc->gpu) {
		dvar_strategy_run(sc->s, scen_free_fn, sc);
		cudaSetDevice(sc->dev0);
		cudaFree(sc->mval);
		cudaFree(sc->mread);
	}
	for (int l = 0; l < MAX_LOCAL; l++)
		log_free(&sc->local[l]);
	log_free(&sc->main);
}

/* The training part: create, step, read, update across replicas, read. */
static void scen_train(scen *sc)
{
	int rc = create_vars(sc->s, sc->v, 0);

	if (rc != DVAR_OK)
		fail_msg("creating the variables on the %s strategy: %s", sc->gpu ? "GPU" : "CPU",
		         dvar_error_last()->message);
	cross_reads(sc, &sc->main, "initial");
	rc = dvar_strategy_run(sc->s, steps_fn, sc);
	log_rc(&sc->main, rc, "the steps' run");
	take_reports(sc->rep, sc->R, sc->gpu ? "GPU steps" : "CPU steps");
	cross_reads(sc, &sc->main, "after the steps");
	cross_updates(sc, 0);
	cross_reads(sc, &sc->main, "after the cross-replica updates");
}

static void compare_scen(const scen *gs, const scen *cs, const char *what)
{
	char buf[160];

	for (int l = 0; l < gs->R; l++) {
		snprintf(buf, sizeof buf, "%s, replica context, local %d", what, l);
		log_compare(&gs->local[l], &cs->local[l], buf);
	}
	snprintf(buf, sizeof buf, "%s, cross-replica context", what);
	log_compare(&gs->main, &cs->main, buf);
}

/* Save step 1 (allowing the mismatch of dense/bias, NONE, whose replicas
 * differ), step 2 asynchronously with the variables changed while it is
 * written, then step 3 strictly (refused when the local replicas differ).
 * The statuses and what the variables hold afterwards go to the log. */
static void scen_save(scen *sc, const char *root)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	const char *who = sc->gpu ? "GPU" : "CPU";
	int rc;

	wo.flags = DVAR_WRITE_NO_FSYNC;
	so.write = &wo;
	so.flags = DVAR_SAVE_ALLOW_REPLICA_MISMATCH;
	rc = dvar_save(sc->s, root, 1, sc->v, NV, &so);
	if (rc != DVAR_OK)
		mismatch("%s: dvar_save: %s", who, dvar_error_last()->message);
	log_rc(&sc->main, rc, "dvar_save");
	rc = dvar_save_async(sc->s, root, 2, sc->v, NV, &so);
	if (rc != DVAR_OK)
		mismatch("%s: dvar_save_async: %s", who, dvar_error_last()->message);
	log_rc(&sc->main, rc, "dvar_save_async");
	/* Training goes on while the save is written: not in the checkpoint. */
	cross_updates(sc, 1);
	rc = dvar_save_wait(sc->s);
	if (rc != DVAR_OK)
		mismatch("%s: dvar_save_wait: %s", who, dvar_error_last()->message);
	log_rc(&sc->main, rc, "dvar_save_wait");
	cross_reads(sc, &sc->main, "after the changes during the asynchronous save");
	so.flags = 0;
	rc = dvar_save(sc->s, root, 3, sc->v, NV, &so);
	if (rc != DVAR_OK && rc != DVAR_EMISMATCH)
		mismatch("%s: strict save: %s", who, dvar_error_last()->message);
	if (rc == DVAR_OK && sc->R > 1)
		mismatch("%s: a save without DVAR_SAVE_ALLOW_REPLICA_MISMATCH succeeded although the "
		         "replicas of dense/bias (ON_WRITE NONE) differ", who);
	log_rc(&sc->main, rc, "strict save (the NONE variable's replicas differ)");
}

/* Every saved variable's bytes and attributes; NULL when it cannot be opened. */
typedef struct {
	unsigned char *data[NV];
	size_t bytes[NV];
	char attrs[NV][160];
} saved;

static int load_saved(const char *path, saved *sv)
{
	dvar_reader *r = NULL;

	memset(sv, 0, sizeof *sv);
	if (dvar_reader_open(&r, path, NULL) != DVAR_OK) {
		mismatch("dvar_reader_open %s: %s", path, dvar_error_last()->message);
		return -1;
	}
	for (int j = 0; j < NV; j++) {
		size_t i;
		dvar_var_info info;
		static const char *const keys[] = { DVAR_STORE_ATTR_KIND, DVAR_STORE_ATTR_SYNCHRONIZATION,
		                                    DVAR_STORE_ATTR_AGGREGATION,
		                                    DVAR_STORE_ATTR_REPLICA_CHECK };

		if (dvar_reader_find(r, vdefs[j].name, &i) != DVAR_OK ||
		    dvar_reader_var(r, i, &info) != DVAR_OK) {
			mismatch("%s: no variable %s: %s", path, vdefs[j].name, dvar_error_last()->message);
			continue;
		}
		sv->bytes[j] = v_elems(j) * dvar_dtype_size(vdefs[j].dtype);
		sv->data[j] = xmalloc(sv->bytes[j]);
		if (info.dtype != vdefs[j].dtype || !dvar_shape_equal(&info.shape, &vdefs[j].shape))
			mismatch("%s: %s saved with dtype %d and another shape", path, vdefs[j].name,
			         info.dtype);
		if (dvar_reader_read(r, i, NULL, sv->data[j], sv->bytes[j]) != DVAR_OK)
			mismatch("%s: reading %s: %s", path, vdefs[j].name, dvar_error_last()->message);
		for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
			const char *val = NULL;
			size_t len = strlen(sv->attrs[j]);

			if (dvar_reader_var_attr(r, i, keys[k], &val) != DVAR_OK)
				val = "-";
			snprintf(sv->attrs[j] + len, sizeof sv->attrs[j] - len, "%s=%s ", keys[k], val);
		}
	}
	dvar_reader_free(r);
	return 0;
}

static void free_saved(saved *sv)
{
	for (int j = 0; j < NV; j++)
		free(sv->data[j]);
}

static void compare_saved(const saved *a, const saved *b, const char *what)
{
	for (int j = 0; j < NV; j++) {
		if (!a->data[j] || !b->data[j])
			continue;
		if (a->bytes[j] != b->bytes[j] || memcmp(a->data[j], b->data[j], a->bytes[j]) != 0) {
			size_t k = 0, e;
			int dt = vdefs[j].dtype;

			while (k < a->bytes[j] && a->data[j][k] == b->data[j][k])
				k++;
			e = k / dvar_dtype_size(dt);
			mismatch("%s: %s differs at element %zu: %.17g vs %.17g", what, vdefs[j].name, e,
			         get_f64(dt, a->data[j], e), get_f64(dt, b->data[j], e));
		}
		if (strcmp(a->attrs[j], b->attrs[j]) != 0)
			mismatch("%s: %s's attributes differ: %s vs %s", what, vdefs[j].name, a->attrs[j],
			         b->attrs[j]);
	}
}

/* Round trips that are exact whatever N: everything but ON_READ SUM and
 * MEAN of floats, which divide by N (exact for N <= 2 only). */
static int exact_round_trip(int j, int N)
{
	return N <= 2 || !(vdefs[j].sync == DVAR_SYNC_ON_READ && elem_is_float(vdefs[j].dtype) &&
	                   vdefs[j].agg != DVAR_AGG_ONLY_FIRST_REPLICA);
}

/* Restore path into fresh (zero) variables of sc's strategy, then read
 * everything into the log. */
static void scen_restore(scen *sc, const char *path)
{
	int rc;

	free_vars(sc->v);
	if ((rc = create_vars(sc->s, sc->v, 1)) != DVAR_OK)
		fail_msg("creating the variables to restore: %s", dvar_error_last()->message);
	rc = dvar_restore(sc->s, path, sc->v, NV, NULL);
	if (rc != DVAR_OK)
		mismatch("%s: dvar_restore %s: %s", sc->gpu ? "GPU" : "CPU", path,
		         dvar_error_last()->message);
	log_rc(&sc->main, rc, "dvar_restore");
	cross_reads(sc, &sc->main, "restored");
}

/* After scen_restore: the cross-replica reads equal what was saved where
 * the round trip is exact. */
static void check_restored(const scen *sc, const saved *sv, const char *what)
{
	for (int j = 0; j < NV; j++) {
		const lentry *e = NULL;

		for (size_t i = 0; i < sc->main.n; i++)
			if (strncmp(sc->main.e[i].label, "restored: cross-replica read [", 30) == 0 &&
			    atoi(sc->main.e[i].label + 30) == j && !strstr(sc->main.e[i].label, "status")) {
				e = &sc->main.e[i];
				break;
			}
		if (!e || !sv->data[j] || !exact_round_trip(j, sc->N))
			continue;
		if (e->len != sv->bytes[j] || memcmp(sc->main.buf + e->off, sv->data[j], e->len) != 0)
			mismatch("%s: %s reads back other values than the checkpoint holds", what,
			         vdefs[j].name);
	}
}

static void test_gpu__variables(void **state)
{
	const topo *t = *state;
	dvar_strategy *g, *c, *c2;
	scen gs, cs, c2s;
	char *root = NULL;
	char path[PATH_BYTES + 64];
	saved sg1, sg2, sc1, sc2;
	int R, R2;

	check_begin(t, "distributed variables, save and restore");
	g = make_strategy(t, 1, t->replicas, 0);
	R = dvar_strategy_local_replicas(g);
	c = make_strategy(t, 0, R, 0);
	scen_open(&gs, g, 1, t);
	scen_open(&cs, c, 0, t);

	/* Training on both, compared value by value. */
	scen_train(&gs);
	scen_train(&cs);
	compare_scen(&gs, &cs, "training");

	/* Saving from both: the same checkpoint bytes. */
	root = shared_dir();
	snprintf(path, sizeof path, "%s/gpu", root);
	scen_save(&gs, path);
	snprintf(path, sizeof path, "%s/cpu", root);
	scen_save(&cs, path);
	compare_scen(&gs, &cs, "saving");
	snprintf(path, sizeof path, "%s/gpu/ckpt-1", root);
	load_saved(path, &sg1);
	snprintf(path, sizeof path, "%s/gpu/ckpt-2", root);
	load_saved(path, &sg2);
	snprintf(path, sizeof path, "%s/cpu/ckpt-1", root);
	load_saved(path, &sc1);
	snprintf(path, sizeof path, "%s/cpu/ckpt-2", root);
	load_saved(path, &sc2);
	compare_saved(&sg1, &sc1, "ckpt-1 saved from the GPUs vs from the CPU");
	compare_saved(&sg2, &sc2, "ckpt-2 (dvar_save_async) saved from the GPUs vs from the CPU");
	/* What changed while the asynchronous save was written is not in it. */
	compare_saved(&sg2, &sg1, "GPU: ckpt-2 (async, changed during the save) vs ckpt-1");

	/* The GPUs' checkpoint onto a CPU strategy with another R (N <= 2, so
	 * every value reads back exactly). */
	R2 = env.W == 1 ? (R == 2 ? 1 : 2) : 1;
	c2 = make_strategy(t, 0, R2, 0);
	scen_open(&c2s, c2, 0, t);
	snprintf(path, sizeof path, "%s/gpu/ckpt-1", root);
	scen_restore(&c2s, path);
	check_restored(&c2s, &sg1, "the GPUs' ckpt-1 restored onto CPU replicas");

	/* The CPU's checkpoint onto the GPUs, next to the same restore on the
	 * CPU strategy of the GPUs' topology. */
	log_free(&gs.main);
	log_free(&cs.main);
	snprintf(path, sizeof path, "%s/cpu/ckpt-1", root);
	scen_restore(&gs, path);
	scen_restore(&cs, path);
	compare_scen(&gs, &cs, "restoring the CPU's ckpt-1");
	check_restored(&gs, &sc1, "the CPU's ckpt-1 restored onto the GPUs");

	free_saved(&sg1);
	free_saved(&sg2);
	free_saved(&sc1);
	free_saved(&sc2);
	scen_close(&c2s);
	scen_close(&gs);
	scen_close(&cs);
	dvar_strategy_free(c2);
	dvar_strategy_free(c);
	dvar_strategy_free(g);
	drop_shared_dir(root);
	check_done();
}

/* ---------------------------------------------------------------- main */

static const char *env_get(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static int skip_program(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int skip_program(const char *fmt, ...)
{
	va_list ap;

	if (env.worker == 0) {
		printf("skipped: ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
		fflush(stdout);
	}
	dvar_strategy_free(env.host);
	return 77;
}

int main(void)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	struct cudaDeviceProp prop;
	const char *rank = env_get("OMPI_COMM_WORLD_RANK");
	int rc;

	/* Without a GPU there is nothing to run: say why, once. */
	if ((rc = dvar_cuda_device_count(&env.G)) != DVAR_OK) {
		env.worker = rank ? atoi(rank) : 0;
		return skip_program("%s", dvar_error_last()->message);
	}

	/* The workers (one, or every process of mpirun) and this one's GPU. */
	o.replicas = 1;
	if (dvar_strategy_create(&env.host, &o) != DVAR_OK) {
		fprintf(stderr, "test_gpu: a CPU strategy: %s\n", dvar_error_last()->message);
		return 1;
	}
	env.W = dvar_strategy_num_workers(env.host);
	env.worker = dvar_strategy_worker_id(env.host);
	/* Open MPI says where this worker is on its node; without it, one node. */
	env.local_rank = env.worker;
	env.local_size = env.W;
	if (env_get("OMPI_COMM_WORLD_LOCAL_RANK") && env_get("OMPI_COMM_WORLD_LOCAL_SIZE")) {
		env.local_rank = atoi(env_get("OMPI_COMM_WORLD_LOCAL_RANK"));
		env.local_size = atoi(env_get("OMPI_COMM_WORLD_LOCAL_SIZE"));
	}
	if (env.W > 1) {
		int dev = env.local_rank % env.G;
		const char *how = env.local_size > env.G || !DVAR_WITH_NCCL ? "through the host" : "NCCL";

		snprintf(env.names[0], sizeof env.names[0], "worker %d: 1 replica on GPU %d (%s)",
		         env.worker, dev, how);
		snprintf(env.names[1], sizeof env.names[1], "worker %d: 3 replicas on GPU %d (%s)",
		         env.worker, dev, how);
		env.topos[0] = (topo){ env.names[0], 1, { dev }, 1 };
		env.topos[1] = (topo){ env.names[1], 3, { dev }, 1 };
		env.ntopos = 2;
	} else {
		if (env.G == 1 || DVAR_WITH_NCCL) {
			snprintf(env.names[0], sizeof env.names[0], "one replica per GPU (%d)", env.G);
			env.topos[env.ntopos++] = (topo){ env.names[0], 0, { 0 }, 0 };
		} else {
			printf("note: %d GPUs but no NCCL in this build: one replica per GPU is not "
			       "tested\n", env.G);
		}
		snprintf(env.names[1], sizeof env.names[1], "3 replicas sharing GPU 0");
		env.topos[env.ntopos++] = (topo){ env.names[1], 3, { 0 }, 1 };
	}
	memset(&prop, 0, sizeof prop);
	if (cudaGetDeviceProperties(&prop, env.W > 1 ? env.local_rank % env.G : 0) != cudaSuccess)
		snprintf(prop.name, sizeof prop.name, "(cudaGetDeviceProperties failed)");
	printf("test_gpu: worker %d of %d, %d CUDA device(s), %s; NCCL %s\n", env.worker, env.W,
	       env.G, prop.name, DVAR_WITH_NCCL ? "built in" : "not built");
	fflush(stdout);

	{
		const struct CMUnitTest one[] = {
			cmocka_unit_test_prestate(test_gpu__placement, &env.topos[0]),
			cmocka_unit_test_prestate(test_gpu__collectives, &env.topos[0]),
			cmocka_unit_test_prestate(test_gpu__collectives_nccl, &env.topos[0]),
			cmocka_unit_test_prestate(test_gpu__errors, &env.topos[0]),
			cmocka_unit_test_prestate(test_gpu__values, &env.topos[0]),
			cmocka_unit_test_prestate(test_gpu__variables, &env.topos[0]),
		};
		const struct CMUnitTest two[] = {
			cmocka_unit_test_prestate(test_gpu__placement, &env.topos[1]),
			cmocka_unit_test_prestate(test_gpu__collectives, &env.topos[1]),
			cmocka_unit_test_prestate(test_gpu__collectives_nccl, &env.topos[1]),
			cmocka_unit_test_prestate(test_gpu__errors, &env.topos[1]),
			cmocka_unit_test_prestate(test_gpu__values, &env.topos[1]),
			cmocka_unit_test_prestate(test_gpu__variables, &env.topos[1]),
		};
		int failed = cmocka_run_group_tests_name(env.topos[0].name, one, NULL, NULL);

		if (env.ntopos > 1)
			failed += cmocka_run_group_tests_name(env.topos[1].name, two, NULL, NULL);
		dvar_strategy_free(env.host);
		return failed ? 1 : 0;
	}
}
