/*
 * runtime/cuda/kernels.h - the device versions of runtime/kernels.c and of
 * the variable kernels (the SUM split, row scatters), with the same
 * arithmetic bit for bit: integers wrap, float16 and bfloat16 compute in
 * float32 and round to nearest-even after every step, MIN and MAX
 * propagate NaN, n sources combine left to right. Implemented in
 * kernels.cu; the element operations are __host__ __device__, so a host
 * test checks them against runtime/kernels.c on machines without a GPU.
 *
 * Every launcher enqueues on stream and returns the launch's error (the
 * kernel runs asynchronously); pointers are device memory of the stream's
 * device, aligned to the element size (any element offset into a dvar
 * buffer is). count = 0 launches nothing. An unknown dtype or op, or bool
 * where arithmetic is asked, gives cudaErrorInvalidValue. NaN results are
 * the host's (x86-64 SSE: the NaN operand quieted, the left one when both
 * are; inf - inf gives the negative default NaN), not the GPU's canonical
 * NaN; where two NaNs meet in an ADD, kernels.c's pick depends on gcc's
 * operand order, and the device keeps the left operand (the running result).
 */
#ifndef DVAR_RUNTIME_CUDA_KERNELS_H
#define DVAR_RUNTIME_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The most sources one dvar_cuda_k_reduce takes (the replicas of a worker). */
#define DVAR_CUDA_MAX_SOURCES 256

/** The most destinations one pass of dvar_cuda_k_reduce_to writes. */
#define DVAR_CUDA_MAX_DESTINATIONS 64

/**
 * dst[i] = srcs[0][i] op ... op srcs[n-1][i] (dvar_kernel_reduce); dst may
 * alias any source. srcs is host memory holding n device pointers
 * (1 <= n <= DVAR_CUDA_MAX_SOURCES), read before the call returns.
 */
cudaError_t dvar_cuda_k_reduce(cudaStream_t stream, int dtype, dvar_kernel_op op, void *dst,
                               const void *const *srcs, int n, size_t count);

/**
 * Every dsts[j] (0 <= j < m) receives srcs[0][i] op ... op srcs[n-1][i],
 * then divided by divisor when it is at least 2 (a MEAN: op must be
 * DVAR_KOP_ADD, else cudaErrorInvalidValue): the reduce, the
 * divide and m - 1 copies of the result in one pass over the memory, the
 * same bytes as dvar_cuda_k_reduce, dvar_cuda_k_divide and copies. A
 * destination may equal any source or another destination; otherwise the
 * buffers must not overlap. srcs and dsts are host memory holding device
 * pointers, read before the call returns. Above DVAR_CUDA_MAX_DESTINATIONS
 * destinations the others are copies of dsts[0] made after the pass.
 */
cudaError_t dvar_cuda_k_reduce_to(cudaStream_t stream, int dtype, dvar_kernel_op op,
                                  void *const *dsts, int m, const void *const *srcs, int n,
                                  size_t count, int64_t divisor);

/**
 * The same over n equal-length segments of one buffer: dst[i] =
 * src[0 * stride + i] op src[1 * stride + i] op ... (stride in elements);
 * dst may alias segment 0. What a reduce-scatter's receive buffer needs.
 */
cudaError_t dvar_cuda_k_reduce_strided(cudaStream_t stream, int dtype, dvar_kernel_op op,
                                       void *dst, const void *src, int n, size_t stride,
                                       size_t count);

/** dst[i] = dst[i] op src[i] (dvar_kernel_apply). */
cudaError_t dvar_cuda_k_apply(cudaStream_t stream, int dtype, dvar_kernel_op op, void *dst,
                              const void *src, size_t count);

/** buf[i] /= divisor (dvar_kernel_divide: floats divide, integers truncate;
 *  divisor <= 1 leaves buf as it is). */
cudaError_t dvar_cuda_k_divide(cudaStream_t stream, int dtype, void *buf, size_t count,
                               int64_t divisor);

/**
 * part = replica replica_id's share of total over num_replicas replicas
 * (dvar_variable_split_sum: floats total / divisor, divisor being N
 * rounded to the dtype as divisor_in does; integers floor division with
 * the remainder one each to replicas 0..r-1). part may equal total. The
 * caller checks the dtype (not bool) and the replica range.
 */
cudaError_t dvar_cuda_k_split_sum(cudaStream_t stream, int dtype, const void *total, void *part,
                                  size_t count, int replica_id, int num_replicas);

/**
 * Row scatter (dvar_variable_scatter_rows) without races: the n updates
 * are grouped by target row on the host (order: the update positions
 * sorted stably by index; starts: nseg + 1 offsets into order, one segment
 * per distinct index), and each thread applies one segment's updates to
 * one column in order. indices, order and starts are device copies.
 */
cudaError_t dvar_cuda_k_scatter(cudaStream_t stream, int dtype, dvar_scatter_op op, void *dst,
                                size_t row_elems, const int64_t *indices, const int64_t *order,
                                const int64_t *starts, size_t nseg, const void *updates);

/**
 * Host test hook (no GPU needed): the device element code run on the host
 * over host buffers, for comparison with runtime/kernels.c. kind: 0 reduce
 * (dst = srcs[0..n) combined by op, then, for DVAR_KOP_ADD alone, divided
 * by divisor when it is at least 2: dvar_cuda_k_reduce_to's pass, thread by
 * thread as a grid runs it), 1 divide (dst in place by divisor;
 * srcs, n unused), 2 split_sum (dst = the share of srcs[0], which may equal
 * dst; replica_id, num_replicas in divisor's low and high 32 bits). Returns
 * 0, or -1 for an unknown kind, dtype or op, bool, n outside
 * [1, DVAR_CUDA_MAX_SOURCES] or a replica outside [0, num_replicas).
 */
int dvar_cuda_k_host_check(int kind, int dtype, dvar_kernel_op op, void *dst,
                           const void *const *srcs, int n, size_t count, int64_t divisor);

#ifdef __cplusplus
}
#endif

#endif
