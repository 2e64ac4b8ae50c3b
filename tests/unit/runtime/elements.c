/*
 * tests/unit/runtime/elements.c - see elements.h.
 */
#include "elements.h"

#include "dvar/core.h"

const int elem_numeric_dtypes[12] = { DVAR_UINT8,   DVAR_UINT16,   DVAR_UINT32,  DVAR_UINT64,
	                                  DVAR_INT8,    DVAR_INT16,    DVAR_INT32,   DVAR_INT64,
	                                  DVAR_FLOAT16, DVAR_BFLOAT16, DVAR_FLOAT32, DVAR_FLOAT64 };

/* Spelled out rather than dvar_kernel_is_floating: the tests check that. */
int elem_is_float(int dtype)
{
	return dtype == DVAR_FLOAT16 || dtype == DVAR_BFLOAT16 || dtype == DVAR_FLOAT32 ||
	       dtype == DVAR_FLOAT64;
}

uint64_t elem_get_bits(int dtype, const void *buf, size_t i)
{
	size_t size = dvar_dtype_size(dtype);
	const unsigned char *p = (const unsigned char *)buf + i * size;
	uint64_t v = 0;

	for (size_t b = 0; b < size; b++)
		v |= (uint64_t)p[b] << (8 * b);
	return v;
}

void elem_put_bits(int dtype, void *buf, size_t i, uint64_t v)
{
	size_t size = dvar_dtype_size(dtype);
	unsigned char *p = (unsigned char *)buf + i * size;

	for (size_t b = 0; b < size; b++)
		p[b] = (unsigned char)(v >> (8 * b));
}
