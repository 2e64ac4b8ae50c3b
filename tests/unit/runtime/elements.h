/*
 * tests/unit/runtime/elements.h - elements of dtype buffers as raw bits, for
 * the tests that compare kernels and collectives byte for byte
 * (test_runtime_kernels.c, test_runtime_collectives.c, test_cuda_kernels.c,
 * tests/gpu/test_gpu.c): one copy, so that they all read and write elements
 * the same way.
 */
#ifndef DVAR_TESTS_ELEMENTS_H
#define DVAR_TESTS_ELEMENTS_H

#include <stddef.h>
#include <stdint.h>

/** Every dtype with arithmetic: the integers, then the floats. */
extern const int elem_numeric_dtypes[12];
#define ELEM_NUM_NUMERIC (sizeof elem_numeric_dtypes / sizeof elem_numeric_dtypes[0])

/** Whether dtype is float16, bfloat16, float32 or float64. */
int elem_is_float(int dtype);

/** Element i of buf, zero-extended (little-endian bits). */
uint64_t elem_get_bits(int dtype, const void *buf, size_t i);

/** Store the low bits of v as element i of buf. */
void elem_put_bits(int dtype, void *buf, size_t i, uint64_t v);

#endif
