/*
 * core/shape.c - tensor shapes: validation, overflow-checked element and
 * byte counts, and the "[3,2]" text used in every shape error message.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* Room for "[" + 8 x "-9223372036854775808," + "]". */
#define SHAPE_TEXT_MAX 200

/* Rank clamped to what a dvar_shape can hold, so formatting a bad shape for
 * an error message never reads past dims. */
static int32_t safe_rank(int32_t rank)
{
	if (rank < 0)
		return 0;
	return rank > DVAR_MAX_RANK ? DVAR_MAX_RANK : rank;
}

size_t dvar_shape_format(const dvar_shape *shape, char *buf, size_t cap)
{
	char text[SHAPE_TEXT_MAX];
	size_t len = 0;
	int32_t rank = safe_rank(shape->rank);

	text[len++] = '[';
	for (int32_t d = 0; d < rank; d++)
		len += (size_t)snprintf(text + len, sizeof text - len, d ? ",%lld" : "%lld",
		                        (long long)shape->dims[d]);
	text[len++] = ']';
	text[len] = '\0';
	if (cap > 0) {
		size_t n = len < cap - 1 ? len : cap - 1;
		memcpy(buf, text, n);
		buf[n] = '\0';
	}
	return len;
}

int dvar_shape_init(dvar_shape *out, int32_t rank, const int64_t *dims)
{
	dvar_shape s;

	if (rank < 0)
		return dvar_error_set(DVAR_EINVAL, "shape rank %d is negative", (int)rank);
	if (rank > DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL, "shape rank %d exceeds the maximum of %d",
		                      (int)rank, DVAR_MAX_RANK);
	if (rank > 0 && !dims)
		return dvar_error_set(DVAR_EINVAL, "shape of rank %d has no dimensions", (int)rank);
	memset(&s, 0, sizeof s);
	s.rank = rank;
	for (int32_t d = 0; d < rank; d++)
		s.dims[d] = dims[d];
	for (int32_t d = 0; d < rank; d++) {
		if (s.dims[d] < 0) {
			char text[SHAPE_TEXT_MAX];
			dvar_shape_format(&s, text, sizeof text);
			return dvar_error_set(DVAR_EINVAL, "shape %s: dimension %d is negative",
			                      text, (int)d);
		}
	}
	*out = s;
	return DVAR_OK;
}

/* Product of the dims times scale. Returns 0, or -1 on overflow; a zero
 * dimension makes the product 0 whatever the other dims are. */
static int checked_product(const dvar_shape *shape, uint64_t scale, uint64_t *out)
{
	uint64_t p = scale;
	int overflow = 0;

	for (int32_t d = 0; d < shape->rank; d++) {
		if (shape->dims[d] == 0) {
			*out = 0;
			return 0;
		}
		overflow |= __builtin_mul_overflow(p, (uint64_t)shape->dims[d], &p);
	}
	*out = p;
	return overflow ? -1 : 0;
}

/* A dvar_shape built by hand (not by dvar_shape_init) may be invalid. */
static int check_shape(const dvar_shape *shape)
{
	char text[SHAPE_TEXT_MAX];

	if (shape->rank < 0 || shape->rank > DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL, "shape rank %d is outside 0..%d",
		                      (int)shape->rank, DVAR_MAX_RANK);
	for (int32_t d = 0; d < shape->rank; d++) {
		if (shape->dims[d] < 0) {
			dvar_shape_format(shape, text, sizeof text);
			return dvar_error_set(DVAR_EINVAL, "shape %s: dimension %d is negative",
			                      text, (int)d);
		}
	}
	return DVAR_OK;
}

int dvar_shape_num_elements(const dvar_shape *shape, uint64_t *out)
{
	char text[SHAPE_TEXT_MAX];
	int rc = check_shape(shape);

	if (rc != DVAR_OK)
		return rc;
	if (checked_product(shape, 1, out) != 0) {
		dvar_shape_format(shape, text, sizeof text);
		return dvar_error_set(DVAR_EINVAL, "shape %s: element count overflows 64 bits", text);
	}
	return DVAR_OK;
}

int dvar_shape_num_bytes(const dvar_shape *shape, int dtype, uint64_t *out)
{
	char text[SHAPE_TEXT_MAX];
	size_t esize = dvar_dtype_size(dtype);
	uint64_t bytes;
	int rc;

	if (esize == 0)
		return dvar_error_set(DVAR_EINVAL, "unknown dtype %d", dtype);
	rc = check_shape(shape);
	if (rc != DVAR_OK)
		return rc;
	if (checked_product(shape, esize, &bytes) != 0) {
		dvar_shape_format(shape, text, sizeof text);
		return dvar_error_set(DVAR_EINVAL, "shape %s of %s: byte count overflows 64 bits",
		                      text, dvar_dtype_name(dtype));
	}
	/* Byte counts become file offsets and off_t is signed. */
	if (bytes > (uint64_t)INT64_MAX) {
		dvar_shape_format(shape, text, sizeof text);
		return dvar_error_set(DVAR_EINVAL,
		                      "shape %s of %s: byte count %llu exceeds the maximum of %lld",
		                      text, dvar_dtype_name(dtype), (unsigned long long)bytes,
		                      (long long)INT64_MAX);
	}
	*out = bytes;
	return DVAR_OK;
}

int dvar_shape_equal(const dvar_shape *a, const dvar_shape *b)
{
	if (a->rank != b->rank || a->rank < 0 || a->rank > DVAR_MAX_RANK)
		return 0;
	for (int32_t d = 0; d < a->rank; d++)
		if (a->dims[d] != b->dims[d])
			return 0;
	return 1;
}
