/*
 * runtime/device.h - where a strategy keeps its replicas' data: host memory
 * (the CPU runtime) or, on a CUDA strategy, each replica's GPU. Variables,
 * values and the store allocate, copy and combine replica data only through
 * these calls, so one code path serves both; on a host strategy each is the
 * plain host operation (memcpy, the kernels of runtime.h).
 *
 * `local` names the local replica whose memory (and, on a GPU, whose device
 * and stream) a call uses. Calls for different locals may run at once (from
 * the replica threads); calls for one local may not. Every call is complete
 * when it returns (device work is synchronized), except dvar_mem_snapshot,
 * which dvar_mem_snapshot_wait completes. Pointers passed as sources may be
 * host or device memory on a CUDA strategy (dvar looks); destinations are
 * the replica's own memory unless said otherwise. On failure the error is
 * set ("what" names the operation in messages).
 *
 * Not installed; implemented in runtime/device.c, which hands CUDA
 * strategies to runtime/cuda/.
 */
#ifndef DVAR_RUNTIME_DEVICE_H
#define DVAR_RUNTIME_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

DVAR_BEGIN_DECL

/** 1 when s keeps its replicas' data on CUDA devices. */
int dvar_mem_on_device(const dvar_strategy *s);

/** 1 when p is device (or managed) memory; always 0 on a host strategy. */
int dvar_mem_is_device(const dvar_strategy *s, const void *p);

/**
 * 1 when p can stand for local replica local's own memory as it is (a
 * collective's buffer that its GPU's kernels and NCCL use directly):
 * memory of its GPU, or managed memory, on a CUDA strategy; any memory on
 * a host strategy. Another GPU's memory is not: copy through the
 * replica's own (dvar_mem_copy reaches every GPU).
 */
int dvar_mem_is_local(const dvar_strategy *s, int local, const void *p);

/**
 * bytes of memory for local replica local's data: page-aligned host memory
 * (dvar_page_alloc), or device memory on its GPU. Zero-filled when zero.
 * NULL with the error set when out of memory. bytes = 0 gives a valid
 * pointer that dvar_mem_free accepts.
 */
void *dvar_mem_alloc(dvar_strategy *s, int local, size_t bytes, int zero);

/** Release dvar_mem_alloc's memory (NULL is a no-op). */
void dvar_mem_free(dvar_strategy *s, int local, void *p);

/** Copy bytes from src to dst, either of them host or device memory. */
int dvar_mem_copy(dvar_strategy *s, int local, void *dst, const void *src, size_t bytes);

/** dst[i] = dst[i] op src[i] for count elements (dvar_kernel_apply). */
int dvar_mem_apply(dvar_strategy *s, int local, int dtype, dvar_kernel_op op, void *dst,
                   const void *src, size_t count);

/** dvar_kernel_reduce on the replica's memory: dst and srcs[0..n) all its own. */
int dvar_mem_reduce(dvar_strategy *s, int local, int dtype, dvar_kernel_op op, void *dst,
                    const void *const *srcs, int n, size_t count);

/** dvar_kernel_divide on the replica's memory. */
int dvar_mem_divide(dvar_strategy *s, int local, int dtype, void *buf, size_t count,
                    int64_t divisor);

/** dvar_variable_split_sum into part (the replica's memory), total anywhere. */
int dvar_mem_split_sum(dvar_strategy *s, int local, int dtype, const void *total, void *part,
                       size_t count, int replica_id, int num_replicas);

/**
 * dvar_variable_scatter_rows into dst (the replica's memory): indices are
 * host memory and in range; updates host or device memory. The same order
 * rules: rows with the same index are applied in the order given.
 */
int dvar_mem_scatter_rows(dvar_strategy *s, int local, int dtype, dvar_scatter_op op, void *dst,
                          size_t row_elems, const int64_t *indices, size_t n,
                          const void *updates);

/**
 * Page-lock host memory that device copies will target (the store's
 * staging), so that they run at full speed and asynchronously; a no-op on
 * a host strategy. dvar_mem_unpin undoes it (NULL is a no-op).
 */
int dvar_mem_pin(dvar_strategy *s, void *p, size_t bytes);
void dvar_mem_unpin(dvar_strategy *s, void *p);

/**
 * Start copying bytes of the replica's data at src into host memory at dst
 * (pinned: dvar_mem_pin) on the replica's snapshot stream, which is not
 * the stream its computations use; on a host strategy, copy now. Several
 * snapshots of one replica may be pending; dvar_mem_snapshot_wait waits for
 * them all and returns the first failure.
 */
int dvar_mem_snapshot(dvar_strategy *s, int local, void *dst, const void *src, size_t bytes);
int dvar_mem_snapshot_wait(dvar_strategy *s, int local);

DVAR_END_DECL

#endif
