/*
 * runtime/cuda/cuda.h - the CUDA side of a strategy (built with
 * DVAR_WITH_CUDA): which GPU each local replica uses, its streams, device
 * memory, NCCL between GPUs and workers, and CUDA's and NCCL's errors as
 * dvar statuses. runtime/device.c hands CUDA strategies' memory calls here;
 * runtime/cuda/coll.c runs the collectives over device buffers.
 *
 * Groups. Local replicas that share a GPU form a group (replica i uses
 * devices[i % ndev]; groups are numbered by their device's first use among
 * locals 0..R-1, so with distinct devices group g holds locals g, g + ndev,
 * ...; a group's lowest local is its leader). NCCL cannot hold two ranks on
 * one device, so each group is one NCCL rank: ranks are numbered worker by
 * worker, each worker's groups in order, and a collective combines a
 * group's replicas with kernels on its GPU before NCCL combines the groups.
 * Every worker has the same R; dvar_cuda_open checks that every worker has
 * the same groups (as many, holding the same locals; device lists, or
 * visible GPUs, may differ).
 *
 * Through the host. Where NCCL cannot connect the groups (two workers use
 * one GPU, or the build has no NCCL and there is more than one GPU or
 * worker), no communicator is made: collective.c copies device buffers
 * into page-locked staging and runs the host collective (dvar_cuda_via_host).
 *
 * Threads. Each replica thread binds to its GPU when it starts
 * (dvar_cuda_bind); calls for a local from another thread (the coordinator,
 * in cross-replica context) bind first themselves. NCCL calls for a group
 * are made by its leader's thread only.
 *
 * Ownership: dvar_cuda_open's object owns its streams, scratch, upload and
 * host staging buffers and NCCL communicators; dvar_cuda_close releases them.
 */
#ifndef DVAR_RUNTIME_CUDA_H
#define DVAR_RUNTIME_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dvar_features.h"
#if DVAR_WITH_NCCL
#include <nccl.h>
#endif

#include "runtime/engine.h"

DVAR_BEGIN_DECL

typedef struct dvar_cuda dvar_cuda;

/* ---------------------------------------------------------------- errors */

/**
 * DVAR_OK for cudaSuccess; otherwise DVAR_EDEVICE (DVAR_ENOMEM for
 * cudaErrorMemoryAllocation) with "<what>: <CUDA's name>: <CUDA's text>"
 * set. Clears a non-sticky error so the next call does not see it.
 */
int dvar_cuda_status(cudaError_t err, const char *what);

#if DVAR_WITH_NCCL
/** The same for NCCL: "<what>: NCCL <ncclGetErrorString> (<last error>)". */
int dvar_nccl_status(ncclResult_t res, const char *what);
#endif

/**
 * How many CUDA devices this process sees: DVAR_OK and *count >= 1, or
 * DVAR_EDEVICE saying why there are none (no driver, no device, CUDA's
 * message) with *count = 0.
 */
int dvar_cuda_visible(int *count);

/* ---------------------------------------------------------------- lifetime */

/**
 * Collective across workers (comm: NULL for one worker): set up the CUDA
 * side of a strategy of R local replicas on devices[0..ndev) (ndev = 0: all
 * visible devices, in order). Checks every device exists; creates per
 * local replica a compute stream and a snapshot stream (non-blocking); per
 * group, with NCCL and more than one rank in all, one communicator rank.
 * With NCCL and W > 1 every worker then takes part in one allgather over
 * comm, whatever its own setup gave: its status, its groups and (worker 0)
 * the NCCL unique id. NCCL's init runs only when every worker succeeded
 * with the same groups; otherwise every worker returns
 * an error without entering it (its own error, or one naming the first
 * failing worker), since a worker that skipped NCCL's init would leave the
 * others waiting in it with no timeout. The caller's agreement
 * (strategy.c) then reports the failure.
 */
int dvar_cuda_open(dvar_cuda **out, int R, const int *devices, int ndev, dvar_comm *comm, int W,
                   int worker);

/** Release everything (NULL is a no-op). Replica threads must be stopped. */
void dvar_cuda_close(dvar_cuda *c);

/** Make local's GPU current on the calling thread. */
int dvar_cuda_bind(const dvar_cuda *c, int local);

/** The CUDA device ordinal of local replica local. */
int dvar_cuda_device(const dvar_cuda *c, int local);

/** local's compute stream: where dvar's work for it runs. */
cudaStream_t dvar_cuda_stream(const dvar_cuda *c, int local);

/* ---------------------------------------------------------------- groups */

/** The number of groups on this worker (distinct devices), and in all (NCCL ranks). */
int dvar_cuda_num_groups(const dvar_cuda *c);
int dvar_cuda_num_ranks(const dvar_cuda *c);

/** local's group (0..num_groups), its leader, and the group's members in increasing order. */
int dvar_cuda_group_of(const dvar_cuda *c, int local);
int dvar_cuda_leader(const dvar_cuda *c, int group);
int dvar_cuda_members(const dvar_cuda *c, int group, const int **members);

/**
 * 1 when collectives over device buffers go through host memory: workers
 * share a GPU (NCCL cannot put two ranks on one), or this build has no NCCL
 * and there is more than one GPU or worker. The same on every worker.
 */
int dvar_cuda_via_host(const dvar_cuda *c);

/** This worker's group g's NCCL rank: worker * num_groups + g. */
int dvar_cuda_rank(const dvar_cuda *c, int group);

#if DVAR_WITH_NCCL
/** Group g's communicator (NULL with one rank in all: nothing to talk to). */
ncclComm_t dvar_cuda_comm(const dvar_cuda *c, int group);
#endif

/* ---------------------------------------------------------------- memory */

/** 1 when p is device or managed memory (cudaPointerGetAttributes). */
int dvar_cuda_is_device(const void *p);

/** 1 when p is local's GPU's memory or managed memory: kernels there may use it as it is. */
int dvar_cuda_is_resident(const dvar_cuda *c, int local, const void *p);

/* The device side of runtime/device.h, same contracts. */
void *dvar_cuda_alloc(dvar_cuda *c, int local, size_t bytes, int zero);
void dvar_cuda_free(dvar_cuda *c, int local, void *p);
int dvar_cuda_copy(dvar_cuda *c, int local, void *dst, const void *src, size_t bytes);
int dvar_cuda_apply(dvar_cuda *c, int local, int dtype, dvar_kernel_op op, void *dst,
                    const void *src, size_t count);
int dvar_cuda_reduce(dvar_cuda *c, int local, int dtype, dvar_kernel_op op, void *dst,
                     const void *const *srcs, int n, size_t count);
int dvar_cuda_divide(dvar_cuda *c, int local, int dtype, void *buf, size_t count,
                     int64_t divisor);
int dvar_cuda_split_sum(dvar_cuda *c, int local, int dtype, const void *total, void *part,
                        size_t count, int replica_id, int num_replicas);
int dvar_cuda_scatter_rows(dvar_cuda *c, int local, int dtype, dvar_scatter_op op, void *dst,
                           size_t row_elems, const int64_t *indices, size_t n,
                           const void *updates);
int dvar_cuda_pin(dvar_cuda *c, void *p, size_t bytes);
void dvar_cuda_unpin(dvar_cuda *c, void *p);
int dvar_cuda_snapshot(dvar_cuda *c, int local, void *dst, const void *src, size_t bytes);
int dvar_cuda_snapshot_wait(dvar_cuda *c, int local);

/**
 * Scratch device memory of local's GPU for a collective: at least bytes,
 * kept and grown by the strategy (one buffer per local and slot 0..1; a
 * call that needs no more than the buffer holds returns it unchanged, so
 * bytes = 0 fetches it). Growing frees the old buffer: pointers to it die.
 * NULL with the error set when out of memory. Calls for one local are never
 * concurrent (device.h). Slot 1 is also where apply, split_sum and
 * scatter_rows stage a source that is not on local's GPU: its contents do
 * not survive those calls.
 */
void *dvar_cuda_scratch(dvar_cuda *c, int local, int slot, size_t bytes);

/**
 * Page-locked host memory of at least bytes for local's part in a
 * collective through the host, kept and grown as dvar_cuda_scratch's slots
 * (growing loses the contents). NULL with the error set when out of memory.
 */
void *dvar_cuda_host_stage(dvar_cuda *c, int local, size_t bytes);

/**
 * A device copy of bytes of host memory (indices, pointers), valid until
 * local's next call to this or to dvar_cuda_scatter_rows (its own buffer,
 * grown as needed). Synchronous: host may be reused at once.
 */
void *dvar_cuda_upload(dvar_cuda *c, int local, const void *host, size_t bytes);

/* ---------------------------------------------------------------- collectives (coll.c) */

/**
 * Before replica r arrives at collective a over device buffers (its kind,
 * dtype, count, shape and dst_bytes set): wait for r's stream, and on a
 * group leader reserve the scratch the data phase needs, so that nothing
 * can fail for want of memory once the NCCL peers are committed.
 */
int dvar_cuda_coll_prepare(dvar_replica *r, const dvar_coll_args *a);

/**
 * The data phase of a decided collective over device buffers (collective.c
 * calls it after enter(), before finish()). Each group's leader does its
 * group's work on its stream and synchronizes it; the other replicas have
 * nothing to do (finish()'s barrier waits for the leader). A failure is
 * recorded in the strategy's dp_code, which finish() reports on every
 * local replica, and breaks the strategy: NCCL peers cannot be unwound.
 */
void dvar_cuda_coll_all_reduce(dvar_replica *r, const dvar_coll_args *a);
void dvar_cuda_coll_broadcast(dvar_replica *r, const dvar_coll_args *a);
void dvar_cuda_coll_all_gather(dvar_replica *r, const dvar_coll_args *a);

DVAR_END_DECL

#endif
