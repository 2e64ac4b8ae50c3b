/*
 * core/dtype.c - element types: their sizes and names, and the widening to
 * double that inspect/diff/verify tools print and compare with.
 */
#include <string.h>

#include "core/core.h"

static const struct {
	int dtype;
	size_t size;
	const char *name;
} dtypes[] = {
	{ DVAR_BOOL, 1, "bool" },
	{ DVAR_INT8, 1, "int8" },
	{ DVAR_INT16, 2, "int16" },
	{ DVAR_INT32, 4, "int32" },
	{ DVAR_INT64, 8, "int64" },
	{ DVAR_UINT8, 1, "uint8" },
	{ DVAR_UINT16, 2, "uint16" },
	{ DVAR_UINT32, 4, "uint32" },
	{ DVAR_UINT64, 8, "uint64" },
	{ DVAR_FLOAT16, 2, "float16" },
	{ DVAR_BFLOAT16, 2, "bfloat16" },
	{ DVAR_FLOAT32, 4, "float32" },
	{ DVAR_FLOAT64, 8, "float64" },
};

#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

size_t dvar_dtype_size(int dtype)
{
	for (size_t i = 0; i < NUM_DTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].size;
	return 0;
}

const char *dvar_dtype_name(int dtype)
{
	for (size_t i = 0; i < NUM_DTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].name;
	return NULL;
}

int dvar_dtype_from_name(dvar_dtype *out, const char *name)
{
	if (!name)
		return dvar_error_set(DVAR_EINVAL, "dtype name is NULL");
	for (size_t i = 0; i < NUM_DTYPES; i++) {
		if (strcmp(dtypes[i].name, name) == 0) {
			*out = (dvar_dtype)dtypes[i].dtype;
			return DVAR_OK;
		}
	}
	return dvar_error_set(DVAR_EINVAL, "unknown dtype name '%s'", name);
}

static double f64_from_bits(uint64_t bits)
{
	double d;

	memcpy(&d, &bits, sizeof d);
	return d;
}

/* IEEE binary16 -> double, exact: every half is a double, so only the bit
 * fields move (NaN payloads included). */
static double half_to_f64(uint16_t h)
{
	uint64_t sign = (uint64_t)(h >> 15) << 63;
	unsigned exp = (h >> 10) & 0x1f;
	uint64_t mant = h & 0x3ff;

	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24, exact in double */
		double v = (double)mant * 0x1p-24;
		return sign ? -v : v;
	}
	if (exp == 0x1f)
		return f64_from_bits(sign | (0x7ffull << 52) | (mant << 42));
	return f64_from_bits(sign | ((uint64_t)(exp - 15 + 1023) << 52) | (mant << 42));
}

/* bfloat16 is the top half of a float32. */
static double bf16_to_f64(uint16_t b)
{
	uint32_t bits = (uint32_t)b << 16;
	float f;

	memcpy(&f, &bits, sizeof f);
	return f;
}

/* Loads go through memcpy: tensor buffers need not be aligned. */
#define WIDEN(type, expr) \
	do { \
		for (size_t i = 0; i < n; i++) { \
			type v; \
			memcpy(&v, p + i * sizeof v, sizeof v); \
			dst[i] = (expr); \
		} \
	} while (0)

int dvar_dtype_to_f64(double *dst, int dtype, const void *src, size_t n)
{
	const unsigned char *p = src;

	switch (dtype) {
	case DVAR_BOOL: WIDEN(uint8_t, v != 0); break;
	case DVAR_INT8: WIDEN(int8_t, v); break;
	case DVAR_INT16: WIDEN(int16_t, v); break;
	case DVAR_INT32: WIDEN(int32_t, v); break;
	case DVAR_INT64: WIDEN(int64_t, (double)v); break;
	case DVAR_UINT8: WIDEN(uint8_t, v); break;
	case DVAR_UINT16: WIDEN(uint16_t, v); break;
	case DVAR_UINT32: WIDEN(uint32_t, v); break;
	case DVAR_UINT64: WIDEN(uint64_t, (double)v); break;
	case DVAR_FLOAT16: WIDEN(uint16_t, half_to_f64(v)); break;
	case DVAR_BFLOAT16: WIDEN(uint16_t, bf16_to_f64(v)); break;
	case DVAR_FLOAT32: WIDEN(float, v); break;
	case DVAR_FLOAT64: WIDEN(double, v); break;
	default:
		return dvar_error_set(DVAR_EINVAL, "unknown dtype %d", dtype);
	}
	return DVAR_OK;
}
