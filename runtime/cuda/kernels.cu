/*
 * runtime/cuda/kernels.cu - the device side of runtime/kernels.c and of the
 * variable kernels (the SUM split, row scatters), bit for bit: reduce,
 * apply, divide, split_sum and scatter over device buffers (kernels.h).
 *
 * Every element operation is a __host__ __device__ function, and
 * dvar_cuda_k_host_check runs them on the host, so that
 * tests/unit/runtime/test_cuda_kernels.c compares them with kernels.c on
 * machines without a GPU. Where the hardware would decide differently on a
 * GPU, the code decides itself, with integer bit manipulation:
 *  - float16 / bfloat16 conversions are kernels.c's, not cuda_fp16's;
 *  - NaN results: a GPU's float arithmetic returns one canonical NaN
 *    (0x7fffffff); both sides return narrow.h's instead (the left NaN
 *    operand quieted, else the right one, else a negative default NaN).
 *
 * Launch shape: grid-stride loops, THREADS threads per block, at most
 * MAX_BLOCKS blocks, size_t indices (counts above 2^32 are fine); a
 * reduce thread takes UNROLL elements a grid stride apart per round. Pointers
 * must be aligned to their element size, since elements are loaded as
 * their own type: dvar's buffers are, and so is any element offset into
 * them (all_reduce_n's concatenations included).
 *
 * Must not be built with --use_fast_math or -ftz=true: float32 arithmetic
 * must keep subnormals and divide correctly rounded, as on the host.
 */
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include <cuda_runtime.h>

#include "runtime/cuda/kernels.h"
#include "runtime/narrow.h"

#ifdef __USE_FAST_MATH__
#error "runtime/cuda/kernels.cu must not be built with --use_fast_math (subnormals, IEEE division)"
#endif

#define HD __host__ __device__ __forceinline__

enum {
	THREADS = 256,
	MAX_BLOCKS = 65535 * 4,
	/* Elements a reduce thread takes per round (k_reduce). */
	UNROLL = 4,
	/* Source pointers a reduce launch takes by value in its parameters:
	 * 512 bytes for the usual few replicas, 2 KiB up to
	 * DVAR_CUDA_MAX_SOURCES; with the 520 bytes of the destinations, within
	 * the 4 KiB a launch may pass. */
	FEW_SOURCES = 64
};

/* ---------------------------------------------------------------- the host's NaN rules */

/* f32_bits, select32, mask32, the float16 / bfloat16 conversions and the
 * NaN of a NaN result (f32_nan_rule, f64_nan_rule): runtime/narrow.h,
 * kernels.c's own, so the two agree bit for bit. */
HD float nan_rule(float a, float b, float r)
{
	return f32_nan_rule(a, b, r);
}

HD double nan_rule(double a, double b, double r)
{
	return f64_nan_rule(a, b, r);
}

template <typename F> HD F nan_add(F a, F b)
{
	return nan_rule(a, b, a + b);
}

template <typename F> HD F nan_sub(F a, F b)
{
	return nan_rule(a, b, a - b);
}

template <typename F> HD F nan_div(F a, F b)
{
	return nan_rule(a, b, a / b);
}

/* kernels.c's OP_FMIN / OP_FMAX: a NaN operand wins (a when a is NaN, else
 * b), picked unchanged (a select, no arithmetic). */
template <typename F> HD F nan_min(F a, F b)
{
	return (a < b || a != a) ? a : b;
}

template <typename F> HD F nan_max(F a, F b)
{
	return (a > b || a != a) ? a : b;
}

/* ---------------------------------------------------------------- element classes */

/*
 * What one reduce step is for a dtype and an operator: mem_t is the type
 * in memory, acc_t the running result's; load widens, step combines (and
 * rounds where kernels.c rounds), store narrows. A reduce is
 * store(step(...step(step(load(s0), load(s1)), load(s2))...)).
 */

/* dvar_kernel_divide of one element by d >= 2. Integers: C's `/` in
 * int64_t or uint64_t (the signedness of S, the dtype's own type)
 * truncates toward zero and cannot overflow. Floats: x / (F)d in the
 * dtype; float16 / bfloat16 through float32, rounded once. */
template <typename S> HD S div_int(S x, int64_t d)
{
	typedef typename std::conditional<std::is_signed<S>::value, int64_t, uint64_t>::type W;

	return (S)((W)x / (W)d);
}

/* What integers and float32 / float64 share: computed in the type in
 * memory, no widening or narrowing. */
template <typename T, int OP> struct plain_elem {
	typedef T mem_t;
	typedef T acc_t;
	static constexpr int op = OP;

	static HD T load(T x) { return x; }
	static HD T store(T a) { return a; }
};

/* Integers: ADD and SUB are instantiated with the unsigned type of the
 * width, T (wraps without UB), MIN and MAX with the dtype's own type S;
 * divide is S's. */
template <typename T, typename S, int OP> struct int_elem : plain_elem<T, OP> {
	static HD T step(T a, T b)
	{
		switch (OP) {
		case DVAR_KOP_ADD: return (T)(a + b);
		case DVAR_KOP_SUB: return (T)(a - b);
		case DVAR_KOP_MIN: return a < b ? a : b;
		default: return a > b ? a : b;
		}
	}
	static HD T divide(T x, int64_t d) { return (T)div_int<S>((S)x, d); }
};

template <typename U, typename S> struct int_kind {
	static_assert(std::is_unsigned<U>::value && sizeof(U) == sizeof(S), "U: S's unsigned twin");
	template <int OP>
	using elem = int_elem<typename std::conditional<OP == DVAR_KOP_ADD || OP == DVAR_KOP_SUB,
	                                                U, S>::type,
	                      S, OP>;
};

/* float32 and float64: computed in their own type. */
template <typename F> struct float_kind {
	template <int OP> struct elem : plain_elem<F, OP> {
		static HD F step(F a, F b)
		{
			switch (OP) {
			case DVAR_KOP_ADD: return nan_add(a, b);
			case DVAR_KOP_SUB: return nan_sub(a, b);
			case DVAR_KOP_MIN: return nan_min(a, b);
			default: return nan_max(a, b);
			}
		}
		static HD F divide(F x, int64_t d) { return nan_div(x, (F)d); }
	};
};

/* float16 (BF = false) and bfloat16 (BF = true): widened to float32
 * exactly, ADD and SUB rounded back after every step (kernels.c's
 * F16_ROUND / BF16_ROUND), MIN and MAX not (they pick an operand, already
 * in the narrow type); store rounds once more, which is exact for a
 * rounded value and quiets a NaN that MIN or MAX picked. */
template <bool BF> struct narrow_kind {
	static HD float widen(uint16_t h) { return BF ? bf16_to_f32(h) : f16_to_f32(h); }
	static HD uint16_t narrow(float x) { return BF ? f32_to_bf16(x) : f32_to_f16(x); }

	template <int OP> struct elem {
		typedef uint16_t mem_t;
		typedef float acc_t;
		static constexpr int op = OP;

		static HD float load(uint16_t x) { return widen(x); }
		static HD uint16_t store(float a) { return narrow(a); }
		static HD float step(float a, float b)
		{
			switch (OP) {
			case DVAR_KOP_ADD: return widen(narrow(nan_add(a, b)));
			case DVAR_KOP_SUB: return widen(narrow(nan_sub(a, b)));
			case DVAR_KOP_MIN: return nan_min(a, b);
			default: return nan_max(a, b);
			}
		}
		static HD uint16_t divide(uint16_t x, int64_t d)
		{
			return narrow(nan_div(widen(x), (float)d));
		}
	};
};

/* Calls f(E<op>()) for the element class of op; -1 for an unknown op. */
template <template <int> class E, class F> static int visit_ops(int op, F &f)
{
	switch (op) {
	case DVAR_KOP_ADD: f(E<DVAR_KOP_ADD>()); return 0;
	case DVAR_KOP_SUB: f(E<DVAR_KOP_SUB>()); return 0;
	case DVAR_KOP_MIN: f(E<DVAR_KOP_MIN>()); return 0;
	case DVAR_KOP_MAX: f(E<DVAR_KOP_MAX>()); return 0;
	}
	return -1;
}

/* Calls f with the element class of (dtype, op); -1 for bool, an unknown
 * dtype or an unknown op (what kernels.c's kernels_for refuses). */
template <class F> static int visit_arith(int dtype, int op, F &&f)
{
	switch (dtype) {
	case DVAR_UINT8: return visit_ops<int_kind<uint8_t, uint8_t>::elem>(op, f);
	case DVAR_INT8: return visit_ops<int_kind<uint8_t, int8_t>::elem>(op, f);
	case DVAR_UINT16: return visit_ops<int_kind<uint16_t, uint16_t>::elem>(op, f);
	case DVAR_INT16: return visit_ops<int_kind<uint16_t, int16_t>::elem>(op, f);
	case DVAR_UINT32: return visit_ops<int_kind<uint32_t, uint32_t>::elem>(op, f);
	case DVAR_INT32: return visit_ops<int_kind<uint32_t, int32_t>::elem>(op, f);
	case DVAR_UINT64: return visit_ops<int_kind<uint64_t, uint64_t>::elem>(op, f);
	case DVAR_INT64: return visit_ops<int_kind<uint64_t, int64_t>::elem>(op, f);
	case DVAR_FLOAT16: return visit_ops<narrow_kind<false>::elem>(op, f);
	case DVAR_BFLOAT16: return visit_ops<narrow_kind<true>::elem>(op, f);
	case DVAR_FLOAT32: return visit_ops<float_kind<float>::elem>(op, f);
	case DVAR_FLOAT64: return visit_ops<float_kind<double>::elem>(op, f);
	}
	return -1;
}

/* Bytes per element of a dtype the kernels know (bool included), else 0. */
static size_t elem_size(int dtype)
{
	switch (dtype) {
	case DVAR_BOOL:
	case DVAR_UINT8:
	case DVAR_INT8: return 1;
	case DVAR_UINT16:
	case DVAR_INT16:
	case DVAR_FLOAT16:
	case DVAR_BFLOAT16: return 2;
	case DVAR_UINT32:
	case DVAR_INT32:
	case DVAR_FLOAT32: return 4;
	case DVAR_UINT64:
	case DVAR_INT64:
	case DVAR_FLOAT64: return 8;
	}
	return 0;
}

/* ---------------------------------------------------------------- unary maps: divide, split */

/* Element copy through an unsigned type of the width (bits unchanged). */
template <typename T> struct map_copy {
	typedef T mem_t;
	HD T operator()(T x) const { return x; }
};

/* dvar_kernel_divide by d >= 2 through the element class E of the dtype. */
template <class E> struct map_div {
	typedef typename E::mem_t mem_t;
	int64_t d;
	HD mem_t operator()(mem_t x) const { return E::divide(x, d); }
};

/* Calls f with the divide map of dtype (divisor d >= 2); -1 for bool or
 * an unknown dtype. */
template <class F> static int visit_divide(int dtype, int64_t d, F &&f)
{
	return visit_arith(dtype, DVAR_KOP_ADD, [&](auto e) { f(map_div<decltype(e)>{ d }); });
}

/* variable.c's SPLIT_SIGNED: floor division, the remainder r one each to
 * replicas 0..r-1. */
template <typename T> struct map_split_signed {
	typedef T mem_t;
	int64_t n, id;
	HD T operator()(T x) const
	{
		int64_t q = (int64_t)x / n;
		int64_t r = (int64_t)x % n;

		if (r < 0) {
			q--;
			r += n;
		}
		return (T)(q + (id < r));
	}
};

/* variable.c's SPLIT_UNSIGNED. */
template <typename T> struct map_split_unsigned {
	typedef T mem_t;
	int64_t n, id;
	HD T operator()(T x) const
	{
		uint64_t q = (uint64_t)x / (uint64_t)n;
		uint64_t r = (uint64_t)x % (uint64_t)n;

		return (T)(q + ((uint64_t)id < r));
	}
};

/* Calls f with the split map of dtype for replica id of n (1 <= n, 0 <= id
 * < n): floats divide by dvar_divisor_in(dtype, n), or copy when that is 1 (as
 * dvar_kernel_divide leaves the values alone); -1 for bool or an unknown
 * dtype. */
template <class F> static int visit_split(int dtype, int64_t n, int64_t id, F &&f)
{
	int64_t d = dvar_divisor_in(dtype, n);

	switch (dtype) {
	case DVAR_INT8: f(map_split_signed<int8_t>{ n, id }); return 0;
	case DVAR_INT16: f(map_split_signed<int16_t>{ n, id }); return 0;
	case DVAR_INT32: f(map_split_signed<int32_t>{ n, id }); return 0;
	case DVAR_INT64: f(map_split_signed<int64_t>{ n, id }); return 0;
	case DVAR_UINT8: f(map_split_unsigned<uint8_t>{ n, id }); return 0;
	case DVAR_UINT16: f(map_split_unsigned<uint16_t>{ n, id }); return 0;
	case DVAR_UINT32: f(map_split_unsigned<uint32_t>{ n, id }); return 0;
	case DVAR_UINT64: f(map_split_unsigned<uint64_t>{ n, id }); return 0;
	case DVAR_FLOAT16:
	case DVAR_BFLOAT16:
	case DVAR_FLOAT32:
	case DVAR_FLOAT64:
		if (d <= 1) {
			switch (elem_size(dtype)) {
			case 2: f(map_copy<uint16_t>()); return 0;
			case 4: f(map_copy<uint32_t>()); return 0;
			default: f(map_copy<uint64_t>()); return 0;
			}
		}
		return visit_divide(dtype, d, f);
	}
	return -1;
}

/* ---------------------------------------------------------------- per-element bodies */

/* Up to CAP source pointers, passed by value to a launch. */
template <int CAP> struct src_list {
	const void *p[CAP];

	template <typename T> HD T get(int k, size_t i) const { return ((const T *)p[k])[i]; }
};

template <int CAP> static src_list<CAP> make_list(const void *const *srcs, int n)
{
	src_list<CAP> l = {};

	for (int k = 0; k < n; k++)
		l.p[k] = srcs[k];
	return l;
}

/* n segments of one buffer, stride elements apart. */
struct src_strided {
	const void *base;
	size_t stride;

	template <typename T> HD T get(int k, size_t i) const
	{
		return ((const T *)base)[(size_t)k * stride + i];
	}
};

/* Up to MAX_DESTINATIONS destinations of one reduce, passed by value. */
struct dst_list {
	void *p[DVAR_CUDA_MAX_DESTINATIONS];
	int m;
};

/*
 * Elements i, i + step, ..., i + (U - 1) * step of a reduce (those below
 * count), into v: for each, s0 op s1 op ... op s(n-1), left to right (s0's
 * bits when n = 1, as kernels.c copies a lone source), then, for ADD,
 * divided by d when d >= 2 (a MEAN). A source's U loads are issued
 * together, before the values they update are used, so that a GPU thread
 * has U loads in flight, not one.
 */
template <class E, int U, class S> HD void reduce_values(const S &s, int n, size_t i, size_t step,
                                                         size_t count, int64_t d,
                                                         typename E::mem_t *v)
{
	typedef typename E::mem_t T;
	typename E::acc_t acc[U];

	for (int u = 0; u < U; u++)
		v[u] = i + u * step < count ? s.template get<T>(0, i + u * step) : T();
	if (n > 1) {
		for (int u = 0; u < U; u++)
			acc[u] = E::load(v[u]);
		for (int k = 1; k < n; k++) {
			T w[U];

			for (int u = 0; u < U; u++)
				w[u] = i + u * step < count ? s.template get<T>(k, i + u * step) : T();
			for (int u = 0; u < U; u++)
				acc[u] = E::step(acc[u], E::load(w[u]));
		}
		for (int u = 0; u < U; u++)
			v[u] = E::store(acc[u]);
	}
	if constexpr (E::op == DVAR_KOP_ADD)
		if (d > 1)
			for (int u = 0; u < U; u++)
				v[u] = E::divide(v[u], d);
}

/* One scatter work item: column c of the row that segment seg targets, its
 * updates applied in order exactly as dvar_variable_scatter_rows does
 * (a read-modify-write per update; UPDATE: the later one wins). */
template <class A> HD void scatter_at(typename A::mem_t *dst, size_t row_elems,
                                      const int64_t *indices, const int64_t *order,
                                      const int64_t *starts, size_t seg, size_t c,
                                      const typename A::mem_t *updates)
{
	for (int64_t j = starts[seg]; j < starts[seg + 1]; j++) {
		size_t p = (size_t)order[j];
		typename A::mem_t *d = dst + (size_t)indices[p] * row_elems + c;

		*d = A::apply(*d, updates[p * row_elems + c]);
	}
}

/* Scatter appliers: dst = dst op update (dvar_kernel_apply, n = 2), or the
 * update itself. */
template <class E> struct apply_arith {
	typedef typename E::mem_t mem_t;
	static HD mem_t apply(mem_t d, mem_t u)
	{
		return E::store(E::step(E::load(d), E::load(u)));
	}
};

template <typename T> struct apply_update {
	typedef T mem_t;
	static HD T apply(T, T u) { return u; }
};

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ size_t first_index()
{
	return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t grid_stride()
{
	return (size_t)gridDim.x * blockDim.x;
}

/* One thread's share of a reduce: elements i, i + step, ... below count,
 * UNROLL of them per round, all their loads before any of their stores (a
 * store may alias a source, so the compiler would not move a later
 * element's loads above it), every destination written after every source
 * is read, so that a destination may alias any source. */
template <class E, class S> HD void reduce_thread(const dst_list &dsts, const S &s, int n,
                                                  size_t count, int64_t d, size_t i, size_t step)
{
	typedef typename E::mem_t T;

	for (; i < count; i += UNROLL * step) {
		T v[UNROLL];

		reduce_values<E, UNROLL>(s, n, i, step, count, d, v);
		for (int u = 0; u < UNROLL && i + u * step < count; u++)
			for (int j = 0; j < dsts.m; j++)
				((T *)dsts.p[j])[i + u * step] = v[u];
	}
}

template <class E, class S>
__global__ void __launch_bounds__(THREADS) k_reduce(dst_list dsts, S s, int n, size_t count,
                                                    int64_t d)
{
	reduce_thread<E>(dsts, s, n, count, d, first_index(), grid_stride());
}

template <class M>
__global__ void __launch_bounds__(THREADS) k_map(void *dst, const void *src, size_t count, M m)
{
	typedef typename M::mem_t T;

	for (size_t i = first_index(); i < count; i += grid_stride())
		((T *)dst)[i] = m(((const T *)src)[i]);
}

template <class A>
__global__ void __launch_bounds__(THREADS)
        k_scatter(typename A::mem_t *dst, size_t row_elems, const int64_t *indices,
                  const int64_t *order, const int64_t *starts, size_t nseg,
                  const typename A::mem_t *updates)
{
	size_t items = nseg * row_elems;

	for (size_t w = first_index(); w < items; w += grid_stride())
		scatter_at<A>(dst, row_elems, indices, order, starts, w / row_elems, w % row_elems,
		              updates);
}

static unsigned int grid_for(size_t items)
{
	size_t blocks = (items + THREADS - 1) / THREADS;

	return blocks < MAX_BLOCKS ? (unsigned int)blocks : (unsigned int)MAX_BLOCKS;
}

/* The threads' work items of a reduce of count elements: UNROLL each. */
static size_t reduce_items(size_t count)
{
	return (count + UNROLL - 1) / UNROLL;
}

/*
 * Reduce n sources (2 <= n <= DVAR_CUDA_MAX_SOURCES) in one pass, so that
 * dst may alias any source as in kernels.c (passes of a few sources each,
 * with dst as the running result, would overwrite a later source that dst
 * aliases before it is read). run(list) runs the pass.
 */
template <class R> static cudaError_t reduce_pass(const void *const *srcs, int n, R run)
{
	if (n <= FEW_SOURCES)
		return run(make_list<FEW_SOURCES>(srcs, n));
	return run(make_list<DVAR_CUDA_MAX_SOURCES>(srcs, n));
}

/* ---------------------------------------------------------------- launchers */

static dst_list make_dsts(void *const *dsts, int m)
{
	dst_list l = {};

	for (int j = 0; j < m; j++)
		l.p[j] = dsts[j];
	l.m = m;
	return l;
}

extern "C" cudaError_t dvar_cuda_k_reduce_to(cudaStream_t stream, int dtype, dvar_kernel_op op,
                                             void *const *dsts, int m, const void *const *srcs,
                                             int n, size_t count, int64_t divisor)
{
	cudaError_t err = cudaSuccess;
	int first;

	if (visit_arith(dtype, op, [](auto) {}) != 0 || n < 1 || n > DVAR_CUDA_MAX_SOURCES || !srcs ||
	    m < 1 || !dsts || (divisor > 1 && op != DVAR_KOP_ADD))
		return cudaErrorInvalidValue;
	if (count == 0)
		return cudaSuccess;
	/* One source to one place: a copy, as kernels.c's memmove. */
	if (n == 1 && m == 1 && divisor <= 1)
		return dsts[0] == srcs[0] ? cudaSuccess
		                          : cudaMemcpyAsync(dsts[0], srcs[0], count * elem_size(dtype),
		                                            cudaMemcpyDeviceToDevice, stream);
	/* More destinations than a launch takes (replicas sharing a GPU, as
	 * many as DVAR_MAX_REPLICAS): the first gets the result, the others
	 * copies of it. */
	first = m <= DVAR_CUDA_MAX_DESTINATIONS ? m : 1;
	visit_arith(dtype, op, [&](auto e) {
		typedef decltype(e) E;
		err = reduce_pass(srcs, n, [&](const auto &l) {
			typedef typename std::decay<decltype(l)>::type L;
			k_reduce<E, L><<<grid_for(reduce_items(count)), THREADS, 0, stream>>>(
			        make_dsts(dsts, first), l, n, count, divisor);
			return cudaGetLastError();
		});
	});
	for (int j = first; j < m && err == cudaSuccess; j++)
		if (dsts[j] != dsts[0])
			err = cudaMemcpyAsync(dsts[j], dsts[0], count * elem_size(dtype),
			                      cudaMemcpyDeviceToDevice, stream);
	return err;
}

extern "C" cudaError_t dvar_cuda_k_reduce(cudaStream_t stream, int dtype, dvar_kernel_op op,
                                          void *dst, const void *const *srcs, int n, size_t count)
{
	return dvar_cuda_k_reduce_to(stream, dtype, op, &dst, 1, srcs, n, count, 0);
}

extern "C" cudaError_t dvar_cuda_k_reduce_strided(cudaStream_t stream, int dtype,
                                                  dvar_kernel_op op, void *dst, const void *src,
                                                  int n, size_t stride, size_t count)
{
	cudaError_t err = cudaSuccess;

	if (visit_arith(dtype, op, [](auto) {}) != 0 || n < 1)
		return cudaErrorInvalidValue;
	if (count == 0)
		return cudaSuccess;
	if (n == 1)
		return dst == src ? cudaSuccess
		                  : cudaMemcpyAsync(dst, src, count * elem_size(dtype),
		                                    cudaMemcpyDeviceToDevice, stream);
	visit_arith(dtype, op, [&](auto e) {
		typedef decltype(e) E;
		src_strided s = { src, stride };

		k_reduce<E, src_strided><<<grid_for(reduce_items(count)), THREADS, 0, stream>>>(
		        make_dsts(&dst, 1), s, n, count, 0);
		err = cudaGetLastError();
	});
	return err;
}

extern "C" cudaError_t dvar_cuda_k_apply(cudaStream_t stream, int dtype, dvar_kernel_op op,
                                         void *dst, const void *src, size_t count)
{
	const void *srcs[2] = { dst, src };

	return dvar_cuda_k_reduce(stream, dtype, op, dst, srcs, 2, count);
}

extern "C" cudaError_t dvar_cuda_k_divide(cudaStream_t stream, int dtype, void *buf, size_t count,
                                          int64_t divisor)
{
	cudaError_t err = cudaSuccess;

	if (elem_size(dtype) == 0 || dtype == DVAR_BOOL)
		return cudaErrorInvalidValue;
	/* kernels.c leaves the values alone for divisor <= 1. */
	if (count == 0 || divisor <= 1)
		return cudaSuccess;
	visit_divide(dtype, divisor, [&](auto m) {
		k_map<<<grid_for(count), THREADS, 0, stream>>>(buf, buf, count, m);
		err = cudaGetLastError();
	});
	return err;
}

extern "C" cudaError_t dvar_cuda_k_split_sum(cudaStream_t stream, int dtype, const void *total,
                                             void *part, size_t count, int replica_id,
                                             int num_replicas)
{
	cudaError_t err = cudaSuccess;

	if (elem_size(dtype) == 0 || dtype == DVAR_BOOL || num_replicas < 1 || replica_id < 0 ||
	    replica_id >= num_replicas)
		return cudaErrorInvalidValue;
	if (count == 0)
		return cudaSuccess;
	visit_split(dtype, num_replicas, replica_id, [&](auto m) {
		k_map<<<grid_for(count), THREADS, 0, stream>>>(part, total, count, m);
		err = cudaGetLastError();
	});
	return err;
}

extern "C" cudaError_t dvar_cuda_k_scatter(cudaStream_t stream, int dtype, dvar_scatter_op op,
                                           void *dst, size_t row_elems, const int64_t *indices,
                                           const int64_t *order, const int64_t *starts,
                                           size_t nseg, const void *updates)
{
	cudaError_t err = cudaSuccess;
	unsigned int grid = grid_for(nseg * row_elems);
	auto launch = [&](auto a) {
		typedef decltype(a) A;
		typedef typename A::mem_t T;
		k_scatter<A><<<grid, THREADS, 0, stream>>>((T *)dst, row_elems, indices, order,
		                                           starts, nseg, (const T *)updates);
		err = cudaGetLastError();
	};
	int kop;

	if (elem_size(dtype) == 0)
		return cudaErrorInvalidValue;
	if (op == DVAR_SCATTER_UPDATE) {
		/* Any dtype, bool included: element copies of its width. */
		if (nseg == 0 || row_elems == 0)
			return cudaSuccess;
		switch (elem_size(dtype)) {
		case 1: launch(apply_update<uint8_t>()); break;
		case 2: launch(apply_update<uint16_t>()); break;
		case 4: launch(apply_update<uint32_t>()); break;
		default: launch(apply_update<uint64_t>()); break;
		}
		return err;
	}
	switch (op) { /* variable.c's scatter_kops */
	case DVAR_SCATTER_ADD: kop = DVAR_KOP_ADD; break;
	case DVAR_SCATTER_SUB: kop = DVAR_KOP_SUB; break;
	case DVAR_SCATTER_MIN: kop = DVAR_KOP_MIN; break;
	case DVAR_SCATTER_MAX: kop = DVAR_KOP_MAX; break;
	default: return cudaErrorInvalidValue;
	}
	if (visit_arith(dtype, kop, [](auto) {}) != 0)
		return cudaErrorInvalidValue; /* bool */
	if (nseg == 0 || row_elems == 0)
		return cudaSuccess;
	visit_arith(dtype, kop, [&](auto e) { launch(apply_arith<decltype(e)>()); });
	return err;
}

/* ---------------------------------------------------------------- host check */

extern "C" int dvar_cuda_k_host_check(int kind, int dtype, dvar_kernel_op op, void *dst,
                                      const void *const *srcs, int n, size_t count,
                                      int64_t divisor)
{
	auto map = [&](const void *src) {
		return [&, src](auto m) {
			typedef typename decltype(m)::mem_t T;
			for (size_t i = 0; i < count; i++)
				((T *)dst)[i] = m(((const T *)src)[i]);
		};
	};

	switch (kind) {
	case 0: /* reduce; an ADD divided when divisor >= 2 */
		if (visit_arith(dtype, op, [](auto) {}) != 0 || n < 1 ||
		    n > DVAR_CUDA_MAX_SOURCES || !srcs || (divisor > 1 && op != DVAR_KOP_ADD))
			return -1;
		/* The device's pass, as a host loop over the same list. */
		return visit_arith(dtype, op, [&](auto e) {
			typedef decltype(e) E;
			reduce_pass(srcs, n, [&](const auto &l) {
				dst_list d = make_dsts(&dst, 1);
				size_t threads = reduce_items(count);

				/* A grid of one element-group per thread, in thread order. */
				for (size_t t = 0; t < threads; t++)
					reduce_thread<E>(d, l, n, count, divisor, t, threads);
				return cudaSuccess;
			});
		});
	case 1: /* divide, in place */
		if (elem_size(dtype) == 0 || dtype == DVAR_BOOL)
			return -1;
		if (divisor <= 1)
			return 0;
		return visit_divide(dtype, divisor, map(dst));
	case 2: { /* split_sum: srcs[0] -> dst */
		int64_t id = (int64_t)(uint32_t)(divisor & 0xffffffff);
		int64_t nrep = (int64_t)(uint32_t)((uint64_t)divisor >> 32);

		if (nrep < 1 || id >= nrep || n < 1 || !srcs)
			return -1;
		return visit_split(dtype, nrep, id, map(srcs[0]));
	}
	}
	return -1;
}
