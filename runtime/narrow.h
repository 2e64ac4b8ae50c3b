/*
 * runtime/narrow.h - the bit-level arithmetic the host kernels (kernels.c,
 * variable.c) and the device kernels (cuda/kernels.cu) share, so that both
 * give the same bits: float16 and bfloat16 to and from float32 (round to
 * nearest, ties to even; NaN payloads kept, quieted), the NaN an addition,
 * subtraction or division gives, and a replica count rounded to a float
 * type's precision. Static inline; under nvcc they are
 * __host__ __device__ as well. Private to runtime/.
 */
#ifndef DVAR_RUNTIME_NARROW_H
#define DVAR_RUNTIME_NARROW_H

#include <stdint.h>
#include <string.h>

#include "dvar/core.h"

#ifdef __CUDACC__
#define DVAR_NARROW_FN static __host__ __device__ __forceinline__
#else
#define DVAR_NARROW_FN static inline
#endif

DVAR_NARROW_FN uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

DVAR_NARROW_FN float f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* a where mask is all ones, b where it is zero: a select the vectorizer keeps. */
DVAR_NARROW_FN uint32_t select32(uint32_t mask, uint32_t a, uint32_t b)
{
	return (a & mask) | (b & ~mask);
}

DVAR_NARROW_FN uint32_t mask32(int cond)
{
	return 0u - (uint32_t)cond;
}

DVAR_NARROW_FN uint64_t f64_bits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof u);
	return u;
}

DVAR_NARROW_FN double f64_from_bits(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof d);
	return d;
}

DVAR_NARROW_FN uint64_t select64(uint64_t mask, uint64_t a, uint64_t b)
{
	return (a & mask) | (b & ~mask);
}

DVAR_NARROW_FN uint64_t mask64(int cond)
{
	return 0u - (uint64_t)cond;
}

/*
 * r = a op b (+, -, /) with dvar's NaN: r when r is a number; otherwise
 * the left NaN operand, else the right one, quieted; a NaN made from
 * numbers (inf - inf, 0 / 0) is the negative "default NaN". This is what
 * x86-64 SSE returns for one NaN operand, written out so that the answer
 * does not depend on the hardware (a GPU returns one canonical NaN, ARM a
 * positive default) or on the order in which a compiler put the operands
 * of a commutative addition (gcc's vector loop and its tail differ).
 * Branch-free, so that loops over it vectorize.
 */
DVAR_NARROW_FN float f32_nan_rule(float a, float b, float r)
{
	uint32_t ua = f32_bits(a), ub = f32_bits(b), ur = f32_bits(r);
	uint32_t pick = select32(mask32((ua & 0x7fffffffu) > 0x7f800000u), ua | 0x00400000u,
	                         select32(mask32((ub & 0x7fffffffu) > 0x7f800000u),
	                                  ub | 0x00400000u, 0xffc00000u));

	return f32_from_bits(select32(mask32((ur & 0x7fffffffu) > 0x7f800000u), pick, ur));
}

DVAR_NARROW_FN double f64_nan_rule(double a, double b, double r)
{
	const uint64_t abs = 0x7fffffffffffffffull, inf = 0x7ff0000000000000ull;
	const uint64_t quiet = 0x0008000000000000ull;
	uint64_t ua = f64_bits(a), ub = f64_bits(b), ur = f64_bits(r);
	uint64_t pick = select64(mask64((ua & abs) > inf), ua | quiet,
	                         select64(mask64((ub & abs) > inf), ub | quiet,
	                                  0xfff8000000000000ull));

	return f64_from_bits(select64(mask64((ur & abs) > inf), pick, ur));
}

/*
 * binary16 -> float32, exact. Normal numbers move the exponent and mantissa
 * up 13 bits and rebias; infinities and NaNs get the all-ones exponent and
 * keep their mantissa (the payload); subnormals are mantissa * 2^-24, which
 * an integer-to-float conversion computes exactly. No branches, so that
 * loops over it vectorize.
 */
DVAR_NARROW_FN float f16_to_f32(uint16_t h)
{
	uint32_t em = h & 0x7fffu;
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t normal = (em << 13) + ((127u - 15u) << 23);
	uint32_t special = (em << 13) | 0x7f800000u;
	uint32_t sub = f32_bits((float)(int32_t)em * 0x1p-24f);
	uint32_t o = select32(mask32(em >= 0x7c00u), special,
	                      select32(mask32(em < 0x400u), sub, normal));

	return f32_from_bits(o | sign);
}

/*
 * float32 -> binary16, round to nearest, ties to even, without branches.
 * Normal results round the mantissa by adding 0xfff plus the lowest kept
 * bit (a carry into the exponent is the right answer, up to infinity).
 * Subnormal results let a float32 addition to 0.5 do the rounding at 2^-24.
 * NaNs stay NaN (quiet, with the top of their payload).
 */
DVAR_NARROW_FN uint16_t f32_to_f16(float x)
{
	const uint32_t inf_from = (127u + 16u) << 23; /* 65536 and up: inf */
	const uint32_t normal_from = 113u << 23;      /* 2^-14 */
	const uint32_t half = 126u << 23;             /* 0.5f */
	uint32_t f = f32_bits(x);
	uint32_t sign = (f >> 16) & 0x8000u;
	uint32_t a = f & 0x7fffffffu;
	uint32_t normal = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
	uint32_t sub = f32_bits(f32_from_bits(a) + f32_from_bits(half)) - half;
	uint32_t special =
	        select32(mask32(a > 0x7f800000u), 0x7e00u | ((a >> 13) & 0x3ffu), 0x7c00u);
	uint32_t o = select32(mask32(a >= inf_from), special,
	                      select32(mask32(a < normal_from), sub, normal));

	return (uint16_t)(o | sign);
}

DVAR_NARROW_FN float bf16_to_f32(uint16_t b)
{
	return f32_from_bits((uint32_t)b << 16);
}

/* float32 -> bfloat16, nearest-even; NaNs keep their top bits and turn quiet. */
DVAR_NARROW_FN uint16_t f32_to_bf16(float x)
{
	uint32_t f = f32_bits(x);
	uint32_t r = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
	uint32_t nan = (f >> 16) | 0x40u;

	return (uint16_t)select32(mask32((f & 0x7fffffffu) > 0x7f800000u), nan, r);
}

/* n rounded to the precision of dtype (TF converts the Python int N to the
 * tensor's dtype before dividing); exact for every N float32 can hold. */
DVAR_NARROW_FN int64_t dvar_divisor_in(int dtype, int64_t n)
{
	int bits = dtype == DVAR_FLOAT16 ? 11 : dtype == DVAR_BFLOAT16 ? 8 : 24;
	int len = 0;
	int64_t q, rem, half;

	if (dtype == DVAR_FLOAT64)
		return n;
	while (len < 62 && ((int64_t)1 << len) <= n)
		len++;
	if (len <= bits)
		return n;
	/* Round to nearest, ties to even, keeping the top `bits` bits. */
	q = n >> (len - bits);
	rem = n & (((int64_t)1 << (len - bits)) - 1);
	half = (int64_t)1 << (len - bits - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return q << (len - bits);
}

#endif
