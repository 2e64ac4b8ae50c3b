/*
 * runtime/cuda/cuda.c - the CUDA side of a strategy (cuda.h): which GPU each
 * local replica uses, its two streams, its device memory and staging
 * buffers, the NCCL communicators of its groups, and CUDA's and NCCL's
 * errors turned into dvar statuses.
 *
 * Threads. After dvar_cuda_open nothing here changes the object's layout:
 * the per-local state (streams, scratch, upload buffer) is touched only by
 * calls for that local, which device.h already serializes, so no lock is
 * needed. Any thread may call for any local: every call that touches a
 * device makes local's GPU current first (cudaSetDevice is per thread).
 *
 * Every call is complete when it returns (its stream is synchronized),
 * except dvar_cuda_snapshot, which dvar_cuda_snapshot_wait completes. So a
 * source that is host memory, or another GPU's, is copied into scratch slot
 * 1 on local's stream, used there, and the slot is free again on return.
 *
 * Ownership: the object owns its streams, scratch, upload and host staging
 * buffers and NCCL communicators; dvar_cuda_close releases them. Memory from
 * dvar_cuda_alloc belongs to the caller (dvar_cuda_free).
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/kernels.h"

/* Scratch and upload buffers grow in steps of this, so that a run of
 * slightly larger requests does not reallocate every time. */
#define GROW_STEP ((size_t)1 << 20)

typedef struct {
	int dev;             /* CUDA ordinal */
	int group;
	cudaStream_t stream; /* compute: every call for this local */
	cudaStream_t snap;   /* snapshots to the host */
	void *scratch[2];
	size_t scratch_cap[2];
	void *upload;
	size_t upload_cap;
	void *host; /* page-locked: collectives through the host */
	size_t host_cap;
} cuda_local;

struct dvar_cuda {
	int R, W, worker;
	int ngroups;
	cuda_local *loc; /* R */
	int *members;    /* R: the locals by group, increasing within a group */
	int *first;      /* ngroups + 1: group g is members[first[g] .. first[g + 1]) */
	int via_host;    /* dvar_cuda_via_host */
#if DVAR_WITH_NCCL
	ncclComm_t *nccl; /* ngroups; all NULL with one rank in all */
#endif
};

/* ---------------------------------------------------------------- errors */

int dvar_cuda_status(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return DVAR_OK;
	/* Clears a non-sticky error; a sticky one stays with the context. */
	(void)cudaGetLastError();
	return dvar_error_set(err == cudaErrorMemoryAllocation ? DVAR_ENOMEM : DVAR_EDEVICE,
	                      "%s: %s: %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* dvar_cuda_status with a formatted what, built only on failure. */
static int check(cudaError_t err, const char *fmt, ...) DVAR_PRINTF(2, 3);
static int check(cudaError_t err, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	if (err == cudaSuccess)
		return DVAR_OK;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return dvar_cuda_status(err, what);
}

#if DVAR_WITH_NCCL
int dvar_nccl_status(ncclResult_t res, const char *what)
{
	int code = DVAR_ECOMM;
	const char *last;

	if (res == ncclSuccess)
		return DVAR_OK;
	/* A CUDA failure inside NCCL is the device's; the rest is the
	 * communication's (a peer, the network, NCCL itself). */
	if (res == ncclUnhandledCudaError) {
		(void)cudaGetLastError();
		code = DVAR_EDEVICE;
	}
	last = ncclGetLastError(NULL);
	if (last && *last)
		return dvar_error_set(code, "%s: NCCL %s (%s)", what, ncclGetErrorString(res), last);
	return dvar_error_set(code, "%s: NCCL %s", what, ncclGetErrorString(res));
}

static int nccl_check(ncclResult_t res, const char *fmt, ...) DVAR_PRINTF(2, 3);
static int nccl_check(ncclResult_t res, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	if (res == ncclSuccess)
		return DVAR_OK;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return dvar_nccl_status(res, what);
}
#endif

int dvar_cuda_visible(int *count)
{
	const char *env = getenv("CUDA_VISIBLE_DEVICES");
	char note[160] = "";
	cudaError_t err;
	int n = 0;

	*count = 0;
	if (env) /* the usual reason a device is missing */
		snprintf(note, sizeof note, " (CUDA_VISIBLE_DEVICES=\"%s\")", env);
	err = cudaGetDeviceCount(&n);
	if (err != cudaSuccess) {
		(void)cudaGetLastError();
		return dvar_error_set(DVAR_EDEVICE, "no CUDA device: %s%s", cudaGetErrorString(err),
		                      note);
	}
	if (n < 1)
		return dvar_error_set(DVAR_EDEVICE, "no CUDA device: none is visible%s", note);
	*count = n;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- lifetime */

/* This worker's part: check the devices, make the groups and streams.
 * Local only; dvar_cuda_open takes part in the exchange whatever happens. */
static int setup(dvar_cuda *c, const int *devices, int ndev)
{
	int R = c->R, visible, rc, oom;
	int *group_dev;

	if (R < 1 || R > DVAR_MAX_REPLICAS)
		return dvar_error_set(DVAR_EINVAL, "%d local replicas: between 1 and %d are supported",
		                      R, DVAR_MAX_REPLICAS);
	if (ndev < 0 || (ndev > 0 && !devices))
		return dvar_error_set(DVAR_EINVAL, "bad device list (%d devices%s)", ndev,
		                      devices ? "" : ", NULL");
	if ((rc = dvar_cuda_visible(&visible)) != DVAR_OK)
		return rc;
	for (int i = 0; i < ndev; i++)
		if (devices[i] < 0 || devices[i] >= visible)
			return dvar_error_set(DVAR_EINVAL,
			                      "GPU %d does not exist: this process sees %d CUDA device%s (0..%d)",
			                      devices[i], visible, visible == 1 ? "" : "s", visible - 1);
	if (ndev == 0)
		ndev = visible;

	c->loc = calloc((size_t)R, sizeof *c->loc);
	c->members = calloc((size_t)R, sizeof *c->members);
	c->first = calloc((size_t)R + 1, sizeof *c->first);
	group_dev = calloc((size_t)R, sizeof *group_dev);
	oom = !c->loc || !c->members || !c->first || !group_dev;
#if DVAR_WITH_NCCL
	c->nccl = calloc((size_t)R, sizeof *c->nccl); /* at most R groups */
	oom |= !c->nccl;
#endif
	if (oom) {
		free(group_dev);
		return dvar_error_set(DVAR_ENOMEM, "out of memory for %d local replicas", R);
	}

	/* Local i uses devices[i % ndev]. Locals on one ordinal are a group
	 * (NCCL allows one rank per device), numbered by first appearance. */
	for (int i = 0; i < R; i++) {
		int dev = devices ? devices[i % ndev] : i % ndev, g;

		for (g = 0; g < c->ngroups && group_dev[g] != dev; g++)
			;
		if (g == c->ngroups)
			group_dev[c->ngroups++] = dev;
		c->loc[i].dev = dev;
		c->loc[i].group = g;
	}
	free(group_dev);
	/* Counting sort by group keeps each group's members in increasing order. */
	for (int i = 0; i < R; i++)
		c->first[c->loc[i].group + 1]++;
	for (int g = 0; g < c->ngroups; g++)
		c->first[g + 1] += c->first[g];
	{
		int fill[DVAR_MAX_REPLICAS];

		memcpy(fill, c->first, (size_t)c->ngroups * sizeof *fill);
		for (int i = 0; i < R; i++)
			c->members[fill[c->loc[i].group]++] = i;
	}

	for (int i = 0; i < R; i++) {
		cuda_local *L = &c->loc[i];

		if ((rc = dvar_cuda_bind(c, i)) != DVAR_OK ||
		    (rc = check(cudaStreamCreateWithFlags(&L->stream, cudaStreamNonBlocking),
		                "creating the compute stream of local replica %d on GPU %d", i,
		                L->dev)) != DVAR_OK ||
		    (rc = check(cudaStreamCreateWithFlags(&L->snap, cudaStreamNonBlocking),
		                "creating the snapshot stream of local replica %d on GPU %d", i,
		                L->dev)) != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

#if DVAR_WITH_NCCL
/* What every worker says before NCCL starts: whether its setup worked, how
 * many groups (ranks) it has, which group each local replica is in, and
 * (worker 0) the NCCL id. */
typedef struct {
	int32_t rc;
	int32_t ngroups;
	uint8_t group_of[DVAR_MAX_REPLICAS]; /* < R <= 256; zero past R */
	uint8_t uuid[DVAR_MAX_REPLICAS][16]; /* each group's GPU (cudaDeviceProp.uuid) */
	ncclUniqueId id;
} nccl_hello;

/* Every worker's hello is in: DVAR_OK when NCCL may start, else the
 * same failure on every worker. The pattern must match too, not only the
 * count: a broadcast's or all_gather's root rank is worker * ngroups +
 * group_of(local), computed from the local replica's group on this worker
 * (coll.c), so workers that group their replicas differently (devices
 * {0, 1} and {0, 0, 1, 1} for 4 replicas) would name different roots. */
static int hello_verdict(const nccl_hello *all, int W)
{
	for (int w = 0; w < W; w++)
		if (all[w].rc != DVAR_OK)
			return dvar_error_set(all[w].rc, "worker %d could not set up its GPUs", w);
	for (int w = 1; w < W; w++) {
		if (all[w].ngroups != all[0].ngroups)
			return dvar_error_set(DVAR_EINVAL,
			                      "worker 0 has %d distinct GPUs for its replicas and worker "
			                      "%d has %d: NCCL needs the same number on every worker",
			                      (int)all[0].ngroups, w, (int)all[w].ngroups);
		if (memcmp(all[w].group_of, all[0].group_of, sizeof all[0].group_of) != 0)
			return dvar_error_set(DVAR_EINVAL,
			                      "worker %d shares its GPUs among its replicas in another "
			                      "pattern than worker 0: list the devices in the same "
			                      "pattern on every worker",
			                      w);
	}
	return DVAR_OK;
}

/* Whether two workers use one GPU: NCCL cannot hold both as ranks. */
static int workers_share_a_gpu(const nccl_hello *all, int W)
{
	for (int w = 0; w < W; w++)
		for (int v = w + 1; v < W; v++)
			for (int g = 0; g < all[w].ngroups; g++)
				for (int h = 0; h < all[v].ngroups; h++)
					if (memcmp(all[w].uuid[g], all[v].uuid[h], 16) == 0)
						return 1;
	return 0;
}

/* Collective across workers (W > 1): the exchange happens whatever rc (this
 * worker's result so far) is, so a worker that failed locally does not
 * leave the others waiting; and NCCL's init runs only when every worker is
 * ready with the same number of groups, because one that skipped it would
 * leave the others waiting inside NCCL, where no timeout of ours reaches. */
static int nccl_connect(dvar_cuda *c, int rc, dvar_comm *comm, int W, int worker)
{
	char saved[DVAR_ERROR_MESSAGE_MAX];
	nccl_hello mine, *all;
	ncclUniqueId id;
	ncclResult_t end;
	int ngroups = rc == DVAR_OK ? c->ngroups : 0, nranks, xrc;

	if (W <= 1 && ngroups <= 1)
		return rc; /* one rank in all (or a local failure): nothing to connect */
	memset(&mine, 0, sizeof mine);
	if (rc == DVAR_OK && worker == 0)
		rc = nccl_check(ncclGetUniqueId(&mine.id), "making the NCCL id");
	id = mine.id;
	if (W > 1) {
		/* Without these the worker cannot take part: the others then
		 * time out in the exchange (comm.c). */
		if (!comm)
			return rc != DVAR_OK ? rc : dvar_error_set(DVAR_EINVAL, "%d workers, no comm", W);
		if (!(all = malloc((size_t)W * sizeof *all)))
			return rc != DVAR_OK ? rc : dvar_error_set(DVAR_ENOMEM, "out of memory for %d "
			                                           "workers' NCCL hellos", W);
		for (int g = 0; rc == DVAR_OK && g < ngroups; g++) {
			struct cudaDeviceProp prop;
			int dev = c->loc[c->members[c->first[g]]].dev;

			rc = check(cudaGetDeviceProperties(&prop, dev), "reading GPU %d's properties", dev);
			if (rc == DVAR_OK)
				memcpy(mine.uuid[g], prop.uuid.bytes, sizeof mine.uuid[g]);
		}
		mine.rc = rc;
		mine.ngroups = rc == DVAR_OK ? ngroups : 0;
		for (int i = 0; rc == DVAR_OK && i < c->R; i++)
			mine.group_of[i] = (uint8_t)c->loc[i].group;
		snprintf(saved, sizeof saved, "%s", rc != DVAR_OK ? dvar_error_last()->message : "");
		xrc = dvar_comm_allgather(comm, &mine, all, sizeof mine, "the NCCL id");
		if (rc != DVAR_OK)
			rc = dvar_error_restore(rc, saved); /* this worker's own failure first */
		else if (xrc != DVAR_OK)
			rc = xrc;
		else
			rc = hello_verdict(all, W);
		id = all[0].id;
		/* Every worker sees the same hellos, so all of them choose the host. */
		if (rc == DVAR_OK && workers_share_a_gpu(all, W))
			c->via_host = 1;
		free(all);
	}
	if (rc != DVAR_OK || c->via_host)
		return rc;

	/* One thread initializes several ranks: a group, or the first
	 * ncclCommInitRank would wait for the next one forever. */
	nranks = W * ngroups;
	if ((rc = nccl_check(ncclGroupStart(), "starting the NCCL init group")) != DVAR_OK)
		return rc;
	for (int g = 0; g < ngroups && rc == DVAR_OK; g++) {
		int dev = c->loc[c->members[c->first[g]]].dev;

		/* Cannot fail in practice: setup() has just used every device. */
		rc = check(cudaSetDevice(dev), "selecting GPU %d for NCCL", dev);
		if (rc == DVAR_OK)
			rc = nccl_check(ncclCommInitRank(&c->nccl[g], nranks, id, worker * ngroups + g),
			                "creating NCCL rank %d of %d on GPU %d", worker * ngroups + g,
			                nranks, dev);
	}
	end = ncclGroupEnd(); /* the ranks connect here */
	if (rc == DVAR_OK)
		rc = nccl_check(end, "connecting NCCL ranks %d..%d of %d", worker * ngroups,
		                worker * ngroups + ngroups - 1, nranks);
	if (rc != DVAR_OK) {
		/* A failed init leaves communicators that only abort may release. */
		for (int g = 0; g < ngroups; g++)
			if (c->nccl[g]) {
				(void)ncclCommAbort(c->nccl[g]);
				c->nccl[g] = NULL;
			}
	}
	return rc;
}
#endif

int dvar_cuda_open(dvar_cuda **out, int R, const int *devices, int ndev, dvar_comm *comm, int W,
                   int worker)
{
	dvar_cuda *c = calloc(1, sizeof *c);
	int rc;

	*out = NULL;
	if (c) {
		c->R = R;
		c->W = W;
		c->worker = worker;
		rc = setup(c, devices, ndev);
	} else {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory for the CUDA state");
	}
#if DVAR_WITH_NCCL
	rc = nccl_connect(c, rc, comm, W, worker);
#else
	(void)comm;
	if (rc == DVAR_OK && (W > 1 || c->ngroups > 1))
		c->via_host = 1; /* nothing else connects the GPUs */
#endif
	if (rc != DVAR_OK) {
		dvar_cuda_close(c);
		return rc;
	}
	*out = c;
	return DVAR_OK;
}

void dvar_cuda_close(dvar_cuda *c)
{
	if (!c)
		return;
	/* Errors are ignored (and cleared): nothing more can be done here, and
	 * the caller's error record may hold the failure that led to close. */
	if (c->loc)
		for (int i = 0; i < c->R; i++) {
			if (cudaSetDevice(c->loc[i].dev) != cudaSuccess)
				continue;
			/* Pending snapshots may target host memory freed next. */
			if (c->loc[i].stream)
				(void)cudaStreamSynchronize(c->loc[i].stream);
			if (c->loc[i].snap)
				(void)cudaStreamSynchronize(c->loc[i].snap);
		}
#if DVAR_WITH_NCCL
	if (c->nccl)
		for (int g = 0; g < c->ngroups; g++)
			if (c->nccl[g]) {
				(void)cudaSetDevice(c->loc[c->members[c->first[g]]].dev);
				(void)ncclCommDestroy(c->nccl[g]);
			}
	free(c->nccl);
#endif
	if (c->loc)
		for (int i = 0; i < c->R; i++) {
			cuda_local *L = &c->loc[i];

			if (cudaSetDevice(L->dev) != cudaSuccess)
				continue;
			if (L->stream)
				(void)cudaStreamDestroy(L->stream);
			if (L->snap)
				(void)cudaStreamDestroy(L->snap);
			(void)cudaFree(L->scratch[0]); /* cudaFree(NULL) does nothing */
			(void)cudaFree(L->scratch[1]);
			(void)cudaFree(L->upload);
			(void)cudaFreeHost(L->host);
		}
	(void)cudaGetLastError();
	free(c->loc);
	free(c->members);
	free(c->first);
	free(c);
}

int dvar_cuda_bind(const dvar_cuda *c, int local)
{
	assert(local >= 0 && local < c->R);
	return check(cudaSetDevice(c->loc[local].dev), "selecting GPU %d for local replica %d",
	             c->loc[local].dev, local);
}

int dvar_cuda_device(const dvar_cuda *c, int local)
{
	assert(local >= 0 && local < c->R);
	return c->loc[local].dev;
}

cudaStream_t dvar_cuda_stream(const dvar_cuda *c, int local)
{
	assert(local >= 0 && local < c->R);
	return c->loc[local].stream;
}

/* ---------------------------------------------------------------- groups */

int dvar_cuda_num_groups(const dvar_cuda *c)
{
	return c->ngroups;
}

int dvar_cuda_num_ranks(const dvar_cuda *c)
{
	return c->W * c->ngroups;
}

int dvar_cuda_group_of(const dvar_cuda *c, int local)
{
	assert(local >= 0 && local < c->R);
	return c->loc[local].group;
}

int dvar_cuda_leader(const dvar_cuda *c, int group)
{
	assert(group >= 0 && group < c->ngroups);
	return c->members[c->first[group]];
}

int dvar_cuda_members(const dvar_cuda *c, int group, const int **members)
{
	assert(group >= 0 && group < c->ngroups);
	*members = c->members + c->first[group];
	return c->first[group + 1] - c->first[group];
}

int dvar_cuda_via_host(const dvar_cuda *c)
{
	return c->via_host;
}

int dvar_cuda_rank(const dvar_cuda *c, int group)
{
	assert(group >= 0 && group < c->ngroups);
	return c->worker * c->ngroups + group;
}

#if DVAR_WITH_NCCL
ncclComm_t dvar_cuda_comm(const dvar_cuda *c, int group)
{
	assert(group >= 0 && group < c->ngroups);
	return c->nccl[group];
}
#endif

/* ---------------------------------------------------------------- buffers */

int dvar_cuda_is_device(const void *p)
{
	struct cudaPointerAttributes a;

	if (!p)
		return 0;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError(); /* no driver, or a pointer CUDA does not know */
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* 1 when a kernel on GPU dev may read p as it is: that GPU's memory, or
 * managed memory. Host memory and other GPUs' memory are staged. */
static int resident(const void *p, int dev)
{
	struct cudaPointerAttributes a;

	if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeManaged || (a.type == cudaMemoryTypeDevice && a.device == dev);
}

int dvar_cuda_is_resident(const dvar_cuda *c, int local, const void *p)
{
	assert(local >= 0 && local < c->R);
	return resident(p, c->loc[local].dev);
}

/* Make *buf at least bytes (and at least one byte) of GPU dev's memory, or
 * of page-locked host memory when pinned; growing loses the contents. The
 * old buffer goes first: cudaFree waits for the device, so no queued work
 * still uses it, and the peak stays at the new size. */
static int grow(void **buf, size_t *cap, size_t bytes, int dev, int local, const char *what,
                int pinned)
{
	size_t want = bytes;

	if (*buf && *cap >= bytes)
		return DVAR_OK;
	if (want <= SIZE_MAX - GROW_STEP)
		want = (want + GROW_STEP - 1) / GROW_STEP * GROW_STEP;
	if (want == 0)
		want = GROW_STEP;
	(void)(pinned ? cudaFreeHost(*buf) : cudaFree(*buf));
	*buf = NULL;
	*cap = 0;
	if (check(pinned ? cudaHostAlloc(buf, want, cudaHostAllocPortable) : cudaMalloc(buf, want),
	          "allocating %zu bytes of %s %s GPU %d for local replica %d", want, what,
	          pinned ? "in host memory beside" : "on", dev, local) != DVAR_OK) {
		*buf = NULL;
		return dvar_error_last()->code;
	}
	*cap = want;
	return DVAR_OK;
}

/* The end of every call that queues work on local's stream: wait for the
 * stream in any case (the call is complete when it returns, and staging
 * buffers are free again), then report the first failure: rc (before the
 * work was queued), queued (queuing it), or the work itself. */
static int finish(dvar_cuda *c, int local, int rc, cudaError_t queued, const char *fmt, ...)
	DVAR_PRINTF(5, 6);
static int finish(dvar_cuda *c, int local, int rc, cudaError_t queued, const char *fmt, ...)
{
	cuda_local *L = &c->loc[local];
	cudaError_t done = cudaStreamSynchronize(L->stream);
	char what[400];
	va_list ap;

	if (rc != DVAR_OK)
		return rc;
	if (queued == cudaSuccess)
		queued = done;
	if (queued == cudaSuccess)
		return DVAR_OK;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return check(queued, "%s on GPU %d for local replica %d", what, L->dev, local);
}

void *dvar_cuda_scratch(dvar_cuda *c, int local, int slot, size_t bytes)
{
	cuda_local *L;

	assert(slot == 0 || slot == 1);
	if (dvar_cuda_bind(c, local) != DVAR_OK)
		return NULL;
	L = &c->loc[local];
	if (grow(&L->scratch[slot], &L->scratch_cap[slot], bytes, L->dev, local,
	         slot ? "scratch (slot 1)" : "scratch (slot 0)", 0) != DVAR_OK)
		return NULL;
	return L->scratch[slot];
}

void *dvar_cuda_host_stage(dvar_cuda *c, int local, size_t bytes)
{
	cuda_local *L;

	if (dvar_cuda_bind(c, local) != DVAR_OK)
		return NULL;
	L = &c->loc[local];
	if (grow(&L->host, &L->host_cap, bytes, L->dev, local, "collective staging", 1) != DVAR_OK)
		return NULL;
	return L->host;
}

void *dvar_cuda_upload(dvar_cuda *c, int local, const void *host, size_t bytes)
{
	cuda_local *L;

	if (dvar_cuda_bind(c, local) != DVAR_OK)
		return NULL;
	L = &c->loc[local];
	if (grow(&L->upload, &L->upload_cap, bytes, L->dev, local, "upload buffer", 0) != DVAR_OK)
		return NULL;
	/* Synchronized, so the caller may reuse host at once. */
	if (bytes && finish(c, local, DVAR_OK,
	                    cudaMemcpyAsync(L->upload, host, bytes, cudaMemcpyHostToDevice, L->stream),
	                    "uploading %zu bytes", bytes) != DVAR_OK)
		return NULL;
	return L->upload;
}

/* src as something a kernel on local's GPU can read: src itself, or its
 * copy in scratch slot 1, queued on local's stream before the kernel. */
static int stage(dvar_cuda *c, int local, const void *src, size_t bytes, const void **out)
{
	cuda_local *L = &c->loc[local];
	void *tmp;

	*out = src;
	if (bytes == 0 || resident(src, L->dev))
		return DVAR_OK;
	if (!(tmp = dvar_cuda_scratch(c, local, 1, bytes)))
		return dvar_error_last()->code;
	*out = tmp;
	return check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDefault, L->stream),
	             "staging %zu bytes on GPU %d for local replica %d", bytes, L->dev, local);
}

/* ---------------------------------------------------------------- memory */

void *dvar_cuda_alloc(dvar_cuda *c, int local, size_t bytes, int zero)
{
	cuda_local *L;
	void *p = NULL;

	if (dvar_cuda_bind(c, local) != DVAR_OK)
		return NULL;
	L = &c->loc[local];
	/* bytes = 0: one real byte, so the pointer is unique, is device memory
	 * like any other, and dvar_cuda_free needs no special case. */
	if (check(cudaMalloc(&p, bytes ? bytes : 1),
	          "allocating %zu bytes on GPU %d for local replica %d", bytes, L->dev,
	          local) != DVAR_OK)
		return NULL;
	if (zero && bytes &&
	    finish(c, local, DVAR_OK, cudaMemsetAsync(p, 0, bytes, L->stream), "zeroing %zu bytes",
	           bytes) != DVAR_OK) {
		(void)cudaFree(p);
		return NULL;
	}
	return p;
}

void dvar_cuda_free(dvar_cuda *c, int local, void *p)
{
	if (!p)
		return;
	/* Errors are dropped: a free has no caller to tell, and must not
	 * replace the error the caller may be cleaning up after. */
	if (cudaSetDevice(c->loc[local].dev) == cudaSuccess)
		(void)cudaFree(p);
	(void)cudaGetLastError();
}

int dvar_cuda_copy(dvar_cuda *c, int local, void *dst, const void *src, size_t bytes)
{
	cuda_local *L = &c->loc[local];
	int rc;

	if (bytes == 0 || dst == src)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	/* cudaMemcpyDefault: the pointers say where they live (UVA), so one
	 * call covers host, this GPU and another GPU on either side. */
	return finish(c, local, DVAR_OK, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, L->stream),
	              "copying %zu bytes", bytes);
}

int dvar_cuda_apply(dvar_cuda *c, int local, int dtype, dvar_kernel_op op, void *dst,
                    const void *src, size_t count)
{
	size_t esize = dvar_dtype_size(dtype);
	cudaError_t launch = cudaSuccess;
	const void *dsrc;
	int rc;

	if (esize == 0)
		return dvar_error_set(DVAR_EINVAL, "apply: unknown dtype %d", dtype);
	if (count == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	if ((rc = stage(c, local, src, count * esize, &dsrc)) == DVAR_OK)
		launch = dvar_cuda_k_apply(c->loc[local].stream, dtype, op, dst, dsrc, count);
	return finish(c, local, rc, launch, "updating %zu elements", count);
}

int dvar_cuda_reduce(dvar_cuda *c, int local, int dtype, dvar_kernel_op op, void *dst,
                     const void *const *srcs, int n, size_t count)
{
	int rc;

	if (dvar_dtype_size(dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "reduce: unknown dtype %d", dtype);
	if (n < 1 || n > DVAR_CUDA_MAX_SOURCES || !srcs)
		return dvar_error_set(DVAR_EINVAL, "reduce: %d sources (1 to %d)", n,
		                      DVAR_CUDA_MAX_SOURCES);
	if (count == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	/* dst and every source are the replica's own memory (device.h): no staging. */
	return finish(c, local, DVAR_OK,
	              dvar_cuda_k_reduce(c->loc[local].stream, dtype, op, dst, srcs, n, count),
	              "reducing %d x %zu elements", n, count);
}

int dvar_cuda_divide(dvar_cuda *c, int local, int dtype, void *buf, size_t count,
                     int64_t divisor)
{
	int rc;

	if (dvar_dtype_size(dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "divide: unknown dtype %d", dtype);
	if (divisor < 1)
		return dvar_error_set(DVAR_EINVAL, "divide: divisor %lld is not positive",
		                      (long long)divisor);
	if (count == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	return finish(c, local, DVAR_OK,
	              dvar_cuda_k_divide(c->loc[local].stream, dtype, buf, count, divisor),
	              "dividing %zu elements", count);
}

int dvar_cuda_split_sum(dvar_cuda *c, int local, int dtype, const void *total, void *part,
                        size_t count, int replica_id, int num_replicas)
{
	cudaError_t launch = cudaSuccess;
	const void *dtotal;
	int rc;

	/* The checks and messages of dvar_variable_split_sum. */
	if (num_replicas < 1 || replica_id < 0 || replica_id >= num_replicas)
		return dvar_error_set(DVAR_EINVAL, "split_sum: replica %d of %d is out of range",
		                      replica_id, num_replicas);
	if (count && (!total || !part))
		return dvar_error_set(DVAR_EINVAL, "split_sum: NULL buffer");
	if (dtype == DVAR_BOOL || dvar_dtype_size(dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "a %s value cannot be divided over %d replicas",
		                      dvar_dtype_name(dtype) ? dvar_dtype_name(dtype) : "non-numeric",
		                      num_replicas);
	if (count == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	if ((rc = stage(c, local, total, count * dvar_dtype_size(dtype), &dtotal)) == DVAR_OK)
		launch = dvar_cuda_k_split_sum(c->loc[local].stream, dtype, dtotal, part, count,
		                               replica_id, num_replicas);
	return finish(c, local, rc, launch, "splitting %zu elements of a SUM", count);
}

typedef struct {
	int64_t index;
	int64_t pos;
} index_pos;

static int cmp_index_pos(const void *a, const void *b)
{
	const index_pos *x = a, *y = b;

	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int dvar_cuda_scatter_rows(dvar_cuda *c, int local, int dtype, dvar_scatter_op op, void *dst,
                           size_t row_elems, const int64_t *indices, size_t n,
                           const void *updates)
{
	size_t row_bytes = row_elems * dvar_dtype_size(dtype), nseg = 0, packed_n;
	int64_t *packed, *order, *starts;
	cudaError_t launch = cudaSuccess;
	const int64_t *dpacked;
	const void *dupdates;
	index_pos *pairs;
	int rc;

	if (dvar_dtype_size(dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "scatter: unknown dtype %d", dtype);
	if (n == 0 || row_bytes == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	if (n > SIZE_MAX / (4 * sizeof(int64_t)))
		return dvar_error_set(DVAR_ENOMEM, "scatter: %zu rows is too many", n);

	/* Group the updates by row without losing their order: sort the
	 * positions by (index, position). Segment s holds the updates of one
	 * row, order[starts[s] .. starts[s + 1]), in the order given. */
	if (!(pairs = malloc(n * sizeof *pairs)))
		return dvar_error_set(DVAR_ENOMEM, "scatter: out of memory for %zu rows", n);
	for (size_t i = 0; i < n; i++) {
		pairs[i].index = indices[i];
		pairs[i].pos = (int64_t)i;
	}
	qsort(pairs, n, sizeof *pairs, cmp_index_pos);
	for (size_t k = 0; k < n; k++)
		nseg += k == 0 || pairs[k].index != pairs[k - 1].index;
	/* One upload: indices (n), order (n), starts (nseg + 1). */
	packed_n = 2 * n + nseg + 1;
	if (!(packed = malloc(packed_n * sizeof *packed))) {
		free(pairs);
		return dvar_error_set(DVAR_ENOMEM, "scatter: out of memory for %zu rows", n);
	}
	order = packed + n;
	starts = packed + 2 * n;
	memcpy(packed, indices, n * sizeof *packed);
	for (size_t k = 0, s = 0; k < n; k++) {
		if (k == 0 || pairs[k].index != pairs[k - 1].index)
			starts[s++] = (int64_t)k;
		order[k] = pairs[k].pos;
	}
	starts[nseg] = (int64_t)n;
	free(pairs);
	dpacked = dvar_cuda_upload(c, local, packed, packed_n * sizeof *packed);
	free(packed);
	if (!dpacked)
		return dvar_error_last()->code;

	if ((rc = stage(c, local, updates, n * row_bytes, &dupdates)) == DVAR_OK)
		launch = dvar_cuda_k_scatter(c->loc[local].stream, dtype, op, dst, row_elems, dpacked,
		                             dpacked + n, dpacked + 2 * n, nseg, dupdates);
	return finish(c, local, rc, launch, "scattering %zu rows", n);
}

int dvar_cuda_pin(dvar_cuda *c, void *p, size_t bytes)
{
	int rc;

	if (!p || bytes == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, 0)) != DVAR_OK)
		return rc;
	/* Portable: pinned for every GPU's copies, not only the current one's. */
	return check(cudaHostRegister(p, bytes, cudaHostRegisterPortable),
	             "pinning %zu bytes of host memory", bytes);
}

void dvar_cuda_unpin(dvar_cuda *c, void *p)
{
	if (!p)
		return;
	if (cudaSetDevice(c->loc[0].dev) == cudaSuccess)
		(void)cudaHostUnregister(p);
	(void)cudaGetLastError();
}

int dvar_cuda_snapshot(dvar_cuda *c, int local, void *dst, const void *src, size_t bytes)
{
	cuda_local *L = &c->loc[local];
	int rc;

	if (bytes == 0)
		return DVAR_OK;
	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	/* Not waited for: dvar_cuda_snapshot_wait does. The compute stream has
	 * nothing queued (every other call is complete when it returns). */
	return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, L->snap),
	             "starting a snapshot of %zu bytes from GPU %d for local replica %d", bytes,
	             L->dev, local);
}

int dvar_cuda_snapshot_wait(dvar_cuda *c, int local)
{
	int rc;

	if ((rc = dvar_cuda_bind(c, local)) != DVAR_OK)
		return rc;
	return check(cudaStreamSynchronize(c->loc[local].snap),
	             "waiting for the snapshots of local replica %d on GPU %d", local,
	             c->loc[local].dev);
}
