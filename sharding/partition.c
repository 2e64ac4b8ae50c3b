/*
 * sharding/partition.c - partitioners (how many shards a variable gets) and
 * ParameterServerStrategy's "div" layout (which rows each shard holds).
 *
 * The numbers are TensorFlow's, floating point included: MinSizePartitioner
 * divides with Python's true division and MaxSizePartitioner works in
 * doubles, so for huge shapes their results are not the exact integer
 * ceilings, and dvar reproduces those doubles bit for bit (docs/SHARDING.md).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "dvar/sharding.h"

#ifndef __SIZEOF_INT128__
#error "sharding/partition.c needs a compiler with unsigned __int128 (gcc or clang, 64-bit)"
#endif
__extension__ typedef unsigned __int128 u128;

#define U128_MAX (~(u128)0)

/* TensorFlow's DT_STRING: dvar stores no strings, but a caller may ask what
 * TF would choose for one (bytes_per_string bytes per element). */
#define TF_DT_STRING 7

/* Room for "[" + 8 x "-9223372036854775808," + "]". */
#define SHAPE_TEXT_MAX 200

/* ------------------------------------------------------------ arguments */

int dvar_partitioner_check(const dvar_partitioner *p)
{
	if (!p)
		return dvar_error_set(DVAR_EINVAL, "partitioner is NULL");
	switch (p->kind) {
	case DVAR_PARTITIONER_FIXED:
		/* TF does not check num_shards; ParameterServerStrategy later
		 * rejects 0 and misbehaves on negatives. Same wording as TF's. */
		if (p->num_shards < 1)
			return dvar_error_set(DVAR_EINVAL,
			                      "Argument `num_shards` must be positive. Received: %lld",
			                      (long long)p->num_shards);
		return DVAR_OK;
	case DVAR_PARTITIONER_MIN_SIZE:
		if (p->min_shard_bytes < 1)
			return dvar_error_set(DVAR_EINVAL,
			                      "Argument `min_shard_bytes` must be positive. Received: %lld",
			                      (long long)p->min_shard_bytes);
		if (p->max_shards < 1)
			return dvar_error_set(DVAR_EINVAL,
			                      "Argument `max_shards` must be positive. Received: %lld",
			                      (long long)p->max_shards);
		break;
	case DVAR_PARTITIONER_MAX_SIZE:
		/* TF's MaxSizePartitioner writes "Received" without a colon. */
		if (p->max_shard_bytes < 1)
			return dvar_error_set(DVAR_EINVAL,
			                      "Argument `max_shard_bytes` must be positive. Received %lld",
			                      (long long)p->max_shard_bytes);
		/* 0 is TF's None: no limit ("if max_shards and max_shards < 1"). */
		if (p->max_shards < 0)
			return dvar_error_set(DVAR_EINVAL,
			                      "Argument `max_shards` must be positive. Received %lld",
			                      (long long)p->max_shards);
		break;
	default:
		return dvar_error_set(DVAR_EINVAL, "unknown partitioner kind %d", p->kind);
	}
	if (p->bytes_per_string < 1)
		return dvar_error_set(DVAR_EINVAL,
		                      "Argument `bytes_per_string` must be positive. Received: %lld",
		                      (long long)p->bytes_per_string);
	return DVAR_OK;
}

/* ------------------------------------------------------------ arithmetic */

static int bit_length(u128 x)
{
	int n = 0;

	while (x) {
		x >>= 1;
		n++;
	}
	return n;
}

/*
 * num / den rounded to the nearest double, ties to even: what Python's
 * int / int gives (CPython's true division of integers is correctly
 * rounded, whatever their size). den is 1..INT64_MAX.
 *
 * Collect the quotient's leading 64 bits (long division past the binary
 * point when the integer part is short) plus a sticky bit for everything
 * below, then round those 64 bits to 53 by hand.
 */
static double div_to_double(u128 num, uint64_t den)
{
	u128 q = num / den;
	uint64_t r = (uint64_t)(num % den);
	int len = bit_length(q);
	uint64_t m, low, m53;
	int exp, sticky;

	if (num == 0)
		return 0.0;
	if (len >= 64) {
		int shift = len - 64;
		u128 below = shift ? q & (((u128)1 << shift) - 1) : 0;

		m = (uint64_t)(q >> shift);
		exp = shift;
		sticky = below != 0 || r != 0;
	} else {
		m = (uint64_t)q;
		exp = 0;
		/* r < den < 2^63, so r << 1 cannot overflow. */
		while (!(m >> 63)) {
			r <<= 1;
			m <<= 1;
			if (r >= den) {
				r -= den;
				m |= 1;
			}
			exp--;
		}
		sticky = r != 0;
	}
	low = m & 0x7ff;
	m53 = m >> 11;
	if (low > 0x400 || (low == 0x400 && (sticky || (m53 & 1))))
		m53++;
	return ldexp((double)m53, exp + 11);
}

/* A double that is a whole number, as int64, saturated at INT64_MAX: the
 * only use of these counts is min(count, rows). */
static int64_t double_to_count(double d)
{
	if (d >= 9223372036854775808.0)
		return INT64_MAX;
	return (int64_t)d;
}

/* The product of shape->dims[from..rank) times scale, saturated at
 * U128_MAX (a saturated product only ever makes a quotient larger than any
 * count it is compared with). */
static u128 product(const dvar_shape *shape, int from, u128 scale)
{
	u128 p = scale;

	for (int d = from; d < shape->rank; d++) {
		u128 dim = (u128)shape->dims[d];

		if (dim == 0)
			return 0;
		if (p > U128_MAX / dim)
			p = U128_MAX;
		else
			p *= dim;
	}
	return p;
}

/*
 * min_max_variable_partitioner, axis 0:
 *   partitions = num_elements * bytes_per_element / min_slice_size  (a float)
 *   max(1, min(shape[0], max_partitions, ceil(partitions)))
 */
static int64_t min_size_apply(const dvar_partitioner *p, const dvar_shape *shape, uint64_t esize)
{
	int64_t rows = shape->dims[0];
	int64_t limit = rows < p->max_shards ? rows : p->max_shards;
	u128 total = product(shape, 0, esize);
	double parts = div_to_double(total, (uint64_t)p->min_shard_bytes);
	int64_t want = double_to_count(ceil(parts));

	if (want < limit)
		limit = want;
	return limit > 1 ? limit : 1;
}

/*
 * variable_axis_size_partitioner, axis 0, in doubles as TF computes it:
 *   bytes_per_slice  = 1.0 * (num_elements / shape[0]) * element_size
 *   slices_per_shard = max(1, floor(max_shard_bytes / bytes_per_slice))
 *   axis_shards      = ceil(1.0 * shape[0] / slices_per_shard)
 *   min(max_shards, axis_shards) when max_shards is set
 * num_elements / shape[0] is the product of the other dimensions, exactly,
 * so Python's division gives that product rounded to a double. TF divides
 * by zero (ZeroDivisionError) for 0 rows or 0-byte rows; dvar gives one
 * shard, as MinSizePartitioner does for an empty shape.
 */
static int64_t max_size_apply(const dvar_partitioner *p, const dvar_shape *shape, uint64_t esize)
{
	int64_t rows = shape->dims[0];
	u128 rest = product(shape, 1, 1);
	double bytes_per_slice, slices_per_shard;
	int64_t shards;

	if (rows == 0 || rest == 0)
		return 1;
	bytes_per_slice = div_to_double(rest, 1) * (double)esize;
	slices_per_shard = floor((double)p->max_shard_bytes / bytes_per_slice);
	if (slices_per_shard < 1.0)
		slices_per_shard = 1.0;
	shards = double_to_count(ceil((double)rows / slices_per_shard));
	if (p->max_shards > 0 && p->max_shards < shards)
		shards = p->max_shards;
	return shards;
}

int dvar_partitioner_apply(const dvar_partitioner *p, const dvar_shape *shape, int dtype,
                           int64_t *num)
{
	uint64_t esize;
	int rc;

	if (!shape || !num)
		return dvar_error_set(DVAR_EINVAL, "partitioner: %s is NULL", shape ? "num" : "shape");
	rc = dvar_partitioner_check(p);
	if (rc != DVAR_OK)
		return rc;
	if (shape->rank < 0 || shape->rank > DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL, "shape rank %d is outside 0..%d", (int)shape->rank,
		                      DVAR_MAX_RANK);
	for (int32_t d = 0; d < shape->rank; d++) {
		if (shape->dims[d] < 0) {
			char text[SHAPE_TEXT_MAX];

			dvar_shape_format(shape, text, sizeof text);
			return dvar_error_set(DVAR_EINVAL, "shape %s: dimension %d is negative", text,
			                      (int)d);
		}
	}
	if (dtype == TF_DT_STRING)
		esize = (uint64_t)p->bytes_per_string;
	else if ((esize = dvar_dtype_size(dtype)) == 0)
		return dvar_error_set(DVAR_EINVAL, "unknown dtype %d", dtype);

	/* ParameterServerStrategy never asks about scalars, so neither TF's
	 * "Cannot partition variable along axis 0 when shape is only ()" nor
	 * FixedShards' IndexError can arise. */
	if (shape->rank == 0) {
		*num = 1;
		return DVAR_OK;
	}
	switch (p->kind) {
	case DVAR_PARTITIONER_FIXED:
		*num = p->num_shards < shape->dims[0] ? p->num_shards : shape->dims[0];
		break;
	case DVAR_PARTITIONER_MIN_SIZE:
		*num = min_size_apply(p, shape, esize);
		break;
	default:
		*num = max_size_apply(p, shape, esize);
		break;
	}
	return DVAR_OK;
}

/* ------------------------------------------------------------ text */

#define PARTITIONER_FORMS \
	"'fixed:N', 'min-size:BYTES[:MAX_SHARDS]' or 'max-size:BYTES[:MAX_SHARDS]'"

/* One decimal number, optionally negative (so that the constructor's
 * message reports it), optionally followed by K, M or G (powers of 1024)
 * when suffix is set. *end is where it stopped. */
static int parse_number(const char *text, const char *s, int suffix, const char **end,
                        int64_t *out)
{
	int neg = 0;
	uint64_t v = 0, limit;
	const char *start = s;

	if (*s == '-') {
		neg = 1;
		s++;
	}
	if (*s < '0' || *s > '9')
		return dvar_error_set(DVAR_EINVAL, "partitioner '%s': expected a number %s%s%s",
		                      text, *start ? "at '" : "at the end", start, *start ? "'" : "");
	limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v) ||
		    v > limit)
			return dvar_error_set(DVAR_EINVAL, "partitioner '%s': number '%s' is too large",
			                      text, start);
	}
	if (suffix && *s && strchr("KMGkmg", *s)) {
		int shift = (*s == 'K' || *s == 'k') ? 10 : (*s == 'M' || *s == 'm') ? 20 : 30;

		if (v > (limit >> shift))
			return dvar_error_set(DVAR_EINVAL, "partitioner '%s': number '%s' is too large",
			                      text, start);
		v <<= shift;
		s++;
	}
	*end = s;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return DVAR_OK;
}

int dvar_partitioner_parse(dvar_partitioner *out, const char *text)
{
	dvar_partitioner p;
	const char *s;
	int64_t *first, *second = NULL;
	int rc;

	if (!out || !text)
		return dvar_error_set(DVAR_EINVAL, "partitioner: %s is NULL", out ? "text" : "out");
	if (strncmp(text, "fixed:", 6) == 0) {
		p = (dvar_partitioner)DVAR_PARTITIONER_FIXED_INIT(0);
		first = &p.num_shards;
		s = text + 6;
	} else if (strncmp(text, "min-size:", 9) == 0) {
		p = (dvar_partitioner)DVAR_PARTITIONER_MIN_SIZE_INIT;
		first = &p.min_shard_bytes;
		second = &p.max_shards;
		s = text + 9;
	} else if (strncmp(text, "max-size:", 9) == 0) {
		p = (dvar_partitioner)DVAR_PARTITIONER_MAX_SIZE_INIT(0);
		first = &p.max_shard_bytes;
		second = &p.max_shards;
		s = text + 9;
	} else {
		return dvar_error_set(DVAR_EINVAL, "partitioner '%s': expected " PARTITIONER_FORMS,
		                      text);
	}
	rc = parse_number(text, s, second != NULL, &s, first);
	if (rc == DVAR_OK && second && *s == ':')
		rc = parse_number(text, s + 1, 0, &s, second);
	if (rc != DVAR_OK)
		return rc;
	if (*s)
		return dvar_error_set(DVAR_EINVAL, "partitioner '%s': unexpected '%s'; expected "
		                      PARTITIONER_FORMS, text, s);
	rc = dvar_partitioner_check(&p);
	if (rc != DVAR_OK)
		return dvar_error_prefix("partitioner '%s'", text);
	*out = p;
	return DVAR_OK;
}

size_t dvar_partitioner_format(const dvar_partitioner *p, char *buf, size_t cap)
{
	char text[96];
	int len;

	/* bytes_per_string is not written: dvar has no string dtype. */
	if (!p)
		len = snprintf(text, sizeof text, "(null)");
	else if (p->kind == DVAR_PARTITIONER_FIXED)
		len = snprintf(text, sizeof text, "fixed:%lld", (long long)p->num_shards);
	else if (p->kind == DVAR_PARTITIONER_MIN_SIZE)
		len = snprintf(text, sizeof text, "min-size:%lld:%lld", (long long)p->min_shard_bytes,
		               (long long)p->max_shards);
	else if (p->kind == DVAR_PARTITIONER_MAX_SIZE && p->max_shards == 0)
		len = snprintf(text, sizeof text, "max-size:%lld", (long long)p->max_shard_bytes);
	else if (p->kind == DVAR_PARTITIONER_MAX_SIZE)
		len = snprintf(text, sizeof text, "max-size:%lld:%lld", (long long)p->max_shard_bytes,
		               (long long)p->max_shards);
	else
		len = snprintf(text, sizeof text, "unknown-kind-%d", p->kind);
	if (cap > 0) {
		size_t n = (size_t)len < cap - 1 ? (size_t)len : cap - 1;

		memcpy(buf, text, n);
		buf[n] = '\0';
	}
	return (size_t)len;
}

/* ------------------------------------------------------------ the div layout */

int dvar_div_layout(int64_t rows, int64_t num_partitions, int64_t *offsets, int64_t *n)
{
	int64_t shards, base, extra;

	if (!n)
		return dvar_error_set(DVAR_EINVAL, "div layout: n is NULL");
	if (num_partitions < 1)
		return dvar_error_set(DVAR_EINVAL, "div layout: %lld partitions; need at least 1",
		                      (long long)num_partitions);
	if (rows < 0)
		return dvar_error_set(DVAR_EINVAL, "div layout: row count %lld is negative",
		                      (long long)rows);
	/* 0 rows: one empty shard (TF never gets here: it divides by zero). */
	shards = rows == 0 ? 1 : num_partitions < rows ? num_partitions : rows;
	base = rows / shards;
	extra = rows % shards;
	if (offsets) {
		offsets[0] = 0;
		for (int64_t i = 0; i < shards; i++)
			offsets[i + 1] = offsets[i] + base + (i < extra ? 1 : 0);
	}
	*n = shards;
	return DVAR_OK;
}

int dvar_div_layout_is(const int64_t *offsets, int64_t n)
{
	int64_t rows, base, extra;

	if (!offsets || n < 1 || offsets[0] != 0 || offsets[n] < 0)
		return 0;
	rows = offsets[n];
	/* More shards than rows leaves shards empty: TF's size check would
	 * pass (base 0), but its lookups then divide by zero. */
	if (n > (rows > 0 ? rows : 1))
		return 0;
	base = rows / n;
	extra = rows % n;
	for (int64_t i = 0; i < n; i++)
		if (offsets[i + 1] - offsets[i] != base + (i < extra ? 1 : 0))
			return 0;
	return 1;
}
