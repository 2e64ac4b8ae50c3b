/*
 * runtime/kernels.c - the elementwise kernels under every collective and
 * variable update: reduce n buffers into one, apply one buffer to another,
 * divide for a MEAN, and clip a row to a norm (embedding lookups).
 *
 * A reduce walks memory once: for each block of BLOCK elements it combines
 * all sources into a small accumulator that stays in L1, then stores the
 * block. Since every source's block is read before dst's block is written,
 * dst may alias any source. The accumulator is a local array, so the inner
 * loops have no aliasing to check and the compiler vectorizes them.
 *
 * Integers add and subtract as unsigned numbers of the same width (two's
 * complement wraps without UB; signed and unsigned share those kernels) and
 * compare as their own type. float16 and bfloat16 widen to float32 exactly,
 * and every step is rounded back to the narrow type (nearest-even), as if
 * the arithmetic were done in that type: float32 has more than 2p+2 bits for
 * both, so rounding twice gives the correctly rounded result.
 *
 * Buffers need not be aligned: elements move through memcpy, which the
 * compiler turns into plain unaligned loads and stores.
 */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/narrow.h"
#include "runtime/runtime.h"

/* Elements per block: 8 KiB of accumulator for 64-bit types. */
#define BLOCK 1024

/* ---------------------------------------------------------------- narrow floats */

/* f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16 and their bit helpers:
 * runtime/narrow.h, shared with the device kernels. */

/* ---------------------------------------------------------------- element ops */

#define OP_ADD(a, b) ((a) + (b))
#define OP_SUB(a, b) ((a) - (b))
/* Floats: the NaN of a NaN result is narrow.h's, whatever the hardware. */
#define OP_FADD32(a, b) f32_nan_rule((a), (b), (a) + (b))
#define OP_FSUB32(a, b) f32_nan_rule((a), (b), (a) - (b))
#define OP_FADD64(a, b) f64_nan_rule((a), (b), (a) + (b))
#define OP_FSUB64(a, b) f64_nan_rule((a), (b), (a) - (b))
#define OP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OP_MAX(a, b) ((a) > (b) ? (a) : (b))
/* A NaN operand wins: a when a is NaN, else b when b is (a < b is false). */
#define OP_FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define OP_FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))

/* Accumulator conversions: identity, or the narrow floats' widen / round. */
#define ID(x) (x)
#define F16_ROUND(x) f16_to_f32(f32_to_f16(x))
#define BF16_ROUND(x) bf16_to_f32(f32_to_bf16(x))

/*
 * One block of a reduce: acc[0..m) = the n sources' elements [off, off + m)
 * combined with OP, the accumulator rounded after each step; nan set when
 * the last step left a NaN (integers never do).
 */
#define REDUCE_BLOCK(T, A, LOAD, OP, ROUND) \
	do { \
		const unsigned char *s0 = (const unsigned char *)srcs[0] + off * sizeof(T); \
		if (n == 1) { \
			for (size_t i = 0; i < m; i++) { \
				T x; \
				memcpy(&x, s0 + i * sizeof x, sizeof x); \
				acc[i] = LOAD(x); \
			} \
		} else { \
			const unsigned char *s1 = (const unsigned char *)srcs[1] + off * sizeof(T); \
			for (size_t i = 0; i < m; i++) { \
				T x, y; \
				memcpy(&x, s0 + i * sizeof x, sizeof x); \
				memcpy(&y, s1 + i * sizeof y, sizeof y); \
				A r = OP(LOAD(x), LOAD(y)); \
				acc[i] = ROUND(r); \
				nan |= acc[i] != acc[i]; \
			} \
		} \
		for (int k = 2; k < n; k++) { \
			const unsigned char *sk = (const unsigned char *)srcs[k] + off * sizeof(T); \
			nan = 0; \
			for (size_t i = 0; i < m; i++) { \
				T x; \
				memcpy(&x, sk + i * sizeof x, sizeof x); \
				A r = OP(acc[i], LOAD(x)); \
				acc[i] = ROUND(r); \
				nan |= acc[i] != acc[i]; \
			} \
		} \
	} while (0)

/*
 * One reduce kernel: T is the element type in memory, A the accumulator's,
 * LOAD widens an element, OP combines, ROUND narrows the accumulator after
 * each step (only where the op can leave the narrow type), STORE narrows to
 * memory. A block that ends with a NaN (a NaN stays one through every later
 * step) is computed again with RULE, OP with narrow.h's NaN: the rule costs
 * more than the data's trip through memory, and NaNs are rare. Integers
 * never see one. dst may be a source: a block is stored only at its end.
 */
#define DEFINE_REDUCE(name, T, A, LOAD, OP, RULE, ROUND, STORE) \
	static void name(void *dst, const void *const *srcs, int n, size_t count) \
	{ \
		A acc[BLOCK]; \
		unsigned char *d = dst; \
		for (size_t off = 0; off < count; off += BLOCK) { \
			size_t m = count - off < BLOCK ? count - off : BLOCK; \
			int nan = 0; \
			REDUCE_BLOCK(T, A, LOAD, OP, ROUND); \
			if (nan) \
				REDUCE_BLOCK(T, A, LOAD, RULE, ROUND); \
			for (size_t i = 0; i < m; i++) { \
				T y = STORE(acc[i]); \
				memcpy(d + (off + i) * sizeof y, &y, sizeof y); \
			} \
		} \
	}

/* Integers: ADD and SUB as unsigned of the width (shared by signed types). */
#define DEFINE_INT(bits) \
	DEFINE_REDUCE(add_u##bits, uint##bits##_t, uint##bits##_t, ID, OP_ADD, OP_ADD, ID, ID) \
	DEFINE_REDUCE(sub_u##bits, uint##bits##_t, uint##bits##_t, ID, OP_SUB, OP_SUB, ID, ID) \
	DEFINE_REDUCE(min_u##bits, uint##bits##_t, uint##bits##_t, ID, OP_MIN, OP_MIN, ID, ID) \
	DEFINE_REDUCE(max_u##bits, uint##bits##_t, uint##bits##_t, ID, OP_MAX, OP_MAX, ID, ID) \
	DEFINE_REDUCE(min_i##bits, int##bits##_t, int##bits##_t, ID, OP_MIN, OP_MIN, ID, ID) \
	DEFINE_REDUCE(max_i##bits, int##bits##_t, int##bits##_t, ID, OP_MAX, OP_MAX, ID, ID)

DEFINE_INT(8)
DEFINE_INT(16)
DEFINE_INT(32)
DEFINE_INT(64)

#define DEFINE_FLOAT(name, T, bits) \
	DEFINE_REDUCE(add_##name, T, T, ID, OP_ADD, OP_FADD##bits, ID, ID) \
	DEFINE_REDUCE(sub_##name, T, T, ID, OP_SUB, OP_FSUB##bits, ID, ID) \
	DEFINE_REDUCE(min_##name, T, T, ID, OP_FMIN, OP_FMIN, ID, ID) \
	DEFINE_REDUCE(max_##name, T, T, ID, OP_FMAX, OP_FMAX, ID, ID)

DEFINE_FLOAT(f32, float, 32)
DEFINE_FLOAT(f64, double, 64)

/* MIN and MAX pick an operand, which is already in the narrow type. */
#define DEFINE_NARROW(name, WIDEN, NARROW, ROUND) \
	DEFINE_REDUCE(add_##name, uint16_t, float, WIDEN, OP_ADD, OP_FADD32, ROUND, NARROW) \
	DEFINE_REDUCE(sub_##name, uint16_t, float, WIDEN, OP_SUB, OP_FSUB32, ROUND, NARROW) \
	DEFINE_REDUCE(min_##name, uint16_t, float, WIDEN, OP_FMIN, OP_FMIN, ID, NARROW) \
	DEFINE_REDUCE(max_##name, uint16_t, float, WIDEN, OP_FMAX, OP_FMAX, ID, NARROW)

DEFINE_NARROW(f16, f16_to_f32, f32_to_f16, F16_ROUND)
DEFINE_NARROW(bf16, bf16_to_f32, f32_to_bf16, BF16_ROUND)

typedef void (*reduce_fn)(void *dst, const void *const *srcs, int n, size_t count);

/* Indexed by dvar_kernel_op. */
#define OPS_INT(ubits, sbits) { add_u##ubits, sub_u##ubits, min_##sbits, max_##sbits }
#define OPS_FLOAT(name) { add_##name, sub_##name, min_##name, max_##name }

static const reduce_fn *kernels_for(int dtype)
{
	static const reduce_fn u8[4] = OPS_INT(8, u8), i8[4] = OPS_INT(8, i8);
	static const reduce_fn u16[4] = OPS_INT(16, u16), i16[4] = OPS_INT(16, i16);
	static const reduce_fn u32[4] = OPS_INT(32, u32), i32[4] = OPS_INT(32, i32);
	static const reduce_fn u64[4] = OPS_INT(64, u64), i64[4] = OPS_INT(64, i64);
	static const reduce_fn f16[4] = OPS_FLOAT(f16), bf16[4] = OPS_FLOAT(bf16);
	static const reduce_fn f32[4] = OPS_FLOAT(f32), f64[4] = OPS_FLOAT(f64);

	switch (dtype) {
	case DVAR_UINT8: return u8;
	case DVAR_INT8: return i8;
	case DVAR_UINT16: return u16;
	case DVAR_INT16: return i16;
	case DVAR_UINT32: return u32;
	case DVAR_INT32: return i32;
	case DVAR_UINT64: return u64;
	case DVAR_INT64: return i64;
	case DVAR_FLOAT16: return f16;
	case DVAR_BFLOAT16: return bf16;
	case DVAR_FLOAT32: return f32;
	case DVAR_FLOAT64: return f64;
	default: return NULL;
	}
}

/* ---------------------------------------------------------------- public */

int dvar_kernel_is_floating(int dtype)
{
	return dtype == DVAR_FLOAT16 || dtype == DVAR_BFLOAT16 || dtype == DVAR_FLOAT32 ||
	       dtype == DVAR_FLOAT64;
}

int dvar_kernel_check(int dtype, dvar_kernel_op op, const char *what)
{
	const char *name = dvar_dtype_name(dtype);

	if (!what)
		what = "kernel";
	if (!name)
		return dvar_error_set(DVAR_EINVAL, "%s: unknown dtype %d", what, dtype);
	if (!kernels_for(dtype))
		return dvar_error_set(DVAR_EINVAL,
		                      "%s: dtype %s is not supported (numeric dtypes only)", what,
		                      name);
	if ((int)op < DVAR_KOP_ADD || (int)op > DVAR_KOP_MAX)
		return dvar_error_set(DVAR_EINVAL, "%s: unknown operator %d", what, (int)op);
	return DVAR_OK;
}

void dvar_kernel_reduce(int dtype, dvar_kernel_op op, void *dst, const void *const *srcs, int n,
                        size_t count)
{
	const reduce_fn *k = kernels_for(dtype);

	if (!k || (int)op < DVAR_KOP_ADD || (int)op > DVAR_KOP_MAX || n < 1 || count == 0)
		return;
	if (n == 1) {
		if (dst != srcs[0])
			memmove(dst, srcs[0], count * dvar_dtype_size(dtype));
		return;
	}
	k[op](dst, srcs, n, count);
}

void dvar_kernel_apply(int dtype, dvar_kernel_op op, void *dst, const void *src, size_t count)
{
	const void *srcs[2] = { dst, src };

	dvar_kernel_reduce(dtype, op, dst, srcs, 2, count);
}

/* Integer division: C's `/` truncates toward zero; divisor >= 1 cannot overflow. */
#define DIVIDE_INT(T, WIDE) \
	do { \
		for (size_t i = 0; i < count; i++) { \
			T x; \
			memcpy(&x, p + i * sizeof x, sizeof x); \
			x = (T)((WIDE)x / (WIDE)divisor); \
			memcpy(p + i * sizeof x, &x, sizeof x); \
		} \
	} while (0)

/* x / D with D >= 2: a NaN result is x's NaN, quieted, on every hardware,
 * which is narrow.h's rule already (and no rule to apply keeps it fast). */
#define DIVIDE_FLOAT(T, WIDEN, NARROW, D) \
	do { \
		for (size_t i = 0; i < count; i++) { \
			T x; \
			memcpy(&x, p + i * sizeof x, sizeof x); \
			x = NARROW(WIDEN(x) / (D)); \
			memcpy(p + i * sizeof x, &x, sizeof x); \
		} \
	} while (0)

void dvar_kernel_divide(int dtype, void *buf, size_t count, int64_t divisor)
{
	unsigned char *p = buf;

	if (divisor <= 1)
		return;
	switch (dtype) {
	case DVAR_UINT8: DIVIDE_INT(uint8_t, uint64_t); break;
	case DVAR_UINT16: DIVIDE_INT(uint16_t, uint64_t); break;
	case DVAR_UINT32: DIVIDE_INT(uint32_t, uint64_t); break;
	case DVAR_UINT64: DIVIDE_INT(uint64_t, uint64_t); break;
	case DVAR_INT8: DIVIDE_INT(int8_t, int64_t); break;
	case DVAR_INT16: DIVIDE_INT(int16_t, int64_t); break;
	case DVAR_INT32: DIVIDE_INT(int32_t, int64_t); break;
	case DVAR_INT64: DIVIDE_INT(int64_t, int64_t); break;
	case DVAR_FLOAT16: {
		const float d = (float)divisor;
		DIVIDE_FLOAT(uint16_t, f16_to_f32, f32_to_f16, d);
		break;
	}
	case DVAR_BFLOAT16: {
		const float d = (float)divisor;
		DIVIDE_FLOAT(uint16_t, bf16_to_f32, f32_to_bf16, d);
		break;
	}
	case DVAR_FLOAT32: {
		const float d = (float)divisor;
		DIVIDE_FLOAT(float, ID, ID, d);
		break;
	}
	case DVAR_FLOAT64: {
		const double d = (double)divisor;
		DIVIDE_FLOAT(double, ID, ID, d);
		break;
	}
	default: break;
	}
}

/* ---------------------------------------------------------------- clip by norm */

/* clip_ops.clip_by_norm over one row: the sum of squares, its square root
 * (0 stays 0), then x * max_norm / max(norm, max_norm), the multiplication
 * first, as TF computes it. A NaN norm propagates (TF's maximum). */
#define CLIP_NORM(T, A, SQRT, WIDEN, NARROW) \
	do { \
		const A mn = (A)max_norm; \
		A l2 = 0, norm, d; \
		for (size_t i = 0; i < count; i++) { \
			T x; \
			A w; \
			memcpy(&x, p + i * sizeof x, sizeof x); \
			w = WIDEN(x); \
			l2 += w * w; \
		} \
		norm = l2 > 0 ? SQRT(l2) : l2; \
		d = (norm > mn || norm != norm) ? norm : mn; \
		for (size_t i = 0; i < count; i++) { \
			T x; \
			memcpy(&x, p + i * sizeof x, sizeof x); \
			x = NARROW((WIDEN(x) * mn) / d); \
			memcpy(p + i * sizeof x, &x, sizeof x); \
		} \
	} while (0)

void dvar_kernel_clip_norm(int dtype, void *row, size_t count, double max_norm)
{
	unsigned char *p = row;

	switch (dtype) {
	case DVAR_FLOAT16: CLIP_NORM(uint16_t, float, sqrtf, f16_to_f32, f32_to_f16); break;
	case DVAR_BFLOAT16: CLIP_NORM(uint16_t, float, sqrtf, bf16_to_f32, f32_to_bf16); break;
	case DVAR_FLOAT32: CLIP_NORM(float, float, sqrtf, ID, ID); break;
	case DVAR_FLOAT64: CLIP_NORM(double, double, sqrt, ID, ID); break;
	default: break;
	}
}

dvar_kernel_op dvar_kernel_op_of(int reduce_op)
{
	switch (reduce_op) {
	case DVAR_REDUCE_MIN: return DVAR_KOP_MIN;
	case DVAR_REDUCE_MAX: return DVAR_KOP_MAX;
	default: return DVAR_KOP_ADD;
	}
}

const char *dvar_reduce_op_name(int reduce_op)
{
	switch (reduce_op) {
	case DVAR_REDUCE_SUM: return "SUM";
	case DVAR_REDUCE_MEAN: return "MEAN";
	case DVAR_REDUCE_MIN: return "MIN";
	case DVAR_REDUCE_MAX: return "MAX";
	}
	return "?";
}
