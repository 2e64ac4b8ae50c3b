/*
 * runtime/device.c - replica memory (device.h): the host operations for a
 * CPU strategy, the CUDA backend's (runtime/cuda/) for a CUDA one. A build
 * without CUDA has only CPU strategies.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dvar_features.h"
#include "runtime/device.h"
#include "runtime/engine.h"
#if DVAR_WITH_CUDA
#include "runtime/cuda/cuda.h"
#define CUDA_OF(s) ((dvar_cuda *)(s)->cuda)
#endif

int dvar_mem_on_device(const dvar_strategy *s)
{
	return s->cuda != NULL;
}

int dvar_mem_is_device(const dvar_strategy *s, const void *p)
{
#if DVAR_WITH_CUDA
	if (s->cuda && p)
		return dvar_cuda_is_device(p);
#endif
	(void)s, (void)p;
	return 0;
}

int dvar_mem_is_local(const dvar_strategy *s, int local, const void *p)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_is_resident(CUDA_OF(s), local, p);
#endif
	(void)s, (void)local, (void)p;
	return 1;
}

void *dvar_mem_alloc(dvar_strategy *s, int local, size_t bytes, int zero)
{
	void *p;

#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_alloc(CUDA_OF(s), local, bytes, zero);
#endif
	(void)local;
	if (!(p = dvar_page_alloc(bytes, zero)))
		dvar_error_set(DVAR_ENOMEM, "out of memory for %zu bytes", bytes);
	return p;
}

void dvar_mem_free(dvar_strategy *s, int local, void *p)
{
#if DVAR_WITH_CUDA
	if (s->cuda) {
		dvar_cuda_free(CUDA_OF(s), local, p);
		return;
	}
#endif
	(void)s, (void)local;
	free(p);
}

int dvar_mem_copy(dvar_strategy *s, int local, void *dst, const void *src, size_t bytes)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_copy(CUDA_OF(s), local, dst, src, bytes);
#endif
	(void)s, (void)local;
	if (bytes && dst != src)
		memcpy(dst, src, bytes);
	return DVAR_OK;
}

int dvar_mem_apply(dvar_strategy *s, int local, int dtype, dvar_kernel_op op, void *dst,
                   const void *src, size_t count)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_apply(CUDA_OF(s), local, dtype, op, dst, src, count);
#endif
	(void)s, (void)local;
	dvar_kernel_apply(dtype, op, dst, src, count);
	return DVAR_OK;
}

int dvar_mem_reduce(dvar_strategy *s, int local, int dtype, dvar_kernel_op op, void *dst,
                    const void *const *srcs, int n, size_t count)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_reduce(CUDA_OF(s), local, dtype, op, dst, srcs, n, count);
#endif
	(void)s, (void)local;
	dvar_kernel_reduce(dtype, op, dst, srcs, n, count);
	return DVAR_OK;
}

int dvar_mem_divide(dvar_strategy *s, int local, int dtype, void *buf, size_t count,
                    int64_t divisor)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_divide(CUDA_OF(s), local, dtype, buf, count, divisor);
#endif
	(void)s, (void)local;
	dvar_kernel_divide(dtype, buf, count, divisor);
	return DVAR_OK;
}

int dvar_mem_split_sum(dvar_strategy *s, int local, int dtype, const void *total, void *part,
                       size_t count, int replica_id, int num_replicas)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_split_sum(CUDA_OF(s), local, dtype, total, part, count, replica_id,
		                           num_replicas);
#endif
	(void)s, (void)local;
	return dvar_variable_split_sum(dtype, total, part, count, replica_id, num_replicas);
}

int dvar_mem_scatter_rows(dvar_strategy *s, int local, int dtype, dvar_scatter_op op, void *dst,
                          size_t row_elems, const int64_t *indices, size_t n,
                          const void *updates)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_scatter_rows(CUDA_OF(s), local, dtype, op, dst, row_elems, indices, n,
		                              updates);
#endif
	(void)s, (void)local;
	dvar_variable_scatter_rows(dtype, op, dst, row_elems, indices, n, updates);
	return DVAR_OK;
}

int dvar_mem_pin(dvar_strategy *s, void *p, size_t bytes)
{
#if DVAR_WITH_CUDA
	if (s->cuda && p && bytes)
		return dvar_cuda_pin(CUDA_OF(s), p, bytes);
#endif
	(void)s, (void)p, (void)bytes;
	return DVAR_OK;
}

void dvar_mem_unpin(dvar_strategy *s, void *p)
{
#if DVAR_WITH_CUDA
	if (s->cuda && p)
		dvar_cuda_unpin(CUDA_OF(s), p);
#endif
	(void)s, (void)p;
}

int dvar_mem_snapshot(dvar_strategy *s, int local, void *dst, const void *src, size_t bytes)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_snapshot(CUDA_OF(s), local, dst, src, bytes);
#endif
	return dvar_mem_copy(s, local, dst, src, bytes);
}

int dvar_mem_snapshot_wait(dvar_strategy *s, int local)
{
#if DVAR_WITH_CUDA
	if (s->cuda)
		return dvar_cuda_snapshot_wait(CUDA_OF(s), local);
#endif
	(void)s, (void)local;
	return DVAR_OK;
}
